"""Model pools: each model's replicas (Ray actors), what is recorded of them, and their life cycle.

A :class:`ModelPool` asks Ray for all its replicas at once; Ray creates each actor when its resources are free
(or an autoscaler adds a node), and the queue (queue.py) gives work only to replicas that answered ``ping`` (their
model is loaded). The life cycle, over the executor's state record (state.py): :func:`start_pools`,
:func:`grow_pools` (elastic replicas, as capacity.py ``grow_replicas`` decides), :func:`release_idle` and
:func:`model_dead`. What a cluster user measures is recorded per :class:`Replica` (``manifest.json``,
``meta.replicas``): when it was asked for and ready, its loads and calls, its restarts, when it was released.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from confgrid.actors.api_cache import CACHE_DIR
from confgrid.actors.calls import ReplicaInfo
from confgrid.flows.execute.capacity import (CapacityError, PoolDemand, at_once, check_capacity, fmt, grow_replicas,
                                             max_replicas, node_line, read_nodes, start_order)
from confgrid.flows.execute.queue import fail_queued, queued_calls
from confgrid.flows.execute.ray_session import init_ray
from confgrid.flows.execute.state import ExecState
from confgrid.flows.execute.timeline import add_span
from confgrid.flows.spec.grid import GridSpec, ModelSpec

__all__ = ["ActorEntry", "actor_entry", "placed", "Replica", "ModelPool", "model_config", "cancel_calls",
           "free_per_node", "start_latency", "ensure_ray", "ping", "start_pools", "grow_pools", "release",
           "release_idle", "cancel_waiting", "model_dead"]

log = logging.getLogger("confgrid")

#: Seconds between two decisions on elastic replicas (each reads the nodes' free resources from Ray).
GROW_EVERY_S = 0.5
#: Seconds an elastic replica may wait for Ray to place it before its request is withdrawn (the free resources
#: it was asked for were taken meanwhile; it must not take room a pool waits for later).
ELASTIC_PLACE_S = 10.0


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
    """Cancel engine calls still in flight (an interrupted run), before their replicas are killed, so Ray does
    not announce retries nobody will make. Best effort: nothing is raised."""
    import ray  # lazy: no Ray until a shard must be computed

    if not refs or not ray.is_initialized():
        return
    for ref in refs:
        with contextlib.suppress(Exception):  # the replica is killed right after anyway
            ray.cancel(ref)


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


def placed(handle: Any) -> bool | None:
    """Whether Ray has placed a not-yet-ready actor on a worker process (it is loading: a raylet port and a pid
    in the GCS actor table), or still waits for resources; None when the table cannot be read."""
    entry = actor_entry(handle)
    return None if entry is None else (entry.placed and entry.pid > 0)


def start_latency(replicas: Sequence[Replica]) -> float:
    """Seconds (>= 0) from asking Ray for a replica to its model load beginning, as a run has measured it.

    A replica's latency is its first load's start (``loading[0][0]``) minus ``requested_at``, clipped at 0. The
    median over extra (elastic) replicas when there is one (asked for on free resources: the start alone), else
    the least over all replicas (the others also waited for resources); 0.0 when no replica has begun a load.

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


