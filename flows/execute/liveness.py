"""Replica liveness: a replica that cannot be reached is not a failed shard, and a lost node is named.

When a Ray node dies, its actors are unreachable for 10 to 20 s before Ray
declares the node dead; calls to them raise ``ActorUnavailableError`` (the
actor may come back: Ray restarts it elsewhere) and then ``ActorDiedError``
(it will not). Neither says anything about the work itself, so the executor
(flows/execute/executor.py) does this:

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
and the executor's liveness methods talk to Ray.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from confgrid.flows.execute.pools import check_capacity

__all__ = ["NodeInfo", "Fault", "classify_fault", "requeue_or_fail", "actor_verdict", "lost_nodes", "lost_node_tags",
           "stranded_models", "node_line", "read_nodes", "NodeWatch", "PROBE_SECONDS"]

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
    from ray.exceptions import ActorDiedError, ActorUnavailableError  # lazy: the plan and the tests load no Ray

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
    import ray  # lazy: the plan and the tests load no Ray

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
