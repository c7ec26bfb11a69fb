"""Run a grid: plan (flows/plan/), execute (flows/execute/), assemble (flows/tables/), evaluate
(flows/evaluate/), then the enabled studies' views (flows/studies/), and write the outputs.

A stored shard is reused (no model call, and the log says so); a shard whose call fails is recorded with its error
while every other shard goes on, and the run ends with one error naming the failed shards (:class:`ShardFailures`;
resume and resubmit: docs/guides/faults-resume.md). Computing never depends on MLflow: a store that cannot be
opened turns tracking off with one log line, ``RunSummary.tracking_failure`` says what failed, and ``confgrid log
OUT`` (:func:`log_run`) logs it later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import yaml

from confgrid.errors import FieldsPickle
from confgrid.flows.tables.assemble import assemble, empty_schema, shard_table
from confgrid.flows.tables.signals import run_signal_table
from confgrid.analysis.signals import to_arrow as signals_arrow
from confgrid.flows.evaluate.run_evaluation import Evaluation, cluster_problems, evaluate
from confgrid.flows.execute.liveness import lost_node_tags
from confgrid.flows.execute.executor import execute
from confgrid.flows.evaluate.methods import method_tables
from confgrid.flows.evaluate.outputs import grid_params, log_results, verdict_mlflow, write_outputs
from confgrid.flows.plan.grid_plan import GridPlan, check_items
from confgrid.flows.store.runlog import run_log, trace
from confgrid.flows.spec.grid import BUNDLED, DatasetSpec, GridSpec, load_grid
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.store.run_store import RunStore, shard_key, write_frames, write_text_atomic
from confgrid.flows.evaluate.rounds import Rounds
from confgrid.flows.studies import RunInputs, enabled_studies
from confgrid.flows.tracking import Logged, Tracker, TrackingError, TrackingFailure, choose_tracking_uri
from confgrid.protocols.items import Item, items_to_table
from confgrid.protocols.datasets import BUNDLED as BUNDLED_PATHS, load_items

__all__ = ["RunSummary", "ShardFailures", "DatasetError", "run_grid", "log_run"]

log = logging.getLogger("confgrid")


class ShardFailures(FieldsPickle, RuntimeError):
    """Some shards failed; everything else was computed and stored. ``failed``: one dict per failed shard (stage,
    setting, key, error); ``summary``: what the run produced despite them (or None)."""

    def __init__(self, failed: list[dict[str, Any]], out_dir: Path, summary: RunSummary | None = None,
                 address: str | None = None) -> None:
        self.failed = failed
        self.summary = summary
        lines = [f"{len(failed)} shard(s) failed; every other shard is stored in {out_dir}:"]
        lines += [f"  - {f['stage']} {f['setting']} ({f['key'][:12]}): {f['error']}" for f in failed[:20]]
        if len(failed) > 20:
            lines.append(f"  ... and {len(failed) - 20} more (see manifest.json)")
        lines.append(f"rerun only these with: confgrid resubmit {out_dir} --failed{address_hint(address)}")
        super().__init__("\n".join(lines))


def address_hint(address: str | None) -> str:
    """`` --address A`` for a hint's command line when the run joined a cluster at ``A`` (else "")."""
    return f" --address {address}" if address else ""


class DatasetError(FieldsPickle, ValueError):
    """A dataset of the grid could not be loaded (raised before any model is loaded)."""


@dataclass(kw_only=True)
class RunSummary:
    """What a run produced: ``model_calls`` (requests a model computed; 0 when everything was reused),
    ``model_loads`` (Ray restarts included), ``results`` (every study view's frames, as in ``results/``),
    ``tracking_failure`` (set when the MLflow record could not be opened or written), the store it logged into."""

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
    model_loads: int = 0
    restarts: int = 0
    results: dict[str, pd.DataFrame] = field(default_factory=dict)
    tracking_failure: TrackingFailure | None = None
    tracking_uri: str | None = None

    @property
    def methods(self) -> pd.DataFrame:
        """``results/methods.csv``: every confidence method's metrics (empty without methods)."""
        return self.results.get("methods", pd.DataFrame())


