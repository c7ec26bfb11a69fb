"""Weighted ECE and Brier score, Kish effective sample size (study 001, section 4.2, Appendix E.5).

Real-valued row weights enter ECE's bin counts, bin accuracy and bin confidence, with the bins and bin-edge rule of
:func:`confgrid.analysis.metrics.bin_indices`. Both are computed by the one weighted kernel of the package
(:func:`confgrid.analysis.kernels.ece_weighted` and ``brier_weighted``, the kernels of the paired bootstrap), with the
weights as one row; weights all 1 give :func:`confgrid.analysis.metrics.ece` and ``brier`` to float round-off.
"""

from __future__ import annotations

import numpy as np

from confgrid.analysis.kernels import brier_weighted, ece_weighted
from confgrid.analysis.metrics import undefined, validate_inputs
from confgrid.analysis.registry import METRICS as METRIC_REGISTRY
from confgrid.analysis.registry import get_metric

__all__ = ["METRICS", "weighted_ece", "weighted_brier", "metric_value", "kish_ess"]

#: Metrics of the comparison (lower is better for both).
METRICS = ("ece", "brier")


def _check_weights(weights, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        bad = int(np.flatnonzero(~np.isfinite(w) | (w < 0))[0])
        raise ValueError(f"weights must be finite and >= 0; got weights[{bad}] = {w[bad]!r}")
    return w


def _weighted_inputs(what: str, confidence, correct, weights):
    """``(c, y, w)`` checked, or ``None`` after a warning when there is no row or no weight."""
    c, y = validate_inputs(confidence, correct)
    w = _check_weights(weights, c.size)
    if c.size == 0 or not w.sum() > 0:
        undefined(what, "no rows or zero total weight", stacklevel=4)
        return None
    return c, y, w


def weighted_ece(confidence, correct, weights=None, n_bins: int = 10, closure: str = "left") -> float:
    """ECE with real-valued row weights in the bin counts, accuracy and confidence.

    ``ECE_w = sum_b (W_b / W) |acc_b - conf_b|`` with ``W_b = sum_{i in b} w_i``,
    ``acc_b = sum_{i in b} w_i z_i / W_b``, ``conf_b = sum_{i in b} w_i c_i / W_b`` and ``W = sum_i w_i``; bins
    ``[k/B, (k+1)/B)``, the last one holding ``1.0`` (:func:`confgrid.analysis.metrics.bin_indices`), or another
    ``closure`` (``"right"``: ``(k/B, (k+1)/B]``; :data:`metrics.CLOSURES`). Computed in the same order as
    :func:`confgrid.analysis.metrics.ece`, so weights all 1 give exactly (bit for bit) the existing ECE; integer
    weights give the ECE of the rows repeated that many times. Reference: study 001, section 4.2.

    Parameters
    ----------
    confidence, correct : array-like of shape (n,)
        In ``[0, 1]`` (correctness binary or graded).
    weights : array-like of shape (n,), optional
        Finite, ``>= 0``; default all 1.

    Returns
    -------
    float
        In ``[0, 1]``, lower is better; ``nan`` with an :class:`UndefinedMetricWarning` when there are no rows or the
        weights sum to 0.

    Raises
    ------
    ValueError
        Values outside ``[0, 1]``, shapes that differ, negative or non-finite weights, ``n_bins < 1``.

    Examples
    --------
    >>> weighted_ece([0.0, 0.1, 0.5, 1.0], [0, 0, 1, 1])
    0.15
    >>> round(weighted_ece([0.9, 0.9, 0.2], [1, 0, 0], weights=[1.0, 2.0, 0.0]), 12)  # |1/3 - 0.9|
    0.566666666667
    """
    if (prep := _weighted_inputs("weighted ECE", confidence, correct, weights)) is None:
        return float("nan")
    c, y, w = prep
    return float(ece_weighted(c, y, w[None, :], n_bins, closure)[0])  # the one weighted kernel (analysis/kernels.py)


def weighted_brier(confidence, correct, weights=None) -> float:
    """Weighted Brier score ``sum_i w_i (c_i - z_i)^2 / sum_i w_i``.

    Weights all 1 give exactly :func:`confgrid.analysis.metrics.brier`; parameters, result and errors as
    :func:`weighted_ece`.

    Examples
    --------
    >>> weighted_brier([1.0, 0.5, 0.0], [1, 0, 0], weights=[0.0, 2.0, 2.0])
    0.125
    """
    if (prep := _weighted_inputs("weighted Brier", confidence, correct, weights)) is None:
        return float("nan")
    c, y, w = prep
    return float(brier_weighted(c, y, w[None, :])[0])  # the one weighted kernel (analysis/kernels.py)


def metric_value(metric: str, confidence, correct, weights=None, n_bins: int = 10) -> float:
    """:func:`weighted_ece` (``ece``, ``ece_right``, ``ece_right_float``: its bin closure) or :func:`weighted_brier`
    by name.

    Raises
    ------
    ValueError
        If ``metric`` is not in :data:`METRICS`.
    """
    info = get_metric(metric) if metric in METRIC_REGISTRY else None
    if info is not None and info.family == "ece":  # ece and its closure variants: the registry holds the closure
        return weighted_ece(confidence, correct, weights, n_bins, info.closure)
    if metric == "brier":
        return weighted_brier(confidence, correct, weights)
    raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")


def kish_ess(weights) -> float:
    """Kish effective sample size ``(sum w)^2 / sum w^2`` (study 001, Appendix E.5).

    Returns ``nan`` for no weights, all-zero or non-finite weights.

    Examples
    --------
    >>> kish_ess([1.0, 1.0, 1.0, 1.0])
    4.0
    >>> kish_ess([2.0, 1.0, 1.0])  # 16 / 6
    2.6666666666666665
    """
    w = np.asarray(weights, dtype=np.float64)
    s2 = float(np.sum(w * w))
    if w.size == 0 or not np.isfinite(w).all() or s2 == 0.0:
        return float("nan")
    return float(np.sum(w)) ** 2 / s2
