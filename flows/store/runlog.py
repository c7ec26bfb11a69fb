"""The run's log file: every confgrid log line of a run, tracebacks included, in ``OUT/confgrid.log``.

The console shows one line per failure; the file also keeps its full traceback, once: code that catches a
failure logs the traceback to :data:`trace` (the ``confgrid.trace`` logger: the log file only). Every invocation
appends to the file, starting with a header line.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Iterator

__all__ = ["LOG_NAME", "run_log", "trace"]

LOG_NAME = "confgrid.log"

#: Tracebacks of failures, for the run's log file only (not propagated to the console).
trace = logging.getLogger("confgrid.trace")
trace.propagate = False
trace.setLevel(logging.DEBUG)
trace.addHandler(logging.NullHandler())


@contextlib.contextmanager
def run_log(out_dir: str | Path, what: str) -> Iterator[Path]:
    """Copy the ``confgrid`` logger's records and every :data:`trace` record into ``OUT/confgrid.log`` (yielded),
    after a header naming ``what`` (``run``, ``resume``...). A file that cannot be opened is skipped with a
    warning: logging never stops a run."""
    path = Path(out_dir) / LOG_NAME
    log = logging.getLogger("confgrid")
    try:
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        log.warning("run log %s cannot be written (%s); logging to the console only", path, exc)
        yield path
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    trace.addHandler(handler)
    trace.info("---- confgrid %s in %s at %s", what, Path(out_dir).resolve(), time.strftime("%Y-%m-%d %H:%M:%S"))
    try:
        yield path
    finally:
        log.removeHandler(handler)
        trace.removeHandler(handler)
        handler.close()
