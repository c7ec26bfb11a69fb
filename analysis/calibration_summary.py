"""Calibration summaries of studies 002 and 003: per group, the calibrated-random baseline and repeated runs.

Pure numpy/pandas on the run's signal rows; these tables hold point values (the intervals: the run's metrics table).

* Brier score, signed calibration gap (mean confidence - accuracy; study 002 calls it overconfidence), ECE
  (equal-width bins), smECE (study 003 section 3.3).
* The calibrated-random baseline (study 003 section 3.3): a guesser that picks one of k options at random and states
  1/k has expected Brier ``(1/k)(1 - 1/k)^2 + (1 - 1/k)(1/k)^2 = (k - 1)/k^2`` (0.1875 for k = 4, 0.25 for k = 2);
  with items of different k the baseline is the mean of the per-item values. The Brier skill score is
  ``1 - Brier / baseline`` (0: no better than the calibrated random guesser; 1: perfect).
* Repeated runs (study 003 Appendix A, Table 2): per model, the mean and standard deviation (ddof = 1) across runs of
  every metric, and the pooled n (the analyzed rows of all runs together).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from confgrid.analysis.estimators import smece
from confgrid.analysis.metrics import UndefinedMetricWarning, brier, ece

__all__ = ["random_baseline_brier", "brier_skill_score", "SUMMARY_METRICS", "calibration_summary",
           "runs_summary"]

#: Metrics of :func:`calibration_summary` (columns, in order).
SUMMARY_METRICS = ("accuracy", "mean_confidence", "brier", "calibration_gap", "ece", "smece", "baseline_brier",
                   "brier_skill_score")


def random_baseline_brier(n_options) -> np.ndarray:
    """Expected Brier score of the calibrated random guesser, ``(k - 1) / k^2`` per item (study 003 section 3.3).

    ``n_options`` (n,): options per item (k >= 1; NaN or 0, an item without options, gives NaN). Returns float64
    ``(n,)`` in [0, 0.25] (0.1875 for k = 4).
    """
    k = np.asarray(n_options, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(k >= 1, (k - 1.0) / (k * k), np.nan)


def brier_skill_score(brier: float, baseline: float) -> float:
    """``1 - brier / baseline``; NaN when the baseline is NaN or 0 (one option: nothing to guess)."""
    if not np.isfinite(baseline) or baseline <= 0 or not np.isfinite(brier):
        return float("nan")
    return float(1.0 - brier / baseline)


def _row(conf: np.ndarray, corr: np.ndarray, k: np.ndarray, n_bins: int, with_smece: bool) -> dict[str, float]:
    n = len(conf)
    if n == 0:
        return {"n": 0, **{m: float("nan") for m in SUMMARY_METRICS}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        b = brier(conf, corr)
        out = {"n": n, "accuracy": float(corr.mean()), "mean_confidence": float(conf.mean()), "brier": b,
               "calibration_gap": float(conf.mean() - corr.mean()), "ece": ece(conf, corr, n_bins),
               "smece": smece(conf, corr) if with_smece else float("nan")}
    base = random_baseline_brier(k)
    base_mean = float(np.nanmean(base)) if np.isfinite(base).any() else float("nan")
    out["baseline_brier"] = base_mean
    out["brier_skill_score"] = brier_skill_score(b, base_mean)
    return out


def calibration_summary(rows: pd.DataFrame, by: Sequence[str], group_cols: Sequence[str] = (),
                        n_bins: int = 10, with_smece: bool = True) -> pd.DataFrame:
    """Per group of ``by`` (and, separately, per value of each column of ``group_cols``), the summary metrics.

    Parameters
    ----------
    rows : DataFrame
        One row per analyzed answer: ``confidence`` (float in [0, 1]), ``correct`` (float in [0, 1]), ``n_options``
        (int; 0 without options), the ``by`` columns and the ``group_cols`` columns.
    by : sequence of str
        Columns that identify a table cell (setting, answer set, policies, signal).
    group_cols : sequence of str
        Grouping columns from the items' metadata (e.g. ``category``): each gives rows with ``group`` = its name and
        ``group_value`` = a value; the rows over all items have ``group = "all"``, ``group_value = ""``.
    n_bins : int, the equal-width ECE bins
    with_smece : bool
        Compute smECE (relplot, slow on small groups); False leaves the column NaN.

    Returns
    -------
    DataFrame
        The ``by`` columns, ``group``, ``group_value``, ``n`` and :data:`SUMMARY_METRICS`.
    """
    cols = [*by, "group", "group_value", "n", *SUMMARY_METRICS]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for key, g in rows.groupby(list(by), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        ident = dict(zip(by, key, strict=True))
        parts = [("all", "", g)]
        for col in group_cols:
            if col in g:
                parts += [(col, str(v), sub) for v, sub in g.groupby(col, sort=True) if str(v) != ""]
        for group, value, sub in parts:
            out.append({**ident, "group": group, "group_value": value,
                        **_row(sub["confidence"].to_numpy(np.float64), sub["correct"].to_numpy(np.float64),
                               sub["n_options"].to_numpy(np.float64), n_bins, with_smece)})
    return pd.DataFrame(out, columns=cols)


def runs_summary(summary: pd.DataFrame, runs: dict[str, Sequence[str]], by: Sequence[str],
                 metrics: Sequence[str] = SUMMARY_METRICS) -> pd.DataFrame:
    """Mean and standard deviation across runs of every metric, and the pooled n (study 003 Table 2).

    Parameters
    ----------
    summary : DataFrame
        :func:`calibration_summary` output with an ``answer_set`` column.
    runs : dict of str to sequence of str
        Declared answer set -> the answer sets of its runs.
    by : sequence of str
        The other identifying columns (model, dataset, policies, signal, group, group_value).

    Returns
    -------
    DataFrame
        ``answer_set`` (the declared id), the ``by`` columns, ``runs`` (runs with rows), ``n_pooled``, and
        ``<metric>_mean`` / ``<metric>_sd`` (sd with ddof = 1; NaN for a single run).
    """
    out = []
    for base, ids in runs.items():
        sub = summary[summary["answer_set"].isin(list(ids))]
        for key, g in sub.groupby(list(by), sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            row = {"answer_set": base, **dict(zip(by, key, strict=True)), "runs": int(len(g)),
                   "n_pooled": int(g["n"].sum())}
            for m in metrics:
                v = g[m].to_numpy(np.float64)
                v = v[np.isfinite(v)]
                row[f"{m}_mean"] = float(v.mean()) if len(v) else float("nan")
                row[f"{m}_sd"] = float(v.std(ddof=1)) if len(v) > 1 else float("nan")
            out.append(row)
    return pd.DataFrame(out)
