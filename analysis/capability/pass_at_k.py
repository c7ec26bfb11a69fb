"""pass@k from a capability estimate, against the actual pass@k of the stored samples (study 004, section 6.1).

* Predicted: from an estimate ``p_i`` of the item's expected accuracy, ``S_i = 1 - (1 - p_i)^k`` (k independent
  samples, each correct with probability p_i); the dataset's prediction is ``mean_i S_i`` with the band
  ``+- 1.96 sigma``, ``sigma = sqrt(sum_i S_i (1 - S_i)) / N`` (the standard deviation of the mean of N independent
  Bernoulli(S_i)).
* Actual: the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on Code", eq. 1) from
  an item's n samples of which c are correct, ``1 - C(n - c, k) / C(n, k)``; undefined (NaN) for k > n.
* Instance-level MSE: ``mean_i (S_i - actual_i)^2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PassAtK", "pass_at_k_unbiased", "predicted_pass_at_k", "pass_at_k_row"]


def pass_at_k_unbiased(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per item, ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, eq. 1).

    Parameters
    ----------
    n, c : ndarray (N,), int: samples and correct samples per item (0 <= c <= n)
    k : int >= 1

    Returns
    -------
    ndarray (N,), float64 in [0, 1]; NaN where k > n. Computed as
    ``1 - prod_{j = n - c + 1}^{n} (1 - k / j)`` (no large binomials), 1.0 where n - c < k.

    Raises
    ------
    ValueError
        k < 1, or c outside [0, n].
    """
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.any((c < 0) | (c > n)):
        raise ValueError("correct counts c must lie in [0, n]")
    out = np.full(n.shape, np.nan)
    for i in range(n.size):
        ni, ci = int(n.flat[i]), int(c.flat[i])
        if k > ni:
            continue
        if ni - ci < k:
            out.flat[i] = 1.0
            continue
        j = np.arange(ni - ci + 1, ni + 1, dtype=np.float64)
        out.flat[i] = 1.0 - float(np.prod(1.0 - k / j))
    return out


def predicted_pass_at_k(p: np.ndarray, k: int) -> np.ndarray:
    """``1 - (1 - p)^k`` per item; ``p`` (N,) in [0, 1] (NaN stays NaN)."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - (1.0 - p) ** int(k)


@dataclass(frozen=True)
class PassAtK:
    """One (estimator, k) of a dataset: the predicted mean with its band, the actual mean, the instance MSE."""

    k: int
    n_items: int
    predicted: float
    band_lo: float
    band_hi: float
    actual: float
    mse: float
    status: str


def pass_at_k_row(p: np.ndarray, n: np.ndarray, c: np.ndarray, k: int) -> PassAtK:
    """Predicted against actual pass@k on the items where ``p`` is defined (study 004 Table 2 / 16, Figure 11).

    ``status``: ``ok``; ``k_above_samples`` when k exceeds an item's n (actual and MSE NaN); ``no_items``.
    """
    p = np.asarray(p, dtype=np.float64)
    ok = ~np.isnan(p)
    if not ok.any():
        nan = float("nan")
        return PassAtK(int(k), 0, nan, nan, nan, nan, nan, "no_items")
    s = predicted_pass_at_k(p[ok], k)
    N = int(ok.sum())
    mean = float(s.mean())
    sigma = float(np.sqrt(np.sum(s * (1.0 - s))) / N)
    actual = pass_at_k_unbiased(np.asarray(n)[ok], np.asarray(c)[ok], k)
    status = "k_above_samples" if np.isnan(actual).any() else "ok"
    a_mean = float(actual.mean()) if status == "ok" else float("nan")
    mse = float(np.mean((s - actual) ** 2)) if status == "ok" else float("nan")
    return PassAtK(int(k), N, mean, mean - 1.96 * sigma, mean + 1.96 * sigma, a_mean, mse, status)
