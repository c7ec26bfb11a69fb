"""Replica liveness: a replica that cannot be reached is not a failed shard, and a lost node is named (the
behaviour, with its log lines: docs/guides/faults-resume.md).

The handlers here (over the executor's state record, state.py) put an unreachable or gone replica's shards back
in the queue (at most ``execution.max_retries`` moves per shard: :func:`requeue_or_fail`), take the replica out of
the ready set until a ping answers (its restart counted) or Ray gives it up (``lost`` with its node), restart a
replica whose engine died (``EngineDied``), and fail fast the models no alive node fits (capacity.py
``stranded_models``). Every restart Ray makes is recorded on the replica and on each shard whose call went
through it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from confgrid.actors.calls import ReplicaInfo, ReplicaReady
from confgrid.flows.execute.capacity import PROBE_SECONDS, NodeInfo, node_line, stranded_models
from confgrid.flows.execute.pools import Replica, actor_entry, cancel_calls, model_dead, ping
from confgrid.flows.execute.queue import error_text, fail, requeue, submit, traceback_text
from confgrid.flows.execute.state import ExecState, InFlight
from confgrid.flows.store.runlog import LOG_NAME, trace

__all__ = ["Fault", "classify_fault", "requeue_or_fail", "actor_verdict", "lost_node_tags", "on_ping", "loaded",
           "on_replica_fault", "on_engine_died", "abandon_calls", "unreachable", "probe_unreachable", "watch_nodes"]

log = logging.getLogger("confgrid")

#: What a failed engine call says about its replica: ``unreachable`` (it may come back),
#: ``gone`` (it will not: Ray gave the actor up or it was killed), ``work`` (the call itself failed).
Fault = Literal["unreachable", "gone", "work"]


def classify_fault(exc: BaseException) -> Fault:
    """What a failed engine call's exception says about its replica (pure; no Ray call):
    ``ActorUnavailableError`` is ``unreachable``, ``ActorDiedError`` ``gone``, anything else ``work``."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError  # lazy: the plan and the tests load no Ray

    if isinstance(exc, ActorUnavailableError):
        return "unreachable"
    if isinstance(exc, ActorDiedError):
        return "gone"
    return "work"


def requeue_or_fail(moves: int, max_retries: int) -> bool:
    """Whether a shard whose replica was lost goes back in the queue (True) or fails (False): at most
    ``max_retries`` moves across replicas, so a shard that kills every replica it runs on still fails."""
    return moves < max_retries


def actor_verdict(state: str | None, node_alive: bool | None) -> Literal["alive", "restarting", "lost", "unknown"]:
    """What an unreachable replica's actor-table entry (Ray's actor state, None if unread; whether its node is
    alive) says (pure): ``alive`` (ping it), ``restarting`` (wait), ``lost`` or ``unknown`` (look again later)."""
    if state is None:
        return "unknown"
    if state == "DEAD":
        return "lost"
    if state == "ALIVE":
        return "restarting" if node_alive is False else "alive"
    return "restarting"


def lost_node_tags(replicas: list) -> dict[str, str]:
    """The parent MLflow run's tags for replicas lost with their node (``{}`` when none was lost):
    ``confgrid.lost_nodes``, the nodes' IPs (or ids), sorted, comma-separated; ``confgrid.lost_replicas``, e.g.
    ``fx#1@10.0.0.2``."""
    lost = [r for r in replicas if r.state == "lost"]
    if not lost:
        return {}
    where = {r.name: (r.node_ip or r.node_id or "unknown node") for r in lost}
    return {"confgrid.lost_nodes": ", ".join(sorted(set(where.values()))),
            "confgrid.lost_replicas": ", ".join(f"{n}@{w}" for n, w in sorted(where.items()))}