@dataclass(frozen=True)
class ActorEntry:
    """A replica's actor as Ray's GCS actor table has it (:func:`actor_entry`): Ray's actor state, every restart
    (one while loading included), whether a worker holds it (a raylet port is set), where it runs ("" and 0 while
    not placed)."""

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
    """One model replica: a Ray actor and what happened to it (its line in ``manifest.json``: :meth:`record`)."""

    model: str
    index: int  # within the model's pool
    load: int  # pools of this model started before this one in the run (reloaded for cross-model work: 1)
    handle: Any = None  # the actor
    pg: Any = None  # its placement group (a tensor-parallel replica with executor ray), else None
    # waiting (asked for, not loaded: waiting for resources or loading), ready, unreachable (a call could not reach
    # it; out of the ready set until it answers a ping: liveness.py), dead (crashed or killed, not restartable),
    # lost (gone with its node) or released
    state: str = "waiting"
    requested_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    ping_retries: int = 0  # pings asked again after the actor died while loading (Ray restarting it)
    traceback: str | None = None  # the full traceback of why it could not start (manifest and run log)
    released_at: float | None = None
    # its latest process; the manifest line adds from it gpu_ids (the GPUs Ray gave the actor), cpu_bind (a
    # tensor-parallel replica on CPU: each rank's cores as given to VLLM_CPU_OMP_THREADS_BIND, e.g. "0|1") and
    # ranks (its engine's processes with their pids)
    info: ReplicaInfo | None = None
    loads: int = 0  # model loads (1 + Ray restarts)
    restarts: int = 0  # Ray restarts seen (a new process of the same actor), while the model loaded included
    restarts_accounted: int = 0  # Ray's restart count of the actor (ActorEntry.num_restarts) counted in restarts
    load_seconds: float = 0.0  # summed over its loads
    busy_seconds: float = 0.0  # summed over its engine calls
    calls: int = 0  # engine calls finished
    inflight: int = 0  # engine calls sent and not answered
    error: str | None = None
    last_progress: float | None = None  # when it was ready or its last engine call finished
    node_id: str = ""  # the Ray node of its latest process ("" until it is ready)
    node_ip: str = ""
    unreachable_since: float = 0.0  # when a call last found it unreachable
    lost_at: float | None = None  # when it was recorded lost or dead
    gpus: float = 0.0  # GPUs it reserves (tensor_parallel_size for a tensor-parallel replica; 0 without GPUs)
    cpus: float = 0.0  # CPUs it reserves (tensor_parallel_size cores for a tensor-parallel replica without GPUs)
    # its model loads and engine calls, [[start, end], ...], measured inside the replica (timeline.py)
    loading: list[list[float]] = field(default_factory=list)
    computing: list[list[float]] = field(default_factory=list)
    # stopped before its model was loaded (usually: the other replicas did the work first; or the run ended):
    # loading (Ray had placed it: a load was cut short), waiting (for resources) or unknown (no actor table)
    withdrawn: str | None = None
    elastic: bool = False  # started beyond models[].replicas on free resources (models[].max_replicas)
    requests: int = 0  # requests of the engine calls it finished (its rate, with busy_seconds)

    @property
    def name(self) -> str:
        return f"{self.model}#{self.index}" + (f".{self.load}" if self.load else "")

    def loaded(self, info: ReplicaInfo, seen_at: float) -> None:
        """Count one model load of this replica and record its ``loading`` span (the replica's own start, else
        the ``load_seconds`` before ``seen_at``)."""
        self.loads += 1
        self.load_seconds += info.load_seconds
        start = info.load_started or seen_at - info.load_seconds
        add_span(self.loading, start, start + info.load_seconds, gap=0.0)

    def record(self) -> dict[str, Any]:
        """The replica's line in ``manifest.json`` (``meta.replicas``)."""
        own = ("model", "index", "load", "state", "requested_at", "ready_at", "released_at", "loads", "restarts",
               "calls", "lost_at", "error", "gpus", "cpus", "withdrawn", "elastic", "requests")
        info = self.info
        return {"replica": self.name, **{k: getattr(self, k) for k in own},
                "load_seconds": round(self.load_seconds, 3), "busy_seconds": round(self.busy_seconds, 3),
                "host": info.host if info else None, "pid": info.pid if info else None,
                "node_id": self.node_id or None, "node_ip": self.node_ip or None,
                "gpu_ids": list(info.gpu_ids) if info else [], "cpu_bind": (info.cpu_bind if info else "") or None,
                "ranks": [list(x) for x in info.ranks] if info else [],
                "loading": [list(x) for x in self.loading], "computing": [list(x) for x in self.computing],
                **({"traceback": self.traceback} if self.traceback else {})}


