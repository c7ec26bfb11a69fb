"""Deterministic faults inside Ray's worker processes, for tests only (the product has no fault hook).

:func:`install` is Ray's ``worker_process_setup_hook``: a test starts Ray
within :func:`installed` (this folder on the workers' ``PYTHONPATH`` and the
hook named in ``runtime_env``), and every worker process runs it before any
actor code. It patches :class:`confgrid.actors.model_actor.ModelWorker` in that
process so that the replicas of a named model stop at a chosen point and say
where they are; the test then kills them as a user or the OS would
(``os.kill(pid, SIGKILL)``, ``ray.kill``, Ctrl-C). Nothing polls for a moment
to strike.

``CONFGRID_TEST_FAULT="model=<name>;mode=<mode>;after=<N>;marker=<path>"``,
several plans separated by ``|``:

``hang``
    At the start of engine call ``N + 1`` the replica writes
    ``"<pid> <actor name>"`` to the marker and blocks (at most
    :data:`HANG_SECONDS`) until it is killed.
``hang_load``
    Before the model loads, the same (``after`` is ignored).
``kill_rank`` (vLLM with the multiprocessing executor; ``rank=R``, default 1)
    During engine call ``N + 1``, once vLLM holds the call's requests (its
    first engine step), the replica kills the process of tensor-parallel rank
    ``R`` of its engine (``SIGKILL``, the pid from ``ReplicaInfo.ranks``) and
    writes ``"<pid> rank R"`` to the marker; the call then meets a dead engine.
``engine_died`` (any backend)
    Engine call ``N + 1`` fails as a dead vLLM engine's does: the backend
    raises ``EngineDied`` naming ``rank R of 2`` (no process is killed; the
    driver's handling is what is tested). The marker gets ``"<pid> <actor name>"``.

Each plan fires once per marker file (the marker is written first), so a
replica that Ray restarts, or a later resume, runs on.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

#: The environment variable holding the plans.
ENV = "CONFGRID_TEST_FAULT"
#: A hung replica gives up after this long, so a test never hangs forever.
HANG_SECONDS = 600.0
MODES = ("hang", "hang_load", "kill_rank", "engine_died")


@dataclass(frozen=True)
class Fault:
    model: str
    mode: str
    after: int
    marker: Path
    rank: int = 1


def plans(raw: str | None = None) -> list[Fault]:
    """Parse ``CONFGRID_TEST_FAULT`` (or ``raw``); raises ValueError naming the bad part."""
    raw = os.environ.get(ENV, "") if raw is None else raw
    out = []
    for one in filter(None, raw.split("|")):
        try:
            f = dict(part.split("=", 1) for part in one.split(";") if part)
            fault = Fault(f["model"], f["mode"], int(f.get("after", 0)), Path(f["marker"]), int(f.get("rank", 1)))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{ENV}={raw!r}: expected 'model=NAME;mode={'|'.join(MODES)};after=N;marker=PATH"
                             "[;rank=R]'") from exc
        if fault.mode not in MODES:
            raise ValueError(f"{ENV} mode={fault.mode!r}; allowed: {', '.join(MODES)}")
        out.append(fault)
    return out


def spec(*faults: Fault) -> str:
    """The value of :data:`ENV` for ``faults``."""
    return "|".join(f"model={f.model};mode={f.mode};after={f.after};marker={f.marker};rank={f.rank}" for f in faults)


def _write_marker(marker: Path, text: str) -> None:
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(marker)


def _hang_once(fault: Fault, name: str) -> None:
    if fault.marker.exists():  # fired before: a restarted replica (or a resume) runs on
        return
    _write_marker(fault.marker, f"{os.getpid()} {name}")
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:  # until the test kills this process
        time.sleep(0.05)
    raise RuntimeError(f"test fault {fault}: not killed within {HANG_SECONDS:.0f} s")


def install() -> None:
    """Ray's ``worker_process_setup_hook``: patch ModelWorker in this worker process per the plans."""
    faults = plans()
    if not faults:
        return
    import ray

    from confgrid.actors.model_actor import ModelWorker

    init, run = ModelWorker.__init__, ModelWorker.run

    def actor_name() -> str:
        try:
            return ray.get_runtime_context().get_actor_name() or ""
        except Exception:  # noqa: BLE001 - outside an actor
            return ""

    def patched_init(self, config, *args, **kwargs):
        for f in faults:
            if f.model == config.name and f.mode == "hang_load":
                _hang_once(f, actor_name())
        init(self, config, *args, **kwargs)
        self._test_calls = 0

    def patched_run(self, call):
        self._test_calls += 1
        for f in faults:
            if f.model != self.config.name or self._test_calls != f.after + 1 or f.marker.exists():
                continue
            if f.mode == "hang":
                _hang_once(f, actor_name())
            elif f.mode == "kill_rank":
                _kill_rank_in_call(self, f)
            elif f.mode == "engine_died":
                _engine_dies_in_call(self, f, actor_name())
        return run(self, call)

    ModelWorker.__init__ = patched_init
    ModelWorker.run = patched_run


def _kill_rank_in_call(worker, fault: Fault) -> None:
    """Arm the replica's engine: at its next step (vLLM holds the call's requests) rank ``fault.rank`` is killed."""
    import signal

    name = f"rank {fault.rank} of "
    pids = [pid for n, pid in worker.info.ranks if n.startswith(name)]
    if not pids:
        raise RuntimeError(f"test fault {fault}: no process of rank {fault.rank} in {worker.info.ranks}")
    engine = worker.backend.llm.llm_engine
    step = engine.step

    def killing_step(*args, **kwargs):
        engine.step = step  # once
        _write_marker(fault.marker, f"{pids[0]} rank {fault.rank}")
        os.kill(pids[0], signal.SIGKILL)
        return step(*args, **kwargs)

    engine.step = killing_step


def _engine_dies_in_call(worker, fault: Fault, name: str) -> None:
    """The replica's next engine call raises EngineDied as a dead vLLM engine would (nothing is killed)."""
    from confgrid.actors.backend import EngineDied

    _write_marker(fault.marker, f"{os.getpid()} {name}")
    process = f"rank {fault.rank} of 2 (pid 0)"
    for method in ("generate", "generate_samples", "score", "next_token"):
        def dead(*args, **kwargs):
            raise EngineDied(f"the engine died: {process} ended first (test fault)", process)

        setattr(worker.backend, method, dead)


@contextmanager
def installed(faults: list[Fault] | tuple[Fault, ...], **kw) -> Iterator[dict]:
    """Install the faults in every Ray worker started within: yields the ``ray.init`` keyword arguments (``kw``
    and the setup hook in ``runtime_env``).

    The workers inherit the driver's environment: :data:`ENV` and this folder on ``PYTHONPATH``, set here and
    restored on exit.
    """
    before = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
    here = str(Path(__file__).resolve().parent)
    os.environ[ENV] = spec(*faults)
    path = os.environ.get("PYTHONPATH", "")
    if here not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, path) if p)
    try:
        yield {**kw, "runtime_env": {"worker_process_setup_hook": "ray_faults.install"}}
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def read_marker(marker: Path, timeout: float = 300.0) -> tuple[int, str]:
    """Wait until a fault fired; returns ``(pid, actor name)`` of the replica that is hanging."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists():
            pid, _, name = marker.read_text(encoding="utf-8").partition(" ")
            return int(pid), name
        time.sleep(0.05)
    raise TimeoutError(f"the fault with marker {marker} did not fire within {timeout:.0f} s")
