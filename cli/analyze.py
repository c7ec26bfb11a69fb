"""``confgrid analyze``: the command over :func:`confgrid.flows.analyze.analysis.analyze` (options, messages, exit status).

Exit status: 0 done; 2 bad input or options (every bad row named, nothing written); 3 every file written but the
MLflow record failed (``confgrid log OUT`` logs it later).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

import pandas as pd
import typer
from rich.console import Console

from confgrid.analysis.conventions import CONVENTIONS
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.analysis.registry import GRAMMAR
from confgrid.cli.console import setup_logging
from confgrid.cli.show.ace import print_ace
from confgrid.flows.analyze.analysis import EXPERIMENT, TrackingWarning, analyze
from confgrid.flows.analyze.input import AnalyzeWarning
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.analyze.spec import DEFAULT_METRICS, AnalyzeSpec, available_metrics, slow_metrics
from confgrid.flows.evaluate.outputs import closure_lines, interval_notes
from confgrid.flows.tracking import EXIT_TRACKING_FAILED

__all__ = ["analyze_cmd"]


#: the column flags fill AnalyzeSpec.columns, the verdict flags AnalyzeSpec.verdicts; every other parameter is named
#: as the spec's field
_COLUMNS = {"setting_col": "setting", "item_col": "item_id", "signal_col": "signal", "confidence_col": "confidence",
            "correct_col": "correct", "model_col": "model"}
_VERDICTS = ("robust_point_share", "robust_resolved_share", "fragile_point_share", "robust_min_settings")


def _spec(ctx: typer.Context, spec_file: Path | None, values: dict) -> AnalyzeSpec:
    """The :class:`AnalyzeSpec` of the flags; with ``--spec FILE``, the file's, with the flags given on the
    command line on top (a flag left at its default does not override the file)."""
    given = {n for n in values if spec_file is None or  # (by name: typer ships its own copy of click's enum)
             getattr(ctx.get_parameter_source(n), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")}
    fields = {n: values[n] for n in AnalyzeSpec.model_fields if n in given and values.get(n) is not None}
    columns = {role: values[n] for n, role in _COLUMNS.items() if n in given}
    verdicts = {n: values[n] for n in _VERDICTS if n in given}
    fields.update({"columns": columns} if columns else {}, **({"verdicts": verdicts} if verdicts else {}))
    if spec_file is None:
        return AnalyzeSpec(**fields)
    return AnalyzeSpec.from_yaml(spec_file, **fields)


def analyze_cmd(
    ctx: typer.Context,
    input: Path = typer.Argument(None, metavar="[INPUT]", show_default=False,
                                 help="Per-question outputs: .csv (header row), .jsonl/.ndjson or .parquet/.pq; "
                                      "one row per (setting, item_id, signal). Required unless --spec names it."),
    out: Path = typer.Option(None, "--out", help="Output directory: results/ (metrics, gaps, shifts, alignment, "
                                                 "edges, closure, verdicts; .csv and .parquet), analyze.json, and "
                                                 "mlflow.db when it is the MLflow store. Required unless --spec "
                                                 "names it.",
                             show_default=False),
    spec_file: Path = typer.Option(None, "--spec", help="A YAML file of the options (keys: the fields of "
                                   "flows/analyze/spec.py AnalyzeSpec, e.g. input, out, metrics, n_resamples, "
                                   "group_col); flags given on the command line override its values.",
                                   show_default=False),
    metrics: str = typer.Option(",".join(DEFAULT_METRICS), "--metrics",
                                help=f"Comma-separated metrics; choices: {', '.join(available_metrics())}, and "
                                     f"every binned ECE named {GRAMMAR} (each computed exactly as named). "
                                     f"Slow (one call per resample): {', '.join(slow_metrics()) or 'none'}."),
    n_resamples: int = typer.Option(10_000, "--bootstrap", help="Paired bootstrap resamples per setting."),
    level: float = typer.Option(0.95, "--level", help="Interval level, in (0, 1)."),
    interval: str = typer.Option("percentile", "--interval",
                                 help="Interval method: percentile (the default, unchanged), basic (reverse "
                                      "percentile), bc (bias-corrected percentile) or jeffreys (plug-in binned ECEs: "
                                      "each bin's accuracy drawn from its Jeffreys posterior, honest when every answer "
                                      "is right; other metrics keep percentile); README 'How far to trust an "
                                      "interval' gives each one's measured coverage. A value whose resamples have no "
                                      "spread is marked degenerate in the interval column and resolves nothing."),
    seed: int = typer.Option(0, "--seed", help="Base seed; a setting's seed is setting_seed(setting, '', SEED)."),
    n_bins: int = typer.Option(10, "--ece-bins", help="The bins of the binned names without their own count (ece, "
                                                       "ece_equal_mass, ece_centred; ece_15 has 15), 1 to 1000."),
    ece_closure: str = typer.Option("left", "--ece-closure",
                                    help="Bin closures of the unsuffixed binned metrics (ece, ece_<B>, ece_equal_mass), "
                                         "comma-separated: left ([k/B, (k+1)/B), the default), right ((k/B, (k+1)/B], "
                                         "R cut on exact breaks), right_float (right-closed on np.linspace edges: "
                                         "scikit-learn, study 002), left_float (left-closed on np.linspace edges: "
                                         "np.digitize). left,right adds ece_right beside ece; "
                                         "OUT/results/closure.csv lists where they differ. A name with its closure "
                                         "(ece_right) is computed as named."),
    ece_bin_confidence: str = typer.Option("mean", "--ece-bin-confidence",
                                           help="What stands for a bin's confidence in the unsuffixed fixed-edge "
                                                "(equal-width and centred) binned metrics, comma-separated: mean (of "
                                                "the bin's answers, the "
                                                "default) or midpoint (the bin's centre, as Mueller et al. 2026). "
                                                "mean,midpoint adds ece_midpoint beside ece."),
    ece_conventions: str = typer.Option("", "--ece-convention",
                                       help="Published ECE conventions to compute beside --metrics, comma-separated, "
                                            "each as the metric ece_NAME: " + ", ".join(CONVENTIONS) + " (README, "
                                            "'ECE conventions', gives each one's source)."),
    setting_col: str = typer.Option("setting", "--setting-col", help="Column holding the setting (unit of pairing)."),
    item_col: str = typer.Option("item_id", "--item-col", help="Column holding the question id."),
    signal_col: str = typer.Option("signal", "--signal-col", help="Column holding the confidence method."),
    confidence_col: str = typer.Option("confidence", "--confidence-col", help="Column holding confidence in [0, 1]."),
    correct_col: str = typer.Option("correct", "--correct-col", help="Column holding correctness (0/1 or in [0, 1])."),
    tracking_uri: str = typer.Option(None, "--tracking-uri",
                                     help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI if set, else "
                                          "sqlite:///OUT/mlflow.db)."),
    track: bool = typer.Option(True, "--tracking/--no-tracking", help="Log the analysis to MLflow."),
    use_ray: bool = typer.Option(False, "--ray/--no-ray", help="Spread the bootstrap over Ray Data CPU workers "
                                                               "(same numbers; joins RAY_ADDRESS if set)."),
    num_workers: int = typer.Option(None, "--workers",
                                help="With --ray: most CPU workers at once (default: every CPU of the cluster)."),
    model_col: str = typer.Option("model", "--model-col", help="Column holding the model (optional; with two or "
                                  "more models the accuracy-controlled comparison of study 001 runs too)."),
    views: str = typer.Option(None, "--views", help="Comparison views, e.g. raw,ia,da,ca (default raw,ia,da; ca "
                              "with --candidates)."),
    pairs: str = typer.Option(None, "--pairs", help="Model pairs A:B[:LABEL],... (default: every pair)."),
    candidates: Path = typer.Option(None, "--candidates", help="Candidate ratings for the CA view (columns dataset, "
                                    "item_id, candidate, surface, producers, label, rater, method, signal)."),
    comparison_resamples: int = typer.Option(2000, "--comparison-bootstrap",
                                             help="Paired resamples per comparison cell."),
    ia_strata: int = typer.Option(None, "--ia-strata", help="Graded correctness: IA matches scores in the same of "
                                  "this many equal-width strata (default: exact score match)."),
    threshold: float = typer.Option(None, "--threshold", help="Graded correctness to 0/1: correct >= T counts as "
                                    "correct (Rank-Calibration: ROUGE >= 0.7). Without it AUROC and AURC use graded "
                                    "values as soft labels."),
    uncertainty: str = typer.Option(None, "--uncertainty", help="The confidence column is an uncertainty score u "
                                    "(lower = more confident): exp-neg (c = exp(-u), u >= 0), sigmoid-neg (c = 1/(1 + "
                                    "exp(u))) or rank (within setting and signal); order-preserving, so AUROC and "
                                    "AURC are exact."),
    in_turn: bool = typer.Option(None, "--in-turn/--whole-file", help="One setting at a time, read from the Parquet "
                                 "row groups that hold it (bounded memory; default for Parquet without a model "
                                 "column)."),
    group_col: str = typer.Option(None, "--group-col", help="Column naming each item's cluster (e.g. the question "
                                  "of several generations): the bootstrap resamples clusters with all their items."),
    against: str = typer.Option(None, "--against", help="Compare every signal against this one only (gap = "
                                "metric(AGAINST) - metric(other)); default: every ordered pair, or verbalized for a "
                                "run's tables/signals.parquet."),
    signal_pairs: str = typer.Option(None, "--signal-pairs", help="Pairs of signals A:B,C:D to compare (with "
                                     "--against, or instead of every ordered pair; a grid's metrics.pairs)."),
    robust_point_share: float = typer.Option(0.9, "--robust-point-share", help="Verdicts: least share of settings "
                                             "where the majority side is better by point for 'robust'."),
    robust_resolved_share: float = typer.Option(0.5, "--robust-resolved-share", help="Verdicts: least share of "
                                                "settings resolved in the majority side's favour for 'robust'."),
    fragile_point_share: float = typer.Option(0.75, "--fragile-point-share", help="Verdicts: below this share of "
                                              "settings favouring the majority side by point, 'fragile'."),
    robust_min_settings: int = typer.Option(3, "--robust-min-settings", help="Verdicts: fewer settings than this "
                                            "are never 'robust'."),
) -> None:
    """Metrics with paired bootstrap intervals, and paired gaps between signals, of outputs from anywhere.

    INPUT has one row per (setting, item_id, signal) with columns setting,
    item_id, signal, confidence, correct (rename with the --*-col flags).
    Every bad row is reported by line (CSV: the header is line 1; Parquet:
    0-based row) and nothing is written (exit status 2). Within a setting,
    signals are compared on the items all of them scored; items left out are
    counted in OUT/results/alignment.csv. --group-col COL resamples the clusters
    of COL (e.g. the question of several generations) with all their items, for
    intervals that allow for rows that are not independent.

    Writes OUT/results/metrics.csv (a row per setting, signal and metric: point,
    lo, hi, n), OUT/results/gaps.csv (gap = metric(signal_a) - metric(signal_b);
    the pairs: see --against and --signal-pairs),
    OUT/results/shifts.csv, OUT/results/alignment.csv, OUT/results/edges.csv,
    OUT/results/closure.csv, OUT/results/verdicts.csv, a .parquet copy of each,
    OUT/results/run_info.json (bins, closures, level: what show and report
    read), OUT/analyze.json (what `confgrid log OUT` logs) and an MLflow parent run
    (experiment confgrid/analyze; store: --tracking-uri, else
    $MLFLOW_TRACKING_URI, else OUT/mlflow.db) with one child run per setting.
    With a model column, the comparison across models adds
    OUT/results/ace_*.csv. If the MLflow store fails, every file is still
    written and the exit status is 3; log them later with `confgrid log OUT`.
    """
    setup_logging(False)
    values = dict(locals())
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalyzeWarning)
        warnings.simplefilter("always", UndefinedMetricWarning)
        try:
            spec = _spec(ctx, spec_file, values)  # the flags, a --spec file or both
            if spec.use_ray:
                _quiet_ray_data()
            result = analyze(spec)
        except AnalyzeInputError as exc:
            _echo_warnings(caught)
            typer.echo(f"confgrid analyze: {exc}", err=True)
            raise typer.Exit(2) from None
    _echo_warnings(caught)
    tables, spec, out = result.tables, result.spec, result.spec.out
    m = tables["metrics"]
    typer.echo(f"{m['setting'].nunique()} setting(s), {len(m)} (setting, signal, metric) rows, "
               f"{len(tables['gaps'])} gap rows, {spec.n_resamples} {result.resampled}.")
    if len(m) <= 60:
        shown = ["setting", "signal", "metric", "point", "lo", "hi", "n", "interval",
                 *(["n_clusters"] if spec.group_col else [])]
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            typer.echo(m[shown].to_string(index=False))
    if result.n_graded and spec.threshold is None:
        typer.echo(f"note: correctness is graded ({result.n_graded} values strictly between 0 and 1): AUROC and "
                   "AURC use them as soft labels (an item counts as correct with weight y and wrong with 1 - y); "
                   "--threshold T makes correct >= T a 1 and the rest 0.")
    elif spec.threshold is not None:
        typer.echo(f"note: correctness thresholded at {spec.threshold:g} (correct >= {spec.threshold:g} is 1, "
                   "else 0).")
    res = out / "results"
    for line in closure_lines(tables.get("closure")):
        typer.echo(f"note: {line} (results/closure.csv)")
    for line in interval_notes(m):
        typer.echo(f"note: {line}")
    typer.echo(f"Wrote {res / 'metrics.csv'}, {res / 'gaps.csv'}, {res / 'shifts.csv'}, {res / 'alignment.csv'}, "
               f"{res / 'edges.csv'}, {res / 'closure.csv'}, {res / 'verdicts.csv'} (+ .parquet), {res / 'run_info.json'}")
    if "ace_gaps" in tables:
        print_ace(res, Console(width=200))
        typer.echo(f"Wrote the comparison across models: {res}/ace_*.csv (+ .parquet, .md)")
    if result.run_id:
        typer.echo(f"MLflow parent run {result.run_id} (experiment {EXPERIMENT}) in {result.tracking_uri}")
    failure = result.tracking_failure
    if failure is not None:
        typer.echo(f"confgrid analyze: {failure.line()}\n{failure.hint(out)}", err=True)
        raise typer.Exit(EXIT_TRACKING_FAILED)


def _quiet_ray_data() -> None:
    """Ray Data without progress bars or an INFO line per execution (the table printed at the end says it all)."""
    import ray.data  # lazy: Ray loads only when the bootstrap is spread over it

    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)


def _echo_warnings(caught: list[warnings.WarningMessage]) -> None:
    shown = set()
    for w in caught:
        if issubclass(w.category, TrackingWarning):
            continue  # said once, with the exit status, at the end
        if issubclass(w.category, (AnalyzeWarning, UndefinedMetricWarning)):
            msg = str(w.message)
            if msg not in shown:
                shown.add(msg)
                typer.echo(f"warning: {msg}", err=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, file=sys.stderr)