class ModelPool:
    """The replicas of one model, asked for together and released together; ``config`` is what each actor loads
    (:func:`model_config`), ``load`` how many pools of this model the run started before."""

    def __init__(self, spec: ModelSpec, config: Any, load: int) -> None:
        self.spec, self.config, self.load = spec, config, load
        self.replicas: list[Replica] = []
        self.released = False

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self, cluster_resources: dict[str, float] | None = None) -> list[Replica]:
        """Ask Ray for every replica (returns at once; each becomes ready when its ``ping`` answers);
        ``cluster_resources`` is what actors/model_actor.py ``replica_resources`` sizes a replica by."""
        for _ in range(self.spec.replicas):
            self.add_replica(cluster_resources, elastic=False)
        return self.replicas

    def add_replica(self, cluster_resources: dict[str, float] | None = None, elastic: bool = True) -> Replica:
        """Ask Ray for one more replica (an elastic one unless ``elastic`` is False: one of the model's
        ``replicas``); returns at once. Its index follows the pool's last one (its actor's name is its own)."""
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
        return [r for r in self.waiting() if placed(r.handle) is not True]

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
        """Kill one replica's actor and free its placement group (idempotent); one stopped while ``waiting``
        records in ``withdrawn`` whether Ray had placed it or it still waited for resources."""
        import ray  # lazy: no Ray until a shard must be computed
        from ray.util.placement_group import remove_placement_group  # lazy: no Ray until a shard must be computed

        if rep.state in ("released",):
            return
        if rep.state == "waiting" and rep.withdrawn is None:
            where = placed(rep.handle)  # None when the actor table cannot be read (Ray gone)
            rep.withdrawn = "loading" if where else "waiting" if where is False else "unknown"
        if not ray.is_initialized():  # Ray was shut down under us (a test, Ctrl-C): its actors are gone
            rep.state = rep.state if rep.state in ("dead", "lost") else "released"
            return
        with contextlib.suppress(Exception):  # already dead
            ray.kill(rep.handle)
        if rep.pg is not None:
            with contextlib.suppress(Exception):  # already removed
                remove_placement_group(rep.pg)
            rep.pg = None
        if rep.state not in ("dead", "lost"):
            rep.state = state
        rep.released_at = rep.released_at or time.time()

    def release(self) -> None:
        """Kill every replica of the pool (the model is unloaded everywhere)."""
        for rep in self.replicas:
            self.stop_replica(rep)
        self.released = True


# -- the life cycle over the executor's state --------------------------------------------------------------------
def ensure_ray(st: ExecState) -> None:
    """Start or join Ray (once), size every model's replica, and check that each fits some node (else
    :class:`CapacityError`, unless ``execution.wait_for_nodes``)."""
    if st.ray_ready:
        return
    import ray  # lazy: no Ray until a shard must be computed

    from confgrid.actors.model_actor import replica_resources  # lazy: model_actor imports ray

    init_ray(st.address)
    nodes = [n.resources for n in read_nodes() if n.alive]
    # GPUs: does the cluster have any; CPUs: what one node offers (a CPU replica reserves one node's CPUs)
    total = ray.cluster_resources()
    st.cluster = {"GPU": float(total.get("GPU", 0.0)), "CPU": max((n["CPU"] for n in nodes), default=1.0)}
    # what the cluster declares, for the timeline's GPU-seconds (flows/execute/timeline.py)
    st.store.meta["cluster"] = {"GPU": float(total.get("GPU", 0.0)), "CPU": float(total.get("CPU", 0.0)),
                                "nodes": len(nodes)}
    if st.invocation is not None:
        st.invocation["cluster"] = st.store.meta["cluster"]
    for m in st.spec.models:
        rr = replica_resources(model_config(m, st.spec), st.cluster)
        st.needs[m.name] = (m.replicas, rr.per_node, rr.note)
        st.max_replicas[m.name] = max_replicas(m.max_replicas, m.replicas, rr.per_node, nodes)
    problems = check_capacity(st.needs, nodes)
    if problems and not st.spec.execution.wait_for_nodes:
        raise CapacityError(problems)
    for p in problems:
        log.warning("%s; waiting for the autoscaler to add such a node (execution.wait_for_nodes)", p)
    for name, (n, need, _) in st.needs.items():
        fit = at_once(need, nodes)
        if 0 < fit < n:
            log.info("model %s: %d replicas of %s, the cluster holds %d at once; the rest start as room frees "
                     "up", name, n, fmt(need), fit)
        if st.max_replicas[name] > n:
            log.info("model %s: up to %d replicas (max_replicas %s): extra replicas start on free resources "
                     "while its queue holds more calls than its replicas take", name, st.max_replicas[name],
                     st.models[name].max_replicas)
        elif st.models[name].max_replicas is not None:
            log.info("model %s: max_replicas %s allows no extra replica: the cluster holds %d of %s at once and "
                     "the model has %d", name, st.models[name].max_replicas, fit, fmt(need), n)
    st.ray_ready = True


