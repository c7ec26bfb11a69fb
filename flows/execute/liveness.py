"""Replica liveness: a replica that cannot be reached is not a failed shard, and a lost node is named.

When a Ray node dies, its actors are unreachable for 10 to 20 s before Ray
declares the node dead; calls to them raise ``ActorUnavailableError`` (the
actor may come back: Ray restarts it elsewhere) and then ``ActorDiedError``
(it will not). Neither says anything about the work itself, so the executor
(flows/execute/executor.py, through :class:`ReplicaLiveness`) does this:

- the call's shards go back in their model's queue (each shard at most
  ``execution.max_retries`` times across replicas: :func:`requeue_or_fail`);
- the replica leaves the ready set (state ``unreachable``) until it answers a
  ping again; then its restart is counted (or, if Ray gives it up, it is
  recorded ``lost`` with its node, the time and the error);
- the other replicas, or the restarted one, finish the work;
- a replica whose engine died (a tensor-parallel rank's process, vLLM's
  engine core: the replica raises ``EngineDied`` naming it) is restarted by
  Ray (``ray.kill`` with restart, within ``execution.max_retries``) and treated
  as unreachable meanwhile: its calls go back in the queue, the log names
  the process that died, and it is recorded ``dead`` when Ray gives it up;
- when the last node that fits a model's replica is gone and
  ``execution.wait_for_nodes`` is false, the model's remaining shards fail
  naming the lost node (:func:`stranded_models`).

The decisions are the pure functions of this module; only :func:`read_nodes`
and the methods of :class:`ReplicaLiveness` talk to Ray.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from confgrid.flows.execute.pools import check_capacity

__all__ = ["NodeInfo", "Fault", "classify_fault", "requeue_or_fail", "actor_verdict", "lost_nodes", "lost_node_tags",
           "stranded_models", "node_line", "read_nodes", "NodeWatch", "ReplicaLiveness", "PROBE_SECONDS"]

log = logging.getLogger("confgrid")

#: Seconds between two looks at an unreachable replica (its actor-table entry) and at the node table.
PROBE_SECONDS = 1.0

#: What a failed engine call says about its replica: ``unreachable`` (it may come back),
#: ``gone`` (it will not: Ray gave the actor up or it was killed), ``work`` (the call itself failed).
Fault = Literal["unreachable", "gone", "work"]


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as the GCS node table has it.

    Attributes
    ----------
    node_id : str
        Ray's node id (hex, 56 characters).
    ip : str
        The node's IP address (``NodeManagerAddress``).
    alive : bool
    resources : dict of str to float
        Total ``{"GPU": g, "CPU": c}`` of the node.
    labels : dict of str to str
        The node's labels (``ray start --labels``), Ray's own ``ray.io/...`` ones left out.
    """

    node_id: str
    ip: str
    alive: bool
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def classify_fault(exc: BaseException) -> Fault:
    """What a failed engine call's exception says about its replica (pure; no Ray call).

    ``ActorUnavailableError`` (the actor cannot be reached now: its node is
    dying, or Ray is restarting it) is ``unreachable``; ``ActorDiedError`` (Ray
    will not restart it: out of restarts, killed, its node gone) is ``gone``;
    anything else (the engine raised, the result could not be read) is
    ``work``: the shards failed on their own.
    """
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    if isinstance(exc, ActorUnavailableError):
        return "unreachable"
    if isinstance(exc, ActorDiedError):
        return "gone"
    return "work"


def requeue_or_fail(moves: int, max_retries: int) -> bool:
    """Whether a shard whose replica was lost goes back in the queue (True) or fails (False).

    ``moves`` is how often the shard was already put back in this invocation. A
    shard is retried at most ``max_retries`` times across replicas, so a shard
    that kills every replica it runs on still fails.
    """
    return moves < max_retries


def actor_verdict(state: str | None, node_alive: bool | None) -> Literal["alive", "restarting", "lost", "unknown"]:
    """What an unreachable replica's actor-table entry says (pure).

    Parameters
    ----------
    state : str or None
        Ray's actor state (``ALIVE``, ``RESTARTING``, ``PENDING_CREATION``,
        ``DEAD``); None when the table could not be read.
    node_alive : bool or None
        Whether the node the actor runs on now is alive (None: not known).

    Returns
    -------
    str
        ``alive`` (ping it: it may answer), ``restarting`` (wait), ``lost``
        (Ray gave it up) or ``unknown`` (look again later).
    """
    if state is None:
        return "unknown"
    if state == "DEAD":
        return "lost"
    if state == "ALIVE":
        return "restarting" if node_alive is False else "alive"
    return "restarting"


