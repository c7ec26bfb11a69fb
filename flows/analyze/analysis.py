"""``confgrid analyze``: metrics and paired gaps of per-question outputs from anywhere (docs/guides/analyze.md).

Input: one row per (setting, item_id, signal) in CSV, Parquet or JSONL (by the file extension) with the columns
setting (the unit of pairing), item_id, signal (the confidence method), confidence (in [0, 1]) and correct (0/1, graded
in [0, 1], ``true``/``false``), renamed with the ``--*-col`` flags (flows/analyze/read.py ``FLAGS``); other columns
are ignored. The readers are flows/analyze/roads.py.

Determinism: settings, signals and items are sorted as strings, so the output does not depend on the row order. A
setting's bootstrap seed is ``setting_seed(setting, "", seed)`` (:func:`confgrid.analysis.bootstrap.setting_seed`: a
grid run's derivation, the setting in place of the model, an empty dataset). A fixed ``--seed`` gives byte-identical
CSV files, with or without Ray.

Outputs: ``DIR/results`` (:data:`TABLES`, CSV and Parquet; ``run_info.json``, what ``show`` and ``report`` read),
``DIR/analyze.json`` (what ``confgrid log DIR`` logs, :func:`log_analysis`) and an MLflow record (experiment
``confgrid/analyze``, default store ``sqlite:///DIR/mlflow.db``): a parent run named after the input file, one child
run per setting with ``<signal>/<metric>/{point,lo,hi}`` metrics, the tables as artifacts. If the store fails, the
files are written all the same, a :class:`TrackingWarning` says so and the command exits with
:data:`~confgrid.flows.tracking.EXIT_TRACKING_FAILED`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from confgrid.analysis.ace.frame import ACEInputError
from confgrid.analysis.ace.tables import ACETables, ace_tables
from confgrid.analysis.closure import closure_notes
from confgrid.analysis.evaluation import estimates, unit_names
from confgrid.analysis.verdicts import verdict_table
from confgrid.flows.analyze.input import AnalyzeWarning, InputRows, role_columns
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.analyze.roads import Analyzed, evaluate_input
from confgrid.flows.analyze.spec import AnalyzeSpec
from confgrid.flows.evaluate.ace import ace_frames
from confgrid.flows.evaluate.clusters import cluster_note, with_cluster_columns
from confgrid.flows.evaluate.outputs import verdict_mlflow
from confgrid.flows.store.run_info import RunInfo, write_run_info
from confgrid.flows.store.run_store import Frames, write_frames, write_text_atomic
from confgrid.flows.tracking import (Logged, Tracker, TrackingError, TrackingFailure, choose_tracking_uri,
                                     default_tracking_uri, result_metrics)

__all__ = ["EXPERIMENT", "RECORD_FILE", "Analysis", "AnalyzeSpec", "TrackingWarning", "analyze", "log_analysis"]

EXPERIMENT = "confgrid/analyze"
#: the analysis' MLflow params and tags in the output directory (what ``confgrid log`` logs)
RECORD_FILE = "analyze.json"
#: the tables of an analysis, each written as OUT/results/<name>.csv and .parquet (a run's layout)
TABLES = ("metrics", "gaps", "shifts", "alignment", "edges", "closure", "verdicts")
#: those logged to MLflow as artifacts
LOGGED = ("metrics", "gaps", "shifts", "alignment", "verdicts")
#: the views of the comparison across models (an input with a model column; ca too when candidate ratings are given)
DEFAULT_VIEWS = ("raw", "ia", "da")


class TrackingWarning(AnalyzeWarning):
    """The MLflow record could not be written; the files are. ``.failure`` is the
    :class:`~confgrid.flows.tracking.TrackingFailure`."""

    def __init__(self, failure: Any, out_dir: Path) -> None:
        super().__init__(f"{failure.line()}; {failure.hint(out_dir)}")
        self.failure = failure


@dataclass(frozen=True)
class Analysis:
    """What :func:`analyze` gives back (its files are written by then); ``analysis["metrics"]`` is
    ``analysis.tables["metrics"]``."""

    #: what was asked
    spec: AnalyzeSpec
    #: every table written to ``OUT/results`` by name: metrics, gaps, shifts, alignment, edges, closure, verdicts,
    #: and with a model column ``ace_*``
    tables: Mapping[str, pd.DataFrame]
    #: the reader that took the input (flows/analyze/roads.py ``ROADS``)
    road: str
    #: correctness values strictly between 0 and 1 (soft labels unless ``threshold``)
    n_graded: int = 0
    #: how the bootstrap resampled, in words (items, or the clusters of ``group_col``)
    resampled: str = "paired resamples"
    #: the MLflow store logged to; None without tracking
    tracking_uri: str | None = None
    #: the MLflow parent run; None without tracking or when the store failed
    run_id: str | None = None
    #: why the store failed (the files are written all the same)
    tracking_failure: TrackingFailure | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def __contains__(self, name: object) -> bool:
        return name in self.tables


def _read_candidates(path: Path) -> pd.DataFrame:
    """Candidate ratings for the CA view (``--candidates``: CSV, JSONL or Parquet with the columns of
    analysis/ace/candidates.py ``RATING_COLUMNS``; ``producers`` may be ``a|b`` text)."""
    if not path.is_file():
        raise AnalyzeInputError(f"--candidates {str(path)!r}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path, dtype={"item_id": str})
    if suffix in (".jsonl", ".ndjson"):
        return pd.read_json(path, lines=True, dtype={"item_id": str})
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise AnalyzeInputError(f"--candidates {str(path)!r}: unsupported extension {suffix!r}; use .csv, .jsonl or "
                            ".parquet")


def _compare_models(rows: InputRows, spec: AnalyzeSpec, candidates: pd.DataFrame | None) -> ACETables | None:
    """The accuracy-controlled comparison across models (study 001, ACE) of rows with a model column: the setting is
    the dataset, the signal the method; writes ``OUT/results/ace_*``. None with fewer than two models; without
    candidate ratings CA is skipped with a message. AnalyzeInputError (the ACE layer's message): a bad pair, view or
    candidate table."""
    f = rows.objects()
    if f["model"].nunique() < 2:
        return None
    ace_in = pd.DataFrame({"model": f["model"], "dataset": f["dataset"], "method": f["signal"],
                           "item_id": f["item_id"], "signal": f["confidence"], "correct": f["correct"]})
    views = [*DEFAULT_VIEWS, *(["ca"] if candidates is not None else [])] if spec.views is None else list(spec.views)
    try:
        tables = ace_tables(ace_in, candidates if "ca" in views else None,
                            pairs=None if spec.pairs is None else list(spec.pairs), views=views,
                            n_bootstrap=spec.comparison_resamples, seed=spec.seed, n_bins=spec.n_bins,
                            ia_strata=spec.ia_strata)
    except ACEInputError as exc:
        raise AnalyzeInputError(f"comparison across models: {exc}") from None
    write_frames(ace_frames(tables), spec.out / "results")
    return tables


def _with_comparison(tables: dict[str, pd.DataFrame], ace: ACETables, spec: AnalyzeSpec) -> dict[str, pd.DataFrame]:
    """The comparison across models' tables added; its estimates joined to the metrics, gaps, shifts and verdicts (as
    in a run)."""
    tables = {**tables, **ace.tables()}
    if ace.estimates is not None:
        e = ace.estimates
        more = {"metrics": e.metrics, "gaps": e.gaps, "shifts": e.shifts,
                "verdicts": verdict_table(e.gaps, e.shares, spec.verdicts.rule(), spec.level)}
        for name, extra in more.items():
            frames = [f for f in (tables[name], extra) if len(f)]
            tables[name] = pd.concat(frames, ignore_index=True) if len(frames) > 1 else \
                (frames[0] if frames else tables[name])
    return tables


def analyze(spec: AnalyzeSpec) -> Analysis:
    """Metrics with paired bootstrap intervals and pairwise gaps of an input file (see the module docstring).

    The input is read by its entry of flows/analyze/roads.py ``ROADS`` and takes the run's road (``bootstrap_units``,
    ``estimates``): a run's signal table with the run's seed, resamples and level gives the run's tables, byte for
    byte. An input with a ``model`` column is also compared across models (study 001, ACE): its
    ``ace_*`` tables are added and its cells join the metrics, gaps and verdicts. Returns the tables written to
    ``OUT/results`` (gap = metric(signal_a) - metric(signal_b)), the MLflow parent run id or the tracking failure.

    Raises AnalyzeInputError for bad options or input (every bad row by its place; nothing is written then), TypeError
    when ``spec`` is not an :class:`AnalyzeSpec`. Warns: AnalyzeWarning (items left out because some signal lacks
    them), UndefinedMetricWarning (an undefined point estimate, e.g. AUROC with one class), TrackingWarning (the MLflow
    store failed; the files are written).
    """
    if not isinstance(spec, AnalyzeSpec):
        raise TypeError(f"analyze takes one AnalyzeSpec, got {type(spec).__name__}: call "
                        "analyze(AnalyzeSpec(input=..., out=..., metrics=...)) (confgrid.flows.analyze.spec)")
    spec.warn_unused_axes()
    cand_df = _read_candidates(spec.candidates) if spec.candidates is not None else None
    out_dir = spec.out
    if out_dir.exists() and not out_dir.is_dir():
        raise AnalyzeInputError(f"--out {str(out_dir)!r}: exists and is not a directory")
    read = evaluate_input(spec)
    est = estimates(read.units, read.results, spec.level, spec.interval)
    n_clusters = {st.name: st.n_clusters for st in read.settings if st.n_clusters is not None}
    metrics_df, gaps_df, shifts_df = (with_cluster_columns(df, spec.group_col, n_clusters)
                                      for df in (est.metrics, est.gaps, est.shifts))
    if read.rows is None and (spec.views is not None or spec.candidates is not None or spec.pairs is not None):
        raise AnalyzeInputError("--views/--pairs/--candidates compare models: the input needs a model column "
                                "(--model-col NAME)")
    tables = {"metrics": metrics_df, "gaps": gaps_df, "shifts": shifts_df, "alignment": read.alignment,
              "edges": est.edges, "closure": closure_notes(metrics_df, gaps_df, est.edges, spec.n_bins),
              "verdicts": verdict_table(gaps_df, est.shares, spec.verdicts.rule(), spec.level)}
    if read.rows is not None:  # a model column: the comparison across models (it writes its ace_* tables)
        if spec.group_col is not None:
            warnings.warn(f"--group-col {spec.group_col!r} clusters the metrics and gaps; the comparison across "
                          "models still resamples single items", AnalyzeWarning, stacklevel=2)
        ace = _compare_models(read.rows, spec, cand_df)
        if ace is not None:
            tables = _with_comparison(tables, ace, spec)
            for msg in ace.messages:
                warnings.warn(f"comparison across models: {msg}", AnalyzeWarning, stacklevel=2)
    out_dir.mkdir(parents=True, exist_ok=True)  # only now: a refused option leaves no empty folder behind
    write_frames(Frames({n: tables[n] for n in TABLES}), out_dir / "results")
    # what `confgrid show` and `confgrid report` read (an analysis has one group: every row)
    write_run_info(out_dir, RunInfo(command="analyze", n_bins=spec.n_bins, ece_closure=spec.ece_closure,
                                    ece_bin_confidence=spec.ece_bin_confidence, level=spec.level, primary={}))
    record = _record(spec, read)
    write_text_atomic(json.dumps(record, indent=1), out_dir / RECORD_FILE)
    result = Analysis(spec, tables, read.road, read.n_graded, cluster_note(spec.group_col, n_clusters))
    if not spec.track:
        return result
    uri = record.get("tracking_uri") or default_tracking_uri(out_dir)
    logging.getLogger("confgrid").info("%s", choose_tracking_uri(spec.tracking_uri, out_dir).line())
    try:
        return replace(result, tracking_uri=uri, run_id=_track(record, out_dir, uri, tables["metrics"], tables["gaps"]))
    except Exception as exc:  # noqa: BLE001 - the results are written; tracking is the last step
        failure = TrackingFailure.of(uri, exc)
        warnings.warn(TrackingWarning(failure, out_dir), stacklevel=2)
        return replace(result, tracking_uri=uri, tracking_failure=failure)


def _record(spec: AnalyzeSpec, read: Analyzed) -> dict[str, Any]:
    """The analysis' MLflow record without its metrics: parent run name, params and tags, one child per setting
    (``OUT/analyze.json``)."""
    input_path, settings = spec.input, read.settings
    params = dict(input=str(input_path.resolve()), metrics=spec.metric_names, n_resamples=spec.n_resamples,
                  seed=spec.seed, n_bins=spec.n_bins, ece_closure=",".join(spec.ece_closure),
                  ece_bin_confidence=",".join(spec.ece_bin_confidence),
                  ece_conventions=",".join(spec.ece_conventions), level=spec.level, interval=spec.interval,
                  chunk_size=spec.chunk_size, use_ray=spec.use_ray, n_rows=read.n_rows, n_settings=len(settings),
                  threshold=spec.threshold, uncertainty=spec.uncertainty,
                  graded_soft_labels=bool(read.n_graded and spec.threshold is None), in_turn=read.road == "in_turn",
                  **{f"column.{r}": c for r, c in role_columns(spec.column_roles).items()})
    if spec.group_col is not None:  # a cluster bootstrap: say so, on which column, how many clusters
        n_clusters = [st.n_clusters for st in settings if st.n_clusters is not None]
        params.update(resampling="clustered", group_col=spec.group_col, n_clusters=",".join(map(str, n_clusters)))
    choice = choose_tracking_uri(spec.tracking_uri, spec.out)  # --tracking-uri, $MLFLOW_TRACKING_URI, OUT's store
    with open(input_path, "rb") as f:  # streamed: the input may be larger than memory
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {
        "run_name": input_path.name, "tracking_uri": None if choice.source == "run folder" else choice.uri,
        "params": params,
        "tags": {"confgrid.command": "analyze", "confgrid.input": str(input_path.resolve()),
                 "confgrid.input_sha256": digest},
        "children": [{"name": st.name, "params": dict(setting=st.name, seed=st.seed, n_items=st.n_items,
                                                       signals=st.signals, **({} if st.n_clusters is None else
                                                                              {"n_clusters": st.n_clusters}))}
                     for st in settings],
    }


def _track(record: dict[str, Any], out_dir: Path, tracking_uri: str, metrics_df: pd.DataFrame,
           gaps_df: pd.DataFrame) -> str:
    """Log ``record`` with the metrics of each setting, the tables of ``out_dir`` as artifacts; the parent run's id."""
    tracker = Tracker(tracking_uri, EXPERIMENT)
    with tracker.parent(record["run_name"], record["params"], tags=record["tags"]) as run_id:
        m_units, g_units = unit_names(metrics_df), unit_names(gaps_df)
        for ch in record["children"]:
            name = ch["name"]
            values = result_metrics(metrics_df[m_units == name], gaps_df[g_units == name])
            tags = {"confgrid.kind": "setting", "confgrid.setting": name, "confgrid.command": "analyze"}
            tracker.child(name, ch["params"], values, [], tags=tags)
        tracker.log_artifacts([out_dir / "results" / f"{name}{ext}" for name in LOGGED for ext in (".csv", ".parquet")
                               if (out_dir / "results" / f"{name}{ext}").is_file()], "results")
        verdicts = out_dir / "results" / "verdicts.parquet"
        if verdicts.is_file():  # the verdicts on the parent, as a run logs them
            v_metrics, v_tags = verdict_mlflow(pd.read_parquet(verdicts))
            tracker.log_metrics(v_metrics)
            tracker.log_tags(v_tags)
    return run_id