def ping(st: ExecState, rep: Replica) -> None:
    """Ask a replica whether its model is loaded. Ray does not retry the ping (it would print the remote
    traceback each time): liveness.py ``on_ping`` asks again, within ``execution.max_retries``."""
    st.pings[rep.handle.ping.options(max_task_retries=0).remote()] = rep


def start_pools(st: ExecState) -> None:
    """Ask Ray for the pool of each model with queued work and none, largest replica first (first-fit
    decreasing: small replicas asked for first can fragment the nodes), within ``execution.max_concurrent_models``."""
    limit = st.spec.execution.max_concurrent_models
    pending = [name for name in st.models if st.queues[name] and name not in st.pools]
    if not pending:
        return
    ensure_ray(st)
    for name in start_order({name: st.needs[name] for name in pending}):
        alive = st.alive_pools()
        if limit is not None and len(alive) >= limit:
            st.say(f"limit:{name}", f"model {name}: waits for a free slot (execution.max_concurrent_models="
                   f"{limit}; running: {', '.join(p.name for p in alive)})")
            continue
        m = st.models[name]
        load = sum(1 for p in st.history if p.name == name)
        api_cache = st.store.root / CACHE_DIR if m.backend == "openai" else None  # an API model's answer cache
        if api_cache is not None:  # created here, so a replica can tell it reaches it
            api_cache.mkdir(parents=True, exist_ok=True)
        pool = ModelPool(m, model_config(m, st.spec, str(api_cache) if api_cache else None), load)
        try:
            pool.start(st.cluster)
        except Exception as exc:  # noqa: BLE001 - e.g. a placement group that can never be created
            model_dead(st, name, f"could not start replicas of model {name!r}: {type(exc).__name__}: {exc}")
            continue
        st.pools[name] = pool
        st.history.append(pool)
        for rep in pool.replicas:
            ping(st, rep)
        log.info("model %s: %d %s replica(s) of %s requested%s", name, m.replicas, m.backend, fmt(st.needs[name][1]),
                 f" (load {load + 1} of this model in the run)" if load else "")


def grow_pools(st: ExecState) -> None:
    """Elastic replicas: ask for the extra replicas capacity.py ``grow_replicas`` decides on, every
    GROW_EVERY_S; withdraw an extra one Ray has not placed within ELASTIC_PLACE_S; log what waits."""
    now = time.time()
    if now < st.grow_at:
        return
    st.grow_at = now + GROW_EVERY_S
    for pool in st.alive_pools():
        for rep in pool.waiting():
            if rep.elastic and now - rep.requested_at >= ELASTIC_PLACE_S and placed(rep.handle) is False:
                cancel_waiting(st, pool, rep, f"extra replica not placed within {ELASTIC_PLACE_S:.0f} s (the free "
                               "resources it was asked for were taken meanwhile)")
    if not any(st.queues[p.name] and st.max_replicas.get(p.name, 0) > len(p.live()) for p in st.alive_pools()):
        return
    demands, queued = {}, {}
    start_s = start_latency([r for p in st.history for r in p.replicas])
    for pool in st.alive_pools():
        queued[pool.name] = queued_calls(st, pool.name)
        demands[pool.name] = pool.demand(st.needs[pool.name][1], st.max_replicas[pool.name], *queued[pool.name],
                                         unplaced=len(pool.unplaced()), start_s=start_s,
                                         calls_in_flight=st.spec.execution.calls_in_flight)
    starting = [m for m, q in st.queues.items() if q and m not in st.pools and m not in st.dead_reason]
    growth = grow_replicas(list(demands.values()), free_per_node(), st.spec.execution.calls_in_flight, starting)
    for name, node in growth.start:
        pool, d = st.pools[name], demands[name]
        live = len(pool.live())
        rep = pool.add_replica(st.cluster)
        ping(st, rep)
        log.info("model %s: extra replica %s asked for (max_replicas %d): %d call(s) queued for %d replica(s), "
                 "%.0f s of one replica's work against %.0f s to start and %.0f s to load; %s free on node %s",
                 name, rep.name, st.max_replicas[name], queued[name][0], live, d.work_s or 0.0, d.start_s,
                 d.load_s or 0.0, fmt(st.needs[name][1]), node[:8])
    for name, why in growth.waits.items():
        st.say(f"grow:{name}", f"model {name}: {queued[name][0]} call(s) queued for {len(st.pools[name].live())} "
               f"replica(s) (max_replicas {st.max_replicas[name]}); an extra replica waits: {why}")


