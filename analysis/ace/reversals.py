"""Ranking reversals, their patterns, and the accuracy-gap correlation (study 001, sections 5.2, 6, E.1, E.2, A.2).

Definitions
-----------
* **Reversal** (section 5.2): the raw gap and an aligned gap have strictly opposite signs
  (:func:`confgrid.analysis.compare.flip`). A gap that is exactly 0 (a tie) is no reversal; a gap that is ``nan``
  (undefined, e.g. DA without support) makes the reversal undefined (``<NA>``), and such comparisons are left out of
  rates and counted as ``n_undefined``.
* The comparisons of reversal analysis are the three main aligned views :data:`MAIN_VIEWS` (``ia``, ``da``, ``ca``);
  the other views of ``ace_gaps`` (IA parts, DA directions, resampling) carry a ``reversal`` column too but enter no
  rate or pattern.
* **Accuracy-gap bins** (Appendix E.2): ``|a_A - a_B|`` rounded to 12 decimals (so ``0.7 - 0.6`` counts as 0.1) in the
  bins of :data:`ACC_GAP_EDGES`, ``[lo, hi)`` and the last one closed; every bin lies wholly below or at/above the 0.1
  threshold, marked by ``above_threshold``.
* **Patterns** (section 6, Tables 1 and 2), per cell and metric, from the reversal flags of the views used: ``none``,
  ``ia_only``, ``da_only``, ``ca_only``, ``da_ia`` (DA and IA, not CA), ``all_three``, ``other`` (CA with exactly one
  of DA, IA), or ``undefined`` when a used view's gap is undefined (``nan``). A view that was not computed for a cell
  (CA without a candidate table, or without ratings for that cell's method) is not used there and counts as no
  reversal; ``views_used`` says, per cell, which were. DA and IA *agree* when their flags are equal.
* **Correlation** (Figure 1, Appendix A.2): across cells, Spearman's rho between the accuracy gap and the raw metric
  gap, both oriented *more accurate minus less accurate* (``|a_A - a_B|`` and ``sign(a_A - a_B) * gap``; a tie keeps
  ``A - B``), with a percentile interval from resampling the cells (seeded with ``setting_seed("spearman",
  "<metric>|<by>|<key>", seed)``).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from confgrid.analysis.bootstrap import interval
from confgrid.analysis.resampling import resample_indices, setting_seed
from confgrid.analysis.compare import flip
from scipy import stats

__all__ = [
    "CELL_COLUMNS",
    "MAIN_VIEWS",
    "ACC_GAP_EDGES",
    "ACC_GAP_THRESHOLD",
    "PATTERNS",
    "DEFAULT_BY",
    "is_reversal",
    "acc_gap_bin",
    "reversal_rates",
    "patterns",
    "pattern_shares",
    "accuracy_correlation",
    "RATE_COLUMNS",
    "PATTERN_COLUMNS",
    "SHARE_COLUMNS",
    "CORRELATION_COLUMNS",
]

#: Columns that identify a cell in every table.
CELL_COLUMNS = ("model_a", "model_b", "comparison", "dataset", "method")
#: Aligned views that define reversals, patterns and retention.
MAIN_VIEWS = ("ia", "da", "ca")
#: Bin edges of ``|a_A - a_B|`` (Appendix E.2).
ACC_GAP_EDGES = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 1.0)
#: The threshold of Appendix E.2.
ACC_GAP_THRESHOLD = 0.1
#: Exclusive reversal patterns (section 6).
PATTERNS = ("none", "ia_only", "da_only", "ca_only", "da_ia", "all_three", "other")
#: Default groupings of :func:`reversal_rates` (a tuple groups by several columns).
DEFAULT_BY = ("method", "dataset", "comparison", "acc_gap_bin", ("method", "dataset"), ("comparison", "dataset"))

RATE_COLUMNS = ("by", "key", "metric", "view", "n_cells", "n_reversals", "rate", "n_undefined", "above_threshold")
PATTERN_COLUMNS = CELL_COLUMNS + ("metric", "acc_a", "acc_b", "acc_gap", "ia_reversal", "da_reversal",
                                  "ca_reversal", "pattern", "da_ia_agree", "views_used")
SHARE_COLUMNS = ("by", "key", "metric", "n_cells") + PATTERNS + ("n_undefined", "da_ia_agree")
CORRELATION_COLUMNS = ("by", "key", "metric", "n_cells", "rho", "lo", "hi", "p_value", "n_undefined", "seed")


def is_reversal(raw_gap: float, aligned_gap: float):
    """``True`` / ``False``, or ``pd.NA`` when either gap is not finite.

    Examples
    --------
    >>> is_reversal(0.1, -0.2), is_reversal(0.1, 0.2), is_reversal(0.0, -0.2), is_reversal(0.1, float("nan"))
    (True, False, False, <NA>)
    """
    if not (np.isfinite(raw_gap) and np.isfinite(aligned_gap)):
        return pd.NA
    return flip(raw_gap, aligned_gap)


def acc_gap_bin(abs_gap, edges: Sequence[float] = ACC_GAP_EDGES) -> np.ndarray:
    """Label of the bin of each ``|a_A - a_B|``, e.g. ``"[0.05, 0.10)"``; ``None`` for ``nan``.

    Examples
    --------
    >>> acc_gap_bin([0.0, 0.7 - 0.6, 0.25, 1.0]).tolist()
    ['[0.00, 0.05)', '[0.10, 0.15)', '[0.20, 0.30)', '[0.30, 1.00]']
    """
    e = np.asarray(edges, dtype=np.float64)
    x = np.round(np.asarray(abs_gap, dtype=np.float64), 12)
    k = np.clip(np.searchsorted(e, x, side="right") - 1, 0, e.size - 2)
    labels = [f"[{e[i]:.2f}, {e[i + 1]:.2f}{']' if i == e.size - 2 else ')'}" for i in range(e.size - 1)]
    return np.array([labels[i] if np.isfinite(v) else None for i, v in zip(k, x)], dtype=object)


def _groupings(df: pd.DataFrame, by):
    """Yield ``(name, key)`` for ``"all"`` and each grouping of ``by``: ``key`` labels every row of ``df``.

    A grouping is a column name, or a tuple of them (name ``"a+b"``, key ``"x / y"``).
    """
    yield "all", pd.Series("all", index=df.index)
    for grouping in by:
        cols = [grouping] if isinstance(grouping, str) else list(grouping)
        key = df[cols[0]].astype(str)
        for c in cols[1:]:
            key = key + " / " + df[c].astype(str)
        yield "+".join(cols), key


def reversal_rates(gaps: pd.DataFrame, views: Sequence[str] = MAIN_VIEWS, by=DEFAULT_BY,
                   edges: Sequence[float] = ACC_GAP_EDGES) -> pd.DataFrame:
    """Reversal rates per grouping, metric and view (Figures 2, 3, 5; Tables 7, 8).

    Parameters
    ----------
    gaps : DataFrame
        ``ace_gaps`` rows (columns of :data:`CELL_COLUMNS`, ``metric``, ``view``, ``acc_gap``, ``reversal``).
    by : sequence of str or tuple of str
        Groupings besides ``"all"``: a column of ``gaps`` or ``"acc_gap_bin"``; a tuple groups by its columns together
        (key ``"a / b"``).
    edges : accuracy-gap bin edges

    Returns
    -------
    DataFrame
        Columns :data:`RATE_COLUMNS`: ``n_cells`` comparisons with a defined reversal, ``n_reversals``,
        ``rate = n_reversals / n_cells`` (``nan`` for 0), ``n_undefined``; ``above_threshold`` (lower bin edge >= 0.1)
        on ``acc_gap_bin`` rows, ``<NA>`` elsewhere. Counts, not only rates, so groups can be merged (e.g. datasets
        into knowledge / reasoning).
    """
    g = gaps[gaps["view"].isin(list(views))]
    g = g.assign(acc_gap_bin=acc_gap_bin(g["acc_gap"].abs(), edges))
    flag = g["reversal"].astype("boolean")
    d = pd.DataFrame({"metric": g["metric"], "view": g["view"], "defined": flag.notna().astype(np.int64),
                      "rev": flag.fillna(False).astype(np.int64)}, index=g.index)
    parts = []
    for name, key in _groupings(g, by):
        grp = d.assign(key=key).groupby(["key", "metric", "view"], sort=True)
        agg = grp[["defined", "rev"]].sum().rename(columns={"defined": "n_cells", "rev": "n_reversals"})
        agg = agg.assign(n_rows=grp.size()).reset_index()
        agg.insert(0, "by", name)
        agg["above_threshold"] = [(float(k[1:].split(",")[0]) >= ACC_GAP_THRESHOLD - 1e-12)  # the lower edge
                                  if name == "acc_gap_bin" else pd.NA for k in agg["key"]]
        parts.append(agg)
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["n_cells", "n_reversals", "n_rows"])
    n = out["n_cells"].to_numpy(np.float64)
    out["rate"] = np.divide(out["n_reversals"].to_numpy(np.float64), n, out=np.full(n.size, np.nan), where=n > 0)
    out["n_undefined"] = out["n_rows"] - out["n_cells"]
    out = out.reindex(columns=list(RATE_COLUMNS))
    out["above_threshold"] = out["above_threshold"].astype("boolean")
    return out


def _pattern(flags: dict) -> str:
    if any(v is pd.NA for v in flags.values()):
        return "undefined"
    on = frozenset(k for k, v in flags.items() if v)
    return {frozenset(): "none", frozenset({"ia"}): "ia_only", frozenset({"da"}): "da_only",
            frozenset({"ca"}): "ca_only", frozenset({"da", "ia"}): "da_ia",
            frozenset({"ia", "da", "ca"}): "all_three"}.get(on, "other")


def patterns(gaps: pd.DataFrame, views_used: Sequence[str] = MAIN_VIEWS) -> pd.DataFrame:
    """The exclusive reversal pattern of every cell and metric (section 6).

    Parameters
    ----------
    gaps : DataFrame
        ``ace_gaps`` rows.
    views_used : sequence of str
        The main views computed in this run (a subset of :data:`MAIN_VIEWS`); per cell, those with a row in ``gaps``.

    Returns
    -------
    DataFrame
        Columns :data:`PATTERN_COLUMNS`; ``<view>_reversal`` is nullable
        boolean (``<NA>`` when undefined or the view is not used).
    """
    used = [v for v in MAIN_VIEWS if v in views_used]
    keys = list(CELL_COLUMNS) + ["metric"]
    raw = gaps[gaps["view"] == "raw"].set_index(keys)
    main = gaps[gaps["view"].isin(used)]
    flags = {k: dict(zip(g["view"], g["reversal"])) for k, g in main.groupby(keys, sort=False)}
    rows = []
    for k, r in raw.iterrows():
        f = flags.get(k, {})
        fl = {v: f[v] for v in used if v in f}  # a view without a row for this cell (no CA ratings) is not used
        agree = (bool(fl["ia"] == fl["da"]) if ("ia" in fl and "da" in fl and fl["ia"] is not pd.NA
                                                and fl["da"] is not pd.NA) else pd.NA)
        rows.append(dict(zip(keys, k), acc_a=r["acc_a"], acc_b=r["acc_b"], acc_gap=r["acc_gap"],
                         **{f"{v}_reversal": fl.get(v, pd.NA) for v in MAIN_VIEWS},
                         pattern=_pattern(fl), da_ia_agree=agree, views_used="+".join(fl)))
    out = pd.DataFrame(rows, columns=list(PATTERN_COLUMNS))
    for c in ("ia_reversal", "da_reversal", "ca_reversal", "da_ia_agree"):
        out[c] = out[c].astype("boolean")
    return out


def pattern_shares(pats: pd.DataFrame, by=("method", "dataset", "comparison")) -> pd.DataFrame:
    """Share of each pattern per grouping and metric (Tables 1, 2; Figure 4).

    Returns
    -------
    DataFrame
        Columns :data:`SHARE_COLUMNS`: ``n_cells`` with a defined pattern, the share of each of :data:`PATTERNS` among
        them, ``n_undefined``, and ``da_ia_agree``, the share of cells (with both flags defined) where DA and IA share
        the same reversal status.
    """
    d = pd.DataFrame({p: (pats["pattern"] == p).astype(np.int64) for p in PATTERNS}, index=pats.index)
    d["metric"] = pats["metric"]
    d["n_cells"] = (pats["pattern"] != "undefined").astype(np.int64)
    agree = pats["da_ia_agree"].astype("boolean")
    d["agree_n"], d["agree_yes"] = agree.notna().astype(np.int64), agree.fillna(False).astype(np.int64)
    parts = []
    for name, key in _groupings(pats, by):
        grp = d.assign(key=key).groupby(["key", "metric"], sort=True)
        agg = grp[[*PATTERNS, "n_cells", "agree_n", "agree_yes"]].sum().assign(n_rows=grp.size()).reset_index()
        agg.insert(0, "by", name)
        parts.append(agg)
    out = pd.concat(parts, ignore_index=True)
    n = out["n_cells"].to_numpy(np.float64)
    for p in PATTERNS:
        out[p] = np.divide(out[p].to_numpy(np.float64), n, out=np.full(n.size, np.nan), where=n > 0)
    na = out["agree_n"].to_numpy(np.float64)
    out["da_ia_agree"] = np.divide(out["agree_yes"].to_numpy(np.float64), na, out=np.full(na.size, np.nan),
                                   where=na > 0)
    out["n_undefined"] = out["n_rows"] - out["n_cells"]
    return out.reindex(columns=list(SHARE_COLUMNS))


def _row_pearson(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    xc = rx - rx.mean(axis=1, keepdims=True)
    yc = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _spearman(x: np.ndarray, y: np.ndarray, n_bootstrap: int, seed: int):
    if x.size < 3:
        return float("nan"), float("nan"), float("nan"), float("nan"), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        res = stats.spearmanr(x, y)
    rho, p = float(res.statistic), float(res.pvalue)
    if n_bootstrap < 1:
        return rho, float("nan"), float("nan"), p, 0
    boot = np.concatenate([_row_pearson(stats.rankdata(x[idx], axis=1), stats.rankdata(y[idx], axis=1))
                           for _, idx in resample_indices(x.size, n_bootstrap, seed)])
    lo, hi = interval(boot)
    return rho, lo, hi, p, int(np.isnan(boot).sum())


def accuracy_correlation(gaps: pd.DataFrame, n_bootstrap: int = 2000, seed: int = 0,
                         by=("method",)) -> pd.DataFrame:
    """Spearman rho between the accuracy gap and the raw metric gap across cells (Figure 1).

    Parameters
    ----------
    gaps : DataFrame
        ``ace_gaps`` rows (the ``raw`` rows are used).
    n_bootstrap : int
        Resamples of the cells for the percentile interval (0: none).
    by : groupings besides ``"all"``

    Returns
    -------
    DataFrame
        Columns :data:`CORRELATION_COLUMNS`; ``rho``, ``lo``, ``hi``, ``p_value`` are ``nan`` for fewer than 3 cells
        or constant input (``n_undefined`` counts the resamples where rho was undefined).
    """
    raw = gaps[(gaps["view"] == "raw") & np.isfinite(gaps["gap"]) & np.isfinite(gaps["acc_gap"])]
    rows = []
    for name, key in _groupings(raw, by):
        for (k, metric), part in raw.groupby([key, raw["metric"]], sort=True):
            acc = part["acc_gap"].to_numpy(np.float64)
            s = np.where(acc < 0, -1.0, 1.0)
            x, y = np.abs(acc), s * part["gap"].to_numpy(np.float64)
            sd = setting_seed("spearman", f"{metric}|{name}|{k}", seed)
            rho, lo, hi, p, nu = _spearman(x, y, n_bootstrap, sd)
            rows.append(dict(by=name, key=k, metric=metric, n_cells=int(x.size), rho=rho, lo=lo, hi=hi,
                             p_value=p, n_undefined=nu, seed=sd))
    return pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
