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


def _lines(caplog, monkeypatch, clock, steps) -> list[str]:
    ticks = iter(clock)
    monkeypatch.setattr("confgrid.flows.execute.progress.time.monotonic", lambda: next(ticks))
    p = LogProgress("model work", "q", every_s=30.0)  # the first tick
    p.total = 100
    p.refresh()
    with caplog.at_level(logging.INFO, logger="confgrid"):
        for n in steps:
            p.update(n)
        p.close()
    return [r.getMessage() for r in caplog.records]


def test_log_lines_at_most_every_interval_and_once_at_close(caplog, monkeypatch):
    # t = 0 start; updates at 10 (the first: the rate starts here), 11 (too soon), 41 (a line), 42 (too soon);
    # close at 50
    got = _lines(caplog, monkeypatch, [0.0, 10.0, 11.0, 41.0, 42.0, 50.0], [10, 10, 20, 5])
    assert got == ["model work: 40 of 100 q done (40%), 1.0 q/s, about 62 s left",  # 30 q in 31 s since the first
                   "model work: 45 of 100 q done (45%), 0.9 q/s, about 63 s left"]


def test_no_second_line_at_close_when_nothing_moved(caplog, monkeypatch):
    got = _lines(caplog, monkeypatch, [0.0, 10.0, 45.0, 46.0], [50, 50])
    assert got == ["model work: 100 of 100 q done (100%), 1.4 q/s"]


def test_a_line_before_any_rate_says_no_rate(caplog, monkeypatch):
    assert _lines(caplog, monkeypatch, [0.0, 40.0, 41.0], [64]) == ["model work: 64 of 100 q done (64%)"]


def test_nothing_done_writes_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="confgrid"):
        LogProgress("model work", "q").close()
    assert caplog.records == []
