"""The cluster as the driver sees it: its nodes (which were lost since the last look) and what fits on them.

Pure decisions, no executor state: :func:`check_capacity` runs before any model is loaded (a replica that needs
more GPUs or CPUs than any node offers fails the grid at once, naming the model, what one replica asks for and
what the largest node offers); :func:`stranded_models` tells which models no alive node fits after a node was
lost; :func:`start_order` orders the pools' requests (largest replica first); :func:`grow_replicas` decides which
models get an extra (elastic) replica now (``models[].max_replicas``). flows/execute/pools.py and liveness.py
apply them. :class:`NodeWatch` reads Ray's node table (:func:`read_nodes`) at most every :data:`PROBE_SECONDS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from confgrid.errors import FieldsPickle

__all__ = ["CapacityError", "check_capacity", "at_once", "start_order", "max_replicas", "stranded_models", "PoolDemand",
           "Growth", "calls_left", "grow_replicas", "fmt", "NodeInfo", "NodeWatch", "lost_nodes", "node_line",
           "read_nodes", "PROBE_SECONDS"]

#: Seconds between two looks at an unreachable replica (its actor-table entry) and at the node table.
PROBE_SECONDS = 1.0


class CapacityError(FieldsPickle, ValueError):
    """A replica of the grid cannot fit on any node of the cluster (raised before any model is loaded);
    ``problems``: one line per model that cannot be placed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the grid cannot run on this cluster:\n" + "\n".join(f"  - {p}" for p in problems))


def fmt(res: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in res.items()) + "}"


def check_capacity(needs: dict[str, tuple[int, dict[str, float], str]], nodes: list[dict[str, float]]) -> list[str]:
    """Which models' replicas fit on no node (pure; the caller raises :class:`CapacityError`).

    ``needs``: model name -> (replicas, what ONE replica needs on one node, e.g. ``{"GPU": 4, "CPU": 4}``, a note
    on why, e.g. ``"tensor_parallel_size=4"``); ``nodes``: every node's total resources (:func:`read_nodes`).
    Returns one problem per model whose replica fits on no node, naming the model, what a replica asks for and
    what the largest node offers; empty if all fit. Replicas that fit one at a time but not all at once are not
    a problem: they run as the cluster frees room.
    """
    problems = []
    for name, (_, need, why) in needs.items():
        if any(all(node.get(k, 0.0) >= v for k, v in need.items()) for node in nodes):
            continue
        largest = max(nodes, key=lambda n: (n.get("GPU", 0.0), n.get("CPU", 0.0)), default={})
        problems.append(f"model {name!r}: one replica asks for {fmt(need)} on one node ({why}); "
                        f"the largest node offers {fmt({k: largest.get(k, 0.0) for k in need})}"
                        f" ({len(nodes)} node(s) in the cluster)")
    return problems


def stranded_models(needs: dict[str, tuple[int, dict[str, float], str]], alive: list[NodeInfo],
                    models: list[str]) -> list[str]:
    """Of ``models``, those whose replica fits on no alive node any more (pure; :func:`check_capacity`)."""
    nodes = [n.resources for n in alive if n.alive]
    sub = {m: needs[m] for m in models if m in needs}
    return [m for m in sub if check_capacity({m: sub[m]}, nodes)]


