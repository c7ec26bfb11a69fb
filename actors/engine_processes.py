"""Which process of a vLLM engine died: the engine's processes named from their titles, and the order they end in.

vLLM names its processes (``VLLM::EngineCore``, ``VLLM::Worker_TP1``, ...) with ``setproctitle``; a rank killed by
the system ends first and vLLM then stops the others, so the first process seen to end names the rank that died
(``EngineDied`` in actors/backend.py, the restart in flows/execute/liveness.py). Linux only (pidfds); elsewhere
nothing is watched and the message names no process.
"""

from __future__ import annotations

import os
import re
import select
import threading
import time

__all__ = ["engine_process_name", "engine_processes", "ExitOrder"]

_TP_RANK = re.compile(r"\bVLLM::Worker\S*?_TP(\d+)(?!\d)")


def engine_process_name(title: str, tensor_parallel_size: int = 1) -> str | None:
    """How a vLLM process is named in confgrid's log, from its process title (None: not an engine process).

    >>> engine_process_name("VLLM::Worker_TP1", 2)
    'rank 1 of 2'
    >>> engine_process_name("VLLM::Worker_PP0_TP3", 4), engine_process_name("VLLM::EngineCore")
    ('rank 3 of 4', 'engine core')
    >>> engine_process_name("python -m pytest") is None
    True
    """
    m = _TP_RANK.search(title)
    if m:
        return f"rank {int(m.group(1))} of {tensor_parallel_size}"
    if "VLLM::EngineCore" in title:
        return "engine core"
    return None


def engine_processes(tensor_parallel_size: int, exclude: set[int] = frozenset()) -> list[tuple[str, int]]:
    """The engine processes among this process's descendants, ``(name, pid)``, engine core first, then ranks."""
    try:
        import psutil

        found = []
        for p in psutil.Process().children(recursive=True):
            if p.pid in exclude:
                continue
            try:
                name = engine_process_name(" ".join(p.cmdline()), tensor_parallel_size)
            except (psutil.Error, OSError):
                continue
            if name is not None:
                found.append((name, p.pid))
    except Exception:  # noqa: BLE001 - provenance and fault messages only: no psutil, no /proc
        return []
    return sorted(found, key=lambda x: (x[0] != "engine core", int(x[0].split()[1]) if x[0].startswith("rank") else 0))


class ExitOrder:
    """Which of some processes ended first: a thread waits on their pidfds (Linux >= 5.3) and records each end.

    ``processes``: ``(name, pid)`` of each process to watch. ``ended``: ``(name, pid, time.time())`` of each process
    seen to end, in the order seen; its first entry is the process that died (see the module docstring).
    ``watching``: False when no process could be watched (no ``os.pidfd_open``, or every pid gone already).
    """

    def __init__(self, processes: list[tuple[str, int]]) -> None:
        self.ended: list[tuple[str, int, float]] = []
        self._fds: dict[int, tuple[str, int]] = {}
        for name, pid in processes:
            try:
                self._fds[os.pidfd_open(pid)] = (name, pid)  # type: ignore[attr-defined]
            except (AttributeError, OSError):  # not Linux >= 5.3, or the process is gone already
                continue
        self.watching = bool(self._fds)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="confgrid-engine-exit-order", daemon=True)
        if self.watching:
            self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        while self._fds:
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    return
                name, pid = self._fds.pop(fd)
                self.ended.append((name, pid, time.time()))
                poller.unregister(fd)
                os.close(fd)

    def first(self, wait: float = 0.0) -> tuple[str, int, float] | None:
        """The first process seen to end, waiting at most ``wait`` seconds for one; None if none has."""
        deadline = time.monotonic() + wait
        while not self.ended and self.watching and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.ended[0] if self.ended else None

    def close(self) -> None:
        """Stop watching (idempotent)."""
        if self._wake_w < 0:
            return
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        for fd in list(self._fds):
            os.close(fd)
        self._fds.clear()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
