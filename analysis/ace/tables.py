"""The ACE output tables and the one entry point :func:`ace_tables` (study 001).

Every table is tidy, one row per the unit named below; the cell columns are :data:`~.reversals.CELL_COLUMNS`
(``model_a``, ``model_b``, ``comparison``, ``dataset``, ``method``); every gap is ``A - B``.

``ace_gaps`` -- one row per (cell, metric, view) (:data:`GAP_COLUMNS`)
    ``value_a``, ``value_b``, ``gap``; ``favours`` (the model with the lower value, or ``"neither"``, by
    :func:`confgrid.analysis.compare.better_signal`); ``raw_gap`` and ``reversal`` (nullable boolean; ``<NA>`` on raw
    rows and where undefined); ``acc_a``, ``acc_b``, ``acc_gap = acc_a - acc_b``; ``n_items`` (matched items),
    ``n_a``, ``n_b`` (rows or item-candidate pairs entering each side), ``retention`` (IA views), ``ess_a``,
    ``ess_b``, ``ess_frac_a``, ``ess_frac_b`` (DA views), ``n_only_a``, ``n_only_b`` (items dropped by matching),
    ``note``.
``ace_reversals`` -- reversal rates (:data:`~.reversals.RATE_COLUMNS`, :func:`~.reversals.reversal_rates`).
``ace_patterns`` -- one row per (cell, metric) (:data:`~.reversals.PATTERN_COLUMNS`).
``ace_pattern_shares`` -- pattern shares (:data:`~.reversals.SHARE_COLUMNS`).
``ace_bootstrap`` -- one row per (cell, metric, view) bootstrapped (:data:`BOOTSTRAP_COLUMNS`)
    ``gap``, ``lo``, ``hi`` (95% percentile), ``excludes_zero``, ``n_undefined``, ``raw_gap``, ``raw_lo``, ``raw_hi``,
    ``reversal``, ``retention_prob`` (point reversals only), ``strict``, ``n_resamples``, ``seed``.
``ace_retention`` -- one row per point-estimate reversal of a main view (:data:`RETENTION_COLUMNS`).
``ace_bootstrap_summary`` -- Table 10, one row per metric (:data:`SUMMARY_COLUMNS`)
    ``n_cells``; ``n_point`` cells with a reversal in at least one main view; ``n_strict`` cells where at least one
    view meets the strict criterion; ``n_reversals``, ``median_retention`` and ``n_retained_95`` (retention
    probability >= 0.95) over the reversals.
``ace_self_preference`` -- one row per (cell, rater) (:data:`SELF_PREFERENCE_COLUMNS`)
    ``n_differ`` items where the two candidates differ, ``mean_own``, ``mean_other``, ``diff = mean_own - mean_other``
    with ``lo``, ``hi`` (paired bootstrap on the cell's resamples), ``excludes_zero``, ``n_ambiguous``.
``ace_correlation`` -- Spearman rho of raw gap vs accuracy gap (:data:`~.reversals.CORRELATION_COLUMNS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd
from confgrid.analysis.bootstrap import interval, n_undefined, resample_counts
from confgrid.analysis.compare import better_signal, excludes_zero
from confgrid.analysis.evaluation import bootstrap_unit, estimates
from confgrid.analysis.resampling import setting_seed

from .bootstrap import (
    DEFAULT_RESAMPLES,
    cell_seed,
    strict_reversal,
)
from .candidates import ca_cell, ca_views, self_preference_data, validate_ratings
from .frame import ACEInputError, matched_cells
from .units import ace_unit
from .reversals import (
    CELL_COLUMNS,
    CORRELATION_COLUMNS,
    MAIN_VIEWS,
    PATTERN_COLUMNS,
    RATE_COLUMNS,
    SHARE_COLUMNS,
    accuracy_correlation,
    is_reversal,
    pattern_shares,
    patterns,
    reversal_rates,
)
from .views import METRICS, ViewOptions, cell_views

__all__ = [
    "VIEWS",
    "GAP_COLUMNS",
    "BOOTSTRAP_COLUMNS",
    "RETENTION_COLUMNS",
    "SUMMARY_COLUMNS",
    "SELF_PREFERENCE_COLUMNS",
    "ACETables",
    "ACEPlan",
    "ace_plan",
    "ace_views",
    "ace_tables",
]

#: Views a run may ask for (``raw`` is always computed).
VIEWS = ("raw", "ia", "da", "ca", "da_resample")

_C = list(CELL_COLUMNS)
GAP_COLUMNS = tuple(_C) + ("metric", "view", "value_a", "value_b", "gap", "favours", "raw_gap", "reversal",
                           "acc_a", "acc_b", "acc_gap", "n_items", "n_a", "n_b", "retention", "ess_a", "ess_b",
                           "ess_frac_a", "ess_frac_b", "n_only_a", "n_only_b", "note")
BOOTSTRAP_COLUMNS = tuple(_C) + ("metric", "view", "gap", "lo", "hi", "excludes_zero", "n_undefined", "raw_gap",
                                 "raw_lo", "raw_hi", "reversal", "retention_prob", "strict", "acc_gap",
                                 "n_resamples", "seed")
RETENTION_COLUMNS = tuple(_C) + ("metric", "view", "raw_gap", "gap", "acc_gap", "retention_prob", "n_defined",
                                 "strict")
SUMMARY_COLUMNS = ("metric", "n_cells", "n_point", "share_point", "n_strict", "share_strict", "n_reversals",
                   "median_retention", "n_retained_95")
SELF_PREFERENCE_COLUMNS = tuple(_C) + ("rater", "other", "n_items", "n_differ", "mean_own", "mean_other", "diff",
                                       "lo", "hi", "excludes_zero", "n_undefined", "n_ambiguous")


def _empty(cols) -> pd.DataFrame:
    return pd.DataFrame(columns=list(cols))


@dataclass(frozen=True)
class ACETables:
    """Output of :func:`ace_tables`: the tables (module docstring) and the run's messages."""

    gaps: pd.DataFrame
    reversals: pd.DataFrame
    patterns: pd.DataFrame
    pattern_shares: pd.DataFrame
    bootstrap: pd.DataFrame
    retention: pd.DataFrame
    bootstrap_summary: pd.DataFrame
    self_preference: pd.DataFrame
    correlation: pd.DataFrame
    messages: tuple[str, ...] = field(default_factory=tuple)
    #: the one evaluator's estimates of the cells (analysis/evaluation.py ``Estimates``; their gap rows and
    #: per-resample shares give the model-vs-model verdicts), None without a bootstrap or when the caller
    #: evaluated the units itself
    estimates: Any = None

    def tables(self) -> dict[str, pd.DataFrame]:
        """``{"ace_gaps": ..., "ace_reversals": ..., ...}`` (every DataFrame field, prefixed ``ace_``)."""
        return {f"ace_{f.name}": getattr(self, f.name) for f in fields(self) if f.name not in ("messages", "estimates")}