def at_once(need: dict[str, float], nodes: list[dict[str, float]]) -> int:
    """How many replicas needing ``need`` the nodes hold at the same time (each node packed on its own)."""
    total = 0
    for node in nodes:
        fits = [int(node.get(k, 0.0) // v) for k, v in need.items() if v > 0]
        total += min(fits) if fits else 0
    return total


def start_order(needs: dict[str, tuple[int, dict[str, float], str]]) -> list[str]:
    """The order in which the executor asks Ray for the models' pools: largest replica first (pure).

    Small replicas asked for first can spread over the nodes and leave each node a few GPUs short of a large
    replica, which then waits with GPUs idle (benchmarks/RESULTS.md, ``--cluster 8gpu``). This is first-fit
    decreasing (Johnson et al., "Worst-case performance bounds for simple one-dimensional packing algorithms",
    SIAM J. Comput. 3(4), 1974); an order of requests, not a placement: Ray still decides where each goes.

    ``needs`` is as for :func:`check_capacity`, in grid order. Returns every name, sorted by GPUs per replica,
    then CPUs per replica, then replicas (more first each); equal shapes keep grid order. Models without GPUs (a
    CPU cluster, an API model) come after every GPU model.

    Examples
    --------
    >>> start_order({"a": (1, {"GPU": 1.0, "CPU": 1.0}, ""), "tp4": (1, {"GPU": 4.0, "CPU": 4.0}, ""),
    ...              "dp2": (2, {"GPU": 1.0, "CPU": 1.0}, ""), "api": (1, {"CPU": 1.0}, "")})
    ['tp4', 'dp2', 'a', 'api']
    """
    def size(name: str) -> tuple[float, float, int]:
        replicas, need, _ = needs[name]
        return -need.get("GPU", 0.0), -need.get("CPU", 0.0), -replicas

    return sorted(needs, key=size)


def max_replicas(setting: int | str | None, replicas: int, need: dict[str, float], nodes: list[dict[str, float]]) -> int:
    """The most replicas a model may have at once (``models[].max_replicas`` resolved; pure).

    ``None`` gives ``replicas`` (no extra replica); ``"auto"`` as many as the nodes hold at once
    (:func:`at_once`), never fewer than ``replicas``; an integer is kept.

    >>> max_replicas("auto", 1, {"GPU": 1.0, "CPU": 1.0}, [{"GPU": 4.0, "CPU": 4.0}, {"GPU": 4.0, "CPU": 4.0}])
    8
    >>> max_replicas(None, 2, {"GPU": 1.0}, []), max_replicas(3, 1, {"GPU": 1.0}, [])
    (2, 3)
    """
    if setting is None:
        return replicas
    return max(replicas, at_once(need, nodes)) if setting == "auto" else int(setting)


@dataclass(frozen=True)
class PoolDemand:
    """One alive pool as :func:`grow_replicas` sees it (pools.py builds one per pool and turn)."""

    model: str
    need: dict[str, float]  # what ONE replica reserves on one node, e.g. {"GPU": 1.0, "CPU": 1.0}
    replicas: int  # asked for and not stopped: ready, loading, waiting for resources or unreachable (>= 0)
    max_replicas: int  # the most it may have (:func:`max_replicas`); replicas >= max_replicas: no growth
    queued_calls: int  # engine calls its queue would make now (one per shard, or shards packed per call)
    unplaced: int = 0  # its replicas Ray has not placed yet (waiting for resources)
    load_s: float | None = None  # mean seconds its replicas took to load; None before any has
    # seconds ONE replica needs for its queued work at its measured rate; None before a call of it has finished
    work_s: float | None = None
    start_s: float = 0.0  # seconds from asking Ray for a replica to its load beginning (pools.py start_latency)
    # calls its replicas would take at once: calls_in_flight per replica not ready, the free slots of ready ones
    open_slots: int = 0


@dataclass(frozen=True)
class Growth:
    """What :func:`grow_replicas` decided: ``start``, one ``(model, node id)`` per extra replica to ask for, in
    order (the node where it fits now; Ray still places it), and ``waits``, model -> why a replica it could use
    is not started now (for the log)."""

    start: tuple[tuple[str, str], ...] = ()
    waits: dict[str, str] = field(default_factory=dict)


def _wants(p: PoolDemand, replicas: int, calls_in_flight: int) -> bool:
    """One more replica than ``replicas`` would get work of its own (the queue holds more calls than they take
    at once, now and once it is ready) and end the queue sooner (``work_s / replicas > start_s + load_s``)."""
    if not (replicas < p.max_replicas and p.queued_calls > replicas * calls_in_flight
            and p.load_s is not None and p.work_s is not None):
        return False
    ready_in = p.start_s + p.load_s
    if p.work_s <= ready_in * max(replicas, 1):
        return False
    return calls_left(p, ready_in) - (replicas - p.replicas) * calls_in_flight >= 1.0


def calls_left(p: PoolDemand, after_s: float) -> float:
    """Calls a pool's queue still holds ``after_s`` seconds from now (>= 0: an extra replica's ``start_s +
    load_s``) for replicas that are not asked for yet; fractional (an expectation), <= 0: none left.

    ``p`` is measured (``work_s`` not None) with ``queued_calls`` >= 1. Its replicas first fill their open slots
    (a loading one counted as if ready now), then each takes the next call as one ends, one per ``c = work_s /
    queued_calls`` seconds. Left: ``queued_calls - open_slots - replicas x after_s / c``; work the queue gains
    meanwhile (the scoring calls of generations) is not counted.

    Examples
    --------
    8 calls queued that take one replica 78 s (9.75 s each); one replica computing 2 calls and one still loading,
    2 calls in flight each; an extra replica would be ready in 20 s:

    >>> p = PoolDemand("one-a", {"GPU": 1.0}, replicas=2, max_replicas=8, queued_calls=8, load_s=10.0, work_s=78.0,
    ...                start_s=10.0, open_slots=2)
    >>> round(calls_left(p, 20.0), 2)  # 8 - 2 - 2 x 20 / 9.75
    1.9

    A first extra replica takes 1.9 of them; a second would find none.
    """
    per_call = p.work_s / p.queued_calls
    return p.queued_calls - p.open_slots - p.replicas * after_s / per_call


def grow_replicas(pools: Sequence[PoolDemand], free: Mapping[str, Mapping[str, float]], calls_in_flight: int,
                  starting: Sequence[str] = ()) -> Growth:
    """Which models get an extra (elastic) replica now, on the resources free now (pure; work-conserving).

    Rules, in order:

    1. Pools first: while a model with queued work has no pool yet (``starting``: waiting for a slot of
       ``execution.max_concurrent_models``) or some pool has a replica Ray has not placed (``unplaced``), no extra
       replica starts anywhere: the free resources are theirs, and extras must not fragment the nodes before them.
    2. Only for work: a model wants another replica while ``replicas < max_replicas`` and its queue holds more
       engine calls than its replicas take at once (``queued_calls > replicas x calls_in_flight``).
    3. Only when it pays: once it has measured a load (``load_s``, ``L``) and its rate (``work_s``, ``W``: its
       queue in seconds of one replica), and only while ``W / r > S + L`` (``r`` its replicas without the new
       one, loading ones counted as ready; ``S`` = ``start_s``): an extra replica ends the queue at ``(W + S +
       L) / (r + 1)`` instead of ``W / r``. And only while a call is left for it when it is ready: the ``k``-th
       extra of this step needs, ``S + L`` seconds from now, at least one whole call beyond the ``(k - 1) x
       calls_in_flight`` the extras before it take (:func:`calls_left`). Why it waits for the measurement:
       benchmarks/RESULTS.md.
    4. Where it fits: the model with the most queued calls per replica first (ties keep the input order), its
       replica on the node with the least free GPUs (then CPUs) that holds it (best fit); repeated while some
       model wants one and a node holds it.

    ``free``: node id -> resources free on it now; ``calls_in_flight``: ``execution.calls_in_flight``;
    ``starting``: models with queued work whose pools are not started yet. Returns the replicas to start, and for
    each model that could use one more but gets none now (rules 1 and 4), the reason. Raises ValueError if
    ``calls_in_flight`` < 1.

    Examples
    --------
    One model with 5 calls queued on its 1 replica (2 calls at a time) that would take it 60 s, against a load
    of 10 s; 2 GPUs free on node b, 1 on node a:

    >>> p = PoolDemand("m", {"GPU": 1.0, "CPU": 1.0}, replicas=1, max_replicas=8, queued_calls=5, load_s=10.0,
    ...                work_s=60.0)
    >>> grow_replicas([p], {"a": {"GPU": 1.0, "CPU": 1.0}, "b": {"GPU": 2.0, "CPU": 2.0}}, 2).start
    (('m', 'a'), ('m', 'b'))
    """
    if calls_in_flight < 1:
        raise ValueError(f"calls_in_flight: {calls_in_flight!r}; allowed: >= 1")
    wanting = [p for p in pools if _wants(p, p.replicas, calls_in_flight)]
    if not wanting:
        return Growth()
    if starting:
        why = f"model(s) {', '.join(starting)} wait to start their pools; they take free resources first"
        return Growth((), {p.model: why for p in wanting})
    blocked = [f"{p.model} ({p.unplaced})" for p in pools if p.unplaced]
    if blocked:
        why = (f"replicas of {', '.join(blocked)} are not placed yet (waiting for resources or a worker process); "
               "they take free resources first")
        return Growth((), {p.model: why for p in wanting})
    left = {node: {k: float(v) for k, v in res.items()} for node, res in free.items()}
    reps = {p.model: p.replicas for p in wanting}
    start: list[tuple[str, str]] = []
    while True:
        cands = sorted((p for p in wanting if _wants(p, reps[p.model], calls_in_flight)),
                       key=lambda p: -p.queued_calls / max(reps[p.model], 1))
        chosen = None
        for p in cands:
            fits = [n for n, res in left.items() if all(res.get(k, 0.0) >= v for k, v in p.need.items())]
            if fits:
                chosen = (p, min(fits, key=lambda n: (left[n].get("GPU", 0.0), left[n].get("CPU", 0.0), n)))
                break
        if chosen is None:
            break
        p, node = chosen
        for k, v in p.need.items():
            left[node][k] = left[node].get(k, 0.0) - v
        reps[p.model] += 1
        start.append((p.model, node))
    waits = {}
    for p in wanting:
        if _wants(p, reps[p.model], calls_in_flight):
            best = max(left.values(), key=lambda r: (r.get("GPU", 0.0), r.get("CPU", 0.0)), default={})
            waits[p.model] = (f"no node has {fmt(p.need)} free (most free on one node: "
                              f"{fmt({k: best.get(k, 0.0) for k in p.need})})")
    return Growth(tuple(start), waits)


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as the GCS node table has it: id (hex), IP (``NodeManagerAddress``), whether alive, total
    ``{"GPU": g, "CPU": c}`` and labels (``ray start --labels``, Ray's own ``ray.io/...`` left out)."""

    node_id: str
    ip: str
    alive: bool
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def lost_nodes(before: dict[str, NodeInfo], now: list[NodeInfo]) -> list[NodeInfo]:
    """Nodes alive in ``before`` that are dead or absent in ``now`` (pure), as they were last seen alive."""
    alive_now = {n.node_id for n in now if n.alive}
    return [n for nid, n in before.items() if n.alive and nid not in alive_now]


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
