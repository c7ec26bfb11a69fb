"""The executor's event loop: :func:`execute` runs a :class:`~confgrid.flows.plan.grid_plan.GridPlan` on Ray.

Each turn starts, grows and releases pools (pools.py), sends queued shards to ready replicas (queue.py), looks
after unreachable replicas and lost nodes (liveness.py), then waits for one answer from Ray: an engine call
returned (:func:`_on_call`) or a ping (liveness.py ``on_ping``). Nothing waits silently: a replica not ready, a
slow call and planned cross-model work are each said in the log, and again every 30 s while they last.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

import pandas as pd

from confgrid.actors.backend import engine_died
from confgrid.actors.calls import CallResult
from confgrid.flows.execute.capacity import fmt
from confgrid.flows.execute.liveness import (classify_fault, loaded, on_engine_died, on_ping, on_replica_fault,
                                             probe_unreachable, unreachable, watch_nodes)
from confgrid.flows.execute.pools import (cancel_calls, free_per_node, grow_pools, model_dead, placed, release,
                                          release_idle, start_pools)
from confgrid.flows.execute.progress import progress
from confgrid.flows.execute.queue import dispatch, error_text, fail, finish, note_queue, submit, traceback_text
from confgrid.flows.execute.state import WAIT_LOG_SECONDS, ExecState, InFlight
from confgrid.flows.execute.timeline import add_span
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.store.run_store import RunStore
from confgrid.flows.store.runlog import trace

__all__ = ["execute"]

log = logging.getLogger("confgrid")

#: Seconds a replica may take to become ready before the log says what it waits for (also the longest wait on
#: Ray in one turn).
WAIT_FIRST_SECONDS = 5.0
#: Seconds without a finished engine call (while calls are in flight) before the log says so.
SLOW_CALL_SECONDS = 60.0


def execute(spec: GridSpec, store: RunStore, plan: GridPlan, build: Callable[[ShardRequest, tuple], pd.DataFrame],
            *, tracker: Any = None, address: str | None = None, only_failed: bool = False,
            rounds: Any = None) -> ExecState:
    """Run the plan's shards to the end, record every outcome in the store, and return the final state.

    The arguments are the inputs of the state record (state.py ``ExecState``); ``rounds`` (early stopping): its
    first round is submitted with the plan's shards, and each setting with nothing queued or running goes to its
    next round or stops. Raises CapacityError before any model is loaded if some model's replica fits on no node
    (unless ``execution.wait_for_nodes``).
    """
    st = ExecState(spec=spec, store=store, plan=plan, build=build, tracker=tracker, address=address,
                   only_failed=only_failed, rounds=rounds, bar=progress("model work", "q"))
    record_replicas(st)  # the invocation starts now (its started_at opens the timeline's window)
    ctrl_c, restore = _catch_ctrl_c()
    try:
        submit(st, plan.generate_shards())
        if rounds is not None:
            submit(st, rounds.start())
        idle_turns = 0
        while _has_work(st):
            if ctrl_c.is_set():
                raise KeyboardInterrupt
            if _advance_rounds(st):
                continue
            start_pools(st)
            grow_pools(st)
            dispatch(st)
            release_idle(st)
            watch_nodes(st)
            probe_unreachable(st)
            if not st.inflight and not st.pings and unreachable(st):
                time.sleep(0.2)  # work waits for a replica Ray may bring back; the probe looks again
                continue
            if not st.inflight and not st.pings:
                idle_turns += 1  # pools were just released or failed; the next turn starts or fails them
                if idle_turns > 3:
                    raise RuntimeError(f"scheduler stalled with work queued and nothing running: {_state_line(st)}")
                continue
            idle_turns = 0
            _wait_one(st)
            _log_waiting(st)
            record_replicas(st)
            store.flush()
    finally:
        restore()
        close(st)
        st.bar.close()
    for stage, (n, rows) in st.reused_by_stage.items():
        log.info("%s: reusing %d stored shard(s) (%d rows); no model call for them", stage, n, rows)
    return st


def close(st: ExecState) -> None:
    """Release every pool still alive and write the replicas into the manifest; shards whose calls were still
    in flight are recorded ``interrupted`` (not failed, not done; ``confgrid resume`` runs them)."""
    for f in st.inflight.values():
        for rec in f.records:
            if rec.status == "running":
                rec.status, rec.error = "interrupted", "the run stopped before this shard finished"
    cancel_calls(list(st.inflight))  # not retried by Ray: no false "will be retried" on Ctrl-C
    for pool in list(st.pools.values()):
        release(st, pool, "end of run" if st.queues[pool.name] or st.inflight else "its work is done")
    note_queue(st, closing=True)
    record_replicas(st)
    st.invocation["ended_at"] = time.time()  # `confgrid status`: running shards after this are stale
    st.store.flush(force=True)


def record_replicas(st: ExecState) -> None:
    """Every replica's timeline and the loads per model, in the manifest, as they change: ``meta.replicas``,
    ``meta.loads`` and ``meta.queued`` (timeline.py) of this invocation, and its entry of ``meta.invocations``."""
    replicas = [r.record() for p in st.history for r in p.replicas]
    queued = [list(x) for x in st.queue_spans]
    if st.invocation is None:
        st.invocation = {"started_at": time.time(), "only_failed": st.only_failed, "driver_pid": os.getpid(),
                         "driver_host": socket.gethostname(), "address": st.address}
        st.store.meta.setdefault("invocations", []).append(st.invocation)
    elif replicas == st.store.meta.get("replicas") and queued == st.store.meta.get("queued"):
        return
    loads = {m: sum(r.loads for p in st.history if p.name == m for r in p.replicas) for m in st.models}
    st.store.meta.update(replicas=replicas, loads=loads, queued=queued)
    st.invocation.update(replicas=replicas, loads=loads, restarts=st.counters.restarts)
    st.store.touch()


def _has_work(st: ExecState) -> bool:
    return (any(st.queues.values()) or bool(st.inflight)
            or (st.rounds is not None and bool(st.rounds.active())))


def _advance_rounds(st: ExecState) -> bool:
    """Early stopping: each setting with nothing queued or running goes to its next round or stops
    (flows/evaluate/rounds.py); repeated while a round is done at once (its shards reused). Returns whether
    every setting has stopped and nothing is left to run (the loop ends)."""
    if st.rounds is None:
        return False
    while True:
        busy = {(q.shard.model, q.shard.dataset) for qs in st.queues.values() for q in qs}
        busy |= {(sh.model, sh.dataset) for f in st.inflight.values() for sh in f.shards}
        busy |= {(sh.model, sh.dataset) for group in st.twins.values() for sh in group}  # twins too
        idle = [k for k in st.rounds.active() if k not in busy]
        if not idle:
            break
        for key in idle:
            failed = sum(1 for f in st.failed if (f.get("model"), f.get("dataset")) == key)
            submit(st, st.rounds.advance(key, st.done, st.submitted, failed))
    return not _has_work(st)


def _catch_ctrl_c() -> tuple[threading.Event, Callable[[], None]]:
    """Make Ctrl-C reliable while the driver waits on Ray (whose ``wait`` can swallow a KeyboardInterrupt): a
    SIGINT sets the returned event, which the loop turns into ``KeyboardInterrupt``; a second one raises at once.
    Also returns the function restoring the old handler. Outside the main thread nothing changes."""
    pressed = threading.Event()

    def on_sigint(signum, frame):
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()
        log.warning("Ctrl-C: stopping after the current wait (press again to stop at once)")

    try:
        old = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not allowed here (not the main thread, or an embedded interpreter)
        return pressed, lambda: None
    return pressed, lambda: signal.signal(signal.SIGINT, old)


def _wait_one(st: ExecState) -> None:
    import ray  # lazy: a run whose shards are all stored, and the commands that only read a run, never load it

    ready, _ = ray.wait(list(st.inflight) + list(st.pings), num_returns=1, timeout=WAIT_FIRST_SECONDS)
    if not ready:
        return
    ref = ready[0]
    if ref in st.pings:
        on_ping(st, ref, st.pings.pop(ref))
    else:
        _on_call(st, ref, st.inflight.pop(ref))


def _on_call(st: ExecState, ref: Any, f: InFlight) -> None:
    """An engine call returned: its shards are stored (queue.py ``finish``) or failed; a call that did not reach
    its replica puts them back in the queue (liveness.py); a restart of the replica's actor is counted."""
    import ray  # lazy: see _wait_one
    from ray.exceptions import RayActorError  # lazy: likewise

    rep = f.replica
    rep.inflight -= 1
    try:
        result: CallResult = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - the call failed; its shards are recorded, never lost
        trace.error("engine call on %s failed", rep.name, exc_info=exc)
        fault = classify_fault(exc)
        died = engine_died(exc) if fault == "work" and not isinstance(exc, RayActorError) else None
        if fault != "work":  # the replica is unreachable or gone, not the work: its shards go back in the queue
            on_replica_fault(st, f, error_text(exc), fault)
        elif died is not None:  # the replica's engine is gone, not the work: restarted, shards back in the queue
            on_engine_died(st, f, died)
        else:
            submit(st, fail(st, f.shards, f.records, error_text(exc), traceback_text(exc)))
        return
    rep.calls += 1
    rep.busy_seconds += result.seconds
    rep.requests += sum(len(sh.rows) for sh in f.shards)
    rep.last_progress = time.time()
    add_span(rep.computing, result.started, result.started + result.seconds)
    if rep.info is not None and result.replica.incarnation != rep.info.incarnation:
        n = loaded(st, rep, result.replica, result.started, fallback=1)  # 0: Ray counted it already (at the ping)
        log.warning("replica %s: Ray restarted its actor (pid %s on %s -> pid %s on %s%s) and retried the calls "
                    "in flight; recorded in manifest.json", rep.name, rep.info.pid, rep.info.host,
                    result.replica.pid, result.replica.host,
                    f"; {n} restarts" if n > 1 else "; counted when it became ready" if n == 0 else "")
        rep.info = result.replica
    stop = finish(st, f, result, restarted=f.incarnation is not None and result.replica.incarnation != f.incarnation)
    if stop is not None and rep.model not in st.dead_reason:
        log.error("model %s: stopped; its remaining shards fail with the reason (confgrid resume starts it "
                  "afresh)", rep.model)
        model_dead(st, rep.model, stop)