def _check_args(metrics, views, n_bootstrap) -> tuple[list[str], list[str]]:
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    views = [views] if isinstance(views, str) else list(views)
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        raise ACEInputError(f"metrics must be a non-empty subset of {list(METRICS)}, got {metrics}")
    bad = [v for v in views if v not in VIEWS]
    if bad:
        raise ACEInputError(f"views: unknown view(s) {bad}; allowed: {list(VIEWS)}")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise ACEInputError(f"n_bootstrap must be an integer >= 0 (0: no bootstrap), got {n_bootstrap!r}")
    return metrics, views


def _gap_rows(cell, point, extra) -> list[dict]:
    values = list(point.values) + list(extra)
    raw = {v.metric: v.gap for v in values if v.view == "raw"}
    return [dict(
        cell.key, metric=v.metric, view=v.view, value_a=v.value_a, value_b=v.value_b, gap=v.gap,
        favours=better_signal(v.metric, v.value_a, v.value_b, cell.pair.a, cell.pair.b),
        raw_gap=raw[v.metric], reversal=pd.NA if v.view == "raw" else is_reversal(raw[v.metric], v.gap),
        acc_a=point.acc_a, acc_b=point.acc_b, acc_gap=point.acc_a - point.acc_b, n_items=cell.n,
        n_a=v.n_a, n_b=v.n_b, retention=v.retention, ess_a=v.ess_a, ess_b=v.ess_b,
        ess_frac_a=v.ess_a / cell.n, ess_frac_b=v.ess_b / cell.n,
        n_only_a=cell.n_only_a, n_only_b=cell.n_only_b, note=v.note,
    ) for v in values]


def _est_index(df: pd.DataFrame, cols: Sequence[str]) -> dict:
    """Rows of an estimates table keyed by ``cols`` (first row wins)."""
    if df is None or df.empty:
        return {}
    out: dict = {}
    for key, row in zip(df[list(cols)].itertuples(index=False, name=None), df.to_dict("records"), strict=True):
        out.setdefault(key, row)
    return out


