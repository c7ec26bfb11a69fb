"""Replica pools: each model's Ray actors, their life cycle, and the cluster capacity check.

A :class:`ModelPool` holds the replicas of one model (``models[].replicas``
actors, each loading the weights once). Pools of different models live at the
same time as far as the cluster's resources allow: a pool asks Ray for all its
replicas at once and Ray creates each actor when its resources are free (or
when an autoscaler adds a node); the executor (flows/execute/executor.py) gives work
only to replicas that answered ``ping`` (their model is loaded), so a replica
still waiting for resources never holds work back.

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

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confgrid.errors import FieldsPickle
from confgrid.actors.calls import ReplicaInfo
from confgrid.flows.execute.timeline import add_span
from confgrid.flows.spec.grid import GridSpec, ModelSpec

__all__ = ["CapacityError", "ActorEntry", "actor_entry", "Replica", "ModelPool", "model_config", "cancel_calls",
           "check_capacity", "node_resources", "start_order"]

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
    import dataclasses

    from confgrid.actors.model_actor import ModelConfig

    return ModelConfig(
        name=m.name, model=m.model, backend=m.backend, dtype=m.dtype, revision=m.revision,
        chat_template=m.chat_template, batch_size=m.batch_size, tensor_parallel_size=m.tensor_parallel_size,
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
    import ray

    if not refs or not ray.is_initialized():
        return
    for ref in refs:
        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001 - the replica is killed right after anyway
            pass


def node_resources() -> list[dict[str, float]]:
    """Total ``{"GPU": g, "CPU": c}`` of every alive node of the connected Ray cluster."""
    import ray

    return [{"GPU": float(n.get("Resources", {}).get("GPU", 0.0)), "CPU": float(n.get("Resources", {}).get("CPU", 0.0))}
            for n in ray.nodes() if n.get("Alive")]


def _fmt(res: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in res.items()) + "}"


def _free_resources() -> dict[str, float]:
    """What the cluster has free now (for a log line; {} when Ray does not answer)."""
    import ray

    try:
        return {k: float(v) for k, v in ray.available_resources().items()}
    except Exception:  # noqa: BLE001 - the log line is best effort
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
    the nodes and leave each node a few GPUs short of a large placement group, which
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
        the parallel sizes (``tensor_parallel_size`` GPUs in one STRICT_PACK group).

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
        from ray._private import state

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
        tensor-parallel replica; 0 without GPUs).
    loading, computing : list of [start, end]
        Its model loads and engine calls as measured inside the replica
        (``time.time()``; flows/execute/timeline.py says what they cover).
    withdrawn : str or None
        Set when it was stopped before its model was loaded (usually: the other
        replicas did its model's work first; also a run that ended or was
        interrupted meanwhile): ``loading`` (Ray had placed it: a load started
        and was cut short), ``waiting`` (still waiting for resources),
        ``unknown`` (the actor table could not be read).
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
    loading: list[list[float]] = field(default_factory=list)
    computing: list[list[float]] = field(default_factory=list)
    withdrawn: str | None = None

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
                "gpus": self.gpus, "loading": [list(x) for x in self.loading],
                "computing": [list(x) for x in self.computing], "withdrawn": self.withdrawn,
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
        from confgrid.actors.model_actor import replica_resources, start_replica

        gpus = replica_resources(self.config, cluster_resources).per_node.get("GPU", 0.0)
        for r in range(self.spec.replicas):
            rep = Replica(self.spec.name, r, self.load, gpus=gpus)
            rep.handle, rep.pg = start_replica(self.config, r, cluster_resources, load=self.load)
            self.replicas.append(rep)
        return self.replicas

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
        import ray
        from ray.util.placement_group import remove_placement_group

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