def _state_line(st: ExecState) -> str:
    queued = {m: len(q) for m, q in st.queues.items() if q}
    pools = {p.name: [r.state for r in p.replicas] for p in st.pools.values()}
    return f"queued shards {queued}; pools {pools}; dead models {st.dead_reason}"


def _log_waiting(st: ExecState) -> None:
    """Say what waits, for what: replicas not ready after WAIT_FIRST_SECONDS, slow calls, planned cross-model
    work."""
    now = time.time()
    for pool in st.alive_pools():
        waiting = [r for r in pool.waiting() if now - r.requested_at >= WAIT_FIRST_SECONDS]
        if not waiting or now - st.said.get(f"wait:{pool.name}", -1e18) < WAIT_LOG_SECONDS:
            continue
        need = st.needs[pool.name][1]
        where = [placed(r.handle) for r in waiting]
        parts = []
        if where.count(True):
            parts.append(f"{where.count(True)} loading the model")
        if where.count(False):
            free = free_per_node().values()
            parts.append(f"{where.count(False)} waiting for resources {fmt(need)} each (free now: "
                         f"{fmt({k: sum(n.get(k, 0.0) for n in free) for k in need})}; they start when other "
                         "replicas release theirs or the cluster adds a node)")
        if where.count(None):
            parts.append(f"{where.count(None)} waiting for resources {fmt(need)} each or loading the model")
        st.say(f"wait:{pool.name}", f"model {pool.name}: {len(waiting)} of {len(pool.replicas)} replica(s) "
               f"not ready after {now - min(r.requested_at for r in waiting):.0f} s: {'; '.join(parts)}")
    for f in {id(f.replica): f for f in st.inflight.values()}.values():
        rep = f.replica
        quiet = now - (rep.last_progress or now)
        if quiet >= SLOW_CALL_SECONDS:
            calls = [g for g in st.inflight.values() if g.replica is rep]
            st.say(f"slow:{rep.name}", f"replica {rep.name}: no engine call has finished for {quiet:.0f} s "
                   f"({len(calls)} call(s) in flight: {sum(len(g.shards) for g in calls)} shard(s), "
                   f"{sum(len(s.rows) for g in calls for s in g.shards)} requests); waiting for it")
    for msg in st.plan.waiting_for():
        st.say(f"plan:{msg}", msg)
