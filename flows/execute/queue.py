"""The shard queue: what each model has to compute, the engine calls it is packed into, every shard's outcome.

:func:`submit` reuses a stored shard, groups a twin (same key) with the one queued, skips (``resubmit
--failed``), fails at once when the model has no replica left, or pushes the shard on its model's heap (earlier
stages first). :func:`dispatch` packs whole shards of one kind into engine calls (up to ``prompts_per_call``) for
the ready replicas; :func:`finish` and :func:`fail` record the outcomes and submit what the plan derives.
"""

from __future__ import annotations

import heapq
import logging
import re
import time
import traceback
from collections import deque

import pyarrow as pa

from confgrid.actors.calls import CallResult, EngineCall, RequestCounts
from confgrid.flows.execute.state import ExecState, InFlight, Queued
from confgrid.flows.execute.timeline import note_waiting
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import ModelSpec
from confgrid.flows.store.run_store import ShardRecord
from confgrid.flows.store.runlog import trace

__all__ = ["submit", "requeue", "dispatch", "finish", "fail", "fail_queued", "queued_calls", "note_queue",
           "prompts_per_call", "DEFAULT_VLLM_PROMPTS_PER_CALL", "error_text", "traceback_text"]

log = logging.getLogger("confgrid")

#: Requests per engine call of a vLLM replica when ``prompts_per_call`` is not set: four times vLLM's
#: default ``max_num_seqs`` (256), so the engine's scheduler always has a full batch waiting.
DEFAULT_VLLM_PROMPTS_PER_CALL = 1024


def prompts_per_call(m: ModelSpec) -> int | None:
    """Requests per engine call of ``m`` (None: one shard per call)."""
    if m.prompts_per_call is not None:
        return m.prompts_per_call
    return DEFAULT_VLLM_PROMPTS_PER_CALL if m.backend == "vllm" else None


def submit(st: ExecState, shards: list[ShardRequest]) -> None:
    """Reuse what is stored (and plan what follows from it), queue the rest per model."""
    todo = deque(shards)
    while todo:
        sh = todo.popleft()
        st.submitted.append(sh)
        if sh.key in st.done:
            st.store.reuse(sh.stage, sh.label, sh.key, **sh.grid_entries)
            todo += st.plan.on_done(sh, st.done[sh.key])
        elif sh.key in st.twins:
            st.twins[sh.key].append(sh)  # a twin: same inputs (e.g. coinciding contexts), computed once
        elif (stored := st.store.read_stored(sh.stage, sh.key)) is not None:
            st.store.reuse(sh.stage, sh.label, sh.key, **sh.grid_entries)
            table = stored.to_pandas()
            st.done[sh.key] = table
            st.counters.reused += 1
            n = st.reused_by_stage.setdefault(sh.stage, [0, 0])
            n[0] += 1
            n[1] += len(table)
            todo += st.plan.on_done(sh, table)
        elif (st.only_failed and st.store.status(sh.stage, sh.label, sh.key) != "failed"
              and not set(sh.upstream) & st.rerun):
            st.counters.skipped += 1
            todo += st.plan.on_skipped(sh)
        elif sh.model in st.dead_reason:
            rec = st.store.begin(sh.stage, sh.label, sh.key, **sh.grid_entries)
            todo += fail(st, [sh], [rec], st.dead_reason[sh.model])
        else:
            counted = [u for u in sh.upstream if u in st.bounds]
            if counted:  # counted within its generate shard's bound: take it out of the bound
                st.bounds[counted[0]] -= len(sh.rows)
                st.bar.total -= len(sh.rows)
            heapq.heappush(st.queues[sh.model], Queued(sh.rank, next(st.seq), sh))
            st.twins[sh.key] = [sh]
            bound = st.plan.downstream_bound(sh)  # its later shards, counted now: the total never grows
            st.bounds[sh.key] = bound
            st.bar.total += len(sh.rows) + bound
            st.bar.refresh()
    note_queue(st)


def requeue(st: ExecState, sh: ShardRequest) -> None:
    """Put a shard whose replica was lost back in its model's queue (its twins stay grouped under it)."""
    heapq.heappush(st.queues[sh.model], Queued(sh.rank, next(st.seq), sh))
    note_queue(st)


