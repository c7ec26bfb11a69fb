"""Outputs of a run: result files, study tables, the reporting checklist, the report, and MLflow.

Everything is written atomically (flows/store/run_store.py ``atomic_write``) under ``OUT/results``; a table that
cannot be built (a view of the data) fails soft with a log line and never loses the run.
"""

from __future__ import annotations

import json
import logging
import platform
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from confgrid import __version__
from confgrid.flows.tables.assemble import Unit
from confgrid.flows.evaluate.run_evaluation import Evaluation, primary_group, select
from confgrid.analysis.conventions import get_convention
from confgrid.flows.spec.grid import BUNDLED, GridSpec
from confgrid.flows.store.run_info import RunInfo, write_run_info
from confgrid.flows.store.run_store import Frames, RunStore, write_frame_atomic, write_frames, write_text_atomic
from confgrid.protocols.checklist import render_checklist_markdown
from confgrid.flows.tracking import (DatasetRef, ModelRef, Tracker, items_digest, keyed_metrics, mlflow_key,
                                     result_metrics, view_of)
from confgrid.analysis.registry import METRICS
from confgrid.analysis.tables import to_markdown
from confgrid.protocols.checklist import build_checklist
from confgrid.protocols.prompts import get_prompt

__all__ = ["write_outputs", "write_checklist", "result_matrix", "render_markdown", "grid_params", "log_results", "fmt_interval",
           "verdict_mlflow"]

log = logging.getLogger("confgrid")


def fmt_interval(p: float, lo: float, hi: float, interval: str = "") -> str:
    """``0.123 [0.100, 0.150]``; ``NaN`` for an undefined point estimate; ``0.100 [0.100, 0.100] (degenerate)`` for a
    value whose resamples have no spread (``interval``, analysis/intervals.py)."""
    if pd.isna(p):
        return "NaN"
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}]" + (" (degenerate)" if interval == "degenerate" else "")


def fmt_intervals(df: pd.DataFrame, value: str) -> list[str]:
    """:func:`fmt_interval` of every row of a metrics, gaps or shifts table (``value``: ``point``, ``gap`` or
    ``shift``), with its ``interval`` column where the table has one."""
    kinds = df["interval"] if "interval" in df.columns else [""] * len(df)
    return [fmt_interval(p, lo, hi, str(k)) for p, lo, hi, k in zip(df[value], df["lo"], df["hi"], kinds, strict=True)]


def _has_views(df: pd.DataFrame) -> bool:
    """Whether a table holds study 001's model-vs-model rows (a non-empty ``view``): then the view is part of every
    key (one model's cell under each view)."""
    return "view" in df.columns and bool((df["view"].fillna("").astype(str) != "").any())


