"""Run a grid: items -> generate -> parse -> grade -> score -> aggregate -> metrics.

The driver expands the grid into shards: for each (model, dataset) setting the
items are cut into chunks of ``execution.shard_size``; a generate shard is one
chunk's answers, a score shard one chunk's token scores in one scoring
context. A shard's key hashes exactly the inputs it depends on (flows/store.py),
so a shard already in the store is reused: running the same grid twice makes no
model call the second time, and the log says so.

Model work runs on Ray actors, one per model replica (actors/model_actor.py);
shards of a model go only to replicas that hold it, so a model is loaded once
per replica. A shard whose call fails (the actor died, a CUDA error...) is
recorded as failed in the manifest with its error text; the other shards go on,
and the run ends with one error naming the failed shards
(:class:`ShardFailures`). ``confgrid resume OUT`` runs what is not done and
``confgrid resubmit OUT --failed`` reruns only the failed shards.

CPU stages (parse, grade, aggregate, metrics) recompute from stored tables.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import yaml
from tqdm.auto import tqdm

from confgrid import __version__
from confgrid.flows.results import setting_tables
from confgrid.flows.spec import BUNDLED, AnswerSetSpec, DatasetSpec, GridSpec, ModelSpec
from confgrid.flows.stages import (
    aggregate_scores,
    generation_requests,
    grade_answers,
    question_text,
    parse_generations,
    score_requests,
    signal_table,
)
from confgrid.flows.store import RunStore, shard_key
from confgrid.flows.tracking import Tracker, default_tracking_uri
from confgrid.protocols.contexts import get_context
from confgrid.protocols.items import Item, items_to_table
from confgrid.protocols.prompts import get_prompt

__all__ = ["RunSummary", "ShardFailures", "run_grid", "init_ray", "Shard"]

log = logging.getLogger("confgrid")


class ShardFailures(RuntimeError):
    """Some shards failed; everything else was computed and stored.

    Attributes
    ----------
    failed : list of ShardRecord-like dicts (stage, setting, key, error)
    summary : RunSummary or None
        What the run produced despite the failures.
    """

    def __init__(self, failed: list[dict[str, Any]], out_dir: Path, summary: RunSummary | None = None) -> None:
        self.failed = failed
        self.summary = summary
        lines = [f"{len(failed)} shard(s) failed; every other shard is stored in {out_dir}:"]
        lines += [f"  - {f['stage']} {f['setting']} ({f['key'][:12]}): {f['error']}" for f in failed[:20]]
        if len(failed) > 20:
            lines.append(f"  ... and {len(failed) - 20} more (see manifest.json)")
        lines.append(f"rerun only these with: confgrid resubmit {out_dir} --failed")
        super().__init__("\n".join(lines))


@dataclass
class RunSummary:
    """What a run produced."""

    out_dir: Path
    metrics: pd.DataFrame
    gaps: pd.DataFrame
    shifts: pd.DataFrame
    model_calls: int
    reused_shards: int
    computed_shards: int
    parent_run_id: str | None
    tables: dict[str, Path] = field(default_factory=dict)
    failed_shards: int = 0
    skipped_shards: int = 0


@dataclass
class Shard:
    """One unit of model work: a chunk of one setting's items in one stage (and context)."""

    stage: str  # "generate" | "score"
    model: ModelSpec
    dataset: str
    chunk: int
    key: str
    item_ids: list[str]
    payload: list[Any]
    context: str | None = None
    upstream: str | None = None  # key of the shard whose output this one consumes
    answer_set: str = "main"
    max_new_tokens: int = 32

    @property
    def setting(self) -> str:
        return f"{self.model.name}/{self.dataset}"

    @property
    def label(self) -> str:
        aset = f"[{self.answer_set}]" if self.answer_set != "main" else ""
        ctx = f"/{self.context}" if self.context else ""
        return f"{self.setting}{aset}{ctx}#{self.chunk}"


