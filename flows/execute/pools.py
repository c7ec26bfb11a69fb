"""Replica pools: each model's Ray actors, their life cycle, and the cluster capacity check.

A :class:`ModelPool` holds the replicas of one model (``models[].replicas``
actors, each loading the weights once). Pools of different models live at the
same time as far as the cluster's resources allow: a pool asks Ray for all its
replicas at once and Ray creates each actor when its resources are free (or
when an autoscaler adds a node); the executor (flows/execute/executor.py) gives work
only to replicas that answered ``ping`` (their model is loaded), so a replica
still waiting for resources never holds work back.

Elastic replicas (``models[].max_replicas``): :func:`grow_replicas` decides,
from what each pool has queued and what each node has free, which models get
an extra replica now; the executor only applies the decision
(:meth:`ModelPool.add_replica`). It is pure and tested by hand.

Everything a cluster user measures is recorded per replica
(:class:`Replica`): when it was asked for, when it was ready, how long the
load took on the replica, how long it computed, how often Ray restarted it,
when it was released. The run writes these to ``manifest.json``
(``meta.replicas``).

:func:`check_capacity` runs before any model is loaded: a replica that needs
more GPUs or CPUs than any node offers fails the grid at once, naming the
model, what one replica asks for and what the largest node offers.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from confgrid.errors import FieldsPickle
from confgrid.actors.calls import ReplicaInfo
from confgrid.flows.execute.timeline import add_span
from confgrid.flows.spec.grid import GridSpec, ModelSpec

__all__ = ["CapacityError", "ActorEntry", "actor_entry", "Replica", "ModelPool", "model_config", "cancel_calls",
           "check_capacity", "node_resources", "start_order", "PoolDemand", "Growth", "grow_replicas", "max_replicas", "free_per_node"]

log = logging.getLogger("confgrid")


class CapacityError(FieldsPickle, ValueError):
    """A replica of the grid cannot fit on any node of the cluster (raised before any model is loaded).

    Attributes
    ----------
    problems : list of str
        One line per model that cannot be placed.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the grid cannot run on this cluster:\n" + "\n".join(f"  - {p}" for p in problems))


def model_config(m: ModelSpec, spec: GridSpec, api_cache: str | None = None):
    """The actor's plain, picklable copy of a model entry (actors/model_actor.py ``ModelConfig``).

    ``api_cache``: the run's answer cache folder (actors/api_cache.py), given to an API model's replicas.
    """
    from confgrid.actors.model_actor import ModelConfig  # lazy: model_actor imports ray

    return ModelConfig(
        name=m.name, model=m.model, backend=m.backend, dtype=m.dtype, revision=m.revision,
        chat_template=m.chat_template, batch_size=m.batch_size, tensor_parallel_size=m.tensor_parallel_size,
        executor=m.resolved_executor,
        max_num_batched_tokens=m.max_num_batched_tokens, enable_chunked_prefill=m.enable_chunked_prefill,
        enable_prefix_caching=m.enable_prefix_caching, gpu_memory_utilization=m.gpu_memory_utilization,
        max_retries=spec.execution.max_retries, generation_bos=m.generation_bos, scoring_bos=m.scoring_bos,
        max_num_seqs=m.max_num_seqs, chat_template_kwargs=tuple(sorted(m.chat_template_kwargs.items())),
        api=dataclasses.replace(m.api.config(), cache_dir=api_cache) if m.api is not None else None,
    )


def cancel_calls(refs: list[Any]) -> None:
    """Cancel engine calls still in flight (an interrupted run), before their replicas are killed.

    A cancelled call is not retried, so Ray does not print "There are N retries remaining, so the task will be
    retried" for calls nobody will retry. Best effort: nothing is raised.
    """
    import ray  # lazy: no Ray until a shard must be computed

    if not refs or not ray.is_initialized():
        return
    for ref in refs:
        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001 - the replica is killed right after anyway
            pass


def node_resources() -> list[dict[str, float]]:
    """Total ``{"GPU": g, "CPU": c}`` of every alive node of the connected Ray cluster."""
    import ray  # lazy: no Ray until a shard must be computed

    return [{"GPU": float(n.get("Resources", {}).get("GPU", 0.0)), "CPU": float(n.get("Resources", {}).get("CPU", 0.0))}
            for n in ray.nodes() if n.get("Alive")]


