"""The model work's progress: a bar on a terminal, log lines in a redirected log (flows/execute/progress.py)."""

from __future__ import annotations

import io
import logging

from tqdm.auto import tqdm

from confgrid.flows.execute.progress import LogProgress, progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_and_a_file_gets_log_lines():
    assert isinstance(progress("model work", "q", stream=_Tty()), tqdm)
    assert isinstance(progress("model work", "q", stream=io.StringIO()), LogProgress)


def test_log_lines_at_most_every_interval_and_once_at_close(caplog, monkeypatch):
    clock = iter([0.0, 1.0, 31.0, 32.0, 40.0])
    monkeypatch.setattr("confgrid.flows.execute.progress.time.monotonic", lambda: next(clock))
    p = LogProgress("model work", "q", every_s=30.0)  # t = 0
    p.total = 100
    p.refresh()
    with caplog.at_level(logging.INFO, logger="confgrid"):
        p.update(10)  # t = 1: too soon
        p.update(20)  # t = 31: a line
        p.update(5)  # t = 32: too soon
        p.close()  # t = 40: the last line
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["model work: 30 of 100 q done (30%), 1.0 q/s, about 72 s left",
                     "model work: 35 of 100 q done (35%), 0.9 q/s, about 74 s left"]


def test_nothing_done_writes_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="confgrid"):
        LogProgress("model work", "q").close()
    assert caplog.records == []