def init_ray(address: str | None) -> None:
    """Start a local Ray cluster (address None) or join an existing one."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if address:
        ray.init(address=address, **kwargs)
    elif os.environ.get("RAY_ADDRESS"):  # inside a Ray job: join the job's cluster
        ray.init(**kwargs)
    else:
        ray.init(include_dashboard=False, **kwargs)


def _model_identity(m: ModelSpec) -> dict[str, Any]:
    """The model inputs every shard key depends on (not batch size, replicas or engine limits)."""
    ident = {"model": m.model, "revision": m.revision, "backend": m.backend, "dtype": m.dtype,
             "chat_template": m.chat_template, "tensor_parallel_size": m.tensor_parallel_size}
    if m.generation_bos is not None or m.scoring_bos is not None:
        ident["bos"] = [m.generation_bos, m.scoring_bos]
    return ident


def _load_items(d: DatasetSpec) -> list[Item]:
    from confgrid.protocols.datasets import BUNDLED as BUNDLED_PATHS
    from confgrid.protocols.datasets import load_items

    path = str(BUNDLED_PATHS[d.adapter]) if d.path == BUNDLED else d.path
    kwargs = d.columns.adapter_kwargs() if d.columns is not None else {}
    try:
        items = load_items(d.adapter, path, split=d.split, limit=d.limit, seed=d.seed, dataset_name=d.name, **kwargs)
    except (FileNotFoundError, KeyError, ValueError, TypeError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise DatasetError(f"dataset {d.name!r} ({d.adapter}, {path}): {msg}") from exc
    if d.limit is not None and len(items) < d.limit:
        log.warning("dataset %s: limit %d but only %d items available; using all of them", d.name, d.limit, len(items))
    return items


class DatasetError(ValueError):
    """A dataset of the grid could not be loaded (raised before any model is loaded)."""


def _chunks(seq: list, size: int) -> list[list]:
    return [seq[i : i + size] for i in range(0, len(seq), size)] or [[]]


class _Replicas:
    """Model replicas (Ray actors), started lazily, one model at a time."""

    def __init__(self, spec: GridSpec) -> None:
        self.spec = spec
        self.model: str | None = None
        self.handles: list[Any] = []
        self.pgs: list[Any] = []
        self.provenance: dict[str, dict[str, str]] = {}

    def for_model(self, m: ModelSpec) -> list[Any]:
        import ray

        from confgrid.actors.model_actor import ModelConfig, start_replica

        if self.model == m.name and self.handles:
            return self.handles
        self.release()
        cfg = ModelConfig(
            name=m.name, model=m.model, backend=m.backend, dtype=m.dtype, revision=m.revision,
            chat_template=m.chat_template, batch_size=m.batch_size, tensor_parallel_size=m.tensor_parallel_size,
            max_num_batched_tokens=m.max_num_batched_tokens, enable_chunked_prefill=m.enable_chunked_prefill,
            enable_prefix_caching=m.enable_prefix_caching, gpu_memory_utilization=m.gpu_memory_utilization,
            max_retries=self.spec.execution.max_retries, generation_bos=m.generation_bos, scoring_bos=m.scoring_bos,
        )
        for r in range(m.replicas):
            h, pg = start_replica(cfg, r)
            self.handles.append(h)
            self.pgs.append(pg)
        log.info("model %s: %d %s replica(s) loading", m.name, m.replicas, m.backend)
        infos = ray.get([h.ping.remote() for h in self.handles])
        self.provenance[m.name] = {k: v for k, v in infos[0].items() if k != "pid"}
        self.model = m.name
        return self.handles

    def drop(self, handle: Any) -> None:
        if handle in self.handles:
            self.handles.remove(handle)

    def release(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for h in self.handles:
            try:
                ray.kill(h)
            except Exception:  # noqa: BLE001 - already dead
                pass
        for pg in self.pgs:
            if pg is not None:
                remove_placement_group(pg)
        self.handles, self.pgs, self.model = [], [], None


class _Executor:
    """Runs shards on a model's replicas; records every outcome in the store."""

    def __init__(self, spec: GridSpec, store: RunStore, tracker: Tracker | None, address: str | None,
                 only_failed: bool, counter: dict[str, int]) -> None:
        self.spec, self.store, self.tracker = spec, store, tracker
        self.address, self.only_failed, self.counter = address, only_failed, counter
        self.replicas: _Replicas | None = None
        self.failed: list[dict[str, Any]] = []
        self.rerun: set[str] = set()  # keys computed in this invocation

    def _replicas(self) -> _Replicas:
        if self.replicas is None:
            init_ray(self.address)
            self.replicas = _Replicas(self.spec)
        return self.replicas

    def run(self, shards: list[Shard], build: Callable[[Shard, list[dict[str, Any]]], pd.DataFrame],
            desc: str) -> dict[str, pd.DataFrame]:
        """Run the shards not in the store; returns key -> table for every shard that is done."""
        done: dict[str, pd.DataFrame] = {}
        todo: list[Shard] = []
        queued: set[str] = set()
        twins: list[Shard] = []  # shards whose key another shard of this call computes (e.g. coinciding contexts)
        for sh in shards:
            if sh.key in queued:
                twins.append(sh)
            elif self.store.has_shard(sh.stage, sh.key):
                self.store.reuse(sh.stage, sh.label, sh.key)
                self.counter["reused"] += 1
                done[sh.key] = self.store.read_shard(sh.stage, sh.key).to_pandas()
            elif (self.only_failed and self.store.status(sh.stage, sh.label, sh.key) != "failed"
                  and sh.upstream not in self.rerun):
                # --failed: run failed shards and what depends on a shard rerun now; leave the rest
                self.counter["skipped"] += 1
            else:
                todo.append(sh)
                queued.add(sh.key)
        n_reused = len(done)
        if n_reused:
            log.info("%s: reusing %d stored shard(s) (%d rows); no model call for them",
                     desc, n_reused, sum(len(t) for t in done.values()))
        if todo:
            self._run_todo(todo, build, desc, done)
        for sh in twins:
            if sh.key in done:
                self.store.reuse(sh.stage, sh.label, sh.key)
        return done

    def _run_todo(self, todo: list[Shard], build, desc: str, done: dict[str, pd.DataFrame]) -> None:
        import ray
        from ray.exceptions import RayActorError, RayError

        by_model: dict[str, list[Shard]] = {}
        for sh in todo:
            by_model.setdefault(sh.model.name, []).append(sh)
        for shards_m in by_model.values():
            m = shards_m[0].model
            try:
                handles = self._replicas().for_model(m)
            except Exception as exc:  # the model could not be loaded: every shard of it fails
                for sh in shards_m:
                    rec = self.store.begin(sh.stage, sh.label, sh.key)
                    self._fail(sh, rec, exc)
                continue
            queue = deque(shards_m)
            inflight: dict[Any, tuple[Shard, Any, Any]] = {}
            turn = 0
            total = sum(len(s.payload) for s in shards_m)
            with tqdm(total=total, desc=f"{desc} {m.name}", unit="q", leave=False) as bar:
                while queue or inflight:
                    # keep two calls queued per live replica so replicas never idle
                    while queue and handles and len(inflight) < 2 * len(handles):
                        sh = queue.popleft()
                        h = handles[turn % len(handles)]  # round-robin over the replicas holding this model
                        turn += 1
                        rec = self.store.begin(sh.stage, sh.label, sh.key)
                        if sh.stage == "generate":
                            ref = h.generate.remote(sh.payload, sh.max_new_tokens)
                        elif sh.stage == "probe":
                            ref = h.generate.remote([p[0] for p in sh.payload], sh.max_new_tokens,
                                                    [p[1] for p in sh.payload])
                        else:
                            ref = h.score.remote(sh.payload)
                        inflight[ref] = (sh, rec, h)
                    if not inflight:  # no live replica left: the rest fail
                        for sh in queue:
                            rec = self.store.begin(sh.stage, sh.label, sh.key)
                            self._fail(sh, rec, RuntimeError(f"no live replica of model {m.name!r}"))
                        queue.clear()
                        break
                    ready, _ = ray.wait(list(inflight), num_returns=1)
                    ref = ready[0]
                    sh, rec, h = inflight.pop(ref)
                    try:
                        outs = ray.get(ref)
                        table = build(sh, outs)
                    except RayActorError as exc:
                        self._fail(sh, rec, exc)
                        self._replicas().drop(h)
                        handles = self._replicas().handles
                        continue
                    except (RayError, Exception) as exc:  # noqa: BLE001 - recorded, never lost
                        self._fail(sh, rec, exc)
                        continue
                    self.store.finish(rec, pa.Table.from_pandas(table, preserve_index=False))
                    self.counter["model_calls"] += len(outs)
                    self.counter["computed"] += 1
                    self._track(sh, rec)
                    self.rerun.add(sh.key)
                    done[sh.key] = table
                    bar.update(len(sh.payload))

    def _fail(self, sh: Shard, rec: Any, exc: BaseException) -> None:
        self.store.fail(rec, exc)
        self.failed.append({"stage": sh.stage, "setting": sh.label, "key": sh.key, "error": rec.error})
        log.error("shard %s %s failed: %s", sh.stage, sh.label, rec.error)
        self._track(sh, rec)

    def _track(self, sh: Shard, rec: Any) -> None:
        if self.tracker is None:
            return
        rec.mlflow_run_id = self.tracker.shard_run(
            run_id=rec.mlflow_run_id, name=f"{sh.stage} {sh.label}",
            params={"stage": sh.stage, "setting": sh.setting, "chunk": sh.chunk, "context": sh.context or "",
                    "key": sh.key, "items": len(sh.item_ids)},
            metrics={"attempts": rec.attempts, "seconds": rec.seconds or 0.0, "rows": rec.rows or 0},
            tags={"confgrid.kind": "shard", "confgrid.status": rec.status, "confgrid.key": sh.key,
                  "confgrid.stage": sh.stage, "confgrid.setting": sh.setting,
                  **({"confgrid.error": (rec.error or "")[:4000]} if rec.error else {})},
        )
        self.store.save_manifest()

    def close(self) -> None:
        if self.replicas is not None:
            self.replicas.release()