def log_analysis(out_dir: str | Path, tracking_uri: str | None = None) -> Logged:
    """Log a finished analysis directory to MLflow as ``confgrid analyze`` would have (``confgrid log OUT``): the new
    parent run, its store and experiment. ``tracking_uri`` defaults to the analysis' store, else
    ``sqlite:///OUT/mlflow.db``.

    FileNotFoundError when ``out_dir`` lacks ``analyze.json``, ``results/metrics.parquet`` or ``results/gaps.parquet``;
    :class:`~confgrid.flows.tracking.TrackingError` when the store fails.
    """
    out_dir = Path(out_dir)
    for need in (RECORD_FILE, "results/metrics.parquet", "results/gaps.parquet"):
        if not (out_dir / need).is_file():
            raise FileNotFoundError(f"{out_dir}: no {need}; is this the directory of a finished analysis?")
    record = json.loads((out_dir / RECORD_FILE).read_text(encoding="utf-8"))
    uri = tracking_uri or record.get("tracking_uri") or default_tracking_uri(out_dir)
    try:
        run_id = _track(record, out_dir, uri, pd.read_parquet(out_dir / "results" / "metrics.parquet"),
                        pd.read_parquet(out_dir / "results" / "gaps.parquet"))
    except Exception as exc:
        raise TrackingError(TrackingFailure.of(uri, exc)) from exc
    return Logged(run_id, uri, EXPERIMENT)