def _load_items(d: DatasetSpec) -> list[Item]:
    path = str(BUNDLED_PATHS[d.adapter]) if d.path == BUNDLED else d.path
    kwargs = d.columns.adapter_kwargs() if d.columns is not None else {}
    try:
        items = load_items(d.adapter, path, split=d.split, limit=d.limit, seed=d.seed, dataset_name=d.name,
                           params=d.params, **kwargs)
    except (FileNotFoundError, KeyError, ValueError, TypeError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise DatasetError(f"dataset {d.name!r} ({d.adapter}, {path}): {msg}") from exc
    if d.limit is not None and len(items) < d.limit:
        log.warning("dataset %s: limit %d but only %d items available; using all of them", d.name, d.limit, len(items))
    return items


def _store_items(spec: GridSpec, store: RunStore, items: dict[str, list[Item]]) -> Path:
    tables = []
    for d in spec.datasets:
        its = items[d.name]
        key = shard_key("items", {"dataset": d.model_dump(mode="json"), "ids": [i.item_id for i in its]})
        tbl = items_to_table(its)
        if store.has_shard("items", key):
            store.reuse("items", d.name, key, dataset=d.name)
        else:
            store.finish(store.begin("items", d.name, key, dataset=d.name), tbl)
        tables.append(tbl)
        log.info("dataset %s: %d items", d.name, len(its))
    return store.write_table("items", tables)


GRID_HEADER = ("# The grid as run: validated, defaults filled in, local paths resolved (confgrid resume and\n"
               "# resubmit read this file). The file as written is grid.source.yaml.\n")


def _write_grid(spec: GridSpec, store: RunStore, grid_text: str | None) -> None:
    """``OUT/grid.yaml``: the validated grid with absolute paths (what resume reads, wherever it is run from);
    ``OUT/grid.source.yaml``: the grid file's own text, comments included."""
    resolved = GRID_HEADER + yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
    grid_path = store.root / "grid.yaml"
    if grid_path.exists() and grid_path.read_text(encoding="utf-8") != resolved:
        log.warning("%s holds another grid; it is replaced (shards whose inputs are unchanged are still reused)",
                    store.root)
    write_text_atomic(resolved, grid_path)
    if grid_text is not None:
        write_text_atomic(grid_text, store.root / "grid.source.yaml")


def _tracking_uri(store: RunStore, given: str | None) -> str:
    """The MLflow store of the run (:func:`confgrid.flows.tracking.choose_tracking_uri`; a moved folder's own
    store is where it is now); logs which it is and records a chosen server for the folder's later commands."""
    custom = store.meta.get("custom_tracking_uri")
    if custom is None and "custom_tracking_uri" not in store.meta:  # a manifest written before the key existed
        old = store.meta.get("tracking_uri")
        custom = old if old and not old.endswith("/mlflow.db") else None
    choice = choose_tracking_uri(given, store.root, recorded=custom)
    store.meta["custom_tracking_uri"] = None if choice.source == "run folder" else choice.uri
    store.meta["tracking_uri_source"] = choice.source
    log.info("%s", choice.line())
    return choice.uri


def _start_tracking(spec: GridSpec, store: RunStore, tracking_uri: str, reopen: bool) -> Tracker:
    """Open the run's MLflow store and its parent run (``reopen``: the parent in the manifest, if the store has it),
    and record the parent in the manifest. Raises whatever :class:`Tracker` raises."""
    tracker = Tracker(tracking_uri, experiment=f"confgrid/{spec.name}")
    parent_id = store.meta.get("mlflow_parent_run_id") if reopen else None
    parent_id = tracker.open_parent(run_id=parent_id, run_name=spec.name, params=grid_params(spec),
                                    tags={"confgrid.kind": "grid"})
    store.meta.update({"mlflow_parent_run_id": parent_id, "tracking_uri": tracking_uri})
    return tracker


def _close_tracking(tracker: Tracker | None, status: str) -> TrackingFailure | None:
    """End the parent run with ``status``; a store that fails now is returned, never raised."""
    if tracker is None:
        return None
    try:
        tracker.close_parent(status=status)
    except Exception as exc:  # noqa: BLE001 - the results are written; say what failed
        return TrackingFailure.of(tracker.tracking_uri, exc)
    return None


def _in_grid(spec: GridSpec):
    """Whether a manifest record belongs to a model, dataset and answer set of ``spec`` (its recorded grid
    entries; a record written before they were recorded, or rebuilt from shard files, is kept)."""
    models = {m.name for m in spec.models}
    datasets = {d.name for d in spec.datasets}
    sets = {a.id for a in spec.all_answer_sets()}

    def keep(rec) -> bool:
        if rec.extra.get("recovered") or rec.dataset is None:  # nothing recorded to judge by: kept
            return True
        if rec.stage == "items":
            return rec.dataset in datasets
        return rec.model in models and rec.dataset in datasets and (rec.answer_set or "main") in sets

    return keep


def run_grid(spec: GridSpec, out_dir: str | Path, *, address: str | None = None, tracking_uri: str | None = None,
             grid_text: str | None = None, only_failed: bool = False, resume: bool = False) -> RunSummary:
    """Execute a validated grid and write every table, result and MLflow run.

    ``out_dir`` is created if missing; reusing it reuses every stored shard whose key still matches.
    ``address``: a Ray cluster to join (None: a local one, started only if some shard must be computed);
    ``grid_text``: the grid file's text (``OUT/grid.source.yaml``); ``only_failed``: rerun only the failed
    shards and what depends on them (``resubmit --failed``); ``resume``: continue the recorded MLflow parent run.

    Raises
    ------
    DatasetError, CapacityError, GridSpecError
        Before any model is loaded: a dataset cannot be read, a model's replica fits on no node, or the loaded
        items make the grid impossible (flows/plan/grid_plan.py ``check_items``).
    ShardFailures
        After every other shard ran, if any shard failed (its error in the manifest, the full traceback in
        ``OUT/confgrid.log``); ``.summary`` holds what was produced.
    OSError
        If the output directory cannot be created or written.
    """
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    what = "resubmit --failed" if only_failed else "resume" if resume else "run"
    with run_log(out_dir, what):
        try:
            return _run_grid(spec, out_dir, address=address, tracking_uri=tracking_uri, grid_text=grid_text,
                             only_failed=only_failed, resume=resume)
        except Exception as exc:
            trace.error("confgrid %s stopped", what, exc_info=exc)  # the traceback, in the run's log file only
            raise


def _run_grid(spec: GridSpec, out_dir: str | Path, *, address: str | None, tracking_uri: str | None,
              grid_text: str | None, only_failed: bool, resume: bool) -> RunSummary:
    t0 = time.time()
    store = RunStore(out_dir)
    _write_grid(spec, store, grid_text)
    # every dataset is loaded before any model, Ray or MLflow is touched: a bad file fails here
    items = {d.name: _load_items(d) for d in spec.datasets}
    if problems := check_items(spec, items) + cluster_problems(spec, items):
        raise GridSpecError(problems, "grid (checked against the loaded items)")
    pruned = store.prune(_in_grid(spec))
    if pruned:
        log.info("manifest: %d record(s) of models, datasets or answer sets no longer in the grid removed "
                 "(their shard files stay in shards/ and are reused if they come back)", pruned)
    tracking_uri = _tracking_uri(store, tracking_uri)
    failure: TrackingFailure | None = None
    tracker: Tracker | None = None
    try:
        tracker = _start_tracking(spec, store, tracking_uri, reopen=resume or only_failed)
    except Exception as exc:  # noqa: BLE001 - computing never depends on tracking
        failure = TrackingFailure.of(tracking_uri, exc)
        log.error("%s; tracking is off for this run, every result is still computed and written", failure.line())
    parent_id = tracker.parent_run_id if tracker is not None else None
    store.save_manifest()
    tables = {"items": _store_items(spec, store, items)}
    plan = GridPlan(spec, items)
    rounds = Rounds(spec, plan, store) if spec.execution.stopping is not None else None
    if rounds is None:
        store.meta.pop("stopping", None)  # a folder run before with early stopping: no stale reasons
    status = "FAILED"
    try:
        ex = execute(spec, store, plan, lambda sh, outs: shard_table(plan, sh, outs), tracker=tracker,
                     address=address, only_failed=only_failed, rounds=rounds)
        done = ex.done
        asm = assemble(plan, done, ex.submitted)
        for name, tl in asm.stage_tables.items():  # each stage's own table (flows/stages: table_name, schema)
            tables[name] = store.write_table(name, tl, empty_schema(
                name, tuple(spec.scoring.aggregations), tuple(spec.correctness.rules)))
        mt = method_tables(plan, done, ex.submitted)
        for name, df in mt.stored().items():
            tables[name] = store.write_table(name, [pa.Table.from_pandas(df, preserve_index=False)])
        run = RunInputs(spec, plan, done, ex.submitted, asm.units, mt, rounds)
        studies = [cls(run, store) for cls in enabled_studies(spec)]
        table = run_signal_table(spec, asm.units, mt.signals)
        ev = evaluate(spec, asm.units, extra=[rows for s in studies for rows in s.signals(table)], table=table)
        tables["signals"] = store.write_table("signals", [signals_arrow(ev.signals)])
        write_outputs(spec, store, ev, asm.units, ex.provenance)
        views = {s.name: s.view(ev) for s in studies}
        results: dict[str, pd.DataFrame] = {}
        for out in views.values():
            write_frames(out.frames, store.root / "results")
            tables.update(out.tables)
            results.update(out.frames.frames)
        c = ex.counters
        summary = RunSummary(out_dir=store.root, metrics=ev.metrics, gaps=ev.gaps, shifts=ev.shifts,
                             model_calls=c.model_calls, reused_shards=c.reused, computed_shards=c.computed,
                             parent_run_id=parent_id, tables=tables, failed_shards=len(ex.failed),
                             skipped_shards=c.skipped, model_loads=c.loads, restarts=c.restarts, results=results)
        # what the MLflow record holds beyond the files, kept for `confgrid log` (log_run)
        store.meta["mlflow_record"] = {
            "provenance": ex.provenance,
            "run_metrics": {"model_calls": c.model_calls, "model_loads": c.loads, "restarts": c.restarts,
                            "shards_reused": c.reused, "shards_computed": c.computed, "shards_failed": len(ex.failed),
                            "replicas_lost": sum(r.state == "lost" for p in ex.history for r in p.replicas),
                            "seconds": time.time() - t0, **(c.api.metrics() if c.api.requests else {}),
                            **verdict_mlflow(ev.verdicts)[0]},
            "run_tags": {**lost_node_tags([r for p in ex.history for r in p.replicas]),
                         **verdict_mlflow(ev.verdicts)[1]}}
        store.flush(force=True)
        if tracker is not None:
            try:
                log_results(spec, store, tracker, ev, ex.provenance, store.meta["mlflow_record"]["run_metrics"],
                            tables)
                tracker.log_tags(store.meta["mlflow_record"]["run_tags"])
                for out in views.values():
                    if out.metrics:
                        tracker.log_metrics(out.metrics)
            except Exception as exc:  # noqa: BLE001 - results are on disk already; say so and go on
                failure = TrackingFailure.of(tracking_uri, exc)
                log.error("%s; every result is in %s", failure.line(), store.root)
        status = "FAILED" if ex.failed else "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        log.warning("interrupted: every finished shard is stored in %s; continue with `confgrid resume %s%s`",
                    store.root, store.root, address_hint(address))
        raise
    finally:
        failure = failure or _close_tracking(tracker, status)
    summary.tracking_failure, summary.tracking_uri = failure, tracking_uri
    log.info("done in %.1f s: %d model calls, %d model load(s), %d shards computed, %d reused, %d failed",
             time.time() - t0, c.model_calls, c.loads, c.computed, c.reused, len(ex.failed))
    if c.api.requests:
        log.info("API requests: %s (per shard: manifest.json; in total: confgrid status %s)", c.api.line(),
                 store.root)
    if c.skipped:
        log.warning("%d shard(s) not run (not failed, not done): run `confgrid resume %s%s`", c.skipped, store.root,
                    address_hint(address))
    if ex.failed:
        raise ShardFailures(ex.failed, store.root, summary, address)
    return summary