def run_grid(
    spec: GridSpec,
    out_dir: str | Path,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    grid_text: str | None = None,
    only_failed: bool = False,
    resume: bool = False,
) -> RunSummary:
    """Execute a validated grid and write every table, result and MLflow run.

    Parameters
    ----------
    spec : GridSpec
        A validated grid (flows/spec.py); validation has already happened, so
        nothing here fails on a bad field before a model is loaded.
    out_dir : path
        Output directory; created if missing. Reusing a directory reuses
        every stored shard whose key still matches.
    address : str, optional
        Ray cluster address; None starts a local cluster.
    tracking_uri : str, optional
        MLflow tracking URI; default ``sqlite:///<out_dir>/mlflow.db``.
    grid_text : str, optional
        The grid file's text, stored as ``OUT/grid.yaml`` for resume.
    only_failed : bool
        Rerun only shards the manifest records as failed (``resubmit --failed``).
    resume : bool
        Continue the MLflow parent run recorded in the manifest.

    Returns
    -------
    RunSummary

    Raises
    ------
    ShardFailures
        After every other shard ran, if any shard failed (its error is in the
        manifest and in MLflow); ``.summary`` holds what was produced.
    """
    t0 = time.time()
    store = RunStore(out_dir)
    grid_path = store.root / "grid.yaml"
    if grid_text is not None and grid_path.exists() and grid_path.read_text(encoding="utf-8") != grid_text:
        log.warning("%s holds another grid; it is replaced (shards whose inputs are unchanged are still reused)",
                    store.root)
    if grid_text is not None or not grid_path.exists():
        grid_path.write_text(
            grid_text if grid_text is not None else yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False),
            encoding="utf-8",
        )
    counter = {"model_calls": 0, "reused": 0, "computed": 0, "skipped": 0}
    # every dataset is loaded before any model, Ray or MLflow is touched: a bad file fails here
    items = {d.name: _load_items(d) for d in spec.datasets}
    tracking_uri = tracking_uri or store.meta.get("tracking_uri") or default_tracking_uri(store.root)
    tracker = Tracker(tracking_uri, experiment=f"confgrid/{spec.name}")
    parent_id = store.meta.get("mlflow_parent_run_id") if (resume or only_failed) else None
    parent_id = tracker.open_parent(run_id=parent_id, run_name=spec.name, params=_axes(spec),
                                    tags={"confgrid.kind": "grid"})
    store.meta.update({"mlflow_parent_run_id": parent_id, "tracking_uri": tracking_uri})
    store.save_manifest()
    ex = _Executor(spec, store, tracker, address, only_failed, counter)
    try:
        summary = _run(spec, store, ex, counter, items)
        summary.parent_run_id = parent_id
        try:
            _log_results(spec, store, tracker, summary, ex, counter, time.time() - t0)
        except Exception as exc:  # noqa: BLE001 - results are on disk already; say so and go on
            log.error("MLflow logging failed (%s: %s); every result is in %s", type(exc).__name__, exc, store.root)
    finally:
        ex.close()
        tracker.close_parent(status="FAILED" if ex.failed else "FINISHED")
    log.info("done in %.1f s: %d model calls, %d shards computed, %d reused, %d failed",
             time.time() - t0, counter["model_calls"], counter["computed"], counter["reused"], len(ex.failed))
    if counter["skipped"]:
        log.warning("%d shard(s) not run (not failed, not done): run `confgrid resume %s`", counter["skipped"], store.root)
    if ex.failed:
        raise ShardFailures(ex.failed, store.root, summary)
    return summary


def _set_items(a: AnswerSetSpec, its: list[Item]) -> list[Item]:
    """The items an answer set asks: all for open sets; items with options (shuffled if asked) for mc."""
    if a.format == "open":
        return its
    from confgrid.protocols.mc import shuffle_options

    with_opts = [i for i in its if i.options]
    return [shuffle_options(i, a.shuffle_seed) for i in with_opts] if a.shuffle_options else with_opts