# -- the handlers, over the executor's state ------------------------------------------------------------------
def on_ping(st: ExecState, ref: Any, rep: Replica) -> None:
    """A replica answered its ping: ready (its model loaded), or back after it was unreachable; or the ping
    failed: asked again while Ray restarts the actor (within ``execution.max_retries``), else recorded dead."""
    import ray  # lazy: no Ray until a shard must be computed

    pool = st.pools.get(rep.model)
    try:
        ready: ReplicaReady = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - the model could not be loaded (or the actor died while loading)
        trace.error("replica %s: ping failed", rep.name, exc_info=exc)
        if rep.state == "unreachable":  # still not back: look again later, or it is gone
            if classify_fault(exc) == "gone":
                _mark_lost(st, rep, error_text(exc))
            return
        if classify_fault(exc) == "unreachable" and pool is not None and not pool.released:
            st.probe_at[id(rep)] = time.time() + 1.0  # its node may be dying: ask again, not counted
            return
        if (not getattr(exc, "_actor_init_failed", False) and pool is not None and not pool.released
                and rep.ping_retries < st.spec.execution.max_retries):
            rep.ping_retries += 1
            log.warning("replica %s: its actor died while loading (%s); Ray restarts it, asking again (%d of %d)",
                        rep.name, error_text(exc), rep.ping_retries, st.spec.execution.max_retries)
            ping(st, rep)
            return
        rep.state, rep.error, rep.traceback = "dead", error_text(exc), traceback_text(exc)
        log.error("replica %s: failed to start: %s (traceback in %s)", rep.name, rep.error, LOG_NAME)
        if pool is not None:
            pool.stop_replica(rep, "dead")
            if not pool.alive():
                model_dead(st, rep.model, f"model {rep.model!r} could not be loaded: {rep.error}")
        return
    if rep.state == "unreachable":
        _on_back(st, rep, ready)
        return
    rep.state, rep.ready_at, rep.info = "ready", time.time(), ready.replica
    rep.node_id, rep.node_ip = ready.replica.node_id, ready.replica.node_ip
    rep.last_progress = rep.ready_at
    st.provenance.setdefault(rep.model, dict(ready.provenance))
    log.info("replica %s: ready on %s, node %s (model loaded in %.1f s)", rep.name, ready.replica.host,
             ready.replica.node_ip or "?", ready.replica.load_seconds)
    n = loaded(st, rep, ready.replica, rep.ready_at)
    if n:
        log.warning("replica %s: Ray restarted its actor %d time(s) while the model loaded (now pid %s on %s, node "
                    "%s); recorded in manifest.json", rep.name, n, ready.replica.pid, ready.replica.host,
                    ready.replica.node_ip or "?")


def loaded(st: ExecState, rep: Replica, info: ReplicaInfo, at: float, fallback: int = 0) -> int:
    """Count a model load of ``rep`` and the actor's restarts not yet counted (Ray's own count in the GCS actor
    table, one while loading included; ``fallback`` when it cannot be read); returns the restarts added."""
    entry = actor_entry(rep.handle)
    new = max(0, entry.num_restarts - rep.restarts_accounted) if entry is not None else fallback
    rep.restarts_accounted += new
    rep.restarts += new
    st.counters.restarts += new
    rep.loaded(info, at)
    st.counters.loads += 1
    return new


def _on_back(st: ExecState, rep: Replica, ready: ReplicaReady) -> None:
    """An unreachable replica answered its ping: count its restart (if it is a new process) and make it ready."""
    if rep.info is not None and ready.replica.incarnation != rep.info.incarnation:
        n = loaded(st, rep, ready.replica, time.time(), fallback=1)
        log.warning("replica %s: back after %.0f s unreachable; Ray restarted its actor (pid %s on %s -> pid %s "
                    "on %s%s); recorded in manifest.json", rep.name, time.time() - rep.unreachable_since,
                    rep.info.pid, node_line(None, rep.node_id, rep.node_ip), ready.replica.pid,
                    node_line(None, ready.replica.node_id, ready.replica.node_ip), f"; {n} restarts" if n > 1 else "")
    else:
        log.info("replica %s: answers again after %.0f s", rep.name, time.time() - rep.unreachable_since)
    rep.info = ready.replica
    rep.node_id, rep.node_ip = ready.replica.node_id, ready.replica.node_ip
    rep.state, rep.error, rep.last_progress = "ready", None, time.time()


def unreachable(st: ExecState) -> list[Replica]:
    """Replicas a call or a ping could not reach (a loading one whose ping is to be asked again included)."""
    return [r for p in st.alive_pools() for r in p.replicas
            if r.state == "unreachable" or (r.state == "waiting" and id(r) in st.probe_at)]


def on_replica_fault(st: ExecState, f: InFlight, err: str, fault: Fault) -> None:
    """A call failed because its replica is unreachable or gone: put its shards back (bounded), mark it."""
    rep = f.replica
    back, failed = [], []
    for sh, rec in zip(f.shards, f.records, strict=True):
        moves = st.moves.get(sh.key, 0)
        if rep.model not in st.dead_reason and requeue_or_fail(moves, st.spec.execution.max_retries):
            st.moves[sh.key] = moves + 1
            rec.status, rec.error = "pending", f"put back in the queue: replica {rep.name} {fault} ({err})"
            requeue(st, sh)
            back.append(sh)
        else:
            failed.append((sh, rec))
    if failed:
        why = st.dead_reason.get(rep.model) or (
            f"replica {rep.name} was lost {st.spec.execution.max_retries} time(s) with this shard: {err}")
        submit(st, fail(st, [s for s, _ in failed], [r for _, r in failed], why))
    if back:
        log.warning("replica %s on %s: %s (%s); %d shard(s) of its call put back in the queue for the other "
                    "replicas", rep.name, node_line(None, rep.node_id, rep.node_ip),
                    "unreachable" if fault == "unreachable" else "gone", err, len(back))
    if fault == "gone":
        _mark_lost(st, rep, err)
    elif rep.state == "ready":
        rep.state, rep.error = "unreachable", err
        rep.unreachable_since = time.time()
        st.probe_at[id(rep)] = time.time() + PROBE_SECONDS
        st.nodes.poll(force=True)


