"""The ACE output tables and the one entry point :func:`ace_tables` (study 001).

Every table is tidy, one row per the unit named below; the cell columns
are :data:`~.reversals.CELL_COLUMNS` (``model_a``, ``model_b``,
``comparison``, ``dataset``, ``method``); every gap is ``A - B``.

``ace_gaps`` -- one row per (cell, metric, view) (:data:`GAP_COLUMNS`)
    ``value_a``, ``value_b``, ``gap``; ``favours`` (the model with the lower
    value, or ``"neither"``, by :func:`confgrid.analysis.compare.better_signal`);
    ``raw_gap`` and ``reversal`` (nullable boolean; ``<NA>`` on raw rows and
    where undefined); ``acc_a``, ``acc_b``, ``acc_gap = acc_a - acc_b``;
    ``n_items`` (matched items), ``n_a``, ``n_b`` (rows or item-candidate
    pairs entering each side), ``retention`` (IA views), ``ess_a``,
    ``ess_b``, ``ess_frac_a``, ``ess_frac_b`` (DA views), ``n_only_a``,
    ``n_only_b`` (items dropped by matching), ``note``.
``ace_reversals`` -- reversal rates (:data:`~.reversals.RATE_COLUMNS`, :func:`~.reversals.reversal_rates`).
``ace_patterns`` -- one row per (cell, metric) (:data:`~.reversals.PATTERN_COLUMNS`).
``ace_pattern_shares`` -- pattern shares (:data:`~.reversals.SHARE_COLUMNS`).
``ace_bootstrap`` -- one row per (cell, metric, view) bootstrapped (:data:`BOOTSTRAP_COLUMNS`)
    ``gap``, ``lo``, ``hi`` (95% percentile), ``excludes_zero``,
    ``n_undefined``, ``raw_gap``, ``raw_lo``, ``raw_hi``, ``reversal``,
    ``retention_prob`` (point reversals only), ``strict``, ``n_resamples``,
    ``seed``.
``ace_retention`` -- one row per point-estimate reversal of a main view (:data:`RETENTION_COLUMNS`).
``ace_bootstrap_summary`` -- Table 10, one row per metric (:data:`SUMMARY_COLUMNS`)
    ``n_cells``; ``n_point`` cells with a reversal in at least one main
    view; ``n_strict`` cells where at least one view meets the strict
    criterion; ``n_reversals``, ``median_retention`` and
    ``n_retained_95`` (retention probability >= 0.95) over the reversals.
``ace_self_preference`` -- one row per (cell, rater) (:data:`SELF_PREFERENCE_COLUMNS`)
    ``n_differ`` items where the two candidates differ, ``mean_own``,
    ``mean_other``, ``diff = mean_own - mean_other`` with ``lo``, ``hi``
    (paired bootstrap on the cell's resamples), ``excludes_zero``,
    ``n_ambiguous``.
``ace_correlation`` -- Spearman rho of raw gap vs accuracy gap (:data:`~.reversals.CORRELATION_COLUMNS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Sequence

import numpy as np
import pandas as pd
from confgrid.analysis.bootstrap import interval, n_undefined
from confgrid.analysis.resampling import setting_seed
from confgrid.analysis.compare import better_signal, excludes_zero

from .bootstrap import (
    DEFAULT_RESAMPLES,
    cell_bootstrap,
    cell_seed,
    retention_probability,
    strict_reversal,
)
from .candidates import ca_cell, ca_views, self_preference_data, validate_ratings
from .frame import ACEInputError, matched_cells
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

    def tables(self) -> dict[str, pd.DataFrame]:
        """``{"ace_gaps": ..., "ace_reversals": ..., ...}`` (every DataFrame field, prefixed ``ace_``)."""
        return {f"ace_{f.name}": getattr(self, f.name) for f in fields(self) if f.name != "messages"}


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


def _gap_rows(cell, point, extra, metrics) -> list[dict]:
    values = list(point.values) + list(extra)
    raw = {v.metric: v.gap for v in values if v.view == "raw"}
    rows = []
    for v in values:
        rows.append(dict(
            cell.key, metric=v.metric, view=v.view, value_a=v.value_a, value_b=v.value_b, gap=v.gap,
            favours=better_signal(v.metric, v.value_a, v.value_b, cell.pair.a, cell.pair.b),
            raw_gap=raw[v.metric], reversal=pd.NA if v.view == "raw" else is_reversal(raw[v.metric], v.gap),
            acc_a=point.acc_a, acc_b=point.acc_b, acc_gap=point.acc_a - point.acc_b, n_items=cell.n,
            n_a=v.n_a, n_b=v.n_b, retention=v.retention, ess_a=v.ess_a, ess_b=v.ess_b,
            ess_frac_a=v.ess_a / cell.n, ess_frac_b=v.ess_b / cell.n,
            n_only_a=cell.n_only_a, n_only_b=cell.n_only_b, note=v.note,
        ))
    return rows


def _boot_rows(cell, gap_rows, boot) -> tuple[list[dict], list[dict]]:
    point = {(r["view"], r["metric"]): r for r in gap_rows}
    rows, ret = [], []
    for (view, metric), vals in boot.gaps.items():
        p = point[(view, metric)]
        lo, hi = interval(vals)
        raw_vals = boot.gaps[("raw", metric)]
        rlo, rhi = interval(raw_vals)
        rev = p["reversal"]
        prob, n_def = retention_probability(raw_vals, vals) if rev is True else (float("nan"), 0)
        strict = (strict_reversal((p["raw_gap"], rlo, rhi), (p["gap"], lo, hi)) if view != "raw" else pd.NA)
        rows.append(dict(cell.key, metric=metric, view=view, gap=p["gap"], lo=lo, hi=hi,
                         excludes_zero=excludes_zero(lo, hi), n_undefined=int(n_undefined(vals)),
                         raw_gap=p["raw_gap"], raw_lo=rlo, raw_hi=rhi, reversal=rev, retention_prob=prob,
                         strict=strict, acc_gap=p["acc_gap"], n_resamples=boot.n_resamples, seed=boot.seed))
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


def _self_pref_rows(cell, sp, boot) -> list[dict]:
    rows = []
    for d in sp:
        vals = boot.self_preference.get(d.rater) if boot is not None else None
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


def ace_tables(
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
) -> ACETables:
    """Run the whole accuracy-controlled comparison of study 001 on own-answer rows.

    Parameters
    ----------
    rows : DataFrame
        Own-answer rows (:mod:`.frame`: ``model``, ``dataset``, ``method``,
        ``item_id``, ``signal``, ``correct``).
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

    Returns
    -------
    ACETables

    Raises
    ------
    ACEInputError
        Bad rows, candidates, pairs or options (the message names them).

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
    gap_rows, boot_rows, ret_rows, sp_rows = [], [], [], []
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
                                f"unrated pool pair(s) and {ca.n_outside} of unmatched items")
        rows_c = _gap_rows(cell, point, extra, metrics)
        gap_rows += rows_c
        boot = None
        if n_bootstrap:
            boot = cell_bootstrap(cell, point, metrics, [v for v in own_views if v != "da_resample"], opts,
                                  ca, sp, n_bootstrap, cell_seed(cell, seed))
            b, r = _boot_rows(cell, rows_c, boot)
            boot_rows += b
            ret_rows += r
        sp_rows += _self_pref_rows(cell, sp, boot)
    if not n_bootstrap:
        msgs.append("bootstrap skipped: n_bootstrap = 0")
    gaps = _frame(gap_rows, GAP_COLUMNS, ["reversal"])
    boot_df = _frame(boot_rows, BOOTSTRAP_COLUMNS, ["reversal", "strict", "excludes_zero"])
    used = [v for v in MAIN_VIEWS if v in views and (v != "ca" or ratings is not None)]
    pats = patterns(gaps, used) if len(gaps) else _empty(PATTERN_COLUMNS)
    return ACETables(
        gaps=gaps,
        reversals=reversal_rates(gaps, used) if len(gaps) else _empty(RATE_COLUMNS),
        patterns=pats,
        pattern_shares=pattern_shares(pats) if len(pats) else _empty(SHARE_COLUMNS),
        bootstrap=boot_df,
        retention=_frame(ret_rows, RETENTION_COLUMNS, ["strict"]),
        bootstrap_summary=_summary(boot_df, metrics) if len(boot_df) else _empty(SUMMARY_COLUMNS),
        self_preference=_frame(sp_rows, SELF_PREFERENCE_COLUMNS, ["excludes_zero"]),
        correlation=accuracy_correlation(gaps, n_bootstrap, seed) if len(gaps) else _empty(CORRELATION_COLUMNS),
        messages=tuple(msgs),
    )