def _run(spec: GridSpec, store: RunStore, ex: _Executor, counter: dict[str, int],
         items: dict[str, list[Item]]) -> RunSummary:
    size = spec.execution.shard_size
    items_tables = []
    for d in spec.datasets:
        its = items[d.name]
        key = shard_key("items", {"dataset": d.model_dump(mode="json"), "ids": [i.item_id for i in its]})
        tbl = items_to_table(its)
        if store.has_shard("items", key):
            store.reuse("items", d.name, key)
        else:
            store.finish(store.begin("items", d.name, key), tbl)
        items_tables.append(tbl)
        log.info("dataset %s: %d items", d.name, len(its))
    tables: dict[str, Path] = {"items": store.write_table("items", items_tables)}
    sets = spec.all_answer_sets()
    set_items = {(a.id, d.name): _set_items(a, items[d.name]) for a in sets for d in spec.datasets}
    for a in sets:
        for d in spec.datasets:
            if not set_items[(a.id, d.name)]:
                log.warning("answer set %s: dataset %s has no items with options; skipped", a.id, d.name)

    # generate: one shard per (model, answer set, dataset, chunk of items)
    gen_shards: list[Shard] = []
    for m in spec.models:
        ident = _model_identity(m)
        for a in sets:
            prompt = get_prompt(a.prompt)
            for d in spec.datasets:
                for c, chunk in enumerate(_chunks(set_items[(a.id, d.name)], size)):
                    if not chunk:
                        continue
                    texts = generation_requests(chunk, a.prompt, a.format)
                    key = shard_key("generate", {"model": ident, "prompt": prompt.template, "prompt_id": prompt.id,
                                                 "format": a.format, "max_new_tokens": a.new_tokens,
                                                 "decoding": "greedy",
                                                 "items": [(i.item_id, t) for i, t in zip(chunk, texts, strict=True)]})
                    gen_shards.append(Shard("generate", m, d.name, c, key, [i.item_id for i in chunk], texts,
                                            answer_set=a.id, max_new_tokens=a.new_tokens))
    set_of = {a.id: a for a in sets}

    def build_gen(sh: Shard, outs: list[dict[str, Any]]) -> pd.DataFrame:
        return pd.DataFrame({
            "model": sh.model.name, "dataset": sh.dataset, "answer_set": sh.answer_set, "item_id": sh.item_ids,
            "prompt_id": set_of[sh.answer_set].prompt, "sample_idx": 0, "chunk": sh.chunk,
            "raw_output": [o["text"] for o in outs], "finish_reason": [o["finish_reason"] for o in outs],
            "n_new_tokens": [o["n_tokens"] for o in outs],
        })

    gens = ex.run(gen_shards, build_gen, "generate")

    # parse + grade (pure, from stored answers), then score shards per context and chunk
    graded_by_key: dict[str, pd.DataFrame] = {}
    score_shards: list[Shard] = []
    for sh in gen_shards:
        if sh.key not in gens:
            continue
        a = set_of[sh.answer_set]
        its = set_items[(a.id, sh.dataset)]
        rules = tuple(dict.fromkeys((*spec.correctness.rules, *a.analysis_rules(spec.correctness.rules))))
        graded = grade_answers(parse_generations(gens[sh.key], a.prompt), its, rules,
                               a.analysis_rules(spec.correctness.rules)[0] if a.format == "mc" else spec.correctness.primary)
        graded_by_key[sh.key] = graded
        ident = _model_identity(sh.model)
        q = {i.item_id: i.question for i in its}
        for ctx_id in a.scoring_contexts(spec.scoring.contexts):
            ctx = get_context(ctx_id)
            ids, reqs = score_requests(graded, its, ctx_id)
            if not reqs:
                continue
            key = shard_key("score", {"model": ident, "context": [ctx.user_prompt, get_prompt(ctx.user_prompt).template,
                                                                  ctx.assistant_prefix, ctx.separator, ctx.item_format],
                                      "requests": [(i, q[i], r[0], r[3]) for i, r in zip(ids, reqs, strict=True)]})
            score_shards.append(Shard("score", sh.model, sh.dataset, sh.chunk, key, ids, reqs, context=ctx_id,
                                      upstream=sh.key, answer_set=a.id))

    def build_score(sh: Shard, outs: list[dict[str, Any]]) -> pd.DataFrame:
        return pd.DataFrame({
            "model": sh.model.name, "dataset": sh.dataset, "answer_set": sh.answer_set, "item_id": sh.item_ids,
            "context_id": sh.context, "chunk": sh.chunk, "answer_source": "generated",
            "answer": [r[3] for r in sh.payload],
            "logprobs": [o["logprobs"] for o in outs], "answer_token_ids": [o["answer_token_ids"] for o in outs],
            "n_tokens": [len(o["logprobs"]) for o in outs], "context_tokens": [o["context_tokens"] for o in outs],
            "backend": sh.model.backend, "dtype": sh.model.dtype,
        })

    scores = ex.run(score_shards, build_score, "score")

    # supplied-answer probe: the verbalized score of sets without one, and the probe study on the main set
    probe_shards = _probe_shards(spec, sets, set_items, items, gen_shards, graded_by_key)

    def build_probe(sh: Shard, outs: list[dict[str, Any]]) -> pd.DataFrame:
        from confgrid.protocols.probe import parse_probe_output

        parsed = [parse_probe_output(o["text"], r[3], r[4]) for o, r in zip(outs, sh.payload, strict=True)]
        return pd.DataFrame({
            "model": sh.model.name, "dataset": sh.dataset, "answer_set": sh.answer_set, "item_id": sh.item_ids,
            "kind": [r[2] for r in sh.payload], "answer": [r[3] for r in sh.payload],
            "source": [r[5] for r in sh.payload], "raw_output": [o["text"] for o in outs],
            "verbalized": pd.array([p.verbalized for p in parsed], dtype="Float64"),
            "parse_status": [p.status for p in parsed], "used_fallback": [bool(p.used_fallback) for p in parsed],
        })

    probes = ex.run(probe_shards, build_probe, "probe")
    store.save_manifest()

    # assemble per (model, dataset, answer set); a unit with any missing shard gets no metrics
    stage_tables: dict[str, list[pa.Table]] = {k: [] for k in ("generations", "graded", "scores", "probe", "signals")}
    units: dict[tuple[str, str, str], dict[str, Any]] = {}
    for m in spec.models:
        for d in spec.datasets:
            for a in sets:
                g_sh = [s for s in gen_shards if s.model.name == m.name and s.dataset == d.name and s.answer_set == a.id]
                if not g_sh:
                    continue
                s_sh = [s for s in score_shards if s.model.name == m.name and s.dataset == d.name and s.answer_set == a.id]
                p_sh = [s for s in probe_shards if s.model.name == m.name and s.dataset == d.name and s.answer_set == a.id]
                for s in g_sh:
                    if s.key in gens:
                        stage_tables["generations"].append(pa.Table.from_pandas(gens[s.key], preserve_index=False))
                        stage_tables["graded"].append(pa.Table.from_pandas(graded_by_key[s.key], preserve_index=False))
                probe_df = pd.concat([probes[s.key].assign(answer_set=s.answer_set) for s in p_sh if s.key in probes],
                                     ignore_index=True) if p_sh and any(s.key in probes for s in p_sh) else None
                if probe_df is not None and len(probe_df):
                    stage_tables["probe"].append(pa.Table.from_pandas(probe_df, preserve_index=False))
                complete = all(s.key in gens for s in g_sh) and all(s.key in scores for s in s_sh) and all(
                    s.key in probes for s in p_sh)
                if not complete:
                    log.warning("%s/%s [%s]: some shards are missing; no metrics for it", m.name, d.name, a.id)
                    continue
                graded = pd.concat([graded_by_key[s.key] for s in g_sh], ignore_index=True)
                if a.verbalized_source() == "probe":
                    graded = _verbalized_from_probe(graded, probe_df)
                sc = [scores[s.key].assign(context_id=s.context, answer_set=s.answer_set) for s in s_sh]
                sc_df = pd.concat(sc, ignore_index=True) if sc else pd.DataFrame(
                    columns=["model", "dataset", "item_id", "context_id", "logprobs"])
                tokens = aggregate_scores(sc_df, spec.scoring.aggregations)
                if len(tokens):
                    stage_tables["scores"].append(pa.Table.from_pandas(tokens, preserve_index=False))
                units[(m.name, d.name, a.id)] = {"graded": graded, "tokens": tokens, "set": a, "probe": probe_df}
    for name, tl in stage_tables.items():
        tables[name] = store.write_table(name, tl)

    # metrics with paired bootstrap intervals, per (setting, answer set, parse policy, correctness rule)
    mets, gaps, shifts, sig_frames, settings_rows = [], [], [], [], []
    groups: dict[tuple[str, str, str], dict[str, tuple[Any, list[str]]]] = {}
    import warnings

    from confgrid.analysis.metrics import UndefinedMetricWarning

    with warnings.catch_warnings(record=True) as undefined:
        warnings.simplefilter("always", UndefinedMetricWarning)
        for (mname, dname, aid), u in tqdm(units.items(), desc="bootstrap", unit="unit", leave=False):
            a = u["set"]
            ctxs = a.scoring_contexts(spec.scoring.contexts)
            for policy in spec.parsing.policies:
                for rule in a.analysis_rules(spec.correctness.rules):
                    sig, dropped = signal_table(u["graded"], u["tokens"], ctxs, aggregations=spec.scoring.aggregations,
                                                policy=policy, rule=rule,
                                                verbalized=a.verbalized_source() != "none")
                    group = {"answer_set": aid, "parse_policy": policy, "rule": rule}
                    settings_rows.append(_settings_row(mname, dname, u["graded"], sig, dropped, group))
                    if sig.empty:
                        continue
                    sig_frames.append(sig.assign(setting=f"{mname}/{dname}", model=mname, dataset=dname, **group))
                    out = setting_tables(sig, model=mname, dataset=dname, metrics=spec.metrics.names,
                                         n_bins=spec.metrics.ece_bins, n_resamples=spec.bootstrap.resamples,
                                         base_seed=spec.bootstrap.seed, level=spec.bootstrap.level,
                                         use_ray=spec.execution.bootstrap_backend == "ray_data",
                                         num_workers=spec.execution.bootstrap_workers,
                                         pairs=_shift_pairs(ctxs, spec.scoring.aggregations))
                    for df, acc in zip(out[:3], (mets, gaps, shifts), strict=True):
                        if len(df):
                            acc.append(_with_group(df, group))
                    groups.setdefault((aid, policy, rule), {})[f"{mname}/{dname}"] = (out[3], list(out[3].signal_names))
    _log_undefined(undefined)
    if sig_frames:
        tables["signals"] = store.write_table("signals", [pa.Table.from_pandas(f, preserve_index=False) for f in sig_frames])
    metrics_df = pd.concat(mets, ignore_index=True) if mets else pd.DataFrame()
    gaps_df = pd.concat(gaps, ignore_index=True) if gaps else pd.DataFrame()
    shifts_df = pd.concat(shifts, ignore_index=True) if shifts else pd.DataFrame()
    settings_df = pd.DataFrame(settings_rows)
    res_dir = store.root / "results"
    res_dir.mkdir(exist_ok=True)
    outputs = {"metrics": metrics_df, "gaps": gaps_df, "shifts": shifts_df, "settings": settings_df}
    outputs.update(_study_tables(spec, units, groups, metrics_df, gaps_df))
    p = _primary(spec)
    main_frames = {f"{f['model'].iloc[0]}/{f['dataset'].iloc[0]}": f for f in sig_frames
                   if len(f) and f["answer_set"].iloc[0] == p["answer_set"] and f["parse_policy"].iloc[0] == p["parse_policy"]
                   and f["rule"].iloc[0] == p["rule"]}
    if {"bare", "guess_slot"} <= set(spec.scoring.contexts) and main_frames:
        from confgrid.flows.report import transfer_tables

        try:
            pen, ttab = transfer_tables(main_frames, "guess_slot", "bare", spec.bootstrap.seed)
            if len(pen):
                outputs["transfer_penalties"], outputs["transfer"] = pen, ttab
        except Exception as exc:  # noqa: BLE001 - a view of the data; never lose the run for it
            log.warning("calibration transfer not computed: %s: %s", type(exc).__name__, exc)
    from confgrid.analysis.tables import format_table, to_markdown

    for name, df in outputs.items():
        df.to_csv(res_dir / f"{name}.csv", index=False)
        df.to_parquet(res_dir / f"{name}.parquet", index=False)
        if name.startswith(("table", "transfer", "selection")) and len(df):
            (res_dir / f"{name}.md").write_text(to_markdown(format_table(df)), encoding="utf-8")
    _write_checklist(spec, store, ex, units, settings_df)
    primary = _primary(spec)
    (res_dir / "primary.json").write_text(json.dumps({**primary, "aggregation": spec.scoring.aggregations[0]}),
                                          encoding="utf-8")
    (res_dir / "report.md").write_text(
        render_markdown(_select(metrics_df, primary), _select(gaps_df, primary), _select(shifts_df, primary),
                        _select(settings_df, primary)), encoding="utf-8")
    return RunSummary(store.root, metrics_df, gaps_df, shifts_df, counter["model_calls"], counter["reused"],
                      counter["computed"], None, tables, len(ex.failed), counter["skipped"])