def _boot_rows(cell, gap_rows, unit, gaps: dict, shifts: dict) -> tuple[list[dict], list[dict]]:
    """The cell's bootstrap and retention rows, read from the one evaluator's gap and shift rows of its unit."""
    point = {(r["view"], r["metric"]): r for r in gap_rows}
    lab = unit.labels
    rows, ret = [], []
    seen = dict.fromkeys((unit.info[b]["view"], m) for _, b, _, _ in unit.pairs for m in unit.metrics)
    for view, metric in seen:
        p = point[(view, metric)]
        g = gaps[(lab["setting"], lab["model"], lab["dataset"], cell.method, view, metric)]
        raw = gaps[(lab["setting"], lab["model"], lab["dataset"], cell.method, "raw", metric)]
        lo, hi, rlo, rhi = g["lo"], g["hi"], raw["lo"], raw["hi"]
        rev = p["reversal"]
        prob, n_def = float("nan"), 0
        if rev is True:  # the shift raw -> view: its flip share is the retention probability (Appendix E.6)
            sh = shifts[(lab["setting"], lab["model"], lab["dataset"], cell.method, view, metric)]
            prob, n_def = float(sh["flip_share"]), int(sh["n_flip_defined"])
        strict = (strict_reversal((p["raw_gap"], rlo, rhi), (p["gap"], lo, hi)) if view != "raw" else pd.NA)
        rows.append(dict(cell.key, metric=metric, view=view, gap=p["gap"], lo=lo, hi=hi,
                         excludes_zero=excludes_zero(lo, hi), n_undefined=int(g["n_undefined"]),
                         raw_gap=p["raw_gap"], raw_lo=rlo, raw_hi=rhi, reversal=rev, retention_prob=prob,
                         strict=strict, acc_gap=p["acc_gap"], n_resamples=int(unit.n_resamples), seed=unit.seed))
        if rev is True and view in MAIN_VIEWS:
            ret.append(dict(cell.key, metric=metric, view=view, raw_gap=p["raw_gap"], gap=p["gap"],
                            acc_gap=p["acc_gap"], retention_prob=prob, n_defined=n_def, strict=strict))
    return rows, ret


def _summary(boot: pd.DataFrame, metrics) -> pd.DataFrame:
    rows = []
    main = boot[boot["view"].isin(MAIN_VIEWS)]
    for metric in metrics:
        part = main[main["metric"] == metric]
        per_cell = part.groupby(list(CELL_COLUMNS), sort=False)
        n_cells = per_cell.ngroups
        n_point = int(per_cell["reversal"].agg(lambda s: bool((s == True).any())).sum()) if n_cells else 0
        n_strict = int(per_cell["strict"].agg(lambda s: bool((s == True).any())).sum()) if n_cells else 0
        rev = part[part["reversal"] == True]
        probs = rev["retention_prob"].to_numpy(np.float64)
        rows.append(dict(metric=metric, n_cells=n_cells, n_point=n_point,
                         share_point=n_point / n_cells if n_cells else float("nan"), n_strict=n_strict,
                         share_strict=n_strict / n_cells if n_cells else float("nan"), n_reversals=len(rev),
                         median_retention=float(np.nanmedian(probs)) if np.isfinite(probs).any() else float("nan"),
                         n_retained_95=int((probs >= 0.95).sum())))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _self_pref_rows(cell, sp, W: np.ndarray | None) -> list[dict]:
    """Per rater, the mean own-minus-other confidence with its interval on the cell's resamples (``W``: the unit's
    counts, :func:`confgrid.analysis.bootstrap.resample_counts`; None: no bootstrap)."""
    rows = []
    for d in sp:
        vals = None
        if W is not None:
            Wd = W[:, d.item_index]
            with np.errstate(invalid="ignore", divide="ignore"):
                tot = Wd.sum(axis=1)
                vals = np.where(tot > 0, (Wd @ d.diff) / np.where(tot > 0, tot, 1.0), np.nan)
        lo, hi = interval(vals) if vals is not None else (float("nan"), float("nan"))
        rows.append(dict(cell.key, rater=d.rater, other=d.other, n_items=cell.n, n_differ=int(d.item_index.size),
                         mean_own=float(np.mean(d.own)) if d.own.size else float("nan"),
                         mean_other=float(np.mean(d.other_signal)) if d.own.size else float("nan"),
                         diff=d.mean_diff, lo=lo, hi=hi, excludes_zero=excludes_zero(lo, hi),
                         n_undefined=int(n_undefined(vals)) if vals is not None else 0, n_ambiguous=d.n_ambiguous))
    return rows


def _frame(rows, cols, booleans=()) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(cols)) if rows else _empty(cols)
    for c in booleans:
        df[c] = df[c].astype("boolean")
    return df


