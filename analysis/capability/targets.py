"""The two calibration targets of study 004 and how they relate (sections 3-4, Figures 2, 6 and 13).

* Capability target: the expected accuracy of the model on an item, the mean correctness of its k_eval samples, with
  the standard error ``std(ddof=1) / sqrt(k)`` (as ``tables/targets.parquet``).
* Response target: the correctness of one sampled answer (the first sample of the item's pool, sample_idx 0).
* Standard error against k (Figure 6): the target and its standard error from the first k samples of every item,
  k = 1 .. k_eval.
* Divergence (Figures 2 and 13): the distribution of the capability target among items whose response target is 0
  and among those where it is 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from confgrid.analysis.metrics import bin_indices

__all__ = ["sample_matrix", "se_by_k", "divergence", "DIVERGENCE_BINS"]

#: Equal-width bins of the capability target in the divergence table ([k/10, (k+1)/10), 1.0 in the last).
DIVERGENCE_BINS = 10


def sample_matrix(samples: pd.DataFrame, correct_col: str) -> tuple[list[str], np.ndarray]:
    """Per-item correctness of the samples, in sample order.

    Parameters
    ----------
    samples : rows of one (model, dataset, method): item_id, sample_idx and ``correct_col`` (float in [0, 1];
        NaN, a sample without a parsed answer, counts as 0, as in the targets table)

    Returns
    -------
    (item ids sorted, ndarray (N, k) float64). Items with fewer samples than the most are padded with NaN.
    """
    if samples.empty:
        return [], np.zeros((0, 0))
    s = samples.sort_values(["item_id", "sample_idx"])
    ids = sorted(s["item_id"].unique())
    k = int(s.groupby("item_id").size().max())
    mat = np.full((len(ids), k), np.nan)
    pos = {i: j for j, i in enumerate(ids)}
    rank = s.groupby("item_id").cumcount().to_numpy()
    rows = s["item_id"].map(pos).to_numpy()
    mat[rows, rank] = np.nan_to_num(s[correct_col].to_numpy(np.float64), nan=0.0)
    return ids, mat


def se_by_k(mat: np.ndarray) -> pd.DataFrame:
    """Standard error of the capability target from the first k samples, k = 1 .. K (study 004 Figure 6).

    Parameters
    ----------
    mat : ndarray (N, K) of sample correctness in [0, 1] (NaN: no such sample; an item counts at k only if it
        has k samples)

    Returns
    -------
    DataFrame with one row per k: k, n_items, mean_se, median_se, max_se (the per-item ``std(ddof=1)/sqrt(k)``,
    NaN at k = 1), mean_target, and mean_abs_change (mean over items of ``|mu_k - mu_K|``, how far the target
    from k samples lies from the one from all K).
    """
    rows = []
    N, K = mat.shape
    full = np.nanmean(mat, axis=1) if K else np.zeros(0)
    for k in range(1, K + 1):
        sub = mat[:, :k]
        have = ~np.isnan(sub).any(axis=1)
        x = sub[have]
        mu = x.mean(axis=1) if len(x) else np.zeros(0)
        se = x.std(axis=1, ddof=1) / np.sqrt(k) if k > 1 and len(x) else np.full(1, np.nan)
        rows.append({"k": k, "n_items": int(have.sum()), "mean_se": float(np.mean(se)),
                     "median_se": float(np.median(se)), "max_se": float(np.max(se)),
                     "mean_target": float(mu.mean()) if len(x) else np.nan,
                     "mean_abs_change": float(np.mean(np.abs(mu - full[have]))) if len(x) else np.nan})
    return pd.DataFrame(rows, columns=["k", "n_items", "mean_se", "median_se", "max_se", "mean_target",
                                       "mean_abs_change"])


def divergence(capability: np.ndarray, response: np.ndarray, n_bins: int = DIVERGENCE_BINS) -> pd.DataFrame:
    """Distribution of the capability target given the response target (study 004 Figure 2).

    Parameters
    ----------
    capability : ndarray (N,), the expected accuracy per item in [0, 1]
    response : ndarray (N,), one sample's correctness per item (0 or 1; NaN items are left out)

    Returns
    -------
    DataFrame, one row per (response_target in {0, 1}, bin): response_target, bin_lo, bin_hi, count, share (of
    the items with that response target), and per response target n_items, mean, q25, median, q75, min, max of
    the capability target (repeated on its rows). Empty bins are rows with count 0.
    """
    cap = np.asarray(capability, dtype=np.float64)
    resp = np.asarray(response, dtype=np.float64)
    ok = ~(np.isnan(cap) | np.isnan(resp))
    cap, resp = cap[ok], resp[ok]
    rows = []
    for r in (0, 1):
        c = cap[(resp > 0.5) == bool(r)]
        b = bin_indices(c, n_bins)
        counts = np.bincount(b, minlength=n_bins)
        q = np.quantile(c, [0.25, 0.5, 0.75]) if len(c) else [np.nan] * 3
        stats = {"n_items": len(c), "mean": float(c.mean()) if len(c) else np.nan, "q25": float(q[0]),
                 "median": float(q[1]), "q75": float(q[2]), "min": float(c.min()) if len(c) else np.nan,
                 "max": float(c.max()) if len(c) else np.nan}
        for j in range(n_bins):
            rows.append({"response_target": r, "bin_lo": j / n_bins, "bin_hi": (j + 1) / n_bins,
                         "count": int(counts[j]), "share": float(counts[j] / len(c)) if len(c) else np.nan, **stats})
    return pd.DataFrame(rows)