def note_queue(st: ExecState, closing: bool = False) -> None:
    """Keep ``meta.queued``: when some shard waited in a queue (``closing``: the invocation ends)."""
    note_waiting(st.queue_spans, any(st.queues.values()) and not closing, time.time())


def queued_calls(st: ExecState, name: str) -> tuple[int, int]:
    """Engine calls and requests in model ``name``'s queue (calls: one per shard, or shards of one kind
    packed up to its ``prompts_per_call``)."""
    q = st.queues[name]
    cap = prompts_per_call(st.models[name])
    rows: dict[tuple, int] = {}
    for item in q:
        key = item.shard.call_key() if cap is not None else id(item)
        rows[key] = rows.get(key, 0) + len(item.shard.rows)
    calls = len(q) if cap is None else sum(-(-n // cap) for n in rows.values())
    return calls, sum(rows.values())


def _next_call(st: ExecState, name: str) -> tuple[EngineCall, list[ShardRequest]] | None:
    """The next engine call of model ``name`` and the whole shards of one kind it carries, up to its
    ``prompts_per_call``."""
    q = st.queues[name]
    if not q:
        return None
    cap = prompts_per_call(st.models[name])
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
    return first.call.engine_call(first.engine_kind, tuple(s.work() for s in shards)), shards


def dispatch(st: ExecState) -> None:
    """Send each ready replica calls from its model's queue, up to ``execution.calls_in_flight`` at a time."""
    per_replica = st.spec.execution.calls_in_flight
    for pool in st.alive_pools():
        for rep in pool.ready():
            while rep.inflight < per_replica:
                nxt = _next_call(st, pool.name)
                if nxt is None:
                    break
                call, shards = nxt
                recs = []
                for sh in shards:
                    rec = st.store.begin(sh.stage, sh.label, sh.key, **sh.grid_entries)
                    rec.replica, rec.node_id, rec.node_ip = rep.name, rep.node_id or None, rep.node_ip or None
                    recs.append(rec)
                ref = rep.handle.run.remote(call)
                rep.inflight += 1
                st.inflight[ref] = InFlight(rep, shards, recs, rep.info.incarnation if rep.info else None)
    note_queue(st)


def finish(st: ExecState, f: InFlight, result: CallResult, restarted: bool) -> str | None:
    """Store the shards of a call that returned (each one's table, or its failure) and submit what the plan
    derives from them; ``restarted``: Ray ran the call again on a restarted actor (a second attempt of each).
    Returns the error of a fatal failure (the model must stop), else None."""
    new: list[ShardRequest] = []
    stop: str | None = None
    for sh, rec in zip(f.shards, f.records, strict=True):
        if restarted:
            rec.restarts += 1
            rec.attempts += 1
        counts = result.requests.get(sh.key)
        if counts is not None:  # an API model: the shard's requests, in the manifest and the run's sums
            rec.requests = counts.as_dict()
            st.counters.api.add(counts)
        if sh.key in result.failed:
            exc = result.failed[sh.key]
            if getattr(exc, "fatal", False) and stop is None:
                stop = error_text(exc)
            new += fail(st, [sh], [rec], error_text(exc))
            continue
        try:
            table = st.build(sh, result.outputs[sh.key])
            st.store.finish(rec, pa.Table.from_pandas(table, preserve_index=False))
        except Exception as exc:  # noqa: BLE001 - e.g. a disk error: recorded, never lost
            trace.error("shard %s %s: building or storing its table failed", sh.stage, sh.label, exc_info=exc)
            new += fail(st, [sh], [rec], error_text(exc), traceback_text(exc))
            continue
        st.counters.model_calls += len(sh.rows)
        st.counters.computed += 1
        st.rerun.add(sh.key)
        st.done[sh.key] = table
        _track(st, sh, rec)
        st.bar.update(len(sh.rows))
        for s in st.twins.pop(sh.key, [sh]):
            if s is not sh:
                st.store.reuse(s.stage, s.label, s.key, **s.grid_entries)
            new += st.plan.on_done(s, table)
    if restarted and any(r.restarts for r in f.records):
        log.warning("shard(s) %s went through the restart of %s (restarts recorded per shard)",
                    ", ".join(s.label for s in f.shards[:5]) + (" ..." if len(f.shards) > 5 else ""), f.replica.name)
    submit(st, new)
    _settle_bounds(st, f.shards)
    return stop


def _settle_bounds(st: ExecState, shards: list[ShardRequest]) -> None:
    """Take the unused part of finished (or failed) generate shards' bounds off the bar's total."""
    for sh in shards:
        left = st.bounds.pop(sh.key, 0)
        if left:
            st.bar.total -= left
            st.bar.refresh()


def fail(st: ExecState, shards: list[ShardRequest], records: list[ShardRecord], error: str,
         tb: str | None = None) -> list[ShardRequest]:
    """Record the shards (and their twins) as failed; returns what the plan plans from the failure (nothing).

    ``tb``, the failure's full traceback, is stored once: in the first shard's manifest record
    (``extra.traceback``); the others of the same failure name that shard.
    """
    new: list[ShardRequest] = []
    first: str | None = None
    for sh, rec in zip(shards, records, strict=True):
        for s in st.twins.pop(sh.key, [sh]):
            r = rec if s is sh else st.store.begin(s.stage, s.label, s.key, **s.grid_entries)
            if tb is not None:
                r.extra["traceback"] = tb if first is None else f"see shard {first}"
                first = first or f"{s.stage}/{s.label}"
            st.store.fail(r, error)
            _settle_bounds(st, [s])
            st.failed.append({"stage": s.stage, "setting": s.label, "key": s.key, "error": r.error,
                              "model": s.model, "dataset": s.dataset})
            log.error("shard %s %s failed: %s", s.stage, s.label, r.error)
            _track(st, s, r)
            new += st.plan.on_failed(s)
    return new


def fail_queued(st: ExecState, name: str, reason: str) -> None:
    """Every shard queued for model ``name`` (and its twins) fails with ``reason`` (the model has no replica left)."""
    queued = [q.shard for q in st.queues[name]]
    st.queues[name] = []
    api = st.models[name].backend == "openai"
    for sh in queued:
        group = st.twins.pop(sh.key, [sh])
        recs = [st.store.begin(s.stage, s.label, s.key, **s.grid_entries) for s in group]
        if api:  # requests asked for and never sent: "0 answered of N requests" counts them
            for s, rec in zip(group, recs, strict=True):
                counts = RequestCounts(requests=len(s.rows))
                rec.requests = counts.as_dict()
                st.counters.api.add(counts)
        submit(st, fail(st, group, recs, reason))
    note_queue(st)


def _track(st: ExecState, sh: ShardRequest, rec: ShardRecord) -> None:
    if st.tracker is None or not st.spec.execution.mlflow_shard_runs:
        return
    rec.mlflow_run_id = st.tracker.shard_run(
        run_id=rec.mlflow_run_id, name=f"{sh.stage} {sh.label}",
        params={"stage": sh.stage, "setting": sh.setting, "chunk": sh.chunk, "context": sh.context or "",
                "key": sh.key, "items": len(sh.rows)},
        metrics={"attempts": rec.attempts, "seconds": rec.seconds or 0.0, "rows": rec.rows or 0,
                 "restarts": rec.restarts},
        tags={"confgrid.kind": "shard", "confgrid.status": rec.status, "confgrid.key": sh.key,
              "confgrid.stage": sh.stage, "confgrid.setting": sh.setting, "confgrid.node": rec.node_ip or "",
              **({"confgrid.error": (rec.error or "")[:4000]} if rec.error else {})})


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s*(.*))?$")


def traceback_text(exc: BaseException) -> str:
    """The full traceback of a failure as text: a Ray error's remote traceback (its message), else Python's."""
    from ray.exceptions import RayError  # lazy: no Ray until a shard must be computed

    if isinstance(exc, RayError):
        return _ANSI.sub("", str(exc)).strip()
    return "".join(traceback.format_exception(exc)).strip()


def error_text(exc: BaseException) -> str:
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
    from ray.exceptions import RayError  # lazy: no Ray until a shard must be computed

    if isinstance(exc, RayError):
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return f"{type(exc).__name__}: {' '.join(lines)}"[:4000]