def _fmt(res: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in res.items()) + "}"


def _free_resources() -> dict[str, float]:
    """What the cluster has free now (for a log line; {} when Ray does not answer)."""
    import ray  # lazy: no Ray until a shard must be computed

    try:
        return {k: float(v) for k, v in ray.available_resources().items()}
    except Exception:  # noqa: BLE001 - the log line is best effort
        return {}


def free_per_node() -> dict[str, dict[str, float]]:
    """GPUs and CPUs free now on each alive node of the connected Ray cluster (node id -> resources); {} when
    Ray does not answer (then no extra replica is started)."""
    import ray  # lazy: no Ray until a shard must be computed
    from ray._private import state  # lazy: no Ray until a shard must be computed

    try:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        return {node: {k: float(res.get(k, 0.0)) for k in ("GPU", "CPU")}
                for node, res in state.available_resources_per_node().items() if node in alive}
    except Exception:  # noqa: BLE001 - no extra replica this turn
        return {}


def _placed(handle: Any) -> bool | None:
    """Whether Ray has placed a not-yet-ready actor on a worker process (it is loading), or still waits for resources.

    Read from the GCS actor table (no dashboard needed); None when that cannot be read. A queued lease already
    names a raylet port, so a worker process (a pid) is required too.
    """
    entry = actor_entry(handle)
    return None if entry is None else (entry.placed and entry.pid > 0)


def check_capacity(needs: dict[str, tuple[int, dict[str, float], str]], nodes: list[dict[str, float]]) -> list[str]:
    """Which models' replicas fit on no node (pure; the caller raises :class:`CapacityError`).

    Parameters
    ----------
    needs : dict of str to (int, dict, str)
        Model name -> (replicas, what ONE replica needs on one node, e.g.
        ``{"GPU": 4, "CPU": 4}``, and a note on why, e.g.
        ``"tensor_parallel_size=4"``).
    nodes : list of dict
        Every node's total resources (:func:`node_resources`).

    Returns
    -------
    list of str
        One problem per model whose replica fits on no node, naming the model,
        what a replica asks for and what the largest node offers; empty if all
        fit. Replicas that fit one at a time but not all at once are not a
        problem: they run as the cluster frees room.
    """
    problems = []
    for name, (_, need, why) in needs.items():
        if any(all(node.get(k, 0.0) >= v for k, v in need.items()) for node in nodes):
            continue
        largest = max(nodes, key=lambda n: (n.get("GPU", 0.0), n.get("CPU", 0.0)), default={})
        problems.append(f"model {name!r}: one replica asks for {_fmt(need)} on one node ({why}); "
                        f"the largest node offers {_fmt({k: largest.get(k, 0.0) for k in need})}"
                        f" ({len(nodes)} node(s) in the cluster)")
    return problems


