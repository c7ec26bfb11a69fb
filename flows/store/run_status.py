"""What ``confgrid status OUT`` concludes from a manifest: shard counts, stale shards and the exit code (pure).

A shard recorded ``running`` is running only while the driver that started it is alive. Each invocation in
``meta.invocations`` records its driver (``driver_pid``, ``driver_host``) and, when it ends in any orderly way,
``ended_at``. A ``running`` shard of an invocation that never ended and whose driver is gone (SIGKILL, a lost
machine) is ``stale``: ``confgrid resume`` runs it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Literal

__all__ = ["RunStatus", "driver_state", "run_status", "pid_alive"]

DriverState = Literal["ended", "running", "gone", "unknown"]


@dataclass(frozen=True)
class RunStatus:
    """The state of a run folder: shards per status (``running`` split into ``running`` and ``stale``), the
    ``stage setting`` of each stale shard, the latest driver's state (:func:`driver_state`) and a line naming it,
    and the exit code (1 when a shard failed or is stale)."""

    counts: dict[str, int]
    failed: int
    stale: list[str]
    driver: DriverState
    driver_line: str
    exit_code: int


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0; a process of another user counts)."""
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except OSError:  # ProcessLookupError: no such process
        return False
    return True


def driver_state(invocation: dict[str, Any] | None, host: str, alive: Callable[[int], bool]) -> DriverState:
    """The latest invocation's driver: ``ended`` (it recorded its end), ``running`` or ``gone`` (its pid on this
    ``host``), ``unknown`` (another host, or no driver recorded)."""
    if not invocation:
        return "unknown"
    if invocation.get("ended_at") is not None:
        return "ended"
    pid, where = invocation.get("driver_pid"), invocation.get("driver_host")
    if not pid or where != host:
        return "unknown"
    return "running" if alive(int(pid)) else "gone"


def run_status(manifest: dict[str, Any], host: str, alive: Callable[[int], bool] = pid_alive) -> RunStatus:
    """Summarize a manifest (as :func:`confgrid.flows.store.run_store.read_manifest` returns it) for ``confgrid status``.

    ``host`` is this machine's host name and ``alive`` tells whether a pid on it runs (tests pass fakes).
    """
    invocations = manifest.get("meta", {}).get("invocations") or []
    last = invocations[-1] if invocations else None
    state = driver_state(last, host, alive)
    counts: dict[str, int] = {}
    stale = []
    for r in manifest["shards"]:
        st = r["status"]
        if st == "running" and state in ("gone", "ended"):
            st = "stale"
            stale.append(f"{r['stage']} {r['setting']}")
        counts[st] = counts.get(st, 0) + 1
    failed = counts.get("failed", 0)
    if last is None:
        line = "driver: not recorded"
    else:
        who = f"pid {last.get('driver_pid', '?')} on {last.get('driver_host', '?')}"
        line = {"ended": f"driver {who}: ended", "running": f"driver {who}: running",
                "gone": f"driver {who}: gone without ending the run (killed?); `confgrid resume` continues it",
                "unknown": f"driver {who}: state unknown from this machine"}[state]
    return RunStatus(counts, failed, stale, state, line, 1 if failed or stale else 0)
