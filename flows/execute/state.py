"""The executor's state record (:class:`ExecState`): one object per invocation, passed explicitly to the
functions of queue.py, pools.py, liveness.py and executor.py that read and change it."""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pandas as pd

from confgrid.actors.calls import RequestCounts
from confgrid.flows.execute.capacity import NodeWatch
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec, ModelSpec
from confgrid.flows.store.run_store import RunStore, ShardRecord

if TYPE_CHECKING:  # types only: pools.py imports this module to take the record
    from confgrid.flows.execute.pools import ModelPool, Replica

__all__ = ["ExecState", "Counters", "InFlight", "Queued"]

log = logging.getLogger("confgrid")

#: Seconds between repeated "still waiting" log lines.
WAIT_LOG_SECONDS = 30.0


@dataclass
class Counters:
    """What the run did (also in ``RunSummary`` and MLflow)."""

    model_calls: int = 0  # requests computed by a model
    computed: int = 0  # shards computed now
    reused: int = 0  # shards read from the store
    skipped: int = 0  # shards neither done nor failed, left for `resume` (resubmit --failed only)
    loads: int = 0  # model loads (replica starts that finished loading, Ray restarts included)
    restarts: int = 0  # Ray actor restarts seen
    api: RequestCounts = field(default_factory=RequestCounts)  # API models' requests of this invocation


@dataclass(order=True)
class Queued:
    """A shard in its model's queue (a heap): earlier stages first, then first come first served."""

    stage_rank: int
    seq: int
    shard: ShardRequest = field(compare=False)


@dataclass
class InFlight:
    """One engine call sent to ``replica``: its shards, their manifest records, the replica's process then."""

    replica: Replica
    shards: list[ShardRequest]
    records: list[ShardRecord]
    incarnation: str | None


@dataclass(kw_only=True, eq=False)
class ExecState:
    """Everything one invocation of the executor holds; each group of fields names the module that writes it.

    Inputs (fixed): ``spec``, ``store``, ``plan``, ``build`` (``build(shard, outputs) -> DataFrame``, the shard's
    rows: flows/tables/assemble.py ``shard_table``), ``tracker`` (MLflow; per-shard runs only with
    ``execution.mlflow_shard_runs``), ``address`` (the Ray cluster to join; None: a local one, started only if
    some shard must be computed), ``only_failed`` (``resubmit --failed``: failed shards and what depends on a
    shard rerun now), ``rounds`` (early stopping, flows/evaluate/rounds.py).

    Outcomes (the runner reads them): ``done`` (key -> table of every shard done, computed or reused),
    ``submitted`` (every shard the plan produced, in order), ``failed`` (one dict per failed shard), ``rerun``
    (keys computed now), ``counters``, ``provenance`` (model -> its replica's provenance), ``history`` (every
    pool started, for the manifest).
    """

    spec: GridSpec
    store: RunStore
    plan: GridPlan
    build: Callable[[ShardRequest, tuple], pd.DataFrame]
    tracker: Any = None
    address: str | None = None
    only_failed: bool = False
    rounds: Any = None
    bar: Any = None  # the progress bar (tqdm), in requests
    models: dict[str, ModelSpec] = field(init=False)  # name -> spec entry
    # outcomes
    counters: Counters = field(default_factory=Counters)
    done: dict[str, pd.DataFrame] = field(default_factory=dict)
    submitted: list[ShardRequest] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    rerun: set[str] = field(default_factory=set)
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)
    history: list[ModelPool] = field(default_factory=list)
    # the queue (queue.py)
    queues: dict[str, list[Queued]] = field(default_factory=dict)  # model -> its heap
    twins: dict[str, list[ShardRequest]] = field(default_factory=dict)  # key -> [the shard queued, its twins...]
    seq: Iterator[int] = field(default_factory=itertools.count)  # first come first served among equal stages
    bounds: dict[str, int] = field(default_factory=dict)  # generate key -> requests its later shards may add
    queue_spans: list[list[float | None]] = field(default_factory=list)  # when some shard waited (meta.queued)
    reused_by_stage: dict[str, list[int]] = field(default_factory=dict)  # stage -> [shards, rows] reused
    moves: dict[str, int] = field(default_factory=dict)  # shard key -> times put back after a lost replica
    # calls and pings in flight (executor.py sends and receives them): Ray object ref -> what it answers
    inflight: dict[Any, InFlight] = field(default_factory=dict)
    pings: dict[Any, Replica] = field(default_factory=dict)
    # pools (pools.py)
    pools: dict[str, ModelPool] = field(default_factory=dict)  # model -> its pool alive now
    dead_reason: dict[str, str] = field(default_factory=dict)  # model -> why it has no replica left
    ray_ready: bool = False
    cluster: dict[str, float] = field(default_factory=dict)  # what replica_resources sizes a replica by
    needs: dict[str, tuple[int, dict[str, float], str]] = field(default_factory=dict)  # capacity.py's `needs`
    max_replicas: dict[str, int] = field(default_factory=dict)  # model -> most replicas at once
    grow_at: float = 0.0  # when elastic replicas are decided on next
    # liveness (liveness.py)
    nodes: NodeWatch = field(default_factory=NodeWatch)  # the node table
    probe_at: dict[int, float] = field(default_factory=dict)  # id(replica) -> next look at its actor entry
    # the invocation (executor.py)
    invocation: dict[str, Any] | None = None  # its entry of meta.invocations
    said: dict[str, float] = field(default_factory=dict)  # log key -> when it was last said

    def __post_init__(self) -> None:
        self.models = {m.name: m for m in self.spec.models}
        self.queues = self.queues or {m: [] for m in self.models}

    def alive_pools(self) -> list[ModelPool]:
        return [p for p in self.pools.values() if not p.released]

    def say(self, key: str, msg: str) -> None:
        """Log ``msg`` once, and again every WAIT_LOG_SECONDS while it stays true."""
        now = time.time()
        if now - self.said.get(key, -1e18) >= WAIT_LOG_SECONDS:
            self.said[key] = now
            log.info("%s", msg)
