"""``confgrid analyze``: metrics and paired gaps of per-question outputs from anywhere.

Input: one row per (setting, item, signal) in CSV, Parquet or JSONL (chosen by
the file extension) with five columns, renamable with flags:

============  =====================================================  ==================
role          meaning                                                flag
============  =====================================================  ==================
setting       the unit of pairing (e.g. ``model/dataset``)           ``--setting-col``
item_id       the question                                           ``--item-col``
signal        the confidence method (``verbalized``, ``token``...)   ``--signal-col``
confidence    a number in [0, 1]                                     ``--confidence-col``
correct       0/1 (or graded in [0, 1]; ``true``/``false`` too)      ``--correct-col``
============  =====================================================  ==================

Other columns are ignored. Every row is checked before anything is computed;
each bad row is reported by its place in the file (CSV: line number with the
header as line 1; JSONL: line number; Parquet: 0-based row index): missing
values (empty, null, NaN), non-numbers, confidence or correct outside [0, 1],
duplicate (setting, item_id, signal) rows (naming both places), malformed
lines. Up to :data:`MAX_PROBLEMS` problems are listed with the count of the
rest, and :class:`AnalyzeInputError` is raised; nothing is written.

Pairing: within a setting the signals are compared on the items that every
signal scored (instance-aligned). Items lacking some signal are left out of
that setting, counted per signal in ``alignment.csv`` and announced with an
:class:`AnalyzeWarning`, never silently.

Clusters: with ``--group-col COL`` the bootstrap resamples the distinct
values of ``COL`` with all their items (flows/analyze/groups.py); the tables
say so (``cluster_col``, ``n_clusters``).

Determinism: settings, signals and items are sorted (as strings), so the
output does not depend on the order of the input rows. The bootstrap seed of
a setting is ``setting_seed(setting, "", seed)`` (SHA-256 of the JSON
``[setting, "", seed]``, see :func:`confgrid.analysis.bootstrap.setting_seed`),
the same derivation as a grid run's ``setting_seed(model, dataset, seed)``
with the setting name in place of the model and an empty dataset. A fixed
``--seed`` gives byte-identical CSV files, with or without Ray.

Outputs in ``DIR``: ``metrics.csv`` (setting, signal, metric, point, lo, hi,
n, n_undefined), ``gaps.csv`` (every ordered pair of signals within a
setting: gap = metric(signal_a) - metric(signal_b) with its paired
percentile interval), ``alignment.csv``, Parquet copies of the three,
``analyze.json`` (the MLflow record's params and tags, what ``confgrid log
DIR`` logs, :func:`log_analysis`) and an MLflow record (experiment
``confgrid/analyze``, default store ``sqlite:///DIR/mlflow.db``): a parent
run named after the input file, one child run per setting with
``<signal>/<metric>/{point,lo,hi}`` metrics, and the tables as artifacts of
the parent run. If the store fails, the files are written all the same, a
:class:`TrackingWarning` says so and the command exits with
:data:`~confgrid.flows.tracking.EXIT_TRACKING_FAILED`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from confgrid.analysis.bootstrap import BootstrapResult
from confgrid.analysis.resampling import DEFAULT_CHUNK_SIZE
from confgrid.analysis.kernels import has_weighted_kernel
from confgrid.analysis.closure import closure_notes, edge_bins
from confgrid.analysis.evaluation import (
    GAP_COLUMNS,
    METRIC_COLUMNS,
    SHIFT_COLUMNS,
    Comparisons,
    UnitPlan,
    estimates,
    unit_names,
)
from confgrid.analysis.binning import BIN_CONFIDENCES, MAX_BINS, BinnedNameError
from confgrid.analysis.conventions import CONVENTIONS, convention_metric
from confgrid.analysis.intervals import INTERVALS
from confgrid.analysis.registry import GRAMMAR, METRICS, check_bins, expand_binned, get_metric, metric_sort_key
from confgrid.registry import UnknownNameError
from confgrid.analysis.verdicts import VerdictRule, verdict_table
from confgrid.flows.evaluate.clusters import cluster_note, with_cluster_columns
from confgrid.flows.analyze.input import AnalyzeWarning, CheckOptions, _columns, read_rows
from confgrid.flows.analyze.read import AnalyzeInputError

if TYPE_CHECKING:
    from confgrid.flows.tracking import Logged

__all__ = [
    "DEFAULT_METRICS",
    "EXPERIMENT",
    "RECORD_FILE",
    "TrackingWarning",
    "analyze",
    "available_metrics",
    "log_analysis",
    "parse_metrics",
    "slow_metrics",
]

EXPERIMENT = "confgrid/analyze"
DEFAULT_METRICS = ("ece", "auroc", "aurc", "brier")
#: the analysis' MLflow params and tags in the output directory (what ``confgrid log`` logs)
RECORD_FILE = "analyze.json"
#: the tables of an analysis, each written as OUT/results/<name>.csv and .parquet (the layout of a run)
TABLES = ("metrics", "gaps", "shifts", "alignment", "verdicts")
#: the one results schema (analysis/evaluation.py), the same as a run's
METRICS_COLUMNS, GAPS_COLUMNS = METRIC_COLUMNS, GAP_COLUMNS
ALIGNMENT_COLUMNS = ["setting", "signal", "n_items", "n_used", "n_left_out", "left_out_examples"]


class TrackingWarning(AnalyzeWarning):
    """The MLflow record could not be written; the files are. ``.failure`` is the
    :class:`~confgrid.flows.tracking.TrackingFailure`."""

    def __init__(self, failure: Any, out_dir: Path) -> None:
        super().__init__(f"{failure.line()}; {failure.hint(out_dir)}")
        self.failure = failure


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------


def available_metrics() -> list[str]:
    """Every registered metric (the ``--metrics`` choices printed in full), numbers in numeric order."""
    return sorted(METRICS, key=metric_sort_key)


def slow_metrics() -> list[str]:
    """Metrics the bootstrap evaluates one resample at a time (no vectorized kernel)."""
    return sorted(m for m in METRICS if not has_weighted_kernel(m))


def parse_metrics(metrics: str | Sequence[str]) -> list[str]:
    """``"ece,auroc"`` or ``["ece", "auroc"]`` -> checked list; unknown or duplicate names raise.

    Raises
    ------
    AnalyzeInputError
        Naming the bad entry and listing the choices.
    """
    raw = [m.strip().lower() for m in (metrics.split(",") if isinstance(metrics, str) else metrics)]
    names = [m for m in raw if m]
    choices = available_metrics()
    if not names:
        raise AnalyzeInputError(f"--metrics: name at least one metric; choose from {', '.join(choices)}")
    if len(names) != len(raw):
        raise AnalyzeInputError(f"--metrics: {metrics!r} has an empty entry; give names separated by single commas")
    for m in names:
        try:
            get_metric(m)
        except BinnedNameError as exc:  # a name of the binned-ECE grammar that spells nothing: why, and what works
            raise AnalyzeInputError(f"--metrics: {exc}") from None
        except UnknownNameError as exc:
            if "did you mean" in str(exc):
                raise AnalyzeInputError(f"--metrics: {exc}") from None
            raise AnalyzeInputError(f"--metrics: unknown metric {m!r}; choose from {', '.join(choices)}, or a "
                                    f"binned ECE of the grammar {GRAMMAR}") from None
    dup = sorted({m for m in names if names.count(m) > 1})
    if dup:
        raise AnalyzeInputError(f"--metrics: {', '.join(dup)} given more than once")
    return names


# ---------------------------------------------------------------------------
# alignment and tables
# ---------------------------------------------------------------------------


def _parse_signal_pairs(value: str | Sequence[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    """``"a:b,c:d"`` or pairs -> checked pairs of two different signal names.

    Raises
    ------
    AnalyzeInputError
        An entry that is not two different names.
    """
    if value is None:
        return ()
    items = [tuple(x.split(":")) for x in value.split(",") if x.strip()] if isinstance(value, str) else \
        [tuple(x) for x in value]
    for p in items:
        if len(p) != 2 or not all(str(n).strip() for n in p) or p[0] == p[1]:
            raise AnalyzeInputError(f"--signal-pairs: {':'.join(map(str, p))!r} is not two different signal names "
                                    "(A:B, comma-separated)")
    return tuple((str(a).strip(), str(b).strip()) for a, b in items)


def _tables(settings: list, results: dict[str, BootstrapResult], level: float, units: list[UnitPlan],
            method: str = "percentile"):
    """Metrics, gaps, shifts and edge shares of the settings (an ``Estimates`` record) through the one evaluator
    (analysis/evaluation.py), with intervals of ``method`` (analysis/intervals.py)."""
    return estimates(units, [results[st.name] for st in settings], level, method)


def parse_closures(value: str | Sequence[str]) -> list[str]:
    """``"left,right"`` or a list -> checked bin closures (``--ece-closure``).

    Raises
    ------
    AnalyzeInputError
        An unknown or repeated closure, or none (naming it and the choices).
    """
    from confgrid.analysis.metrics import CLOSURES

    raw = [c.strip().lower() for c in (value.split(",") if isinstance(value, str) else value)]
    names = [c for c in raw if c]
    bad = [c for c in names if c not in CLOSURES]
    if bad or not names or len(set(names)) != len(names) or len(names) != len(raw):
        raise AnalyzeInputError(f"--ece-closure: {value!r}; give one or more of {', '.join(CLOSURES)} "
                                "(comma-separated, each once)")
    return names


def _takes_axes(names: Sequence[str]) -> bool:
    """Whether some of ``names`` is an unsuffixed binned metric, the names the closure and bin-confidence axes act
    on (analysis/registry.py ``expand_binned``)."""
    return expand_binned(names, ["left", "right"]) != list(dict.fromkeys(names))


def _parse_choices(flag: str, value: str | Sequence[str], allowed: Sequence[str], at_least: int = 1) -> list[str]:
    """``"a,b"`` or a list -> checked names, each once, from ``allowed``.

    Raises
    ------
    AnalyzeInputError
        An unknown or repeated name, or fewer than ``at_least``, naming the flag, the value and the choices.
    """
    raw = [c.strip().lower() for c in (value.split(",") if isinstance(value, str) else value)]
    names = [c for c in raw if c]
    bad = [c for c in names if c not in allowed]
    empty = len(names) != len(raw) and not (at_least == 0 and raw == [""])
    if bad or empty or len(names) < at_least or len(set(names)) != len(names):
        raise AnalyzeInputError(f"{flag}: {value!r}; give {'one or more' if at_least else 'zero or more'} of "
                                f"{', '.join(allowed)} (comma-separated, each once)")
    return names


def _write(df: pd.DataFrame, path: Path) -> None:
    from confgrid.flows.store.run_store import write_frame_atomic

    write_frame_atomic(df, path)


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------


def analyze(
    input_path: str | Path,
    out_dir: str | Path,
    *,
    metrics: str | Sequence[str] = DEFAULT_METRICS,
    n_resamples: int = 10_000,
    seed: int = 0,
    n_bins: int = 10,
    ece_closure: str | Sequence[str] = "left",
    ece_bin_confidence: str | Sequence[str] = "mean",
    ece_conventions: str | Sequence[str] = (),
    columns: Mapping[str, str] | None = None,
    tracking_uri: str | None = None,
    track: bool = True,
    use_ray: bool = False,
    num_workers: int | None = None,
    level: float = 0.95,
    interval: str = "percentile",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    views: str | Sequence[str] | None = None,
    pairs: str | Sequence | None = None,
    candidates: str | Path | None = None,
    comparison_resamples: int = 2000,
    ia_strata: int | None = None,
    threshold: float | None = None,
    uncertainty: str | None = None,
    in_turn: bool | None = None,
    group_col: str | None = None,
    against: str | None = None,
    signal_pairs: str | Sequence[tuple[str, str]] | None = None,
    verdict_rule: VerdictRule | None = None,
) -> dict[str, pd.DataFrame]:
    """Metrics with paired bootstrap intervals and pairwise gaps of an input file.

    Parameters
    ----------
    input_path : path
        CSV, JSONL or Parquet; see the module docstring for the columns.
    out_dir : path
        Created if missing; receives the tables (and the default MLflow store).
    metrics : str or list of str, default ("ece", "auroc", "aurc", "brier")
        Names from :func:`available_metrics`; a comma-separated string works.
    n_resamples : int, default=10_000
        Paired bootstrap resamples per setting (>= 1).
    seed : int, default=0
        Base seed (>= 0); a setting's seed is ``setting_seed(setting, "", seed)``.
    n_bins : int, default=10
        Equal-width ECE bins.
    ece_closure : str or list of str, default "left"
        Bin closures of the binned metrics (``left``, ``right``, ``right_float``; comma-separated works):
        ``"left,right"`` computes ``ece`` and ``ece_right`` (and ``ece_<B>_right`` ...) on the same
        resamples and writes ``results/closure.csv`` where they differ (README, "ECE conventions").
        It applies to the unsuffixed binned names only: ``ece_right`` is right-closed whatever this says.
    ece_bin_confidence : str or list of str, default "mean"
        What stands for a bin's confidence in the unsuffixed equal-width binned metrics (``mean``, ``midpoint``;
        comma-separated works): ``"mean,midpoint"`` computes ``ece`` and ``ece_midpoint``.
    ece_conventions : str or list of str, default ()
        Published ECE conventions (analysis/conventions.py: ``study002``, ``muller2026``, ...; comma-separated
        works), each computed as the metric ``ece_<name>`` beside ``metrics``.
    columns : mapping, optional
        Role -> column name, for roles named differently in the file.
    tracking_uri : str, optional
        MLflow tracking URI; default ``sqlite:///<out_dir>/mlflow.db``.
    track : bool, default=True
        Log to MLflow (False: only the files).
    use_ray : bool, default=False
        Spread the bootstrap with Ray Data (:mod:`confgrid.flows.evaluate.bootstrap_ray`;
        same numbers). Joins ``RAY_ADDRESS`` or an initialized Ray, else
        starts a local instance.
    num_workers : int, optional
        Ray workers (CPUs); default every CPU of the cluster.
    level : float, default=0.95
        Interval level.
    interval : {"percentile", "basic", "bc"}, default "percentile"
        Interval method (analysis/intervals.py; README "How far to trust an interval").
    chunk_size : int, default=1000
        Bootstrap chunk size (part of the draw).
    views, pairs, candidates, comparison_resamples, ia_strata
        An input with a ``model`` column is also compared across models
        (study 001, ACE; flows/analyze/ace.py): the views (default raw, ia,
        da, and ca when ``candidates``, a ratings file, is given), the pairs
        (``"a:b:label,..."`` or tuples; default every pair), the resamples
        per cell, and for graded correctness the IA strata (default: exact
        score match). The ACE tables are returned too (``"ace_gaps"``, ...) and
        written as ``OUT/ace_*``; each setting of the usual tables is then
        ``model/setting``.
    threshold : float in (0, 1], optional
        Graded correctness to 0/1: ``correct >= threshold`` is correct
        (Rank-Calibration: ROUGE >= 0.7). Without it graded values are soft
        labels for AUROC and AURC (``attrs["n_graded"]`` counts them).
    uncertainty : str, optional
        The confidence column holds an uncertainty score u (lower = more
        confident), mapped by a monotone decreasing transform of
        :data:`~confgrid.flows.analyze.input.UNCERTAINTY` (``exp-neg``,
        ``sigmoid-neg``, ``rank``); AUROC and AURC are those of -u.
    in_turn : bool, optional
        Analyze one setting at a time, reading each setting's rows from the
        Parquet row groups that hold it (flows/analyze/in_turn.py; same numbers,
        memory of the largest setting). Default: on for Parquet input without
        a model column; True for other input is an error.
    group_col : str, optional
        A column of the file naming each item's cluster: the bootstrap then
        resamples clusters with all their items (flows/analyze/groups.py);
        the metrics and gaps tables gain ``cluster_col`` and ``n_clusters``.
        None: items are resampled. For a signal table (below) only
        ``cluster`` (its cluster column) is allowed.
    against : str, optional
        Compare every signal against this one only (``gap = metric(against) -
        metric(other)``) instead of every ordered pair; a signal table is
        compared against ``verbalized`` by default, as a run is.
    signal_pairs : str or list of (str, str), optional
        Pairs of signals to compare (``"a:b,c:d"``), with ``against`` or
        instead of every ordered pair (a grid's ``metrics.pairs``).
    verdict_rule : VerdictRule, optional
        Thresholds of the robustness verdicts (``results/verdicts``, analysis/verdicts.py); default
        :class:`~confgrid.analysis.verdicts.VerdictRule`.

    A run's signal table (``tables/signals.parquet``, analysis/signals.py:
    Parquet with the unit, status and align columns) is read as such
    (flows/analyze/run_table.py): its units, statuses and alignment are those of
    the run, so the tables equal the run's, byte for byte.

    Returns
    -------
    dict of str to DataFrame
        ``"metrics"`` (setting, signal, metric, point, lo, hi, n,
        n_undefined), ``"gaps"`` (setting, signal_a, signal_b, metric, gap,
        lo, hi, excludes_zero, favours, n, n_undefined; gap = metric(signal_a)
        - metric(signal_b); favours names the better signal by the point
        estimates, for a signed metric the one closer to 0, else
        ``"neither"``), ``"alignment"`` (setting, signal, n_items, n_used,
        n_left_out, left_out_examples), ``"verdicts"`` (every conclusion of
        the gaps over the settings: analysis/verdicts.py). With tracking,
        ``result["metrics"].attrs["mlflow_parent_run_id"]`` is the parent run,
        or ``result["metrics"].attrs["tracking_failure"]`` the
        :class:`~confgrid.flows.tracking.TrackingFailure` if the store failed.

    Raises
    ------
    AnalyzeInputError
        Bad options or input (every bad row listed by its place); nothing is
        written then.

    Warns
    -----
    AnalyzeWarning
        When items are left out because some signal lacks them.
    UndefinedMetricWarning
        When a point estimate is undefined (e.g. AUROC with one class).
    TrackingWarning
        When the MLflow store fails (the files are written).
    """
    from confgrid.flows.analyze.ace import (
        compare_models,
        parse_pairs,
        parse_views,
        read_candidates,
    )

    closures = parse_closures(ece_closure)
    confs = _parse_choices("--ece-bin-confidence", ece_bin_confidence, BIN_CONFIDENCES)
    conventions = _parse_choices("--ece-convention", ece_conventions, list(CONVENTIONS), at_least=0)
    asked = parse_metrics(metrics)
    try:
        metric_names = expand_binned(asked, closures, confs)
    except ValueError as exc:
        raise AnalyzeInputError(f"--ece-closure/--ece-bin-confidence: {exc}") from None
    metric_names = list(dict.fromkeys([*metric_names, *(convention_metric(c) for c in conventions)]))
    for flag, axis, default in (("--ece-closure", closures, ["left"]), ("--ece-bin-confidence", confs, ["mean"])):
        if axis != default and not _takes_axes(asked):
            warnings.warn(f"{flag} {','.join(axis)} applies to no metric asked for: it takes effect on the binned "
                          f"names without a closure, bin-confidence or estimator suffix (ece, ece_15, ...); got "
                          f"--metrics {','.join(asked)}", AnalyzeWarning, stacklevel=2)
    views = parse_views(views)
    pairs = parse_pairs(pairs) if isinstance(pairs, str) or pairs is None else list(pairs)
    cand_df = read_candidates(candidates) if candidates is not None else None
    for flag, value, least in (("--bootstrap", n_resamples, 1), ("--ece-bins", n_bins, 1), ("--seed", seed, 0),
                               ("chunk_size", chunk_size, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise AnalyzeInputError(f"{flag}: must be an integer >= {least}, got {value!r}")
    if n_bins > MAX_BINS:
        raise AnalyzeInputError(f"--ece-bins: must be at most {MAX_BINS} (as a grid's metrics.ece_bins), got {n_bins}")
    try:
        check_bins(metric_names, int(n_bins))
    except ValueError as exc:
        raise AnalyzeInputError(f"--ece-bins {n_bins}: {exc}") from None
    if num_workers is not None and num_workers < 1:
        raise AnalyzeInputError(f"--workers: must be >= 1, got {num_workers!r}")
    if not 0.0 < level < 1.0:
        raise AnalyzeInputError(f"level: must lie in (0, 1), got {level!r}")
    if interval not in INTERVALS:
        raise AnalyzeInputError(f"--interval: {interval!r}; choose from {', '.join(INTERVALS)}")
    input_path, out_dir = Path(input_path), Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise AnalyzeInputError(f"--out {str(out_dir)!r}: exists and is not a directory")

    from confgrid.flows.analyze.in_turn import ALL_PAIRS, unit_of
    from confgrid.flows.analyze.in_turn import in_turn_wanted as _in_turn
    from confgrid.flows.analyze.in_turn import object_frame as _object_frame
    from confgrid.flows.analyze.in_turn import whole_file as _whole

    from confgrid.flows.analyze.run_table import analyze_signal_table, is_signal_table

    options = CheckOptions(threshold, uncertainty)
    declared = _parse_signal_pairs(signal_pairs)
    comparisons = ALL_PAIRS if against is None and not declared else Comparisons(against=against, pairs=declared)
    table_input = is_signal_table(input_path)
    if group_col is not None:
        columns = {**(columns or {}), "group": group_col}
    cols = _columns(columns)
    in_turn = False if table_input else _in_turn(input_path, cols, in_turn)
    if in_turn and interval == "jeffreys":
        raise AnalyzeInputError("--interval jeffreys draws from each setting's items, which the in-turn road (the "
                                "default for Parquet input without a model column, or --in-turn) frees after its "
                                "bootstrap: add --whole-file, or choose percentile, basic or bc")
    rows = None
    units = None
    shifts_df = pd.DataFrame(columns=SHIFT_COLUMNS)
    if table_input:
        out = analyze_signal_table(input_path, metric_names, int(n_resamples), int(seed), int(n_bins), level,
                                   int(chunk_size), use_ray=use_ray, num_workers=num_workers, group_col=group_col,
                                   against=against, pairs=declared)
        settings, results, alignment, units = out.settings, out.results, out.alignment, out.units
        n_rows, n_graded = out.n_rows, 0
    elif in_turn:
        from confgrid.flows.analyze.in_turn import ALIGNMENT_COLUMNS as _AC
        from confgrid.flows.analyze.in_turn import analyze_in_turn

        outcomes, _plan = analyze_in_turn(input_path, cols, options, metric_names, int(n_resamples), int(seed),
                                          int(chunk_size), int(n_bins), use_ray=use_ray, num_workers=num_workers,
                                          comparisons=comparisons)
        settings = [o.setting for o in outcomes]
        results = {o.name: o.result for o in outcomes}
        units = [o.unit for o in outcomes]
        alignment = pd.DataFrame([r for o in outcomes for r in o.alignment], columns=_AC)
        n_rows, n_graded = _plan.n_rows, sum(o.n_graded for o in outcomes)
    else:
        rows = read_rows(input_path, columns, options)
        n_rows, n_graded = int(rows.pos.size), rows.n_graded
        settings, results, alignment = _whole(rows, metric_names, int(seed), int(n_resamples), int(chunk_size),
                                              int(n_bins), use_ray, num_workers, group_col)
    if units is None:
        units = [unit_of(st, comparisons, edge_bins(metric_names, int(n_bins))) for st in settings]
    est = _tables(settings, results, level, units, interval)
    metrics_df, gaps_df, shifts_df, edges_df = est.metrics, est.gaps, est.shifts, est.edges
    n_clusters = {st.name: st.n_clusters for st in settings if st.n_clusters is not None}
    metrics_df, gaps_df, shifts_df = (with_cluster_columns(df, group_col, n_clusters)
                                      for df in (metrics_df, gaps_df, shifts_df))
    metrics_df.attrs.update(n_graded=n_graded, resampled=cluster_note(group_col, n_clusters))

    out_dir.mkdir(parents=True, exist_ok=True)
    closure_df = closure_notes(metrics_df, gaps_df, edges_df, int(n_bins))
    verdicts_df = verdict_table(gaps_df, est.shares, verdict_rule, level)
    tables = {"metrics": metrics_df, "gaps": gaps_df, "shifts": shifts_df, "alignment": alignment,
              "edges": edges_df, "closure": closure_df, "verdicts": verdicts_df}
    for name, df in tables.items():
        for ext in (".csv", ".parquet"):
            _write(df, out_dir / "results" / f"{name}{ext}")
    from confgrid.flows.store.run_store import write_text_atomic as _write_text

    # the run layout: `confgrid show` and `confgrid report` read the primary group from here (an analysis has
    # one group: every row)
    _write_text(json.dumps({}), out_dir / "results" / "primary.json")
    if rows is not None and "model" in rows.frame.columns:
        if group_col is not None:
            warnings.warn(f"--group-col {group_col!r} clusters the metrics and gaps; the comparison across models "
                          "still resamples single items", AnalyzeWarning, stacklevel=2)
        ace = compare_models(_object_frame(rows.frame), out_dir / "results", views=views, pairs=pairs, candidates=cand_df,
                             n_resamples=int(comparison_resamples), seed=int(seed), n_bins=int(n_bins),
                             ia_strata=ia_strata)
        if ace is not None:
            tables.update(ace.tables())
            if ace.estimates is not None:  # the comparison's rows join the one estimates tables, its conclusions
                e = ace.estimates            # the verdicts (as in a run)
                more = {"metrics": e.metrics, "gaps": e.gaps, "shifts": e.shifts,
                        "verdicts": verdict_table(e.gaps, e.shares, verdict_rule, level)}
                for name, extra in more.items():
                    frames = [f for f in (tables[name], extra) if len(f)]
                    attrs = dict(tables[name].attrs)  # (the metrics' notes: graded rows, how it resampled)
                    if len(frames) > 1:
                        tables[name] = pd.concat(frames, ignore_index=True)
                    elif frames:
                        tables[name] = frames[0]
                    tables[name].attrs.update(attrs)
                    for ext in (".csv", ".parquet"):
                        _write(tables[name], out_dir / "results" / f"{name}{ext}")
                metrics_df, gaps_df, shifts_df = tables["metrics"], tables["gaps"], tables["shifts"]
            for msg in ace.messages:
                warnings.warn(f"comparison across models: {msg}", AnalyzeWarning, stacklevel=2)
    elif views is not None or candidates is not None:
        raise AnalyzeInputError("--views/--candidates compare models: the input needs a model column "
                                "(--model-col NAME)")
    params = dict(input=str(input_path.resolve()), metrics=metric_names, n_resamples=int(n_resamples),
                  seed=int(seed), n_bins=int(n_bins), ece_closure=",".join(closures),
                  ece_bin_confidence=",".join(confs), ece_conventions=",".join(conventions), level=level, interval=interval, chunk_size=int(chunk_size), use_ray=bool(use_ray),
                  n_rows=n_rows, n_settings=len(settings), threshold=threshold, uncertainty=uncertainty,
                  graded_soft_labels=bool(n_graded and threshold is None), in_turn=bool(in_turn),
                  **{f"column.{r}": c for r, c in cols.items()})
    if group_col is not None:  # a cluster bootstrap: say so, on which column, how many clusters
        params.update(resampling="clustered", group_col=group_col, n_clusters=",".join(map(str, n_clusters.values())))
    from confgrid.flows.tracking import choose_tracking_uri

    choice = choose_tracking_uri(tracking_uri, out_dir)  # --tracking-uri, then MLFLOW_TRACKING_URI, then OUT's store
    record = _record(input_path, settings, params, None if choice.source == "run folder" else choice.uri)
    from confgrid.flows.store.run_store import write_text_atomic

    write_text_atomic(json.dumps(record, indent=1), out_dir / RECORD_FILE)

    if track:
        from confgrid.flows.tracking import TrackingFailure

        uri = _uri(record, out_dir)
        logging.getLogger("confgrid").info("%s", choice.line())
        metrics_df.attrs["tracking_uri"] = uri
        try:
            metrics_df.attrs["mlflow_parent_run_id"] = _track(record, out_dir, uri, metrics_df, gaps_df)
        except Exception as exc:  # noqa: BLE001 - the results are written; tracking is the last step
            failure = TrackingFailure.of(uri, exc)
            metrics_df.attrs["tracking_failure"] = failure
            warnings.warn(TrackingWarning(failure, out_dir), stacklevel=2)
    return tables


def _record(input_path: Path, settings: list, params: dict[str, Any],
            tracking_uri: str | None) -> dict[str, Any]:
    """The analysis' MLflow record without its metrics: parent run name, params and tags, one child per setting
    (``OUT/analyze.json``)."""
    with open(input_path, "rb") as f:  # streamed: the input may be larger than memory
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {
        "run_name": input_path.name, "tracking_uri": tracking_uri, "params": params,
        "tags": {"confgrid.command": "analyze", "confgrid.input": str(input_path.resolve()),
                 "confgrid.input_sha256": digest},
        "children": [{"name": st.name, "params": dict(setting=st.name, seed=st.seed, n_items=len(st.items),
                                                       signals=st.signals, **({} if st.n_clusters is None else
                                                                              {"n_clusters": st.n_clusters}))}
                     for st in settings],
    }


def _uri(record: dict[str, Any], out_dir: Path) -> str:
    from confgrid.flows.tracking import default_tracking_uri

    return record.get("tracking_uri") or default_tracking_uri(out_dir)


def _track(record: dict[str, Any], out_dir: Path, tracking_uri: str, metrics_df: pd.DataFrame,
           gaps_df: pd.DataFrame) -> str:
    """Log ``record`` with the metrics of each setting; the tables of ``out_dir`` as artifacts. Returns the parent id."""
    from confgrid.flows.tracking import Tracker, result_metrics

    tracker = Tracker(tracking_uri, EXPERIMENT)
    with tracker.parent(record["run_name"], record["params"], tags=record["tags"]) as run_id:
        m_units, g_units = unit_names(metrics_df), unit_names(gaps_df)
        for ch in record["children"]:
            name = ch["name"]
            values = result_metrics(metrics_df[m_units == name], gaps_df[g_units == name])
            tags = {"confgrid.kind": "setting", "confgrid.setting": name, "confgrid.command": "analyze"}
            tracker.child(name, ch["params"], values, [], tags=tags)
        tracker.log_artifacts([out_dir / "results" / f"{name}{ext}" for name in TABLES for ext in (".csv", ".parquet")
                               if (out_dir / "results" / f"{name}{ext}").is_file()], "results")
        verdicts = out_dir / "results" / "verdicts.parquet"
        if verdicts.is_file():  # the verdicts on the parent, as a run logs them
            from confgrid.flows.evaluate.outputs import verdict_mlflow

            v_metrics, v_tags = verdict_mlflow(pd.read_parquet(verdicts))
            tracker.log_metrics(v_metrics)
            tracker.log_tags(v_tags)
    return run_id


def log_analysis(out_dir: str | Path, tracking_uri: str | None = None) -> Logged:
    """Log a finished analysis directory to MLflow, as ``confgrid analyze`` would have (``confgrid log OUT``).

    Parameters
    ----------
    out_dir : path
        Output directory of ``confgrid analyze`` (``analyze.json``, ``metrics.parquet``, ``gaps.parquet``).
    tracking_uri : str, optional
        Default: the store the analysis was given, else ``sqlite:///OUT/mlflow.db``.

    Returns
    -------
    confgrid.flows.tracking.Logged
        The new parent run, its store and experiment.

    Raises
    ------
    FileNotFoundError
        ``out_dir`` lacks one of the files above.
    confgrid.flows.tracking.TrackingError
        The store failed.
    """
    from confgrid.flows.tracking import Logged, TrackingError, TrackingFailure

    out_dir = Path(out_dir)
    for need in (RECORD_FILE, "results/metrics.parquet", "results/gaps.parquet"):
        if not (out_dir / need).is_file():
            raise FileNotFoundError(f"{out_dir}: no {need}; is this the directory of a finished analysis?")
    record = json.loads((out_dir / RECORD_FILE).read_text(encoding="utf-8"))
    uri = tracking_uri or _uri(record, out_dir)
    try:
        run_id = _track(record, out_dir, uri, pd.read_parquet(out_dir / "results" / "metrics.parquet"),
                        pd.read_parquet(out_dir / "results" / "gaps.parquet"))
    except Exception as exc:
        raise TrackingError(TrackingFailure.of(uri, exc)) from exc
    return Logged(run_id, uri, EXPERIMENT)