def lost_nodes(before: dict[str, NodeInfo], now: list[NodeInfo]) -> list[NodeInfo]:
    """Nodes alive in ``before`` that are dead or absent in ``now`` (pure), as they were last seen alive."""
    alive_now = {n.node_id for n in now if n.alive}
    return [n for nid, n in before.items() if n.alive and nid not in alive_now]


def lost_node_tags(replicas: list) -> dict[str, str]:
    """The parent MLflow run's tags for replicas lost with their node: ``{}`` when none was lost.

    Parameters
    ----------
    replicas : list of Replica
        Every replica of the run (flows/execute/pools.py ``Replica``), in any state.

    Returns
    -------
    dict of str to str
        ``confgrid.lost_nodes``: the lost nodes' IPs (or node ids where no IP was known), sorted, comma-separated;
        ``confgrid.lost_replicas``: the lost replicas' names with their node, e.g. ``fx#1@10.0.0.2``.
    """
    lost = [r for r in replicas if r.state == "lost"]
    if not lost:
        return {}
    where = {r.name: (r.node_ip or r.node_id or "unknown node") for r in lost}
    return {"confgrid.lost_nodes": ", ".join(sorted(set(where.values()))),
            "confgrid.lost_replicas": ", ".join(f"{n}@{w}" for n, w in sorted(where.items()))}


def stranded_models(needs: dict[str, tuple[int, dict[str, float], str]], alive: list[NodeInfo],
                    models: list[str]) -> list[str]:
    """Of ``models``, those whose replica fits on no alive node any more (pure; :func:`check_capacity`)."""
    nodes = [n.resources for n in alive if n.alive]
    sub = {m: needs[m] for m in models if m in needs}
    return [m for m in sub if check_capacity({m: sub[m]}, nodes)]


def node_line(node: NodeInfo | None, node_id: str = "", ip: str = "") -> str:
    """``node 10.0.0.5 (3f2a9c1b)``: how the log and the manifest name a node."""
    nid = node.node_id if node is not None else node_id
    addr = node.ip if node is not None else ip
    return f"node {addr or '?'} ({nid[:8] or '?'})"


