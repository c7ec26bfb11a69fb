"""Distribution-aligned reweighting of a signal on every resample (study 001, section 4.2 and Appendix B).

A *reweighted cell* of the one evaluator (analysis/evaluation.py) is a signal whose items weigh
``w_i = q_k / p_k`` with ``k`` the outcome stratum of item ``i``: ``p`` is the cell's own outcome composition
and ``q`` a target composition (another model's, the mean of two models', or a declared one). In the paired
bootstrap both compositions are **re-estimated on every resample** from the resample's counts ``W`` (study
001, Appendix E.6: the statistic must be the same function of the data in every resample), so a resample's
row weights are ``W[r, i] * q_k(r) / p_k(r)``. The weighted ECE, Brier and signed gap of those weights are the
count-weighted kernel's sums (analysis/kernels.py with real weights), grouped by stratum because a weight is
constant within one (analysis/fused.py ``ReweightedCell``; equal to the kernel to rounding, tested against it
and a per-resample loop); AUROC and AURC are not defined for real weights and stay ``nan`` for such a cell.

Support: a resample where a stratum with target mass has no row of the reweighted cell (``q_k > 0``,
``p_k = 0``), or where a composition is undefined (no rows), gives ``nan`` weights: the metric is undefined
on that resample (counted in ``n_undefined``), never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Reweight", "compositions", "omega", "REWEIGHTABLE_METRICS"]

#: Metrics evaluated on a reweighted cell: those whose kernel takes real weights (every other one is ``nan``).
REWEIGHTABLE_METRICS = ("ece", "brier", "calibration_gap", "overconfidence")


@dataclass(frozen=True)
class Reweight:
    """How one cell of a unit is reweighted on each resample.

    Attributes
    ----------
    strata : ndarray of shape (n,), int64
        The outcome stratum of each of the unit's ``n`` items, in ``0 .. n_strata - 1``; ``-1`` outside the support.
    n_strata : int
        ``K >= 1`` strata.
    targets : tuple of ndarray of shape (n,), int64
        Strata of the models whose resampled compositions are averaged into the target ``q`` (one: that model's
        composition, study 001's ``da_a_to_b``; two: the pair's mean, ``da_target`` with ``target="mean"``); ``-1``
        outside their supports. Empty with ``fixed``.
    fixed : ndarray of shape (K,), float64, or None
        A declared target composition (``da_target`` with a declared accuracy ``t``: ``(1 - t, t)``).

    Raises
    ------
    ValueError
        Shapes that disagree, a stratum outside ``-1 .. K - 1``, neither or both of ``targets`` and ``fixed``.
    """

    strata: np.ndarray
    n_strata: int
    targets: tuple[np.ndarray, ...] = ()
    fixed: np.ndarray | None = None

    def __post_init__(self) -> None:
        k = int(self.n_strata)
        if k < 1:
            raise ValueError(f"n_strata must be >= 1, got {self.n_strata}")
        arrays = (self.strata, *self.targets)
        n = np.shape(self.strata)[0] if np.ndim(self.strata) == 1 else -1
        for a in arrays:
            a = np.asarray(a)
            if a.ndim != 1 or a.shape[0] != n or a.dtype.kind not in "iu":
                raise ValueError(f"strata and targets must be int arrays of shape ({n},), got {a.dtype} {a.shape}")
            if a.size and (a.min() < -1 or a.max() >= k):
                raise ValueError(f"strata must lie in -1 .. {k - 1}, got values {a.min()} .. {a.max()}")
        if bool(self.targets) == (self.fixed is not None):
            raise ValueError("a Reweight needs either target strata (a model's composition) or a fixed target, "
                             "not both or neither")
        if self.fixed is not None and np.shape(self.fixed) != (k,):
            raise ValueError(f"fixed must have shape ({k},), got {np.shape(self.fixed)}")


def compositions(W: np.ndarray, strata: np.ndarray, n_strata: int) -> np.ndarray:
    """Outcome composition of each resample: ``p[r, k] = sum_{strata_i = k} W[r, i] / sum_{strata_i >= 0} W[r, i]``.

    Parameters
    ----------
    W : ndarray of shape (b, n), float64
        Resample counts (multiplicities), or one row of ones for the point estimate.
    strata : ndarray of shape (n,), int64
        ``-1`` for an item that does not count.

    Returns
    -------
    ndarray of shape (b, n_strata), float64
        Rows of ``nan`` where a resample has none of the counted items.
    """
    onehot = np.zeros((strata.shape[0], int(n_strata)))
    rows = np.flatnonzero(strata >= 0)
    onehot[rows, strata[rows]] = 1.0
    C = W @ onehot
    tot = C.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, C / np.where(tot > 0, tot, 1.0), np.nan)


def omega(W: np.ndarray, rw: Reweight) -> np.ndarray:
    """The stratum weights ``q_k / p_k`` of every resample.

    Parameters
    ----------
    W : ndarray of shape (b, n), float64

    Returns
    -------
    ndarray of shape (b, K), float64
        ``0`` for a stratum with ``p_k = 0`` and ``q_k = 0``; a row of ``nan`` where the support condition fails (some
        ``q_k > 0`` with ``p_k = 0``) or a composition is undefined (equals tests/reference/ace_cell_bootstrap.py).

    Examples
    --------
    >>> rw = Reweight(np.array([1, 1, 1, 0]), 2, targets=(np.array([1, 0, 1, 0]),))
    >>> omega(np.ones((1, 4)), rw).round(6).tolist()  # a_A = 0.75 reweighted to a_B = 0.5
    [[2.0, 0.666667]]
    """
    p = compositions(W, rw.strata, rw.n_strata)
    if rw.fixed is not None:
        q = np.broadcast_to(np.asarray(rw.fixed, dtype=np.float64)[None, :], p.shape)
    else:
        q = sum(compositions(W, t, rw.n_strata) for t in rw.targets) / len(rw.targets)
    with np.errstate(invalid="ignore", divide="ignore"):
        om = np.where(p > 0, q / np.where(p > 0, p, 1.0), 0.0)
    bad = ((q > 0) & (p == 0)).any(axis=1) | ~np.isfinite(q).all(axis=1) | ~np.isfinite(p).all(axis=1)
    om[bad] = np.nan
    return om