def at_once(need: dict[str, float], nodes: list[dict[str, float]]) -> int:
    """How many replicas needing ``need`` the nodes hold at the same time (each node packed on its own)."""
    total = 0
    for node in nodes:
        fits = [int(node.get(k, 0.0) // v) for k, v in need.items() if v > 0]
        total += min(fits) if fits else 0
    return total


def start_order(needs: dict[str, tuple[int, dict[str, float], str]]) -> list[str]:
    """The order in which the executor asks Ray for the models' pools: largest replica first (pure).

    Asking for every pool at once leaves placement to Ray, which places requests
    roughly in the order they arrive. Small replicas asked for first can spread over
    the nodes and leave each node a few GPUs short of a large replica, which
    then waits with GPUs idle (measured in benchmarks/README.md, ``--cluster 8gpu``:
    two 1-GPU replicas, one on each 4-GPU node, kept a TP-4 group waiting 42 s with
    2 GPUs free). This is the bin-packing heuristic first-fit decreasing (Johnson et
    al., "Worst-case performance bounds for simple one-dimensional packing
    algorithms", SIAM J. Comput. 3(4), 1974): place the largest items first so the
    smaller ones fill the gaps they leave. It is an order of requests, not a
    placement: Ray still decides where each replica goes.

    Parameters
    ----------
    needs : dict of str to (int, dict, str)
        Model name -> (replicas, what ONE replica needs on one node, a note), as for
        :func:`check_capacity`, in grid order. What a replica needs comes from
        actors/model_actor.py ``replica_resources``, where its GPUs are derived from
        the parallel sizes (``tensor_parallel_size`` GPUs on one node, whichever executor).

    Returns
    -------
    list of str
        Every name of ``needs``, sorted by GPUs per replica (more first), then CPUs
        per replica (more first), then number of replicas (more first); equal shapes
        keep grid order (the sort is stable). Models without GPUs (a CPU cluster, an
        API model) come after every GPU model, ordered by their CPUs.

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
    if setting == "auto":
        return max(replicas, at_once(need, nodes))
    return int(setting)


@dataclass(frozen=True)
class PoolDemand:
    """One alive pool as :func:`grow_replicas` sees it (the executor builds one per pool and turn).

    Attributes
    ----------
    model : str
    need : dict of str to float
        What ONE replica reserves on one node, e.g. ``{"GPU": 1.0, "CPU": 1.0}``.
    replicas : int
        Its replicas asked for and not stopped: ready, loading, waiting for
        resources or unreachable (>= 0).
    max_replicas : int
        The most it may have (:func:`max_replicas`); ``replicas >= max_replicas``: no growth.
    queued_calls : int
        Engine calls its queue would make now: planned shards not yet sent
        (one per shard, or whole shards packed up to ``prompts_per_call``).
    unplaced : int
        Its replicas that Ray has not placed yet (waiting for resources).
    load_s : float, optional
        Seconds one of its replicas took to load (mean of those loaded); None
        before any has (then it gets no extra replica).
    work_s : float, optional
        Seconds ONE replica needs for its queued work at the rate its
        replicas have computed so far (queued requests / requests per busy
        second); None before a call of it has finished (then it gets no extra
        replica).
    start_s : float
        Seconds from asking Ray for a replica to its load beginning (placing
        it, starting its worker process), as this run has measured it
        (:func:`start_latency`); 0.0 before any replica has begun a load.
    open_slots : int
        Calls its replicas would take from the queue at once: ``calls_in_flight``
        for each not ready yet (when it is), ``calls_in_flight`` less its calls
        in flight for each ready one (>= 0).
    """

    model: str
    need: dict[str, float]
    replicas: int
    max_replicas: int
    queued_calls: int
    unplaced: int = 0
    load_s: float | None = None
    work_s: float | None = None
    start_s: float = 0.0
    open_slots: int = 0


@dataclass(frozen=True)
class Growth:
    """What :func:`grow_replicas` decided.

    Attributes
    ----------
    start : tuple of (str, str)
        One ``(model, node id)`` per extra replica to ask for, in order; the
        node is where it fits now (Ray still places it).
    waits : dict of str to str
        Model -> why a replica it could use is not started now (for the log).
    """

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
    """Calls a pool's queue still holds ``after_s`` seconds from now for replicas that are not asked for yet.

    Its replicas first fill their open slots (``open_slots``: a replica still loading takes ``calls_in_flight``
    calls when it is ready, counted as if it were now, the most it can take), then each takes the next call as
    one ends, one per ``c = work_s / queued_calls`` seconds (a replica runs one engine call at a time). Left:
    ``queued_calls - open_slots - replicas x after_s / c``. New work the queue gains meanwhile (the scoring
    calls of generations) is not counted.

    Parameters
    ----------
    p : PoolDemand
        Measured (``work_s`` not None) with ``queued_calls`` >= 1.
    after_s : float
        Seconds from now (>= 0): an extra replica's start and load, ``start_s + load_s``.

    Returns
    -------
    float
        Calls, fractional (an expectation); <= 0: none left.

    Examples
    --------
    8 calls queued that take one replica 78 s (9.75 s each); one replica computing 2 calls and one still loading,
    2 calls in flight each; an extra replica would be ready in 20 s (the schedule_bench run of 4 December 2026,
    15:21):

    >>> p = PoolDemand("one-a", {"GPU": 1.0}, replicas=2, max_replicas=8, queued_calls=8, load_s=10.0, work_s=78.0,
    ...                start_s=10.0, open_slots=2)
    >>> round(calls_left(p, 20.0), 2)  # 8 - 2 - 2 x 20 / 9.75
    1.9

    A first extra replica takes 1.9 of them; a second would find none.
    """
    per_call = p.work_s / p.queued_calls
    return p.queued_calls - p.open_slots - p.replicas * after_s / per_call


def start_latency(replicas: Sequence[Replica]) -> float:
    """Seconds from asking Ray for a replica to its model load beginning, as a run has measured it.

    A replica's start latency is its load's first start (``loading[0][0]``, the replica's clock) minus
    ``requested_at`` (the driver's), clipped at 0: placing it, starting its Ray worker process and unpickling
    its config. Extra (elastic) replicas are asked for on resources free at that moment, so theirs is the
    start alone: their median counts when there is one. Before any, the least of all replicas' counts (the
    ones placed at once; the others also waited for resources, which an extra replica does not).

    Parameters
    ----------
    replicas : sequence of Replica
        Every replica the run has asked for (any model; those with no load begun are skipped).

    Returns
    -------
    float
        Seconds >= 0; 0.0 when no replica has begun a load.

    Examples
    --------
    >>> a = Replica("m", 0, 0, requested_at=100.0, loading=[[130.0, 140.0]])  # waited for resources
    >>> b = Replica("m", 1, 0, requested_at=100.0, loading=[[108.0, 118.0]])
    >>> start_latency([a, b])
    8.0
    >>> start_latency([a, b, Replica("m", 2, 0, requested_at=200.0, loading=[[212.0, 220.0]], elastic=True)])
    12.0
    """
    seen = [(max(0.0, r.loading[0][0] - r.requested_at), r.elastic) for r in replicas if r.loading]
    extra = sorted(s for s, elastic in seen if elastic)
    if extra:
        mid = len(extra) // 2
        return extra[mid] if len(extra) % 2 else (extra[mid - 1] + extra[mid]) / 2
    return min((s for s, _ in seen), default=0.0)


def grow_replicas(pools: Sequence[PoolDemand], free: Mapping[str, Mapping[str, float]], calls_in_flight: int,
                  starting: Sequence[str] = ()) -> Growth:
    """Which models get an extra (elastic) replica now, on the resources free now (pure; work-conserving).

    Rules, in order:

    1. Pools first: while a model with queued work has no pool yet
       (``starting``: waiting for a slot of ``execution.max_concurrent_models``)
       or some pool has a replica Ray has not placed (``unplaced``: it waits for
       resources), no extra replica starts anywhere: the free resources are
       theirs when they fit, and extras must not fragment the nodes before them.
    2. Only for work: a model wants another replica while ``replicas <
       max_replicas`` and its queue holds more engine calls than its replicas
       take at once (``queued_calls > replicas x calls_in_flight``), so every
       replica has a call of its own to start with.
    3. Only when it pays: the model grows only once it has measured a load
       (``load_s``, ``L``) and its rate (a replica of it loaded and finished a
       call; ``work_s``, ``W``: its queue in seconds of one replica), and only
       while ``W / r > S + L``, ``r`` its replicas with the new one left out
       (those still loading counted as if ready) and ``S`` (``start_s``) the
       seconds a replica takes to start before its load begins. With ``r``
       replicas, an extra replica that starts and loads for ``S + L`` seconds
       ends the queue at ``(W + S + L) / (r + 1)`` instead of ``W / r``:
       sooner exactly when ``W / r > S + L``. And only while a call is left
       for it when it is ready: the ``k``-th extra replica of this step is
       asked for while the queue, ``S + L`` seconds from now, still holds at
       least one whole call beyond the ``(k - 1) x calls_in_flight`` the
       extras before it take (:func:`calls_left`: its replicas fill their
       open slots at once, a loading one ``calls_in_flight``, then take a
       call each as one ends). (Growing before the measurement
       was tried and measured: on ``benchmarks/schedule_bench.py --cluster
       8gpu`` the extra replicas of models with about 1 s of work loaded
       beside the replicas doing it and made the runs 28% slower; without
       the calls left, two of six extras of the ``--workload sim`` run were
       ready only once the queue was handed out; benchmarks/README.md.)
    4. Where it fits: the model with the most queued calls per replica goes
       first (longest work first; ties keep the input order), its replica on
       the node with the least free GPUs (then CPUs) that holds it (best
       fit, leaving the largest holes for larger replicas); repeated while
       some model wants one and a node holds it.

    Parameters
    ----------
    pools : sequence of PoolDemand
        Every alive pool, in grid order.
    free : mapping of str to mapping
        Node id -> resources free on it now (``{"GPU": g, "CPU": c, ...}``).
    calls_in_flight : int
        ``execution.calls_in_flight`` (>= 1).
    starting : sequence of str
        Models with queued work whose pools are not started yet.

    Returns
    -------
    Growth
        The replicas to start, and for each model that could use one more but
        gets none now (rules 1 and 4), the reason.

    Raises
    ------
    ValueError
        If ``calls_in_flight`` < 1.

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
            waits[p.model] = (f"no node has {_fmt(p.need)} free (most free on one node: "
                              f"{_fmt({k: best.get(k, 0.0) for k in p.need})})")
    return Growth(tuple(start), waits)


@dataclass(frozen=True)
class ActorEntry:
    """A replica's actor as Ray's GCS actor table has it (read with :func:`actor_entry`).

    ``num_restarts`` counts every restart of the actor (a crash while loading
    included), ``state`` is Ray's actor state (``PENDING_CREATION``, ``ALIVE``,
    ``RESTARTING``, ``DEAD``), ``placed`` whether a worker holds it (a raylet
    port is set: the model is loading or loaded), ``node_id`` / ``node_ip`` /
    ``pid`` where it runs now ("" and 0 while not placed).
    """

    state: str
    num_restarts: int
    placed: bool
    node_id: str
    node_ip: str
    pid: int


def actor_entry(handle: Any) -> ActorEntry | None:
    """The GCS actor-table entry of a replica's actor; None when it cannot be read (no dashboard is needed)."""
    try:
        from ray._private import state  # lazy: no Ray until a shard must be computed

        info = state.actors(actor_id=handle._actor_id.hex())
    except Exception:  # noqa: BLE001 - best effort: the caller falls back on what it knows
        return None
    if not info:
        return None
    addr = info.get("Address") or {}
    return ActorEntry(state=str(info.get("State", "")), num_restarts=int(info.get("NumRestarts") or 0),
                      placed=bool(addr.get("Port")), node_id=str(addr.get("NodeID") or ""),
                      node_ip=str(addr.get("IPAddress") or ""), pid=int(info.get("Pid") or 0))


@dataclass
class Replica:
    """One model replica: a Ray actor and what happened to it.

    Attributes
    ----------
    model : str
    index : int
        Index within the model's pool.
    load : int
        How many pools of this model were started before this one in the run
        (a model reloaded for cross-model work has ``load == 1``).
    state : str
        ``waiting`` (asked for, not loaded yet: waiting for resources or
        loading), ``ready``, ``unreachable`` (a call could not reach it; out of
        the ready set until it answers a ping: flows/execute/liveness.py), ``dead``
        (crashed or killed, not restartable), ``lost`` (gone with its node) or
        ``released``.
    node_id, node_ip : str
        The Ray node it runs on (its latest process; "" until it is ready).
    loads : int
        Model loads of this replica (1 + Ray restarts).
    restarts : int
        Ray restarts seen (a new process answering calls of the same actor),
        restarts while the model loaded included.
    restarts_accounted : int
        Ray's restart count of the actor (:attr:`ActorEntry.num_restarts`)
        already counted in ``restarts``.
    gpus : float
        GPUs one replica reserves (``tensor_parallel_size`` for a
        tensor-parallel replica, whichever executor; 0 without GPUs).
    cpus : float
        CPUs one replica reserves (``tensor_parallel_size`` cores for a
        tensor-parallel replica on a cluster without GPUs: one per rank).
    info : ReplicaInfo or None
        Its latest process (:class:`~confgrid.actors.calls.ReplicaInfo`); the
        manifest line adds from it ``gpu_ids`` (the GPUs Ray gave the actor),
        ``cpu_bind`` (a tensor-parallel replica on CPU: each rank's cores, as
        given to vLLM's ``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``"0|1"``) and
        ``ranks`` (its engine's processes with their pids).
    loading, computing : list of [start, end]
        Its model loads and engine calls as measured inside the replica
        (``time.time()``; flows/execute/timeline.py says what they cover).
    withdrawn : str or None
        Set when it was stopped before its model was loaded (usually: the other
        replicas did its model's work first; also a run that ended or was
        interrupted meanwhile): ``loading`` (Ray had placed it: a load started
        and was cut short), ``waiting`` (still waiting for resources),
        ``unknown`` (the actor table could not be read).
    elastic : bool
        Started beyond ``models[].replicas`` on resources that were free while
        its model had queued work (``models[].max_replicas``; :func:`grow_replicas`).
    requests : int
        Requests of the engine calls it finished (its rate, with ``busy_seconds``).
    """

    model: str
    index: int
    load: int
    handle: Any = None
    pg: Any = None
    state: str = "waiting"
    requested_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    ping_retries: int = 0  # pings asked again after the actor died while loading (Ray restarting it)
    traceback: str | None = None  # the full traceback of why it could not start (manifest and run log)
    released_at: float | None = None
    info: ReplicaInfo | None = None
    loads: int = 0
    restarts: int = 0
    restarts_accounted: int = 0
    load_seconds: float = 0.0
    busy_seconds: float = 0.0
    calls: int = 0
    inflight: int = 0
    error: str | None = None
    last_progress: float | None = None  # when it was ready or its last engine call finished
    node_id: str = ""
    node_ip: str = ""
    unreachable_since: float = 0.0  # when a call last found it unreachable
    lost_at: float | None = None  # when it was recorded lost or dead
    gpus: float = 0.0
    cpus: float = 0.0
    loading: list[list[float]] = field(default_factory=list)
    computing: list[list[float]] = field(default_factory=list)
    withdrawn: str | None = None
    elastic: bool = False
    requests: int = 0

    @property
    def name(self) -> str:
        return f"{self.model}#{self.index}" + (f".{self.load}" if self.load else "")

    def loaded(self, info: ReplicaInfo, seen_at: float) -> None:
        """Count one model load of this replica (``loads``, ``load_seconds``) and record its ``loading`` span.

        The span is the replica's own (``info.load_started``); a replica that did not send its start time gets
        the ``load_seconds`` before ``seen_at`` (when the driver learnt of the load).
        """
        self.loads += 1
        self.load_seconds += info.load_seconds
        start = info.load_started or seen_at - info.load_seconds
        add_span(self.loading, start, start + info.load_seconds, gap=0.0)

    def record(self) -> dict[str, Any]:
        """The replica's line in ``manifest.json`` (``meta.replicas``)."""
        return {"replica": self.name, "model": self.model, "index": self.index, "load": self.load,
                "state": self.state, "requested_at": self.requested_at, "ready_at": self.ready_at,
                "released_at": self.released_at, "loads": self.loads, "restarts": self.restarts,
                "load_seconds": round(self.load_seconds, 3), "busy_seconds": round(self.busy_seconds, 3),
                "calls": self.calls, "host": self.info.host if self.info else None,
                "pid": self.info.pid if self.info else None, "node_id": self.node_id or None,
                "node_ip": self.node_ip or None, "lost_at": self.lost_at, "error": self.error,
                "gpus": self.gpus, "cpus": self.cpus, "gpu_ids": list(self.info.gpu_ids) if self.info else [],
                "cpu_bind": (self.info.cpu_bind if self.info else "") or None,
                "ranks": [list(x) for x in self.info.ranks] if self.info else [],
                "loading": [list(x) for x in self.loading],
                "computing": [list(x) for x in self.computing], "withdrawn": self.withdrawn,
                "elastic": self.elastic, "requests": self.requests,
                **({"traceback": self.traceback} if self.traceback else {})}


class ModelPool:
    """The replicas of one model, asked for together and released together.

    Parameters
    ----------
    spec : ModelSpec
    config : ModelConfig
        What each actor loads (:func:`model_config`).
    load : int
        How many pools of this model this run started before.
    """

    def __init__(self, spec: ModelSpec, config: Any, load: int) -> None:
        self.spec, self.config, self.load = spec, config, load
        self.replicas: list[Replica] = []
        self.released = False
        self.provenance: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self, cluster_resources: dict[str, float] | None = None) -> list[Replica]:
        """Ask Ray for every replica (returns at once; each becomes ready when its ``ping`` answers).

        ``cluster_resources`` is what actors/model_actor.py ``replica_resources`` sizes a replica by.
        """
        for _ in range(self.spec.replicas):
            self.add_replica(cluster_resources, elastic=False)
        return self.replicas

    def add_replica(self, cluster_resources: dict[str, float] | None = None, elastic: bool = True) -> Replica:
        """Ask Ray for one more replica of the pool (an elastic one, ``Replica.elastic``, unless ``elastic`` is
        False: one of the model's ``replicas``); returns at once.

        Its index follows the pool's last one, so its actor has a name of its own.
        """
        from confgrid.actors.model_actor import replica_resources, start_replica  # lazy: model_actor imports ray

        need = replica_resources(self.config, cluster_resources).per_node
        rep = Replica(self.spec.name, len(self.replicas), self.load, gpus=need.get("GPU", 0.0),
                      cpus=need.get("CPU", 0.0), elastic=elastic)
        rep.handle, rep.pg = start_replica(self.config, rep.index, cluster_resources, load=self.load)
        self.replicas.append(rep)
        return rep

    def live(self) -> list[Replica]:
        """Replicas asked for and not stopped: ready, waiting (for resources or loading) or unreachable."""
        return [r for r in self.replicas if r.state in ("ready", "waiting", "unreachable")]

    def unplaced(self) -> list[Replica]:
        """Its waiting replicas that Ray has not placed on a worker process yet (one whose actor-table entry
        cannot be read counts as not placed)."""
        return [r for r in self.waiting() if _placed(r.handle) is not True]

    def demand(self, need: dict[str, float], max_replicas: int, queued_calls: int, queued_requests: int,
               unplaced: int, start_s: float = 0.0, calls_in_flight: int = 1) -> PoolDemand:
        """The pool as :func:`grow_replicas` sees it: its live replicas, its queue, its measured load time and
        rate (``work_s``: queued requests over the requests per busy second of its replicas so far) and the
        calls its replicas would take at once (``open_slots``); ``start_s`` is the run's :func:`start_latency`."""
        loaded = [r for r in self.replicas if r.loads]
        load_s = sum(r.load_seconds / r.loads for r in loaded) / len(loaded) if loaded else None
        busy = sum(r.busy_seconds for r in self.replicas)
        done = sum(r.requests for r in self.replicas)
        work_s = queued_requests / (done / busy) if busy > 0 and done > 0 else None
        return PoolDemand(self.name, need, len(self.live()), max_replicas, queued_calls, unplaced, load_s, work_s,
                          start_s, open_slots=sum(max(0, calls_in_flight - r.inflight) for r in self.ready())
                          + calls_in_flight * len(self.waiting()))

    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "ready"]

    def waiting(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "waiting"]

    def alive(self) -> bool:
        """Some replica is ready or may still become ready."""
        return not self.released and any(r.state in ("ready", "waiting", "unreachable") for r in self.replicas)

    def stop_replica(self, rep: Replica, state: str = "released") -> None:
        """Kill one replica's actor and free its placement group (idempotent).

        A replica stopped while still ``waiting`` (its model not loaded) records in ``withdrawn`` whether Ray had
        placed it (its load had started) or it still waited for resources.
        """
        import ray  # lazy: no Ray until a shard must be computed
        from ray.util.placement_group import remove_placement_group  # lazy: no Ray until a shard must be computed

        if rep.state in ("released",):
            return
        if rep.state == "waiting" and rep.withdrawn is None:
            placed = _placed(rep.handle)  # None when the actor table cannot be read (Ray gone)
            rep.withdrawn = "loading" if placed else "waiting" if placed is False else "unknown"
        if not ray.is_initialized():  # Ray was shut down under us (a test, Ctrl-C): its actors are gone
            rep.state = rep.state if rep.state in ("dead", "lost") else "released"
            return
        try:
            ray.kill(rep.handle)
        except Exception:  # noqa: BLE001 - already dead
            pass
        if rep.pg is not None:
            try:
                remove_placement_group(rep.pg)
            except Exception:  # noqa: BLE001 - already removed
                pass
            rep.pg = None
        if rep.state not in ("dead", "lost"):
            rep.state = state
        rep.released_at = rep.released_at or time.time()

    def release(self) -> None:
        """Kill every replica of the pool (the model is unloaded everywhere)."""
        for rep in self.replicas:
            self.stop_replica(rep)
        self.released = True