def read_nodes() -> list[NodeInfo]:
    """Every node of the connected Ray cluster (GCS node table), dead ones included."""
    import ray

    out = []
    for n in ray.nodes():
        res = n.get("Resources") or {}
        labels = {k: str(v) for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
        out.append(NodeInfo(node_id=str(n.get("NodeID", "")), ip=str(n.get("NodeManagerAddress", "")),
                            alive=bool(n.get("Alive")), resources={"GPU": float(res.get("GPU", 0.0)),
                                                                   "CPU": float(res.get("CPU", 0.0))},
                            labels=labels))
    return out


class NodeWatch:
    """The node table, read at most every ``period`` seconds; tells which nodes were lost since the last look.

    ``read`` returns the node list (default :func:`read_nodes`; tests pass a fake).
    """

    def __init__(self, read: Any = read_nodes, period: float = PROBE_SECONDS) -> None:
        self._read, self.period = read, period
        self.known: dict[str, NodeInfo] = {}
        self.lost: dict[str, tuple[NodeInfo, float]] = {}  # node id -> (node as last seen alive, when lost)
        self._at = -1e18

    def poll(self, now: float | None = None, force: bool = False) -> list[NodeInfo]:
        """Read the table if ``period`` has passed (or ``force``); returns the nodes lost since the last read."""
        now = time.time() if now is None else now
        if not force and now - self._at < self.period:
            return []
        self._at = now
        try:
            nodes = self._read()
        except Exception:  # noqa: BLE001 - the GCS did not answer this time; look again later
            return []
        gone = lost_nodes(self.known, nodes) if self.known else []
        for n in gone:
            self.lost[n.node_id] = (n, now)
        self.known = {n.node_id: n for n in nodes if n.alive or n.node_id not in self.known}
        for n in gone:
            self.known[n.node_id] = NodeInfo(n.node_id, n.ip, False, n.resources, n.labels)
        return gone

    def alive(self) -> list[NodeInfo]:
        return [n for n in self.known.values() if n.alive]

    def is_alive(self, node_id: str) -> bool | None:
        n = self.known.get(node_id)
        return None if n is None else n.alive


class ReplicaLiveness:
    """The executor's part that handles unreachable replicas and lost nodes (mixed into ``Executor``).

    It uses the executor's ``pools``, ``_queues``, ``_queued``, ``_pings``, ``_inflight``, ``store``,
    ``spec``, ``counters``, ``_dead_reason`` and its ``_ping``, ``_fail``, ``_submit``, ``_model_dead``,
    ``_requeue_shard`` and ``_count_restarts``.
    """

    def _liveness_init(self) -> None:
        self._moves: dict[str, int] = {}  # shard key -> times put back in the queue after a lost replica
        self._nodes = NodeWatch()
        self._probe_at: dict[int, float] = {}  # id(replica) -> next look at its actor-table entry

    def _unreachable(self) -> list[Any]:
        """Replicas a call or a ping could not reach (a loading one whose ping is to be asked again included)."""
        return [r for p in self.pools.values() if not p.released for r in p.replicas
                if r.state == "unreachable" or (r.state == "waiting" and id(r) in self._probe_at)]

    def _on_replica_fault(self, f: Any, exc: BaseException | None, err: str, fault: Fault) -> None:
        """A call failed because its replica is unreachable or gone: put its shards back (bounded), mark it."""
        rep = f.replica
        back, failed = [], []
        for sh, rec in zip(f.shards, f.records, strict=True):
            moves = self._moves.get(sh.key, 0)
            if rep.model not in self._dead_reason and requeue_or_fail(moves, self.spec.execution.max_retries):
                self._moves[sh.key] = moves + 1
                rec.status, rec.error = "pending", f"put back in the queue: replica {rep.name} {fault} ({err})"
                self._requeue_shard(sh)
                back.append(sh)
            else:
                failed.append((sh, rec))
        if failed:
            why = self._dead_reason.get(rep.model) or (
                f"replica {rep.name} was lost {self.spec.execution.max_retries} time(s) with this shard: {err}")
            self._submit(self._fail([s for s, _ in failed], [r for _, r in failed], why))
        where = node_line(None, rep.node_id, rep.node_ip)
        if back:
            log.warning("replica %s on %s: %s (%s); %d shard(s) of its call put back in the queue for the other "
                        "replicas", rep.name, where, "unreachable" if fault == "unreachable" else "gone", err,
                        len(back))
        if fault == "gone":
            self._mark_lost(rep, err)
        elif rep.state == "ready":
            rep.state, rep.error = "unreachable", err
            rep.unreachable_since = time.time()
            self._probe_at[id(rep)] = time.time() + PROBE_SECONDS
            self._nodes.poll(force=True)

    def _on_engine_died(self, f: Any, died: Any) -> None:
        """A call failed because the replica's engine died (``actors/backend.py`` ``EngineDied``): the first report
        of an incarnation's death restarts the replica (``ray.kill`` with restart: Ray starts a new process within
        its ``max_restarts``, or gives the actor up); the call's shards go back in the queue as for an unreachable
        replica."""
        import ray

        rep = f.replica
        err = f"its engine died: {died.process or 'no process of the engine was seen to end'}"
        current = rep.info is not None and died.incarnation == rep.info.incarnation
        if current and rep.state == "ready":
            log.error("replica %s on %s: %s; Ray restarts the replica (a new process loads the model; restarts "
                      "allowed per replica: execution.max_retries=%d, used %d)", rep.name,
                      node_line(None, rep.node_id, rep.node_ip), err, self.spec.execution.max_retries, rep.restarts)
            try:
                ray.kill(rep.handle, no_restart=False)
            except Exception as exc:  # noqa: BLE001 - the actor is gone already: the probe records it
                log.warning("replica %s: could not be restarted (%s)", rep.name, exc)
        self._on_replica_fault(f, None, err, "unreachable")

    def _mark_lost(self, rep: Any, err: str) -> None:
        """The replica will not come back: state ``lost`` (or ``dead`` if killed on purpose), node and time recorded."""
        pool = self.pools.get(rep.model)
        if rep.state in ("lost", "dead", "released") or pool is None:
            return
        self._nodes.poll(force=True)
        node_gone = rep.node_id in self._nodes.lost
        rep.state, rep.error, rep.lost_at = ("lost" if node_gone else "dead"), err, time.time()
        if node_gone:
            log.error("replica %s: lost with %s (%s)", rep.name, node_line(None, rep.node_id, rep.node_ip), err)
        else:
            log.error("replica %s: died (%s)", rep.name, err)
        pool.stop_replica(rep, rep.state)
        if not pool.alive():
            self._model_dead(rep.model, f"no live replica of model {rep.model!r} (replica {rep.name} "
                                        f"{'lost with ' + node_line(None, rep.node_id, rep.node_ip) if node_gone else 'died'}: {err})")

    def _abandon_calls(self, node: NodeInfo) -> None:
        """The calls in flight on a lost node's replicas: Ray keeps such a call queued until it restarts the actor,
        which may be never (no room left), so the call is given up: cancelled (best effort), its shards put back
        in the queue, its replica marked unreachable. A late result of a given-up call is ignored."""
        from confgrid.flows.execute.pools import cancel_calls

        gone = [(ref, f) for ref, f in self._inflight.items() if f.replica.node_id == node.node_id]
        merged: dict[int, Any] = {}  # one fault per replica (one log line), all its calls' shards
        for ref, f in gone:
            del self._inflight[ref]
            f.replica.inflight -= 1
            m = merged.setdefault(id(f.replica), type(f)(f.replica, [], [], f.incarnation))
            m.shards += f.shards
            m.records += f.records
        for m in merged.values():
            self._on_replica_fault(m, None, f"its {node_line(node)} was lost", "unreachable")
        cancel_calls([ref for ref, _ in gone])

    def _settle_unreachable(self, pool: Any) -> None:
        """Before a pool is released: a replica still unreachable is recorded ``lost`` with its node if that node
        is gone (Ray may still be waiting to restart it where no room is), else left ``unreachable``."""
        self._nodes.poll(force=True)
        for rep in pool.replicas:
            if rep.state == "unreachable" and rep.node_id in self._nodes.lost:
                rep.state, rep.lost_at = "lost", time.time()
                log.warning("replica %s: lost with %s (%s); not restarted before its model's work was done",
                            rep.name, node_line(None, rep.node_id, rep.node_ip), rep.error)

    def _probe_unreachable(self) -> None:
        """Look at each unreachable replica's actor entry: ping it when Ray has it alive again, record it lost
        when Ray gave it up."""
        from confgrid.flows.execute.pools import actor_entry

        now = time.time()
        pinged = set(map(id, self._pings.values()))
        for rep in self._unreachable():
            if id(rep) in pinged or now < self._probe_at.get(id(rep), 0.0):
                continue
            if rep.state == "waiting":  # its ping found it unreachable while it loaded: ask again
                del self._probe_at[id(rep)]
                self._ping(rep)
                continue
            self._probe_at[id(rep)] = now + PROBE_SECONDS
            entry = actor_entry(rep.handle)
            verdict = actor_verdict(entry.state if entry else None,
                                    self._nodes.is_alive(entry.node_id) if entry and entry.node_id else None)
            if verdict == "alive":
                self._ping(rep)
            elif verdict == "lost":
                self._mark_lost(rep, rep.error or "Ray gave the actor up")

    def _on_back(self, rep: Any, ready: Any) -> None:
        """An unreachable replica answered its ping: count its restart (if it is a new process) and make it ready."""
        restarted = rep.info is not None and ready.replica.incarnation != rep.info.incarnation
        if restarted:
            n = self._count_restarts(rep, fallback=1)
            rep.loaded(ready.replica, time.time())
            self.counters.loads += 1
            log.warning("replica %s: back after %.0f s unreachable; Ray restarted its actor (pid %s on %s -> pid %s "
                        "on %s%s); recorded in manifest.json", rep.name, time.time() - rep.unreachable_since,
                        rep.info.pid, node_line(None, rep.node_id, rep.node_ip), ready.replica.pid,
                        node_line(None, ready.replica.node_id, ready.replica.node_ip), f"; {n} restarts" if n > 1 else "")
        else:
            log.info("replica %s: answers again after %.0f s", rep.name, time.time() - rep.unreachable_since)
        rep.info = ready.replica
        rep.node_id, rep.node_ip = ready.replica.node_id, ready.replica.node_ip
        rep.state, rep.error, rep.last_progress = "ready", None, time.time()

    def _watch_nodes(self) -> None:
        """Read the node table; for each node lost, say in one line what happened to its work, and fail fast the
        models that no alive node fits any more (unless ``execution.wait_for_nodes``)."""
        if not getattr(self, "_ray_ready", False):
            return
        for node in self._nodes.poll():
            reps = [r for p in self.pools.values() if not p.released for r in p.replicas if r.node_id == node.node_id]
            self._abandon_calls(node)
            log.error("Ray %s was lost (labels %s); replica(s) on it: %s; their calls in flight go back in the queue "
                      "(at most execution.max_retries=%d times per shard)", node_line(node), node.labels or "{}",
                      ", ".join(r.name for r in reps) or "none", self.spec.execution.max_retries)
            if self.spec.execution.wait_for_nodes:
                continue
            active = [m for m, q in self._queues.items() if (q or m in self.pools) and m not in self._dead_reason]
            for m in stranded_models(self._needs, self._nodes.alive(), active):
                need = self._needs[m][1]
                self._model_dead(m, f"{node_line(node)} was lost and no node left fits a replica of model {m!r} "
                                    f"({', '.join(f'{k}: {v:g}' for k, v in need.items())}); "
                                    "confgrid resume runs it when the cluster has such a node again")