def _study_tables(spec: GridSpec, units, groups, metrics_df: pd.DataFrame, gaps_df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Study 000's tables for this run (flows/report.py); a table fails soft, with a log line."""
    from confgrid.flows.report import probe_table, study_tables

    out: dict[str, pd.DataFrame] = {}
    p = _primary(spec)
    try:
        if not metrics_df.empty:
            out.update(study_tables(groups, (p["answer_set"], p["parse_policy"], p["rule"]), metrics_df, gaps_df,
                                    spec.scoring.contexts, spec.scoring.aggregations, spec.metrics.names,
                                    spec.bootstrap.level))
    except Exception as exc:  # noqa: BLE001 - the tables are a view; never lose the run for them
        log.warning("study tables not built: %s: %s", type(exc).__name__, exc)
    from confgrid.flows.report import selection_table

    for a in spec.answer_sets:
        if a.format == "open" and a.verbalized_source() == "probe":
            sel = selection_table(units, a.id, spec.bootstrap.seed, spec.bootstrap.resamples, spec.bootstrap.level)
            if len(sel):
                out[f"selection_{a.id}"] = sel
    probes = [u["probe"] for (m, d, a), u in units.items() if a == "main" and u["probe"] is not None]
    if spec.probe.enabled and probes:
        graded = pd.concat([u["graded"] for (m, d, a), u in units.items() if a == "main"], ignore_index=True)
        tbl, pairs = probe_table(pd.concat(probes, ignore_index=True), graded, spec.probe.resamples, spec.probe.seed,
                                 spec.bootstrap.level)
        out["table17_probe"] = tbl
        out["probe_pairs"] = pairs
    return out


def _write_checklist(spec: GridSpec, store: RunStore, ex: _Executor, units, settings_df: pd.DataFrame) -> None:
    """The reporting checklist (study 000 Table 5) of every (model, dataset, answer set)."""
    from confgrid.flows.report import write_checklist
    from confgrid.protocols.checklist import build_checklist

    prov = ex.replicas.provenance if ex.replicas else {}
    models = {m.name: m for m in spec.models}
    entries = []
    for (mname, dname, aid), u in units.items():
        a, m = u["set"], models[mname]
        st = settings_df[(settings_df["setting"] == f"{mname}/{dname}") & (settings_df["answer_set"] == aid)
                         & (settings_df["parse_policy"] == spec.parsing.policies[0])
                         & (settings_df["rule"] == spec.correctness.primary)]
        dropped = {}
        if len(st) and st["dropped"].iloc[0]:
            dropped = {k: int(v) for k, v in (x.split("=") for x in st["dropped"].iloc[0].split("; "))}
        try:
            entries.append(build_checklist(
                model=f"{mname} ({m.model}, revision {m.revision or 'default'})", dataset=dname,
                use_chat_template=m.chat_template,
                decoding={"method": "greedy", "max_new_tokens": a.new_tokens, "backend": m.backend, "dtype": m.dtype},
                elicitation_prompt=a.prompt, token_contexts=a.scoring_contexts(spec.scoring.contexts),
                aggregation=spec.scoring.aggregations[0], correctness_rule=spec.correctness.primary,
                ece_estimator="ece", n_bins=spec.metrics.ece_bins, parse_policy=spec.parsing.policies[0],
                system_prompt=prov.get(mname, {}).get("system_prompt"),
                rows_total=len(u["graded"]), rows_dropped=dropped,
                extra={"answer_set": aid, "answer_format": a.format, "verbalized_source": a.verbalized_source(),
                       "aggregations": list(spec.scoring.aggregations), "rules": list(spec.correctness.rules),
                       "parse_policies": list(spec.parsing.policies), "metrics": list(spec.metrics.names),
                       "bootstrap": spec.bootstrap.model_dump(), "provenance": prov.get(mname, {})},
            ))
        except Exception as exc:  # noqa: BLE001 - recorded, never lose the run for it
            log.warning("checklist for %s/%s [%s] not built: %s", mname, dname, aid, exc)
    write_checklist(store.root, entries)


def _log_undefined(caught: list) -> None:
    """One log line per kind of undefined metric (NaN, never 0) instead of a warning per point estimate."""
    from collections import Counter

    from confgrid.analysis.metrics import UndefinedMetricWarning

    import re

    kinds = Counter(re.sub(r"\s*\([^)]*\)", "", str(w.message)).split(";")[0]
                    for w in caught if issubclass(w.category, UndefinedMetricWarning))
    for msg, n in kinds.most_common():
        log.warning("%s (%d point estimate(s); reported as NaN)", msg, n)


def _primary(spec: GridSpec) -> dict[str, str]:
    """The main protocol: the main answer set, the first parse policy, the primary rule."""
    return {"answer_set": "main", "parse_policy": spec.parsing.policies[0], "rule": spec.correctness.primary}


def _select(df: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    if df.empty:
        return df
    mask = pd.Series(True, index=df.index)
    for k, v in group.items():
        if k in df.columns:
            mask &= df[k] == v
    return df[mask].reset_index(drop=True)


def _with_group(df: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    out = df.copy()
    for i, (k, v) in enumerate(group.items()):
        out.insert(3 + i, k, v)
    return out


def _shift_pairs(contexts: tuple[str, ...], aggregations: tuple[str, ...]) -> list[tuple[str, str]]:
    """Signal pairs whose gap shift is reported: every pair of contexts under the primary aggregation,
    and each other aggregation against the primary one in the same context."""
    import itertools

    from confgrid.flows.stages import token_signal

    prim = aggregations[0]
    pairs = [(token_signal(a, prim, prim), token_signal(b, prim, prim)) for a, b in itertools.combinations(contexts, 2)]
    pairs += [(token_signal(c, prim, prim), token_signal(c, agg, prim)) for c in contexts for agg in aggregations[1:]]
    return pairs


def _verbalized_from_probe(graded: pd.DataFrame, probe: pd.DataFrame | None) -> pd.DataFrame:
    """For a set without a stated score: the verbalized score of the answer re-supplied (kind ``own``)."""
    out = graded.copy()
    own = probe[probe["kind"] == "own"].set_index("item_id") if probe is not None and len(probe) else None
    if own is None:
        out["verbalized"] = pd.array([None] * len(out), dtype="Float64")
        out["parse_status"] = out["parse_status"].where(out["answer"].isna(), "missing_confidence")
        return out
    out["verbalized"] = out["item_id"].map(own["verbalized"]).astype("Float64")
    st = out["item_id"].map(own["parse_status"])
    has_answer = out["answer"].notna() & (out["answer"].astype(str).str.strip() != "")
    out["parse_status"] = st.where(has_answer, "missing_answer").fillna("missing_confidence")
    out["used_fallback"] = out["item_id"].map(own["used_fallback"]).fillna(False).astype(bool)
    out["verbalized_source"] = "probe"
    return out


def _probe_shards(spec, sets, set_items, items, gen_shards, graded_by_key) -> list[Shard]:
    """Probe requests: (1) sets whose verbalized score comes from the probe get their own answers
    re-supplied; (2) with probe.enabled, the main set gets every supplied kind (Table 17)."""
    from confgrid.protocols.probe import probe_request, supplied_answers

    graded_all: dict[tuple[str, str, str], pd.DataFrame] = {}
    for sh in gen_shards:
        if sh.key in graded_by_key:
            graded_all.setdefault((sh.model.name, sh.dataset, sh.answer_set), []).append(graded_by_key[sh.key])
    graded_all = {k: pd.concat(v, ignore_index=True) for k, v in graded_all.items()}
    shards: list[Shard] = []
    conf_prompt = spec.elicitation.prompt
    for a in sets:
        study = a.id == "main" and spec.probe.enabled
        if a.verbalized_source() != "probe" and not study:
            continue
        probe_prompt = "mc_confidence" if a.format == "mc" else conf_prompt
        for m in spec.models:
            ident = _model_identity(m)
            for d in spec.datasets:
                g = graded_all.get((m.name, d.name, a.id))
                if g is None:
                    continue
                its = set_items[(a.id, d.name)]
                by_id = {i.item_id: i for i in its}
                others = {o.name: graded_all.get((o.name, d.name, a.id)) for o in spec.models if o.name != m.name}
                others = {k: v.set_index("item_id") for k, v in others.items() if v is not None}
                reqs = []
                for item_id, ans in zip(g["item_id"], g["answer"], strict=True):
                    item = by_id[item_id]
                    own = ans if isinstance(ans, str) and ans.strip() else None
                    if study:
                        oth = {k: (v.at[item_id, "answer"], v.at[item_id, "correct"]) for k, v in others.items()
                               if item_id in v.index}
                        sup = supplied_answers(item, own, oth, spec.probe.seed, items[d.name], kinds=spec.probe.kinds)
                    else:
                        from confgrid.protocols.probe import Supplied

                        sup = [Supplied("own", own)] if own else []
                    question = question_text(item, a.format)
                    for s_ in sup:
                        r = probe_request(question, s_.answer, probe_prompt)
                        reqs.append((item_id, r, s_.kind, s_.answer, probe_prompt, s_.source or ""))
                for c, chunk in enumerate(_chunks(reqs, spec.execution.shard_size * 4)):
                    if not chunk:
                        continue
                    key = shard_key("probe", {"model": ident, "prompt": get_prompt(probe_prompt).template,
                                              "requests": [(x[0], x[1].user_text, x[1].assistant_prefix) for x in chunk]})
                    payload = [(x[1].user_text, x[1].assistant_prefix, x[2], x[3], x[4], x[5]) for x in chunk]
                    shards.append(Shard("probe", m, d.name, c, key, [x[0] for x in chunk], payload,
                                        answer_set=a.id, max_new_tokens=chunk[0][1].max_new_tokens,
                                        upstream=None))
    return shards


def _settings_row(m: str, d: str, g: pd.DataFrame, sig: pd.DataFrame, dropped: dict[str, int],
                  group: dict[str, str]) -> dict[str, Any]:
    ok = g["parse_status"] == "ok"
    corr = g[f"correct_{group['rule']}"]
    return {
        "setting": f"{m}/{d}", "model": m, "dataset": d, **group, "items": len(g),
        "parse_rate": float(ok.mean()) if len(g) else float("nan"),
        "accuracy": float(corr[ok].mean()) if ok.any() else float("nan"),
        "n_analyzed": int(sig["item_id"].nunique()) if not sig.empty else 0,
        "used_fallback": int(g["used_fallback"].sum()),
        "dropped": "; ".join(f"{k}={v}" for k, v in sorted(dropped.items())),
    }


def _fmt(p: float, lo: float, hi: float) -> str:
    if pd.isna(p):
        return "NaN"
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}]"


def result_matrix(metrics_df: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per (setting, signal), one column per metric, 'point [lo, hi]'."""
    if metrics_df.empty:
        return pd.DataFrame()
    df = metrics_df.assign(value=[_fmt(p, lo, hi) for p, lo, hi in zip(metrics_df["point"], metrics_df["lo"], metrics_df["hi"], strict=True)])
    wide = df.pivot_table(index=["setting", "signal"], columns="metric", values="value", aggfunc="first", sort=False)
    cols = list(dict.fromkeys(metrics_df["metric"]))
    return wide[cols].reset_index()


def render_markdown(metrics_df, gaps_df, shifts_df, settings_df) -> str:
    """The results as a Markdown report (results/report.md)."""
    from confgrid.analysis.tables import to_markdown

    parts = ["# confgrid results", ""]
    if not settings_df.empty:
        parts += ["## Settings", "", to_markdown(settings_df), ""]
    wide = result_matrix(metrics_df)
    if not wide.empty:
        parts += ["## Metrics (point [95% paired bootstrap interval])", "", to_markdown(wide), ""]
    if not gaps_df.empty:
        g = gaps_df.assign(g=[_fmt(p, lo, hi) for p, lo, hi in zip(gaps_df["g"], gaps_df["lo"], gaps_df["hi"], strict=True)])
        parts += ["## Gap g = metric(verbalized) - metric(token)", "",
                  to_markdown(g[["setting", "context", "metric", "g", "excludes_zero"]]), ""]
    if not shifts_df.empty:
        s = shifts_df.assign(shift=[_fmt(p, lo, hi) for p, lo, hi in zip(shifts_df["shift"], shifts_df["lo"], shifts_df["hi"], strict=True)])
        parts += ["## Shift of g between contexts", "",
                  to_markdown(s[["setting", "from_context", "to_context", "metric", "shift", "excludes_zero", "flip", "resolved_flip"]]), ""]
    return "\n".join(parts)


def _axes(spec: GridSpec) -> dict[str, Any]:
    return {
        "elicitation.prompt": spec.elicitation.prompt,
        "elicitation.max_new_tokens": spec.elicitation.max_new_tokens,
        "scoring.contexts": list(spec.scoring.contexts),
        "scoring.aggregations": list(spec.scoring.aggregations),
        "answer_sets": ["main"] + [a.id for a in spec.answer_sets],
        "parsing.policies": list(spec.parsing.policies),
        "probe.enabled": spec.probe.enabled,
        "correctness.rules": list(spec.correctness.rules),
        "correctness.primary": spec.correctness.primary,
        "metrics.names": list(spec.metrics.names),
        "metrics.ece_bins": spec.metrics.ece_bins,
        "metrics.ece_estimator": "equal_width",
        "bootstrap.resamples": spec.bootstrap.resamples,
        "bootstrap.seed": spec.bootstrap.seed,
        "bootstrap.level": spec.bootstrap.level,
        "models": [m.name for m in spec.models],
        "datasets": [d.name for d in spec.datasets],
        "confgrid_version": __version__,
        "python": platform.python_version(),
    }


def _log_results(spec: GridSpec, store: RunStore, tracker: Tracker, summary: RunSummary, ex: _Executor,
                 counter: dict[str, int], seconds: float) -> None:
    """One child run per (model, dataset) setting; results and tables on the parent."""
    axes = _axes(spec)
    primary = _primary(spec)
    met, gaps = _select(summary.metrics, primary), _select(summary.gaps, primary)
    if not met.empty:
        met = met[met["aggregation"].isin(["", spec.scoring.aggregations[0]])]
    settings = _select(pd.read_parquet(store.root / "results" / "settings.parquet"), primary)
    prov = ex.replicas.provenance if ex.replicas else {}
    for m, d in spec.settings():
        setting = f"{m.name}/{d.name}"
        sub = met[met["setting"] == setting] if not met.empty else met
        if sub.empty:
            continue
        params = {**axes, "model": m.name, "model.id": m.model, "model.backend": m.backend, "model.dtype": m.dtype,
                  "model.revision": m.revision or "", "model.chat_template": m.chat_template,
                  "model.tensor_parallel_size": m.tensor_parallel_size, "model.replicas": m.replicas,
                  "dataset": d.name, "dataset.adapter": d.adapter, "dataset.path": d.path,
                  "dataset.limit": d.limit or "all", "dataset.seed": d.seed,
                  **{f"provenance.{k}": v for k, v in prov.get(m.name, {}).items()}}
        metrics: dict[str, float] = {}
        for r in sub.itertuples():
            metrics[f"{r.metric}/{r.signal}"] = r.point
            metrics[f"{r.metric}/{r.signal}/lo"] = r.lo
            metrics[f"{r.metric}/{r.signal}/hi"] = r.hi
        gsub = gaps[gaps["setting"] == setting] if not gaps.empty else gaps
        for r in gsub.itertuples():
            metrics[f"gap/{r.metric}/{r.context}"] = r.g
            metrics[f"gap/{r.metric}/{r.context}/lo"] = r.lo
            metrics[f"gap/{r.metric}/{r.context}/hi"] = r.hi
        for r in settings[settings["setting"] == setting].itertuples():
            metrics.update({"parse_rate": r.parse_rate, "accuracy": r.accuracy, "n_analyzed": r.n_analyzed})
        csv = store.root / "results" / "by_setting" / f"{m.name}__{d.name}.csv"
        csv.parent.mkdir(exist_ok=True)
        sub.to_csv(csv, index=False)
        tracker.child(run_name=setting, params=params, metrics=metrics, artifacts=[csv],
                      tags={"confgrid.kind": "setting", "confgrid.setting": setting})
    tracker.log_metrics({"model_calls": counter["model_calls"], "shards_reused": counter["reused"],
                         "shards_computed": counter["computed"], "shards_failed": len(ex.failed), "seconds": seconds})
    res = store.root / "results"
    tracker.log_artifacts(sorted(res.glob("*.csv")) + [res / "report.md", res / "checklist.json", res / "checklist.md"],
                          "results")
    tracker.log_artifacts(list(summary.tables.values()), "tables")
    tracker.log_artifacts([store.root / "grid.yaml", store.root / "manifest.json"])
