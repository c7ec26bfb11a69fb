"""Outcome strata, distribution-aligned importance weights and the resampling alternative (study 001, Appendix B, E.7).

See :mod:`.views` for how the DA views use them and which direction defines the DA gap.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from confgrid.analysis.metrics import bin_indices, undefined

from .frame import ACEWarning
from .weighted import kish_ess

__all__ = ["ESS_WARNING", "Strata", "outcome_strata", "outcome_distribution", "DAWeights", "da_weights",
           "resample_rows"]

#: ``ESS / N`` below this raises an :class:`ACEWarning` (study 001, Appendix E.5).
ESS_WARNING = 0.5

@dataclass(frozen=True)
class Strata:
    """Outcome strata of correctness values (study 001, Appendix E.7).

    Attributes
    ----------
    levels : tuple of float or None
        Exact levels (ascending); binary data always has ``(0.0, 1.0)``.
    n_strata : int
        Number of equal-width strata of ``[0, 1]`` when ``levels`` is None.
    """

    levels: tuple[float, ...] | None
    n_strata: int = 10

    @property
    def size(self) -> int:
        return len(self.levels) if self.levels is not None else self.n_strata

    def assign(self, correct) -> np.ndarray:
        """Stratum index of each value, shape (n,) int64 in ``0 .. size - 1``.

        Raises
        ------
        ValueError
            With exact levels, a value that is not one of them.
        """
        z = np.asarray(correct, dtype=np.float64)
        if self.levels is None:
            return bin_indices(z, self.n_strata)
        lv = np.asarray(self.levels)
        k = np.clip(np.searchsorted(lv, z), 0, lv.size - 1)
        if z.size and not np.array_equal(lv[k], z):
            bad = int(np.flatnonzero(lv[k] != z)[0])
            raise ValueError(f"correct value {z[bad]!r} is not one of the strata levels {self.levels}")
        return k.astype(np.int64)

    def describe(self) -> str:
        if self.levels is not None:
            return "levels " + ",".join(f"{x:g}" for x in self.levels)
        return f"{self.n_strata} equal-width strata"


def outcome_strata(*correct, max_levels: int = 10, n_strata: int = 10) -> Strata:
    """The strata of DA for the pooled correctness values of a pair.

    Binary data (every value 0 or 1): levels ``(0, 1)``. Otherwise the exact distinct values when there are at most
    ``max_levels``, else ``n_strata`` equal-width strata.

    Examples
    --------
    >>> outcome_strata([1, 1, 0], [1, 1, 1]).levels
    (0.0, 1.0)
    >>> outcome_strata([0.5, 1.0], [0.25]).levels
    (0.25, 0.5, 1.0)
    >>> outcome_strata(np.linspace(0, 1, 11)).levels is None
    True
    """
    z = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in correct]) if correct else np.zeros(0)
    uniq = np.unique(z)
    if np.isin(uniq, (0.0, 1.0)).all():
        return Strata((0.0, 1.0), n_strata)
    if uniq.size <= max_levels:
        return Strata(tuple(float(x) for x in uniq), n_strata)
    return Strata(None, n_strata)


def outcome_distribution(correct, strata: Strata) -> np.ndarray:
    """Share of rows in each stratum, shape (K,); all ``nan`` for no rows."""
    k = strata.assign(correct)
    if k.size == 0:
        return np.full(strata.size, np.nan)
    return np.bincount(k, minlength=strata.size) / k.size


@dataclass(frozen=True)
class DAWeights:
    """Importance weights of one model (study 001, Appendix B).

    Attributes
    ----------
    weights : ndarray of shape (n,), float64
        ``q_k / p_k`` of each row's stratum; all ``nan`` when unsupported.
    source, target : ndarray of shape (K,)
        The model's outcome distribution ``p`` and the target ``q``.
    supported : bool
        Every stratum with ``q_k > 0`` has ``p_k > 0``.
    ess, ess_frac : float
        Kish ESS and ``ESS / n`` (``nan`` when unsupported).
    """

    weights: np.ndarray
    source: np.ndarray
    target: np.ndarray
    supported: bool
    ess: float
    ess_frac: float


def da_weights(correct, target, strata: Strata, who: str = "model") -> DAWeights:
    """Weights ``w_i = q_k / p_k`` moving ``correct``'s outcome distribution to ``target``.

    Parameters
    ----------
    correct : array-like of shape (n,)
        The reweighted model's correctness.
    target : array-like of shape (K,)
        Target distribution over ``strata`` (sums to 1).
    who : str
        Named in the warnings.

    Returns
    -------
    DAWeights
        Unsupported target (a stratum with target mass has no row; binary: accuracy 0 or 1 against another target):
        weights ``nan`` and an :class:`UndefinedMetricWarning`. ``ESS / n <`` :data:`ESS_WARNING`: an
        :class:`ACEWarning`.

    Examples
    --------
    >>> d = da_weights([1, 1, 1, 0], [0.5, 0.5], Strata((0.0, 1.0)))  # a_A = 0.75 -> a_B = 0.5
    >>> d.weights.tolist(), round(d.ess, 12)
    ([0.6666666666666666, 0.6666666666666666, 0.6666666666666666, 2.0], 3.0)
    """
    z = np.asarray(correct, dtype=np.float64)
    k = strata.assign(z)
    n = k.size
    q = np.asarray(target, dtype=np.float64)
    p = np.bincount(k, minlength=strata.size) / n if n else np.full(strata.size, np.nan)
    if n == 0 or not np.isfinite(q).all():
        return DAWeights(np.full(n, np.nan), p, q, False, float("nan"), float("nan"))
    missing = (q > 0) & (p == 0)
    if missing.any():
        s = int(np.flatnonzero(missing)[0])
        undefined(f"DA weights of {who}",
                   f"the target puts mass {q[s]:.4g} on outcome stratum {s} ({strata.describe()}) "
                   "where it has no rows (accuracy 0 or 1: the support condition fails)")
        return DAWeights(np.full(n, np.nan), p, q, False, float("nan"), float("nan"))
    ratio = np.divide(q, p, out=np.zeros_like(q), where=p > 0)
    w = ratio[k]
    ess = kish_ess(w)
    frac = ess / n
    if frac < ESS_WARNING:
        warnings.warn(f"DA weights of {who}: ESS/N = {frac:.3f} < {ESS_WARNING} (ESS {ess:.1f} of {n} rows); "
                      "the weights are concentrated on few rows", ACEWarning, stacklevel=2)
    return DAWeights(w, p, q, True, ess, frac)


def resample_rows(correct, target, strata: Strata, rng: np.random.Generator) -> np.ndarray | None:
    """Row indices kept by the resampling alternative of DA (study 001, section 4.2).

    The largest subset with the target composition in whole rows: ``N' = min_k n_k / q_k`` over strata with
    ``q_k > 0``, then a random ``floor(q_k N')`` rows of stratum ``k`` (without replacement, strata in order, drawn
    with ``rng``). Returns them sorted, int64 ``(n_kept,)``; ``None`` when a stratum with target mass has no row.
    """
    k = strata.assign(correct)
    q = np.asarray(target, dtype=np.float64)
    n_k = np.bincount(k, minlength=strata.size)
    pos = q > 0
    if k.size == 0 or (n_k[pos] == 0).any():
        return None
    n_new = float(np.min(n_k[pos] / q[pos]))
    keep = np.minimum(n_k, np.floor(q * n_new + 1e-9)).astype(np.int64)
    parts = [rng.choice(np.flatnonzero(k == s), size=int(keep[s]), replace=False) for s in range(strata.size)]
    return np.sort(np.concatenate(parts).astype(np.int64))