def on_engine_died(st: ExecState, f: InFlight, died: Any) -> None:
    """A call failed because the replica's engine died (``actors/backend.py`` ``EngineDied``): the first report
    of an incarnation's death restarts the replica (``ray.kill`` with restart); the shards go back in the queue."""
    import ray  # lazy: no Ray until a shard must be computed

    rep = f.replica
    err = f"its engine died: {died.process or 'no process of the engine was seen to end'}"
    if rep.info is not None and died.incarnation == rep.info.incarnation and rep.state == "ready":
        log.error("replica %s on %s: %s; Ray restarts the replica (a new process loads the model; restarts "
                  "allowed per replica: execution.max_retries=%d, used %d)", rep.name,
                  node_line(None, rep.node_id, rep.node_ip), err, st.spec.execution.max_retries, rep.restarts)
        try:
            ray.kill(rep.handle, no_restart=False)
        except Exception as exc:  # noqa: BLE001 - the actor is gone already: the probe records it
            log.warning("replica %s: could not be restarted (%s)", rep.name, exc)
    on_replica_fault(st, f, err, "unreachable")


def _mark_lost(st: ExecState, rep: Replica, err: str) -> None:
    """The replica will not come back: state ``lost`` (or ``dead`` if killed on purpose), node and time recorded."""
    pool = st.pools.get(rep.model)
    if rep.state in ("lost", "dead", "released") or pool is None:
        return
    st.nodes.poll(force=True)
    node_gone = rep.node_id in st.nodes.lost
    rep.state, rep.error, rep.lost_at = ("lost" if node_gone else "dead"), err, time.time()
    where = node_line(None, rep.node_id, rep.node_ip)
    if node_gone:
        log.error("replica %s: lost with %s (%s)", rep.name, where, err)
    else:
        log.error("replica %s: died (%s)", rep.name, err)
    pool.stop_replica(rep, rep.state)
    if not pool.alive():
        model_dead(st, rep.model, f"no live replica of model {rep.model!r} (replica {rep.name} "
                                  f"{'lost with ' + where if node_gone else 'died'}: {err})")


def abandon_calls(st: ExecState, node: NodeInfo) -> None:
    """Give up the calls in flight on a lost node's replicas (Ray may keep them queued forever): cancelled, their
    shards put back in the queue, their replicas marked unreachable; a late result is ignored."""
    gone = [(ref, f) for ref, f in st.inflight.items() if f.replica.node_id == node.node_id]
    merged: dict[int, InFlight] = {}  # one fault per replica (one log line), all its calls' shards
    for ref, f in gone:
        del st.inflight[ref]
        f.replica.inflight -= 1
        m = merged.setdefault(id(f.replica), InFlight(f.replica, [], [], f.incarnation))
        m.shards += f.shards
        m.records += f.records
    for m in merged.values():
        on_replica_fault(st, m, f"its {node_line(node)} was lost", "unreachable")
    cancel_calls([ref for ref, _ in gone])


def probe_unreachable(st: ExecState) -> None:
    """Look at each unreachable replica's actor entry: ping it when Ray has it alive again, record it lost
    when Ray gave it up."""
    now = time.time()
    pinged = set(map(id, st.pings.values()))
    for rep in unreachable(st):
        if id(rep) in pinged or now < st.probe_at.get(id(rep), 0.0):
            continue
        if rep.state == "waiting":  # its ping found it unreachable while it loaded: ask again
            del st.probe_at[id(rep)]
            ping(st, rep)
            continue
        st.probe_at[id(rep)] = now + PROBE_SECONDS
        entry = actor_entry(rep.handle)
        verdict = actor_verdict(entry.state if entry else None,
                                st.nodes.is_alive(entry.node_id) if entry and entry.node_id else None)
        if verdict == "alive":
            ping(st, rep)
        elif verdict == "lost":
            _mark_lost(st, rep, rep.error or "Ray gave the actor up")


def watch_nodes(st: ExecState) -> None:
    """Read the node table; for each node lost, say in one line what happened to its work, and fail fast the
    models that no alive node fits any more (unless ``execution.wait_for_nodes``)."""
    if not st.ray_ready:
        return
    for node in st.nodes.poll():
        reps = [r for p in st.alive_pools() for r in p.replicas if r.node_id == node.node_id]
        abandon_calls(st, node)
        log.error("Ray %s was lost (labels %s); replica(s) on it: %s; their calls in flight go back in the queue "
                  "(at most execution.max_retries=%d times per shard)", node_line(node), node.labels or "{}",
                  ", ".join(r.name for r in reps) or "none", st.spec.execution.max_retries)
        if st.spec.execution.wait_for_nodes:
            continue
        active = [m for m, q in st.queues.items() if (q or m in st.pools) and m not in st.dead_reason]
        for m in stranded_models(st.needs, st.nodes.alive(), active):
            need = st.needs[m][1]
            model_dead(st, m, f"{node_line(node)} was lost and no node left fits a replica of model {m!r} "
                              f"({', '.join(f'{k}: {v:g}' for k, v in need.items())}); "
                              "confgrid resume runs it when the cluster has such a node again")
