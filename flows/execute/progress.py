"""The progress of the model work, in requests: a tqdm bar on a terminal, periodic log lines in a redirected log.

A tqdm bar written to a file or a pipe is one line of carriage returns that grows with every redraw; a log read
later wants a line now and then instead. :func:`progress` picks by where stderr goes.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tqdm.auto import tqdm

__all__ = ["LogProgress", "progress"]

log = logging.getLogger("confgrid")


class LogProgress:
    """tqdm's counting interface (``total``, ``n``, ``update``, ``refresh``, ``close``), written as a log line at most
    every ``every_s`` seconds (> 0) when ``update`` moves the count, and at ``close`` if the count moved since. The
    rate (and the time left) counts from the first update, so a model's load does not slow it down."""

    def __init__(self, desc: str, unit: str, every_s: float = 30.0) -> None:
        self.desc, self.unit, self.every_s = desc, unit, every_s
        self.total = 0
        self.n = 0
        self._last = time.monotonic()
        self._logged = 0  # the count of the last line written
        self._start: tuple[float, int] | None = None  # (time, count) of the first update: the rate starts there

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self._start is None:
            self._start = (now, self.n)
        if now - self._last >= self.every_s:
            self._last = now
            self._line(now)

    def refresh(self) -> None:
        """A change of ``total`` alone writes nothing."""

    def close(self) -> None:
        if self.n != self._logged:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        self._logged = self.n
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total > 0 else ""
        t0, n0 = self._start or (now, self.n)
        rate = (self.n - n0) / (now - t0) if now > t0 and self.n > n0 else None
        speed = f", {rate:.1f} {self.unit}/s" if rate else ""
        left = f", about {(self.total - self.n) / rate:.0f} s left" if rate and self.total > self.n else ""
        log.info("%s: %d of %d %s done%s%s%s", self.desc, self.n, self.total, self.unit, share, speed, left)


def progress(desc: str, unit: str, stream: Any = None) -> Any:
    """A tqdm bar when ``stream`` (default: stderr) is a terminal or the code runs in a notebook, else a
    :class:`LogProgress`; both start at ``total = 0`` and are counted in ``unit``."""
    stream = sys.stderr if stream is None else stream
    if stream.isatty() or "ipykernel" in sys.modules:
        return tqdm(total=0, desc=desc, unit=unit, leave=False)
    return LogProgress(desc, unit)