def _drop_pings(st: ExecState, reps: list[Replica]) -> None:
    for ref in [ref for ref, r in st.pings.items() if any(r is x for x in reps)]:
        del st.pings[ref]


def release(st: ExecState, pool: ModelPool, why: str) -> None:
    """Kill the pool's replicas. One still unreachable is recorded ``lost`` with its node if that node is gone
    (Ray may still be waiting to restart it where no room is), else left ``unreachable``."""
    if pool.released:
        return
    _drop_pings(st, pool.replicas)
    st.nodes.poll(force=True)
    for rep in pool.replicas:
        if rep.state == "unreachable" and rep.node_id in st.nodes.lost:
            rep.state, rep.lost_at = "lost", time.time()
            log.warning("replica %s: lost with %s (%s); not restarted before its model's work was done",
                        rep.name, node_line(None, rep.node_id, rep.node_ip), rep.error)
    pool.release()
    st.pools.pop(pool.name, None)
    if any(r.loads for r in pool.replicas):
        log.info("model %s: released (%s)", pool.name, why)


def _others_wait(st: ExecState, name: str) -> bool:
    """Another model has queued work and no room: no pool yet, or no loaded replica and one that Ray has
    not placed for lack of resources (a replica placed and loading needs no room from anyone)."""
    for other, q in st.queues.items():
        if other == name or not q:
            continue
        pool = st.pools.get(other)
        if pool is None:
            return True
        if not pool.ready() and any(placed(r.handle) is not True for r in pool.waiting()):
            return True
    return False


def release_idle(st: ExecState) -> None:
    """Release each pool with nothing queued or running, unless its model has cross-model work to come and no
    other model waits for room (then the log says it stays loaded); withdraw its replicas not loaded yet."""
    for pool in st.alive_pools():
        name = pool.name
        if st.queues[name] or any(f.replica.model == name for f in st.inflight.values()):
            continue
        for rep in pool.waiting():  # nothing left to give a replica that is not loaded yet
            cancel_waiting(st, pool, rep)
        if st.plan.expects_work(name) and not _others_wait(st, name):
            st.say(f"keep:{name}", f"model {name}: stays loaded; it has cross-model work to come "
                   f"({'; '.join(st.plan.waiting_for()) or 'answers of other models'})")
            continue
        release(st, pool, "its work is done" if not st.plan.expects_work(name)
                else "other models wait for room; it is reloaded for its cross-model work")


def cancel_waiting(st: ExecState, pool: ModelPool, rep: Replica,
                   why: str = "not needed any more (no work left for it)") -> None:
    """Withdraw the request for a replica not loaded yet (the log says whether it was loading or waiting)."""
    _drop_pings(st, [rep])
    pool.stop_replica(rep)
    log.info("replica %s: %s; request withdrawn (%s)", rep.name, why,
             {"loading": "it was loading its model", "waiting": "it was waiting for resources"}.get(
                 rep.withdrawn or "", "loading or waiting for resources"))


def model_dead(st: ExecState, name: str, reason: str) -> None:
    """No replica of ``name`` is left: its pool is released and every shard queued for it fails with ``reason``."""
    st.dead_reason[name] = reason
    pool = st.pools.get(name)
    if pool is not None:
        release(st, pool, reason)
    fail_queued(st, name, reason)