@dataclass
class ACEPlan:
    """What the comparison computes, before any resample (pure; :func:`ace_plan`).

    Attributes
    ----------
    cells : list of Cell
        The matched cells, in order.
    units : list of UnitPlan
        One unit of the one evaluator per cell (analysis/ace/units.py), in the same order; empty without a
        bootstrap (``n_bootstrap = 0``).
    gap_rows : list of list of dict
        Per cell, its point-estimate rows of ``ace_gaps``.
    self_pref : list of tuple
        Per cell, its self-preference data (empty without CA).
    views_used : list of str
        The main views the reversal tables read.
    n_bins : int
        ECE bins of the point estimates, and of the bootstrap of :func:`ace_tables`.
    """

    cells: list
    units: list
    gap_rows: list
    self_pref: list
    views_used: list
    metrics: list
    n_bootstrap: int
    seed: int
    messages: list
    n_bins: int = 10


def ace_plan(
    rows: pd.DataFrame,
    candidates: pd.DataFrame | None = None,
    *,
    pairs=None,
    views: Sequence[str] = ("raw", "ia", "da", "ca"),
    metrics: Sequence[str] = METRICS,
    n_bootstrap: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    target: str | float = "mean",
    ia_strata: int | None = None,
    n_bins: int = 10,
    max_levels: int = 10,
    n_strata: int = 10,
    n_draws: int = 20,
) -> ACEPlan:
    """The point estimates of every cell and the units the one evaluator bootstraps.

    Parameters
    ----------
    rows : DataFrame
        Own-answer rows (:mod:`.frame`: ``model``, ``dataset``, ``method``, ``item_id``, ``signal``, ``correct``).
    candidates : DataFrame, optional
        Candidate ratings (:data:`.candidates.RATING_COLUMNS`); without it CA
        and self-preference are skipped with a message.
    pairs : None or sequence of (a, b[, label]) / Pair
        Default: every pair of models.
    views : sequence of str
        Among :data:`VIEWS`.
    metrics : sequence of str
        Among ``("ece", "brier")``.
    n_bootstrap : int, default=2000
        Resamples per cell (0: no bootstrap; the bootstrap tables are empty).
    seed : int
        Base seed; each cell's seed is :func:`.bootstrap.cell_seed`.
    target, ia_strata, n_bins, max_levels, n_strata, n_draws
        :class:`.views.ViewOptions`.

    Raises
    ------
    ACEInputError
        Bad rows, candidates, pairs or options (the message names them).
    """
    metrics, views = _check_args(metrics, views, n_bootstrap)
    opts = ViewOptions(n_bins=n_bins, target=target, ia_strata=ia_strata, max_levels=max_levels,
                       n_strata=n_strata, n_draws=n_draws)
    matched = matched_cells(rows, pairs)
    msgs = list(matched.messages)
    ratings = None
    if "ca" in views:
        if candidates is None:
            msgs.append("CA skipped: no candidate-ratings table was given")
        else:
            ratings = dict(tuple(validate_ratings(candidates).groupby(["dataset", "method"], sort=False)))
    own_views = [v for v in ("ia", "da", "da_resample") if v in views]
    plan = ACEPlan([], [], [], [], [v for v in MAIN_VIEWS if v in views and (v != "ca" or ratings is not None)],
                   metrics, int(n_bootstrap), int(seed), msgs, int(n_bins))
    for cell in matched.cells:
        rng = np.random.default_rng(setting_seed(cell.pair.name, f"{cell.dataset}|{cell.method}|da_resample", seed))
        point = cell_views(cell, metrics, own_views, opts, rng)
        ca, sp, extra = None, (), []
        if ratings is not None:
            part = ratings.get((cell.dataset, cell.method))
            ca = None if part is None else ca_cell(cell, part)
            if ca is None:
                msgs.append(f"{cell.pair.name} / {cell.dataset} / {cell.method}: CA skipped, no candidate ratings")
            else:
                extra = ca_views(ca, metrics, n_bins)
                sp = self_preference_data(ca, cell)
                if ca.n_unrated or ca.n_outside:
                    msgs.append(f"{cell.pair.name} / {cell.dataset} / {cell.method}: CA left out {ca.n_unrated} "
                                f"pool pair(s) not rated by both models and {ca.n_outside} rated pair(s) of items "
                                "outside the matched items")
        plan.cells.append(cell)
        plan.gap_rows.append(_gap_rows(cell, point, extra))
        plan.self_pref.append(sp)
        if n_bootstrap:
            plan.units.append(ace_unit(cell, point, metrics, [v for v in own_views if v != "da_resample"], opts, ca,
                                       int(n_bootstrap), cell_seed(cell, seed)))
    if not n_bootstrap:
        msgs.append("bootstrap skipped: n_bootstrap = 0")
    return plan


