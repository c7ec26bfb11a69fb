"""The executor: runs a :class:`~confgrid.flows.plan.grid_plan.GridPlan` on Ray, model-major.

Scheduling
    Every model of the grid gets its own pool of replicas (flows/execute/pools.py).
    Pools of different models run at the same time as far as the cluster's
    resources allow (``execution.max_concurrent_models`` bounds them); Ray
    queues the replicas that do not fit and creates them as resources free up.
    Pools are asked for largest replica first (pools.py ``start_order``), so
    small replicas do not fragment the nodes before a large (tensor-parallel) replica.
    A replica keeps its model loaded for the model's whole chain: generate,
    then (on the driver, pure) parse and grade, then the score shards of its
    own answers in every context, then the probe kinds that need only its own
    answers. Probe kinds that need other models' answers run once those exist,
    on pools still alive; a pool whose model has nothing left to do is
    released at once, or kept while it may still get cross-model work and no
    other model waits for room (so a model is loaded at most twice per run,
    and twice only when such work exists).
    Elastic replicas (``models[].max_replicas``): while a model has more
    queued calls than its replicas take at once, its measured queue outlasts
    a replica's start and load, and resources sit free (no other pool waiting for them), extra
    replicas of it start there (pools.py ``grow_replicas`` decides, this loop
    applies); they leave with their pool, and each loads its model once.

Engine calls
    A replica receives several shards per call (``models[].prompts_per_call``)
    and ``execution.calls_in_flight`` calls at a time, so its engine is never
    starved; the shard stays the unit of storage, keys, manifest and failure.

Failures
    A call that fails fails its shards (recorded with the error; every other
    shard goes on). A call whose replica could not be reached or is gone (its
    node died, or its engine: a tensor-parallel rank's process ended, and Ray
    restarts the replica) puts its shards back in the queue for the other replicas, and
    the replica leaves the ready set until it answers again (flows/execute/liveness.py);
    when a model has no replica left its remaining shards fail with the reason. Ray restarts a
    crashed actor at most ``execution.max_retries`` times and retries its calls;
    every restart is recorded (``restarts`` on the replica and on each shard
    whose call went through it, and a log line).

Nothing waits silently: a model waiting for ``max_concurrent_models``, a
replica waiting for resources, a pool kept for cross-model work: each says so
in the log (and again every 30 s while it lasts).

Why one class in one file: the executor is one event loop over one state (the queue, the calls in flight, the
pools and their replicas, the liveness probes), and its handlers (submit, dispatch, call done, ping answered,
start, grow and release a pool, a replica unreachable or back, a node lost, Ctrl-C) each read and change most of
that state and call one another; split into classes they would share it all again through back-references.
What can be decided without that state is pure and lives beside it: the decisions on pools and capacity
(pools.py), on faults and nodes (liveness.py), the replicas' timeline spans (timeline.py); the Ray session is
ray_session.py. Ray is imported inside the methods that talk to it (``import ray  # lazy``): a run whose shards
are all stored, and the commands that only read a run, never load it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import re
import signal
import socket
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from confgrid.actors.api_cache import CACHE_DIR
from confgrid.actors.backend import engine_died
from confgrid.actors.calls import CallResult, EngineCall, ReplicaReady, RequestCounts
from confgrid.flows.execute.liveness import (
    PROBE_SECONDS,
    Fault,
    NodeInfo,
    NodeWatch,
    actor_verdict,
    classify_fault,
    node_line,
    requeue_or_fail,
    stranded_models,
)
from confgrid.flows.execute.pools import (
    CapacityError,
    ModelPool,
    Replica,
    _fmt,
    _free_resources,
    _placed,
    actor_entry,
    at_once,
    cancel_calls,
    check_capacity,
    free_per_node,
    grow_replicas,
    max_replicas,
    model_config,
    node_resources,
    start_latency,
    start_order,
)
from confgrid.flows.execute.ray_session import init_ray
from confgrid.flows.execute.timeline import add_span, note_waiting
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec, ModelSpec
from confgrid.flows.store.run_store import RunStore, ShardRecord
from confgrid.flows.store.runlog import LOG_NAME, trace

__all__ = ["Executor", "Counters", "DEFAULT_VLLM_PROMPTS_PER_CALL"]

log = logging.getLogger("confgrid")

#: Requests per engine call of a vLLM replica when ``prompts_per_call`` is not set: four times vLLM's
#: default ``max_num_seqs`` (256), so the engine's scheduler always has a full batch waiting.
DEFAULT_VLLM_PROMPTS_PER_CALL = 1024
#: Seconds between repeated "still waiting" log lines.
WAIT_LOG_SECONDS = 30.0
#: Seconds a replica may take to become ready before the log says what it waits for.
WAIT_FIRST_SECONDS = 5.0
#: Seconds without a finished engine call (while calls are in flight) before the log says so.
SLOW_CALL_SECONDS = 60.0
#: Seconds between two decisions on elastic replicas (each reads the nodes' free resources from Ray).
GROW_EVERY_S = 0.5
#: Seconds an elastic replica may wait for Ray to place it before its request is withdrawn (the free resources
#: it was asked for were taken meanwhile; it must not take room a pool waits for later).
ELASTIC_PLACE_S = 10.0


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
class _Queued:
    """A shard in its model's queue (a heap): earlier stages first, then first come first served."""

    stage_rank: int
    seq: int
    shard: ShardRequest = field(compare=False)


@dataclass(frozen=True)
class _NextCall:
    """One engine call to send and the whole shards it carries."""

    call: EngineCall
    shards: list[ShardRequest]


@dataclass
class _InFlight:
    replica: Replica
    shards: list[ShardRequest]
    records: list[ShardRecord]
    incarnation: str | None


