"""Reliability-diagram data (compute only; report/figures_reliability.py draws it).

:func:`reliability_diagram` returns a frozen :class:`ReliabilityData` with bin edges, counts, mean confidence and
accuracy per bin; empty bins are ``nan``, never dropped.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .binning import BIN_CONFIDENCES, Binning
from .estimators import equal_mass_bin_starts
from .metrics import (UndefinedMetricWarning, _check_n_bins, _undefined_reason, bin_edges, bin_indices,
                      check_closure, validate_inputs)

__all__ = ["ReliabilityData", "reliability_diagram", "STRATEGIES"]

STRATEGIES = ("uniform", "quantile")


@dataclass(frozen=True)
class ReliabilityData:
    """Per-bin summary of one signal.

    Attributes
    ----------
    bin_edges : ndarray of shape (n_bins + 1,)
        ``uniform``: ``k / n_bins`` (:func:`metrics.bin_edges` of the closure). ``quantile``: ``0``, the confidence of
        the first answer of each bin ``k = 1 .. n_bins - 1`` (1.0 for bins past the last answer; right closure: the
        last answer of bin ``k - 1``, 0 before the first), ``1``; membership of the quantile bins is defined by rank
        (see :func:`estimators.ece_equal_mass`); an empty bin ``k >= 1`` has two equal edges (an empty first bin spans
        ``[0, first confidence)``).
    counts : ndarray of shape (n_bins,), int64
        Answers per bin.
    mean_confidence, accuracy : ndarray of shape (n_bins,)
        Mean confidence and mean correctness per bin, ``nan`` for an empty bin.
    strategy, closure : str
        ``"uniform"`` or ``"quantile"``; the bin closure (:data:`metrics.CLOSURES`).
    bin_confidence : str
        :data:`~confgrid.analysis.binning.BIN_CONFIDENCES`: ``"mean"`` (of its answers), ``"midpoint"`` (uniform only).
    """

    bin_edges: np.ndarray
    counts: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    strategy: str = "uniform"
    closure: str = "left"
    bin_confidence: str = "mean"

    @property
    def n_bins(self) -> int:
        return int(self.counts.size)

    @property
    def confidence(self) -> np.ndarray:
        """What stands for each bin's confidence, shape (n_bins,): the mean confidence of its answers, or the bin's
        midpoint ``(2k + 1) / (2B)`` (:meth:`~confgrid.analysis.binning.Binning.midpoints`); ``nan`` if empty."""
        if self.bin_confidence == "mean":
            return self.mean_confidence
        mid = Binning(self.n_bins, closure=self.closure, bin_confidence="midpoint").midpoints()
        return np.where(self.counts > 0, mid, np.nan)

    @property
    def ece(self) -> float:
        """``sum_b (n_b/n)|acc_b - conf_b|`` over non-empty bins, ``conf_b`` :attr:`confidence`; ``nan``: no answers."""
        n = self.counts.sum()
        if n == 0:
            return float("nan")
        nz = self.counts > 0
        return float(np.sum(self.counts[nz] / n * np.abs(self.accuracy[nz] - self.confidence[nz])))


def reliability_diagram(confidence, correct, n_bins: int = 10, strategy: str = "uniform",
                        closure: str = "left", bin_confidence: str = "mean") -> ReliabilityData:
    """Bin edges, counts, mean confidence and accuracy per bin.

    Parameters
    ----------
    confidence, correct : array-like of shape (n_samples,)
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: equal-width bins ``[k/B, (k+1)/B)``, the last closed (the bins of :func:`metrics.ece`).
        ``"quantile"``: equal-mass bins with the tie rule of :func:`estimators.ece_equal_mass`.
    closure : {"left", "right", "right_float", "left_float"}, default="left"
        Which bin a confidence on an edge (uniform) or a tie group on a quantile edge (quantile) joins, as in
        :func:`metrics.ece` and :func:`estimators.ece_equal_mass`.
    bin_confidence : {"mean", "midpoint"}, default="mean"
        What stands for a bin's confidence (:attr:`ReliabilityData.confidence`); ``"midpoint"`` needs uniform bins.

    Returns
    -------
    ReliabilityData
        Its ``ece`` property equals :func:`metrics.ece` (uniform) or :func:`estimators.ece_equal_mass` (quantile) of
        the same closure. With no rows or a non-finite input every count is 0 and every mean ``nan``, with an
        :class:`UndefinedMetricWarning`.

    Raises
    ------
    ValueError
        Out-of-range values, bad ``n_bins`` or an unknown ``strategy``.

    Examples
    --------
    >>> d = reliability_diagram([0.05, 0.1, 0.95, 1.0], [0, 1, 1, 1], n_bins=2)
    >>> d.counts.tolist(), d.accuracy.tolist()
    ([2, 2], [0.5, 1.0])
    >>> reliability_diagram([0.9], [1], n_bins=2).accuracy.tolist()
    [nan, 1.0]
    """
    n_bins = _check_n_bins(n_bins)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    check_closure(closure)
    if bin_confidence not in BIN_CONFIDENCES or (bin_confidence == "midpoint" and strategy != "uniform"):
        raise ValueError(f"bin_confidence must be one of {list(BIN_CONFIDENCES)} ('midpoint' with uniform bins "
                         f"only), got {bin_confidence!r} with strategy {strategy!r}")
    c, y = validate_inputs(confidence, correct)
    reason = _undefined_reason(c, y)
    if reason is not None:
        warnings.warn(f"reliability diagram is undefined: {reason}; all bins empty",
                      UndefinedMetricWarning, stacklevel=2)
        edges = bin_edges(n_bins, closure)
        empty = np.full(n_bins, np.nan)
        return ReliabilityData(edges, np.zeros(n_bins, dtype=np.int64), empty, empty.copy(), strategy, closure,
                               bin_confidence)
    if strategy == "uniform":
        edges = bin_edges(n_bins, closure)
        b = bin_indices(c, n_bins, closure)
    else:
        order = np.argsort(c, kind="stable")
        cs = c[order]
        starts = equal_mass_bin_starts(cs, n_bins, closure)
        if closure == "left":
            inner = np.append(cs, 1.0)[starts[1:-1]]  # the first answer of each bin
        else:
            inner = np.r_[0.0, cs][starts[1:-1]]  # the last answer of the bin below
        edges = np.r_[0.0, inner, 1.0]
        b = np.empty(c.size, dtype=np.int64)
        b[order] = np.repeat(np.arange(n_bins), np.diff(starts))
    counts = np.bincount(b, minlength=n_bins).astype(np.int64)
    sc = np.bincount(b, weights=c, minlength=n_bins)
    sy = np.bincount(b, weights=y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf_b = np.where(counts > 0, sc / np.maximum(counts, 1), np.nan)
        acc_b = np.where(counts > 0, sy / np.maximum(counts, 1), np.nan)
    return ReliabilityData(edges, counts, conf_b, acc_b, strategy, closure, bin_confidence)