def ace_views(plan: ACEPlan, gaps: pd.DataFrame | None = None, shifts: pd.DataFrame | None = None) -> ACETables:
    """The comparison's tables as views over the one evaluator's estimates of the plan's units.

    Parameters
    ----------
    gaps, shifts : DataFrame, optional
        The estimates' gap and shift tables (analysis/evaluation.py) holding the rows of ``plan.units`` (other
        rows are ignored); needed when the plan has units.
    """
    key = ["setting", "model", "dataset", "method", "view", "metric"]
    g_idx = _est_index(gaps, key)
    s_idx = _est_index(shifts, ["setting", "model", "dataset", "method", "to_view", "metric"])
    units = {id(c): u for c, u in zip(plan.cells, plan.units, strict=False)} if plan.units else {}
    gap_rows, boot_rows, ret_rows, sp_rows = [], [], [], []
    for cell, rows_c, sp in zip(plan.cells, plan.gap_rows, plan.self_pref, strict=True):
        gap_rows += rows_c
        u = units.get(id(cell))
        W = None
        if u is not None:
            b, r = _boot_rows(cell, rows_c, u, g_idx, s_idx)
            boot_rows += b
            ret_rows += r
            if sp:
                W = resample_counts(cell.n, u.n_resamples, u.seed)  # the unit's own draws (analysis/ace/units.py)
        sp_rows += _self_pref_rows(cell, sp, W)
    gaps_df = _frame(gap_rows, GAP_COLUMNS, ["reversal"])
    boot_df = _frame(boot_rows, BOOTSTRAP_COLUMNS, ["reversal", "strict", "excludes_zero"])
    used = plan.views_used
    pats = patterns(gaps_df, used) if len(gaps_df) else _empty(PATTERN_COLUMNS)
    return ACETables(
        gaps=gaps_df,
        reversals=reversal_rates(gaps_df, used) if len(gaps_df) else _empty(RATE_COLUMNS),
        patterns=pats,
        pattern_shares=pattern_shares(pats) if len(pats) else _empty(SHARE_COLUMNS),
        bootstrap=boot_df,
        retention=_frame(ret_rows, RETENTION_COLUMNS, ["strict"]),
        bootstrap_summary=_summary(boot_df, plan.metrics) if len(boot_df) else _empty(SUMMARY_COLUMNS),
        self_preference=_frame(sp_rows, SELF_PREFERENCE_COLUMNS, ["excludes_zero"]),
        correlation=(accuracy_correlation(gaps_df, plan.n_bootstrap, plan.seed) if len(gaps_df)
                     else _empty(CORRELATION_COLUMNS)),
        messages=tuple(plan.messages),
    )


def ace_tables(rows: pd.DataFrame, candidates: pd.DataFrame | None = None, **options: Any) -> ACETables:
    """Run the whole accuracy-controlled comparison of study 001 on own-answer rows.

    The point estimates are :func:`.views.cell_views`'s; the intervals, retention probabilities and the strict
    criterion come from the one evaluator (analysis/evaluation.py): each cell is a unit (analysis/ace/units.py)
    bootstrapped in process with every other estimate's kernels and resampling stream, and the tables are views over
    its gap and shift rows (:func:`ace_plan`, :func:`ace_views`). Raises :class:`ACEInputError` as :func:`ace_plan`.

    Parameters
    ----------
    rows, candidates
        As :func:`ace_plan`.
    **options
        :func:`ace_plan`'s keywords (an unknown one is a ``TypeError``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = {"big": rng.random(60) < 0.8, "small": rng.random(60) < 0.5}
    >>> rows = pd.concat([pd.DataFrame(dict(model=m, dataset="qa", method="verbalized", item_id=range(60),
    ...                                     signal=np.clip(0.75 + 0.1 * rng.standard_normal(60), 0, 1),
    ...                                     correct=z[m].astype(float))) for m in z])
    >>> t = ace_tables(rows, n_bootstrap=200)
    >>> sorted(t.tables())[:3]
    ['ace_bootstrap', 'ace_bootstrap_summary', 'ace_correlation']
    >>> t.gaps.query("metric == 'ece'")["view"].tolist()[:4]
    ['raw', 'ia', 'ia_both_right', 'ia_both_wrong']
    """
    plan = ace_plan(rows, candidates, **options)
    if not plan.units:
        return ace_views(plan)
    results = [bootstrap_unit(u, plan.metrics, plan.n_bootstrap, plan.n_bins) for u in plan.units]
    est = estimates(plan.units, results)
    return replace(ace_views(plan, est.gaps, est.shifts), estimates=est)