def log_run(out_dir: str | Path, tracking_uri: str | None = None) -> Logged:
    """Log a finished run directory to MLflow, as its run would have (``confgrid log OUT``): a new parent run
    (recorded in the manifest) with the grid's params, the counters and the files as artifacts, and a child run
    per setting (:func:`confgrid.flows.evaluate.outputs.log_results`, read back from ``results/*.parquet``).

    A ``tracking_uri`` given here is kept for the folder's later resumes. Raises FileNotFoundError when
    ``out_dir`` lacks grid.yaml, manifest.json or results/metrics.parquet, and :class:`TrackingError` when the
    store fails (the parent run is then marked FAILED if it was made).
    """
    root = Path(out_dir)
    res = root / "results"
    for need in (root / "grid.yaml", root / "manifest.json", res / "metrics.parquet"):
        if not need.is_file():
            raise FileNotFoundError(f"{root}: no {need.relative_to(root)}; is this the directory of a finished run?")
    spec = load_grid(root / "grid.yaml")
    store = RunStore(root)
    ev = Evaluation(*(pd.read_parquet(res / f"{name}.parquet") if (res / f"{name}.parquet").is_file()
                      else pd.DataFrame() for name in ("metrics", "gaps", "shifts", "settings")))
    record = store.meta.get("mlflow_record", {})
    tables = {p.stem: p for p in sorted((store.root / "tables").glob("*.parquet"))}
    tracking_uri = _tracking_uri(store, tracking_uri)
    tracker = None
    try:
        tracker = _start_tracking(spec, store, tracking_uri, reopen=False)
        log_results(spec, store, tracker, ev, record.get("provenance", {}), record.get("run_metrics", {}), tables)
        tracker.log_tags(record.get("run_tags", {}))
        tracker.close_parent("FINISHED")
    except Exception as exc:
        _close_tracking(tracker, "FAILED")
        raise TrackingError(TrackingFailure.of(tracking_uri, exc)) from exc
    store.save_manifest()
    return Logged.of(tracker)