def prompts_per_call(m: ModelSpec) -> int | None:
    """Requests per engine call of ``m`` (None: one shard per call)."""
    if m.prompts_per_call is not None:
        return m.prompts_per_call
    return DEFAULT_VLLM_PROMPTS_PER_CALL if m.backend == "vllm" else None


class Executor:
    """Runs shard requests on model pools and records every outcome in the store.

    Parameters
    ----------
    spec : GridSpec
    store : RunStore
    build : callable
        ``build(shard, outputs) -> DataFrame``: the shard's rows from its
        outputs (flows/tables/assemble.py ``shard_table``).
    tracker : Tracker, optional
        MLflow; per-shard runs only with ``execution.mlflow_shard_runs``.
    address : str, optional
        Ray cluster to join (None: local cluster, started only if some shard
        must be computed).
    only_failed : bool
        ``resubmit --failed``: run failed shards and what depends on a shard
        rerun now; leave the rest.
    rounds : Rounds, optional
        Early stopping (``execution.stop_when_resolved``, flows/evaluate/rounds.py): its first round is
        submitted with the plan's shards, and each setting with nothing queued or running goes to its next
        round or stops.
    """

    def __init__(self, spec: GridSpec, store: RunStore, build: Callable[[ShardRequest, tuple], pd.DataFrame], *,
                 tracker: Any = None, address: str | None = None, only_failed: bool = False,
                 rounds: Any = None) -> None:
        self.spec, self.store, self.build, self.tracker = spec, store, build, tracker
        self.address, self.only_failed, self.rounds = address, only_failed, rounds
        self.models = {m.name: m for m in spec.models}
        self.counters = Counters()
        self.failed: list[dict[str, Any]] = []
        self.done: dict[str, pd.DataFrame] = {}  # key -> table of every shard done (computed or reused)
        self.rerun: set[str] = set()  # keys computed in this invocation
        self.submitted: list[ShardRequest] = []  # every shard the plan produced, in order
        self.pools: dict[str, ModelPool] = {}
        self.history: list[ModelPool] = []  # every pool started, for the manifest
        self.provenance: dict[str, dict[str, str]] = {}
        self._queues: dict[str, list[tuple[int, int, ShardRequest]]] = {m: [] for m in self.models}
        self._queued: dict[str, list[ShardRequest]] = {}  # key -> [the shard queued, its twins...]
        self._seq = itertools.count()
        self._inflight: dict[Any, _InFlight] = {}
        self._pings: dict[Any, Replica] = {}
        self._dead_reason: dict[str, str] = {}  # model -> why it has no replica left
        self._ray_ready = False
        self._reused_by_stage: dict[str, list[int]] = {}
        self._said: dict[str, float] = {}
        self._bar: Any = None
        self._bounds: dict[str, int] = {}  # generate key -> requests its later shards may add (the bar counts them)
        self._plan: GridPlan | None = None
        self._invocation: dict[str, Any] | None = None
        self._queue_spans: list[list[float | None]] = []  # when some shard waited in a queue (meta.queued)
        self._max_replicas: dict[str, int] = {}  # model -> most replicas at once (models[].max_replicas resolved)
        self._grow_at = 0.0  # when elastic replicas are decided on next
        self._moves: dict[str, int] = {}  # shard key -> times put back in the queue after a lost replica
        self._nodes = NodeWatch()
        self._probe_at: dict[int, float] = {}  # id(replica) -> next look at its actor-table entry

    # -- public -------------------------------------------------------------------------
    def run(self, plan: GridPlan) -> dict[str, pd.DataFrame]:
        """Run the plan to the end; returns key -> table for every shard that is done.

        Raises
        ------
        CapacityError
            Before any model is loaded, if some model's replica fits on no node
            (unless ``execution.wait_for_nodes``).
        """
        self._plan = plan
        self._bar = tqdm(total=0, desc="model work", unit="q", leave=False)
        self._record_replicas()  # the invocation starts now (its started_at opens the timeline's window)
        restore = self._catch_ctrl_c()
        try:
            self._submit(plan.generate_shards())
            if self.rounds is not None:
                self._submit(self.rounds.start())
            idle_turns = 0
            while self._has_work():
                if self._ctrl_c:
                    raise KeyboardInterrupt
                if self._advance_rounds():
                    continue
                self._start_pools()
                self._grow_pools()
                self._dispatch()
                self._release_idle()
                self._watch_nodes()
                self._probe_unreachable()
                if not self._inflight and not self._pings and self._unreachable():
                    time.sleep(0.2)  # work waits for a replica Ray may bring back; the probe looks again
                    continue
                if not self._inflight and not self._pings:
                    idle_turns += 1  # pools were just released or failed; the next turn starts or fails them
                    if idle_turns > 3:
                        raise RuntimeError(f"scheduler stalled with work queued and nothing running: {self._state()}")
                    continue
                idle_turns = 0
                self._wait_one()
                self._log_waiting()
                self._record_replicas()
                self.store.flush()
        finally:
            restore()
            self.close()
            self._bar.close()
        for stage, (n, rows) in self._reused_by_stage.items():
            log.info("%s: reusing %d stored shard(s) (%d rows); no model call for them", stage, n, rows)
        return self.done

    def close(self) -> None:
        """Release every pool still alive and write the replicas into the manifest.

        Shards whose calls were still in flight (the run was interrupted) are recorded as ``interrupted``:
        not failed, not done; ``confgrid resume`` runs them.
        """
        for f in self._inflight.values():
            for rec in f.records:
                if rec.status == "running":
                    rec.status, rec.error = "interrupted", "the run stopped before this shard finished"
        cancel_calls(list(self._inflight))  # not retried by Ray: no false "will be retried" on Ctrl-C
        for pool in list(self.pools.values()):
            self._release(pool, "end of run" if self._queues[pool.name] or self._inflight else "its work is done")
        self._note_queue(closing=True)
        self._record_replicas()
        self._invocation["ended_at"] = time.time()  # `confgrid status`: running shards after this are stale
        self.store.flush(force=True)

    def _record_replicas(self) -> None:
        """Every replica's timeline and the loads per model, in the manifest, as they change.

        ``meta.replicas``, ``meta.loads`` and ``meta.queued`` (flows/execute/timeline.py) describe this
        invocation; ``meta.invocations`` keeps one entry per invocation of the run directory (run, resume,
        resubmit), with its replicas, loads and restarts.
        """
        replicas = [r.record() for p in self.history for r in p.replicas]
        queued = [list(x) for x in self._queue_spans]
        if self._invocation is None:
            self._invocation = {"started_at": time.time(), "only_failed": self.only_failed, "driver_pid": os.getpid(),
                                "driver_host": socket.gethostname(), "address": self.address}
            self.store.meta.setdefault("invocations", []).append(self._invocation)
        elif replicas == self.store.meta.get("replicas") and queued == self.store.meta.get("queued"):
            return
        loads = {m: sum(r.loads for p in self.history if p.name == m for r in p.replicas) for m in self.models}
        self.store.meta["replicas"] = replicas
        self.store.meta["loads"] = loads
        self.store.meta["queued"] = queued
        self._invocation.update(replicas=replicas, loads=loads, restarts=self.counters.restarts)
        self.store.touch()

    # -- submission ---------------------------------------------------------------------
    def _submit(self, shards: list[ShardRequest]) -> None:
        """Reuse what is stored (and plan what follows from it), queue the rest per model."""
        todo = deque(shards)
        while todo:
            sh = todo.popleft()
            self.submitted.append(sh)
            if sh.key in self.done:
                self.store.reuse(sh.stage, sh.label, sh.key, **sh.grid_entries)
                todo += self._plan.on_done(sh, self.done[sh.key])
            elif sh.key in self._queued:
                self._queued[sh.key].append(sh)  # a twin: same inputs (e.g. coinciding contexts), computed once
            elif (stored := self.store.read_stored(sh.stage, sh.key)) is not None:
                self.store.reuse(sh.stage, sh.label, sh.key, **sh.grid_entries)
                table = stored.to_pandas()
                self.done[sh.key] = table
                self.counters.reused += 1
                n = self._reused_by_stage.setdefault(sh.stage, [0, 0])
                n[0] += 1
                n[1] += len(table)
                todo += self._plan.on_done(sh, table)
            elif (self.only_failed and self.store.status(sh.stage, sh.label, sh.key) != "failed"
                  and not set(sh.upstream) & self.rerun):
                self.counters.skipped += 1
                todo += self._plan.on_skipped(sh)
            elif sh.model in self._dead_reason:
                rec = self.store.begin(sh.stage, sh.label, sh.key, **sh.grid_entries)
                todo += self._fail([sh], [rec], self._dead_reason[sh.model])
            else:
                counted = [u for u in sh.upstream if u in self._bounds]
                if counted:  # counted within its generate shard's bound: take it out of the bound
                    self._bounds[counted[0]] -= len(sh.rows)
                    self._bar.total -= len(sh.rows)
                heapq.heappush(self._queues[sh.model], _Queued(sh.rank, next(self._seq), sh))
                self._queued[sh.key] = [sh]
                bound = self._plan.downstream_bound(sh)  # its later shards, counted now: the total never grows
                self._bounds[sh.key] = bound
                self._bar.total += len(sh.rows) + bound
                self._bar.refresh()
        self._note_queue()

    def _requeue_shard(self, sh: ShardRequest) -> None:
        """Put a shard whose replica was lost back in its model's queue (its twins stay grouped under it)."""
        heapq.heappush(self._queues[sh.model], _Queued(sh.rank, next(self._seq), sh))
        self._note_queue()

    def _note_queue(self, closing: bool = False) -> None:
        """Keep ``meta.queued``: when some shard waited in a queue (``closing``: the invocation ends)."""
        note_waiting(self._queue_spans, any(self._queues.values()) and not closing, time.time())

    def _has_work(self) -> bool:
        return (any(self._queues.values()) or bool(self._inflight)
                or (self.rounds is not None and bool(self.rounds.active())))

    def _advance_rounds(self) -> bool:
        """Early stopping: each setting with nothing queued or running goes to its next round or stops
        (flows/evaluate/rounds.py); repeated while a round is done at once (its shards reused). Returns whether
        every setting has stopped and nothing is left to run (the loop ends)."""
        if self.rounds is None:
            return False
        while True:
            busy = {(q.shard.model, q.shard.dataset) for qs in self._queues.values() for q in qs}
            busy |= {(sh.model, sh.dataset) for f in self._inflight.values() for sh in f.shards}
            busy |= {(sh.model, sh.dataset) for group in self._queued.values() for sh in group}  # twins too
            idle = [k for k in self.rounds.active() if k not in busy]
            if not idle:
                break
            for key in idle:
                failed = sum(1 for f in self.failed if (f.get("model"), f.get("dataset")) == key)
                self._submit(self.rounds.advance(key, self.done, self.submitted, failed))
        return not self._has_work()

    # -- pools --------------------------------------------------------------------------
    def _model_dead(self, name: str, reason: str) -> None:
        """No replica of ``name`` is left: every shard queued for it fails with ``reason``."""
        self._dead_reason[name] = reason
        pool = self.pools.get(name)
        if pool is not None:
            self._release(pool, reason)
        queued = [q.shard for q in self._queues[name]]
        self._queues[name] = []
        api = self.models[name].backend == "openai"
        for sh in queued:
            group = self._queued.pop(sh.key, [sh])
            recs = [self.store.begin(s.stage, s.label, s.key, **s.grid_entries) for s in group]
            if api:  # requests asked for and never sent: "0 answered of N requests" counts them
                for s, rec in zip(group, recs, strict=True):
                    counts = RequestCounts(requests=len(s.rows))
                    rec.requests = counts.as_dict()
                    self.counters.api.add(counts)
            self._submit(self._fail(group, recs, reason))
        self._note_queue()

    # -- dispatch -----------------------------------------------------------------------
    def _queued_calls(self, name: str) -> tuple[int, int]:
        """Engine calls and requests in model ``name``'s queue (calls: one per shard, or shards of one kind
        packed up to its ``prompts_per_call``)."""
        q = self._queues[name]
        cap = prompts_per_call(self.models[name])
        rows: dict[tuple, int] = {}
        for item in q:
            key = item.shard.call_key() if cap is not None else id(item)
            rows[key] = rows.get(key, 0) + len(item.shard.rows)
        calls = len(q) if cap is None else sum(-(-n // cap) for n in rows.values())
        return calls, sum(rows.values())

    def _next_call(self, name: str) -> _NextCall | None:
        """The next engine call of model ``name``: whole shards of one kind, up to its ``prompts_per_call``."""
        q = self._queues[name]
        if not q:
            return None
        cap = prompts_per_call(self.models[name])
        first = heapq.heappop(q).shard
        shards = [first]
        n = len(first.rows)
        held = []
        while cap is not None and q and n < cap:
            item = heapq.heappop(q)
            sh = item.shard
            if sh.call_key() == first.call_key() and n + len(sh.rows) <= cap:
                shards.append(sh)
                n += len(sh.rows)
            else:
                held.append(item)
                if len(held) > 64:
                    break
        for item in held:
            heapq.heappush(q, item)
        return _NextCall(first.call.engine_call(first.engine_kind, tuple(s.work() for s in shards)), shards)

    def _dispatch(self) -> None:
        per_replica = self.spec.execution.calls_in_flight
        for pool in self._alive_pools():
            for rep in pool.ready():
                while rep.inflight < per_replica:
                    nxt = self._next_call(pool.name)
                    if nxt is None:
                        break
                    recs = []
                    for sh in nxt.shards:
                        rec = self.store.begin(sh.stage, sh.label, sh.key, **sh.grid_entries)
                        rec.replica, rec.node_id, rec.node_ip = rep.name, rep.node_id or None, rep.node_ip or None
                        recs.append(rec)
                    ref = rep.handle.run.remote(nxt.call)
                    rep.inflight += 1
                    self._inflight[ref] = _InFlight(rep, nxt.shards, recs, rep.info.incarnation if rep.info else None)
        self._note_queue()

    # -- results ------------------------------------------------------------------------
    def _catch_ctrl_c(self) -> Callable[[], None]:
        """Make Ctrl-C reliable while the driver waits on Ray: a SIGINT sets a flag that the loop turns into
        ``KeyboardInterrupt`` within ``WAIT_FIRST_SECONDS`` (Ray's ``wait`` can consume a KeyboardInterrupt
        raised inside it); a second Ctrl-C raises at once. Returns the function restoring the old handler.
        Outside the main thread (a notebook's worker thread) nothing changes."""
        self._ctrl_c = False
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_sigint(signum, frame):
            if self._ctrl_c:
                raise KeyboardInterrupt
            self._ctrl_c = True
            log.warning("Ctrl-C: stopping after the current wait (press again to stop at once)")

        try:
            old = signal.signal(signal.SIGINT, on_sigint)
        except ValueError:  # not allowed here (an embedded interpreter)
            return lambda: None
        return lambda: signal.signal(signal.SIGINT, old)

    def _wait_one(self) -> None:
        import ray  # lazy: see the module docstring

        refs = list(self._inflight) + list(self._pings)
        ready, _ = ray.wait(refs, num_returns=1, timeout=WAIT_FIRST_SECONDS)
        if not ready:
            return
        ref = ready[0]
        if ref in self._pings:
            self._on_ping(ref, self._pings.pop(ref))
        else:
            self._on_call(ref, self._inflight.pop(ref))

    def _ping(self, rep: Replica) -> None:
        """Ask a replica whether its model is loaded. Ray does not retry the ping itself (its retry prints the
        remote traceback on the console each time): a replica Ray restarts while loading is pinged again by
        :meth:`_on_ping`, within ``execution.max_retries``."""
        self._pings[rep.handle.ping.options(max_task_retries=0).remote()] = rep

    def _on_ping(self, ref: Any, rep: Replica) -> None:
        import ray  # lazy: see the module docstring

        pool = self.pools.get(rep.model)
        try:
            ready: ReplicaReady = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - the model could not be loaded (or the actor died while loading)
            trace.error("replica %s: ping failed", rep.name, exc_info=exc)
            if rep.state == "unreachable":  # still not back: look again later, or it is gone
                if classify_fault(exc) == "gone":
                    self._mark_lost(rep, _error_text(exc))
                return
            if classify_fault(exc) == "unreachable" and pool is not None and not pool.released:
                self._probe_at[id(rep)] = time.time() + 1.0  # its node may be dying: ask again, not counted
                return
            if (not getattr(exc, "_actor_init_failed", False) and pool is not None and not pool.released
                    and rep.ping_retries < self.spec.execution.max_retries):
                rep.ping_retries += 1
                log.warning("replica %s: its actor died while loading (%s); Ray restarts it, asking again (%d of %d)",
                            rep.name, _error_text(exc), rep.ping_retries, self.spec.execution.max_retries)
                self._ping(rep)
                return
            rep.state, rep.error, rep.traceback = "dead", _error_text(exc), traceback_text(exc)
            log.error("replica %s: failed to start: %s (traceback in %s)", rep.name, rep.error, LOG_NAME)
            if pool is not None:
                pool.stop_replica(rep, "dead")
                if not pool.alive():
                    self._model_dead(rep.model, f"model {rep.model!r} could not be loaded: {rep.error}")
            return
        if rep.state == "unreachable":
            self._on_back(rep, ready)
            return
        rep.state, rep.ready_at, rep.info = "ready", time.time(), ready.replica
        rep.node_id, rep.node_ip = ready.replica.node_id, ready.replica.node_ip
        rep.last_progress = rep.ready_at
        rep.loaded(ready.replica, rep.ready_at)
        self.counters.loads += 1
        self.provenance.setdefault(rep.model, {k: v for k, v in ready.provenance.items()})
        log.info("replica %s: ready on %s, node %s (model loaded in %.1f s)", rep.name, ready.replica.host,
                 ready.replica.node_ip or "?", ready.replica.load_seconds)
        n = self._count_restarts(rep)
        if n:
            log.warning("replica %s: Ray restarted its actor %d time(s) while the model loaded (now pid %s on %s, node "
                        "%s); recorded in manifest.json", rep.name, n, ready.replica.pid, ready.replica.host,
                        ready.replica.node_ip or "?")

    def _count_restarts(self, rep: Replica, fallback: int = 0) -> int:
        """Count the actor's restarts not yet counted; returns how many (added to the replica and the counters).

        Ray's own restart count of the actor (GCS actor table) is the truth: it covers every restart, also one
        while the model loaded, which no engine call sees, and a restart Ray counted before the driver saw its
        new process is not counted twice. ``fallback`` is used when the table cannot be read.
        """
        entry = actor_entry(rep.handle)
        new = max(0, entry.num_restarts - rep.restarts_accounted) if entry is not None else fallback
        rep.restarts_accounted += new
        rep.restarts += new
        self.counters.restarts += new
        return new

    def _on_call(self, ref: Any, f: _InFlight) -> None:
        import ray  # lazy: see the module docstring
        from ray.exceptions import RayActorError  # lazy: likewise

        rep = f.replica
        rep.inflight -= 1
        try:
            result: CallResult = ray.get(ref)
        except RayActorError as exc:
            err = _error_text(exc)
            trace.error("engine call on %s failed", rep.name, exc_info=exc)
            fault = classify_fault(exc)
            if fault == "work":
                self._submit(self._fail(f.shards, f.records, err, traceback_text(exc)))
            else:  # the replica is unreachable or gone, not the work: its shards go back in the queue
                self._on_replica_fault(f, exc, err, fault)
            return
        except Exception as exc:  # noqa: BLE001 - the call failed; its shards are recorded, never lost
            trace.error("engine call on %s failed", rep.name, exc_info=exc)
            died = engine_died(exc)
            if died is not None:  # the replica's engine is gone, not the work: restarted, shards back in the queue
                self._on_engine_died(f, died)
                return
            self._submit(self._fail(f.shards, f.records, _error_text(exc), traceback_text(exc)))
            return
        rep.calls += 1
        rep.busy_seconds += result.seconds
        rep.requests += sum(len(sh.rows) for sh in f.shards)
        rep.last_progress = time.time()
        add_span(rep.computing, result.started, result.started + result.seconds)
        restarted = f.incarnation is not None and result.replica.incarnation != f.incarnation
        if rep.info is not None and result.replica.incarnation != rep.info.incarnation:
            n = self._count_restarts(rep, fallback=1)  # 0: Ray counted it already (seen at the ping)
            rep.loaded(result.replica, result.started)
            self.counters.loads += 1
            log.warning("replica %s: Ray restarted its actor (pid %s on %s -> pid %s on %s%s) and retried the calls "
                        "in flight; recorded in manifest.json", rep.name, rep.info.pid, rep.info.host,
                        result.replica.pid, result.replica.host, f"; {n} restarts" if n > 1 else "; counted when it became ready" if n == 0 else "")
            rep.info = result.replica
        new: list[ShardRequest] = []
        stop: str | None = None
        for sh, rec in zip(f.shards, f.records, strict=True):
            if restarted:  # Ray ran the call again on the restarted actor: a second attempt of the shard
                rec.restarts += 1
                rec.attempts += 1
            counts = result.requests.get(sh.key)
            if counts is not None:  # an API model: the shard's requests, in the manifest and the run's sums
                rec.requests = counts.as_dict()
                self.counters.api.add(counts)
            if sh.key in result.failed:
                exc = result.failed[sh.key]
                if getattr(exc, "fatal", False) and stop is None:
                    stop = _error_text(exc)
                new += self._fail([sh], [rec], _error_text(exc))
                continue
            try:
                table = self.build(sh, result.outputs[sh.key])
                self.store.finish(rec, pa.Table.from_pandas(table, preserve_index=False))
            except Exception as exc:  # noqa: BLE001 - e.g. a disk error: recorded, never lost
                trace.error("shard %s %s: building or storing its table failed", sh.stage, sh.label, exc_info=exc)
                new += self._fail([sh], [rec], _error_text(exc), traceback_text(exc))
                continue
            self.counters.model_calls += len(sh.rows)
            self.counters.computed += 1
            self.rerun.add(sh.key)
            self.done[sh.key] = table
            self._track(sh, rec)
            self._bar.update(len(sh.rows))
            group = self._queued.pop(sh.key, [sh])
            for s in group:
                if s is not sh:
                    self.store.reuse(s.stage, s.label, s.key, **s.grid_entries)
                new += self._plan.on_done(s, table)
        if restarted and any(r.restarts for r in f.records):
            log.warning("shard(s) %s went through the restart of %s (restarts recorded per shard)",
                        ", ".join(s.label for s in f.shards[:5]) + (" ..." if len(f.shards) > 5 else ""), rep.name)
        self._submit(new)
        self._settle_bounds(f.shards)
        if stop is not None and rep.model not in self._dead_reason:
            log.error("model %s: stopped; its remaining shards fail with the reason (confgrid resume starts it "
                      "afresh)", rep.model)
            self._model_dead(rep.model, stop)

    def _settle_bounds(self, shards: list[ShardRequest]) -> None:
        """Take the unused part of finished (or failed) generate shards' bounds off the bar's total."""
        for sh in shards:
            left = self._bounds.pop(sh.key, 0)
            if left:
                self._bar.total -= left
                self._bar.refresh()

    def _fail(self, shards: list[ShardRequest], records: list[ShardRecord], error: str,
              tb: str | None = None) -> list[ShardRequest]:
        """Record the shards (and their twins) as failed; returns what the plan plans from the failure (nothing).

        ``tb``, the failure's full traceback, is stored once: in the first shard's manifest record
        (``extra.traceback``); the others of the same failure name that shard.
        """
        new: list[ShardRequest] = []
        first: str | None = None
        for sh, rec in zip(shards, records, strict=True):
            group = self._queued.pop(sh.key, [sh])
            for s in group:
                r = rec if s is sh else self.store.begin(s.stage, s.label, s.key, **s.grid_entries)
                if tb is not None:
                    r.extra["traceback"] = tb if first is None else f"see shard {first}"
                    first = first or f"{s.stage}/{s.label}"
                self.store.fail(r, error)
                self._settle_bounds([s])
                self.failed.append({"stage": s.stage, "setting": s.label, "key": s.key, "error": r.error,
                                    "model": s.model, "dataset": s.dataset})
                log.error("shard %s %s failed: %s", s.stage, s.label, r.error)
                self._track(s, r)
                new += self._plan.on_failed(s)
        return new

    def _track(self, sh: ShardRequest, rec: ShardRecord) -> None:
        if self.tracker is None or not self.spec.execution.mlflow_shard_runs:
            return
        rec.mlflow_run_id = self.tracker.shard_run(
            run_id=rec.mlflow_run_id, name=f"{sh.stage} {sh.label}",
            params={"stage": sh.stage, "setting": sh.setting, "chunk": sh.chunk, "context": sh.context or "",
                    "key": sh.key, "items": len(sh.rows)},
            metrics={"attempts": rec.attempts, "seconds": rec.seconds or 0.0, "rows": rec.rows or 0,
                     "restarts": rec.restarts},
            tags={"confgrid.kind": "shard", "confgrid.status": rec.status, "confgrid.key": sh.key,
                  "confgrid.stage": sh.stage, "confgrid.setting": sh.setting, "confgrid.node": rec.node_ip or "",
                  **({"confgrid.error": (rec.error or "")[:4000]} if rec.error else {})},
        )

    # -- pools: start, grow, release (the decisions are pools.py's pure functions) ----------
    def _ensure_ray(self) -> None:
        if self._ray_ready:
            return
        import ray  # lazy: see the module docstring

        from confgrid.actors.model_actor import replica_resources  # lazy: model_actor imports ray

        init_ray(self.address)

        nodes = node_resources()
        # GPUs: does the cluster have any; CPUs: what one node offers (a CPU replica reserves one node's CPUs)
        total = ray.cluster_resources()
        self._cluster = {"GPU": float(total.get("GPU", 0.0)), "CPU": max((n["CPU"] for n in nodes), default=1.0)}
        # what the cluster declares, for the timeline's GPU-seconds (flows/execute/timeline.py)
        self.store.meta["cluster"] = {"GPU": float(total.get("GPU", 0.0)), "CPU": float(total.get("CPU", 0.0)),
                                      "nodes": len(nodes)}
        if self._invocation is not None:
            self._invocation["cluster"] = self.store.meta["cluster"]
        self._needs = {}
        for m in self.spec.models:
            rr = replica_resources(model_config(m, self.spec), self._cluster)
            self._needs[m.name] = (m.replicas, rr.per_node, rr.note)
            self._max_replicas[m.name] = max_replicas(m.max_replicas, m.replicas, rr.per_node, nodes)
        problems = check_capacity(self._needs, nodes)
        if problems and not self.spec.execution.wait_for_nodes:
            raise CapacityError(problems)
        for p in problems:
            log.warning("%s; waiting for the autoscaler to add such a node (execution.wait_for_nodes)", p)
        for name, (n, need, _) in self._needs.items():
            fit = at_once(need, nodes)
            if 0 < fit < n:
                log.info("model %s: %d replicas of %s, the cluster holds %d at once; the rest start as room frees "
                         "up", name, n, _fmt(need), fit)
            if self._max_replicas[name] > n:
                log.info("model %s: up to %d replicas (max_replicas %s): extra replicas start on free resources "
                         "while its queue holds more calls than its replicas take", name, self._max_replicas[name],
                         self.models[name].max_replicas)
            elif self.models[name].max_replicas is not None:
                log.info("model %s: max_replicas %s allows no extra replica: the cluster holds %d of %s at once and "
                         "the model has %d", name, self.models[name].max_replicas, fit, _fmt(need), n)
        self._ray_ready = True

    def _api_cache(self, m: ModelSpec) -> str | None:
        """An API model's answer cache: ``<run dir>/api_cache`` (created here, so a replica can tell it reaches it)."""
        if m.backend != "openai":
            return None
        path = self.store.root / CACHE_DIR
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _alive_pools(self) -> list[ModelPool]:
        return [p for p in self.pools.values() if not p.released]

    def _start_pools(self) -> None:
        limit = self.spec.execution.max_concurrent_models
        pending = [name for name in self.models if self._queues[name] and name not in self.pools]
        if not pending:
            return
        self._ensure_ray()
        # largest replica first (first-fit decreasing): small replicas asked for first can fragment the nodes
        for name in start_order({name: self._needs[name] for name in pending}):
            alive = self._alive_pools()
            if limit is not None and len(alive) >= limit:
                self._say(f"limit:{name}", f"model {name}: waits for a free slot (execution.max_concurrent_models="
                          f"{limit}; running: {', '.join(p.name for p in alive)})")
                continue
            m = self.models[name]
            load = sum(1 for p in self.history if p.name == name)
            pool = ModelPool(m, model_config(m, self.spec, self._api_cache(m)), load)
            try:
                pool.start(self._cluster)
            except Exception as exc:  # noqa: BLE001 - e.g. a placement group that can never be created
                self._model_dead(name, f"could not start replicas of model {name!r}: {type(exc).__name__}: {exc}")
                continue
            self.pools[name] = pool
            self.history.append(pool)
            for rep in pool.replicas:
                self._ping(rep)
            need = self._needs[name][1]
            log.info("model %s: %d %s replica(s) of %s requested%s", name, m.replicas, m.backend, _fmt(need),
                     f" (load {load + 1} of this model in the run)" if load else "")

    def _grow_pools(self) -> None:
        """Elastic replicas: ask for the extra replicas pools.py ``grow_replicas`` decides on, every
        GROW_EVERY_S; withdraw an extra one Ray has not placed within ELASTIC_PLACE_S; log what waits."""
        now = time.time()
        if now < self._grow_at:
            return
        self._grow_at = now + GROW_EVERY_S
        for pool in self._alive_pools():
            for rep in pool.waiting():
                if rep.elastic and now - rep.requested_at >= ELASTIC_PLACE_S and _placed(rep.handle) is False:
                    self._cancel_waiting(pool, rep, f"extra replica not placed within {ELASTIC_PLACE_S:.0f} s (the "
                                         "free resources it was asked for were taken meanwhile)")
        pools = [p for p in self._alive_pools() if self._queues[p.name]
                 and self._max_replicas.get(p.name, 0) > len(p.live())]
        if not pools:
            return
        demands, queued = {}, {}
        start_s = start_latency([r for p in self.history for r in p.replicas])
        for pool in self._alive_pools():
            queued[pool.name] = self._queued_calls(pool.name)
            demands[pool.name] = pool.demand(self._needs[pool.name][1], self._max_replicas[pool.name],
                                             *queued[pool.name], unplaced=len(pool.unplaced()), start_s=start_s,
                                             calls_in_flight=self.spec.execution.calls_in_flight)
        starting = [m for m, q in self._queues.items() if q and m not in self.pools and m not in self._dead_reason]
        growth = grow_replicas(list(demands.values()), free_per_node(), self.spec.execution.calls_in_flight,
                               starting)
        for name, node in growth.start:
            pool, d = self.pools[name], demands[name]
            live = len(pool.live())
            rep = pool.add_replica(self._cluster)
            self._ping(rep)
            log.info("model %s: extra replica %s asked for (max_replicas %d): %d call(s) queued for %d replica(s), "
                     "%.0f s of one replica's work against %.0f s to start and %.0f s to load; %s free on node %s",
                     name, rep.name, self._max_replicas[name], queued[name][0], live, d.work_s or 0.0, d.start_s,
                     d.load_s or 0.0, _fmt(self._needs[name][1]), node[:8])
        for name, why in growth.waits.items():
            self._say(f"grow:{name}", f"model {name}: {queued[name][0]} call(s) queued for "
                      f"{len(self.pools[name].live())} replica(s) (max_replicas {self._max_replicas[name]}); an extra "
                      f"replica waits: {why}")

    def _release(self, pool: ModelPool, why: str) -> None:
        if pool.released:
            return
        for ref, rep in list(self._pings.items()):
            if rep in pool.replicas:
                del self._pings[ref]
        self._settle_unreachable(pool)
        pool.release()
        self.pools.pop(pool.name, None)
        if any(r.loads for r in pool.replicas):
            log.info("model %s: released (%s)", pool.name, why)

    def _others_wait(self, name: str) -> bool:
        """Another model has queued work and no room: no pool yet, or no loaded replica and one that Ray has
        not placed for lack of resources (a replica placed and loading needs no room from anyone)."""
        for other, q in self._queues.items():
            if other == name or not q:
                continue
            pool = self.pools.get(other)
            if pool is None:
                return True
            if not pool.ready() and any(_placed(r.handle) is not True for r in pool.waiting()):
                return True
        return False

    def _release_idle(self) -> None:
        for pool in self._alive_pools():
            name = pool.name
            busy = any(f.replica.model == name for f in self._inflight.values())
            if self._queues[name] or busy:
                continue
            for rep in pool.waiting():  # nothing left to give a replica that is not loaded yet
                self._cancel_waiting(pool, rep)
            if self._plan.expects_work(name) and not self._others_wait(name):
                self._say(f"keep:{name}", f"model {name}: stays loaded; it has cross-model work to come "
                          f"({'; '.join(self._plan.waiting_for()) or 'answers of other models'})")
                continue
            self._release(pool, "its work is done" if not self._plan.expects_work(name)
                          else "other models wait for room; it is reloaded for its cross-model work")

    def _cancel_waiting(self, pool: ModelPool, rep: Replica,
                        why: str = "not needed any more (no work left for it)") -> None:
        for ref, r in list(self._pings.items()):
            if r is rep:
                del self._pings[ref]
        pool.stop_replica(rep)
        log.info("replica %s: %s; request withdrawn (%s)", rep.name, why,
                 {"loading": "it was loading its model", "waiting": "it was waiting for resources"}.get(
                     rep.withdrawn or "", "loading or waiting for resources"))

    # -- liveness: unreachable replicas, lost nodes (the decisions are liveness.py's) -----------
    def _unreachable(self) -> list[Replica]:
        """Replicas a call or a ping could not reach (a loading one whose ping is to be asked again included)."""
        return [r for p in self.pools.values() if not p.released for r in p.replicas
                if r.state == "unreachable" or (r.state == "waiting" and id(r) in self._probe_at)]

    def _on_replica_fault(self, f: _InFlight, exc: BaseException | None, err: str, fault: Fault) -> None:
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

    def _on_engine_died(self, f: _InFlight, died: Any) -> None:
        """A call failed because the replica's engine died (``actors/backend.py`` ``EngineDied``): the first report
        of an incarnation's death restarts the replica (``ray.kill`` with restart: Ray starts a new process within
        its ``max_restarts``, or gives the actor up); the call's shards go back in the queue as for an unreachable
        replica."""
        import ray  # lazy: see the module docstring

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

    def _mark_lost(self, rep: Replica, err: str) -> None:
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
        gone = [(ref, f) for ref, f in self._inflight.items() if f.replica.node_id == node.node_id]
        merged: dict[int, _InFlight] = {}  # one fault per replica (one log line), all its calls' shards
        for ref, f in gone:
            del self._inflight[ref]
            f.replica.inflight -= 1
            m = merged.setdefault(id(f.replica), _InFlight(f.replica, [], [], f.incarnation))
            m.shards += f.shards
            m.records += f.records
        for m in merged.values():
            self._on_replica_fault(m, None, f"its {node_line(node)} was lost", "unreachable")
        cancel_calls([ref for ref, _ in gone])

    def _settle_unreachable(self, pool: ModelPool) -> None:
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

    def _on_back(self, rep: Replica, ready: ReplicaReady) -> None:
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
        if not self._ray_ready:
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

    # -- log ----------------------------------------------------------------------------
    def _state(self) -> str:
        queued = {m: len(q) for m, q in self._queues.items() if q}
        pools = {p.name: [r.state for r in p.replicas] for p in self.pools.values()}
        return f"queued shards {queued}; pools {pools}; dead models {self._dead_reason}"

    def _say(self, key: str, msg: str) -> None:
        """Log ``msg`` once, and again every WAIT_LOG_SECONDS while it stays true."""
        now = time.time()
        if now - self._said.get(key, -1e18) >= WAIT_LOG_SECONDS:
            self._said[key] = now
            log.info("%s", msg)

    def _log_waiting(self) -> None:
        """Say what waits, for what: replicas not ready after WAIT_FIRST_SECONDS, and planned cross-model work."""
        now = time.time()
        for pool in self._alive_pools():
            waiting = [r for r in pool.waiting() if now - r.requested_at >= WAIT_FIRST_SECONDS]
            if not waiting or now - self._said.get(f"wait:{pool.name}", -1e18) < WAIT_LOG_SECONDS:
                continue
            need = self._needs[pool.name][1]
            placed = [_placed(r.handle) for r in waiting]
            parts = []
            if placed.count(True):
                parts.append(f"{placed.count(True)} loading the model")
            if placed.count(False):
                free = _free_resources()
                parts.append(f"{placed.count(False)} waiting for resources {_fmt(need)} each (free now: "
                             f"{_fmt({k: free.get(k, 0.0) for k in need})}; they start when other replicas release "
                             "theirs or the cluster adds a node)")
            if placed.count(None):
                parts.append(f"{placed.count(None)} waiting for resources {_fmt(need)} each or loading the model")
            self._say(f"wait:{pool.name}", f"model {pool.name}: {len(waiting)} of {len(pool.replicas)} replica(s) "
                      f"not ready after {now - min(r.requested_at for r in waiting):.0f} s: {'; '.join(parts)}")
        for f in {id(f.replica): f for f in self._inflight.values()}.values():
            rep = f.replica
            quiet = now - (rep.last_progress or now)
            if quiet >= SLOW_CALL_SECONDS:
                calls = [g for g in self._inflight.values() if g.replica is rep]
                self._say(f"slow:{rep.name}", f"replica {rep.name}: no engine call has finished for {quiet:.0f} s "
                          f"({len(calls)} call(s) in flight: {sum(len(g.shards) for g in calls)} shard(s), "
                          f"{sum(len(s.rows) for g in calls for s in g.shards)} requests); waiting for it")
        for msg in self._plan.waiting_for():
            self._say(f"plan:{msg}", msg)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s*(.*))?$")


def traceback_text(exc: BaseException) -> str:
    """The full traceback of a failure as text: a Ray error's remote traceback (its message), else Python's."""
    from ray.exceptions import RayError  # lazy: see the module docstring

    if isinstance(exc, RayError):
        return _ANSI.sub("", str(exc)).strip()
    return "".join(traceback.format_exception(exc)).strip()


def _error_text(exc: BaseException) -> str:
    """One line naming what went wrong: ``Type: message`` of the original exception.

    A Ray task error carries the original exception (``cause``); an actor whose constructor raised (a model
    that could not be loaded) carries only the remote traceback as text, whose last exception line is the
    cause (``JSONDecodeError: ...``, ``ImportError: vLLM is not installed ...``). Colour codes are removed.
    """
    cause = getattr(exc, "cause", None)
    named = cause if cause is not None and not isinstance(cause, type) else exc
    if getattr(named, "names_itself", False):  # e.g. an API request's error: "model 'm' at URL: failed after ..."
        return _ANSI.sub("", str(named)).strip().splitlines()[0]
    if cause is not None and not isinstance(cause, type):
        return _ANSI.sub("", f"{type(cause).__name__}: {cause}").strip().splitlines()[0]
    text = _ANSI.sub("", str(exc)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _EXC_LINE.match(ln)
        if m and m.group(1) != type(exc).__name__:
            detail = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
            if getattr(exc, "_actor_init_failed", False):
                return f"the replica's model load raised {detail}"
            return f"{type(exc).__name__} ({detail})"
    from ray.exceptions import RayError  # lazy: see the module docstring

    if isinstance(exc, RayError):
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return f"{type(exc).__name__}: {' '.join(lines)}"[:4000]