def result_matrix(metrics_df: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per (setting, signal[, view]), one column per metric, 'point [lo, hi]'."""
    if metrics_df.empty:
        return pd.DataFrame()
    df = metrics_df.assign(value=fmt_intervals(metrics_df, "point"))
    index = ["setting", "signal", *(["view"] if _has_views(metrics_df) else [])]
    wide = df.pivot_table(index=index, columns="metric", values="value", aggfunc="first", sort=False)
    cols = list(dict.fromkeys(metrics_df["metric"]))
    return wide[cols].reset_index()


#: below this many items a plug-in binned ECE's percentile interval under-covers in every process of
#: benchmarks/coverage.py (docs/concepts/intervals.md)
SMALL_N = 300


def interval_notes(metrics_df: pd.DataFrame) -> list[str]:
    """Notes on how far the metrics' intervals can be trusted (``show``, ``report.md``): degenerate intervals
    (analysis/intervals.py) and a plug-in binned ECE's percentile interval at fewer than :data:`SMALL_N` items."""
    if metrics_df is None or metrics_df.empty or "interval" not in metrics_df.columns:
        return []
    out = []

    def plugin(m: str) -> bool:
        b = METRICS.get(m).binning if m in METRICS else None
        return b is not None and b.estimator == "plugin"

    flat = metrics_df[metrics_df["interval"] == "degenerate"]
    if len(flat):
        jeffreys = (metrics_df["interval"] == "jeffreys").any()
        fixable = flat["metric"].map(lambda m: plugin(m) and METRICS.get(m).binning.scheme != "mass").any()
        tail = ("; --interval jeffreys (bootstrap.interval: jeffreys) gives the plug-in fixed-edge binned ECEs one "
                "that allows for it" if fixable and not jeffreys else
                "; no interval method here allows for it (jeffreys applies to the plug-in fixed-edge binned ECEs only)")
        out.append(f"(degenerate) marks a value whose resamples all agree (e.g. every answer right): its interval "
                   f"claims a certainty the data do not have and resolves nothing{tail}.")
    small = metrics_df[metrics_df["interval"].isin(["percentile", "degenerate"]) & (metrics_df["n"] < SMALL_N)
                       & metrics_df["metric"].map(plugin)]
    if len(small):
        out.append(f"{', '.join(dict.fromkeys(small['metric']))} on fewer than {SMALL_N} items: a plug-in binned ECE is "
                   "biased upward and its percentile interval misses the population value often (measured coverage "
                   "0.57 at n = 87, 0.82 at n = 300; docs/concepts/intervals.md); ece_debiased's "
                   "covered it 0.91 and 0.95.")
    return out


def closure_lines(closure_df) -> list[str]:
    """One line per result the bin closure changes (``results/closure``): ``setting: note``."""
    if closure_df is None or closure_df.empty:
        return []
    return [f"{r.setting} / {r.signal}: {r.note}" for r in closure_df.itertuples(index=False)]


def render_markdown(metrics_df, gaps_df, shifts_df, settings_df, closure_df=None, level: float = 0.95) -> str:
    """The results as a Markdown report (results/report.md); ``level`` the intervals' (``bootstrap.level``)."""
    parts = ["# confgrid results", ""]
    lines = closure_lines(closure_df)
    if lines:
        parts += ["## The bin closure matters here (results/closure.csv, results/edges.csv)", "",
                  *[f"- {x}" for x in lines], ""]
    if not settings_df.empty:
        parts += ["## Settings", "", to_markdown(settings_df), ""]
    wide = result_matrix(metrics_df)
    if not wide.empty:
        parts += [f"## Metrics (point [{level:.0%} paired bootstrap interval])", "", to_markdown(wide), ""]
        parts += [*(f"Note: {x}" for x in interval_notes(metrics_df)), ""] if interval_notes(metrics_df) else []
    if not gaps_df.empty:
        g = gaps_df.assign(gap=fmt_intervals(gaps_df, "gap"))
        parts += ["## Paired gap = metric(signal_a) - metric(signal_b) on the items both have", "",
                  to_markdown(g[["setting", "signal_a", "signal_b", "metric", "gap", "excludes_zero", "favours", "n"]]), ""]
    if not shifts_df.empty:
        s = shifts_df.assign(shift=fmt_intervals(shifts_df, "shift"))
        parts += ["## Shift of the gap between contexts", "",
                  to_markdown(s[["setting", "from_context", "to_context", "metric", "shift", "excludes_zero", "flip",
                                 "resolved_flip"]]), ""]
    return "\n".join(parts)


def rows_dropped(dropped: pd.DataFrame, unit: dict[str, str]) -> dict[str, int]:
    """Answers of a unit left out of the metrics, by reason: the first answer signal's rows by status (``ok``
    excluded) and ``left_out_by_alignment`` (results/dropped)."""
    d = select(dropped, unit)
    if d.empty:
        return {}
    first = d["signal"].iloc[0] if "verbalized" not in set(d["signal"]) else "verbalized"
    d = d[(d["signal"] == first) & (d["status"] != "ok")]
    return {str(k): int(v) for k, v in zip(d["status"], d["n"], strict=True)}


def _edge_shares(edges: pd.DataFrame, group: dict[str, str], n_bins: int) -> dict[str, float]:
    """Signal -> share of its confidences on an edge of the ``n_bins`` bins, in one group of ``results/edges``."""
    if edges is None or edges.empty:
        return {}
    e = edges[(edges["n_bins"] == n_bins) & np.logical_and.reduce([edges[k] == v for k, v in group.items()])]
    return {str(r.signal): round(float(r.on_edge), 4) for r in e.itertuples(index=False) if np.isfinite(r.on_edge)}


def _checklist(spec: GridSpec, store: RunStore, provenance: dict[str, dict[str, str]],
               units: dict[tuple[str, str, str], Unit], dropped_df: pd.DataFrame,
               ev_edges: pd.DataFrame | None = None) -> None:
    """The reporting checklist (study 000 Table 5) of every (model, dataset, answer set)."""
    models = {m.name: m for m in spec.models}
    p = primary_group(spec)
    entries = []
    for (mname, dname, aid), u in units.items():
        a, m = u.answer_set, models[mname]
        group = {"setting": f"{mname}/{dname}", **p, "answer_set": aid}
        dropped = rows_dropped(dropped_df, group)
        try:
            entries.append(build_checklist(
                model=f"{mname} ({m.model}, revision {m.revision or 'default'})", dataset=dname,
                use_chat_template=m.chat_template,
                decoding={"method": "greedy" if a.sampling is None else "sampling", "max_new_tokens": a.new_tokens,
                          "backend": m.backend, "dtype": m.dtype,
                          **({} if a.sampling is None else {"temperature": a.temperature, "top_p": a.top_p,
                                                            "seed": a.seed})},
                elicitation_prompt=a.prompt, token_contexts=a.scoring_contexts(spec.scoring.contexts),
                aggregation=spec.scoring.aggregations[0], correctness_rule=spec.correctness.primary,
                ece_estimator="ece", n_bins=spec.metrics.ece_bins, ece_closure=list(spec.metrics.ece_closure),
                ece_bin_confidence=list(spec.metrics.ece_bin_confidence),
                ece_conventions={c: get_convention(c).description for c in spec.metrics.ece_conventions},
                on_edge=_edge_shares(ev_edges, group, spec.metrics.ece_bins),
                parse_policy=spec.parsing.policies[0],
                system_prompt=provenance.get(mname, {}).get("system_prompt"),
                rows_total=len(u.graded), rows_dropped=dropped,
                extra={"answer_set": aid, "answer_format": a.format, "verbalized_source": a.verbalized_source(),
                       "aggregations": list(spec.scoring.aggregations), "rules": list(spec.correctness.rules),
                       "parse_policies": list(spec.parsing.policies), "refusal_policies": list(spec.parsing.refusal),
                       "chance_seed": spec.parsing.chance_seed, "metrics": spec.metrics.evaluated,
                       "bootstrap": spec.bootstrap.model_dump(), "probe_rule": spec.probe.rule,
                       "provenance": provenance.get(mname, {}),
                       "conventions": conventions(spec, a, dname)},
            ))
        except Exception as exc:  # noqa: BLE001 - recorded, never lose the run for it
            log.warning("checklist for %s/%s [%s] not built: %s", mname, dname, aid, exc)
    write_checklist(store.root, entries)


def write_checklist(out_dir: Path, entries: list[dict[str, Any]]) -> None:
    """Write the reporting checklists (one per model x dataset x answer set) as JSON and Markdown."""
    res = Path(out_dir) / "results"
    write_text_atomic(json.dumps(entries, indent=1, sort_keys=True, default=str), res / "checklist.json")
    md = ["# Reporting checklist (study 000, Table 5)", ""]
    for e in entries:
        md += [f"## {e.get('model')} / {e.get('dataset')} / answer set {e.get('extra', {}).get('answer_set', 'main')}",
               "", render_checklist_markdown(e), ""]
    write_text_atomic("\n".join(md), res / "checklist.md")


def conventions(spec: GridSpec, a: Any, dataset: str) -> list[str]:
    """The reading and scoring conventions behind one (answer set, dataset) that a reader could choose otherwise
    (docs/studies/003.md, docs/studies/002.md), for the run's checklist."""
    p = get_prompt(a.prompt)
    out = p.reader.conventions(p)
    if a.item_format.options:
        out.append(f"refusal policies {list(spec.parsing.refusal)}: drop leaves unusable replies out (counted); "
                   f"chance scores them as a random letter (seed {spec.parsing.chance_seed}) with confidence 1/k")
    if a.runs > 1 or a.id.rsplit(".run", 1)[-1].isdigit():
        out.append("repeated runs: run r samples with seed + r - 1; results/runs.csv gives mean and sd (ddof 1)")
    if any(mm.reader.options for mm in spec.methods):
        out.append("letter token probabilities: the next-token distribution restricted to the option letters and "
                   "renormalized; a letter absent from the top k counts as 0; ties scored 1/m")
    d = next((x for x in spec.datasets if x.name == dataset), None)
    if d is not None and d.adapter == "lifeeval":
        window = (d.params or {}).get("window", "inclusive")
        out.append(f"LifeEval window {window!r} (inclusive: |D - g| <= r, 2r + 1 ages; official: floor(g - r) <= D "
                   "< g + r); deaths past the last listed age fall at that age; MAS = the best guess's true "
                   "probability, the smallest guess on ties; an answer scores the true probability of its guess")
    return out


def write_outputs(spec: GridSpec, store: RunStore, ev: Evaluation, units: dict[tuple[str, str, str], Unit],
                  provenance: dict[str, dict[str, str]]) -> None:
    """Write ``results/``: the evaluator's tidy tables, the checklist, ``run_info.json`` (flows/store/run_info.py:
    bins, closure, level, primary group) and ``report.md`` (the studies' views are written by the runner,
    flows/studies/)."""
    res = store.root / "results"
    write_frames(Frames({"metrics": ev.metrics, "gaps": ev.gaps, "shifts": ev.shifts, "settings": ev.settings,
                         "dropped": ev.dropped, "edges": ev.edges, "closure": ev.closure, "verdicts": ev.verdicts}),
                 res)
    _checklist(spec, store, provenance, units, ev.dropped, ev.edges)
    p = primary_group(spec)
    write_run_info(store.root, RunInfo(command="run", name=spec.name, n_bins=spec.metrics.ece_bins,
                                       ece_closure=spec.metrics.ece_closure,
                                       ece_bin_confidence=spec.metrics.ece_bin_confidence,
                                       level=spec.bootstrap.level,
                                       primary={**p, "aggregation": spec.scoring.aggregations[0]}))
    write_text_atomic(render_markdown(select(ev.metrics, p), select(ev.gaps, p), select(ev.shifts, p),
                                      select(ev.settings, p), ev.closure, spec.bootstrap.level), res / "report.md")


def verdict_mlflow(verdicts: pd.DataFrame) -> tuple[dict[str, float], dict[str, str]]:
    """The verdicts (``results/verdicts``, analysis/verdicts.py) as parent-run metrics and tags, so runs can be
    compared in the MLflow UI: ``verdict/<a>-<b>/<metric>/share_a_better`` with ``.../lo`` and ``.../hi``,
    ``.../share_resolved_a``, ``.../share_resolved_b`` (NaN left out), and the tag
    ``confgrid.verdict.<a>-<b>.<metric>`` = ``"<verdict> (holds for <side>)"``; a model-vs-model conclusion under an
    ACE view has the view after the metric (``verdict/<a>-<b>/ece/ia/...``)."""
    if verdicts is None or verdicts.empty:
        return {}, {}
    base = lambda r: ("verdict", f"{r.signal_a}-{r.signal_b}", r.metric, view_of(r))  # noqa: E731
    metrics = keyed_metrics(verdicts, base, {k: k for k in ("share_a_better", "lo", "hi", "share_resolved_a",
                                                              "share_resolved_b")})
    tags = {"confgrid." + mlflow_key(*base(r)).replace("/", "."): f"{r.verdict} (holds for {r.holds_for or 'neither'})"
            for r in verdicts.itertuples(index=False)}
    return metrics, tags


def grid_params(spec: GridSpec) -> dict[str, Any]:
    """The grid's protocol axes as MLflow params of the parent run."""
    def axes(*paths: str) -> dict[str, Any]:
        out = {}
        for path in paths:
            v = spec
            for part in path.split("."):
                v = getattr(v, part)
            out[path] = list(v) if isinstance(v, tuple) else v
        return out

    return {
        **axes("elicitation.prompt", "elicitation.max_new_tokens", "scoring.contexts", "scoring.aggregations"),
        "answer_sets": ["main"] + [a.id for a in spec.answer_sets],
        **axes("parsing.policies", "probe.enabled", "probe.rule", "correctness.rules", "correctness.primary",
               "metrics.names", "metrics.ece_bins", "metrics.ece_closure", "metrics.ece_bin_confidence"),
        **(axes("metrics.ece_conventions") if spec.metrics.ece_conventions else {}),
        "metrics.ece_estimator": "equal_width",
        **axes("bootstrap.resamples", "bootstrap.seed", "bootstrap.level", "bootstrap.interval"),
        **(axes("bootstrap.cluster") if spec.bootstrap.cluster else {}),
        **({"execution.stop_when_resolved": json.dumps(spec.execution.stopping.model_dump(mode="json"),
                                                       sort_keys=True)} if spec.execution.stopping else {}),
        "models": [m.name for m in spec.models],
        "datasets": [d.name for d in spec.datasets],
        "confgrid_version": __version__,
        "python": platform.python_version(),
    }


def dataset_refs(spec: GridSpec, items: pd.DataFrame) -> dict[str, DatasetRef]:
    """Dataset name -> its MLflow dataset input (:class:`~confgrid.flows.tracking.DatasetRef`: name, digest of the
    item ids the run used, source), from ``tables/items.parquet`` (``dataset``, ``item_id``); a dataset without items
    is left out."""
    out: dict[str, DatasetRef] = {}
    for d in spec.datasets:
        ids = items.loc[items["dataset"] == d.name, "item_id"]
        if ids.empty:
            continue
        bundled = d.path == BUNDLED
        out[d.name] = DatasetRef(name=d.name, digest=items_digest(ids),
                                 source=f"bundled:{d.adapter}" if bundled else str(d.path),
                                 source_type="bundled" if bundled else "local", n_items=int(ids.nunique()))
    return out


def log_results(spec: GridSpec, store: RunStore, tracker: Tracker, ev: Evaluation,
                provenance: dict[str, dict[str, str]], run_metrics: dict[str, float], tables: dict[str, Path]) -> None:
    """One MLflow child run per (model, dataset) setting; run counters, results and tables on the parent.

    Metric keys are the same as ``confgrid analyze``'s (flows/tracking.py ``result_metrics``):
    ``<signal>/<metric>/{point,lo,hi}`` and ``gap/<signal_a>-<signal_b>/<metric>/{point,lo,hi}``. A resumed or
    resubmitted run logs into the same child runs (``meta.mlflow_setting_runs``), at step = the invocation's index, so
    each metric's history shows every invocation.
    """
    axes = grid_params(spec)
    primary = primary_group(spec)
    # one child run per setting per parent run: a resume or resubmit logs into the same runs, at the next step
    runs = store.meta.setdefault("mlflow_setting_runs", {})
    if runs.get("parent") != tracker.parent_run_id:
        runs.clear()
        runs["parent"] = tracker.parent_run_id
    step = max(len(store.meta.get("invocations", [])) - 1, 0)
    met, gaps = select(ev.metrics, primary), select(ev.gaps, primary)
    if not met.empty:
        met = met[met["aggregation"].isin(["", spec.scoring.aggregations[0]])]
    settings = select(ev.settings, primary)
    datasets = (dataset_refs(spec, pd.read_parquet(tables["items"], columns=["dataset", "item_id"]))
                if "items" in tables else {})
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
                  **{f"dataset.params.{k}": v for k, v in d.params.items()},
                  **{f"provenance.{k}": v for k, v in provenance.get(m.name, {}).items()}}
        gsub = gaps[gaps["setting"] == setting] if not gaps.empty else gaps
        metrics = result_metrics(sub, gsub)
        for r in settings[settings["setting"] == setting].itertuples():
            metrics.update({"parse_rate": r.parse_rate, "accuracy": r.accuracy, "n_analyzed": r.n_analyzed})
        csv = write_frame_atomic(sub, store.root / "results" / "by_setting" / f"{m.name}__{d.name}.csv")
        runs[setting] = tracker.child(run_name=setting, params=params, metrics=metrics, artifacts=[csv],
                                      tags={"confgrid.kind": "setting", "confgrid.setting": setting},
                                      run_id=runs.get(setting), step=step, dataset=datasets.get(d.name),
                                      model=ModelRef(name=m.name, model_id=m.model, revision=m.revision or "",
                                                     params={"backend": m.backend, "dtype": m.dtype,
                                                             "tensor_parallel_size": str(m.tensor_parallel_size)}))
    tracker.log_metrics(run_metrics, step=step)
    store.save_manifest()
    res = store.root / "results"
    tracker.log_artifacts(sorted(res.glob("*.csv")) + [res / "report.md", res / "checklist.json", res / "checklist.md"],
                          "results")
    tracker.log_artifacts(list(tables.values()), "tables")
    figs = res / "figures"  # drawn by `confgrid run` / `confgrid report` (confgrid.report); logged again by `log`
    tracker.log_artifacts(sorted(figs.glob("*.png")) + sorted(figs.glob("*.svg")), "results/figures")
    tracker.log_artifacts([store.root / "report.html", store.root / "grid.yaml", store.root / "manifest.json"])
