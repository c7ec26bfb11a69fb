"""Capability-calibration metrics against a continuous target, with an item-level paired bootstrap.

Study 004 section 3 (capability calibration) and Appendix Tables 3, 12, 13:
an estimate ``p_i`` in [0, 1] of item ``i`` is rated against the item's
target ``mu_i`` in [0, 1] (the expected accuracy over k_eval samples, or one
sample's correctness for the response target):

* Brier score: ``mean_i (p_i - mu_i)^2``.
* ECE: 10 equal-width bins ``[k/10, (k+1)/10)``, a confidence of exactly 1.0
  in the last bin, ``sum_b (n_b / n) |mean_b p - mean_b mu|``. (The study's
  official code drops p = 1.0 from every bin while keeping it in n; that is
  not copied.) Computed by the one ECE kernel
  (:func:`confgrid.analysis.kernels.ece_weighted`, bins of
  :func:`confgrid.analysis.metrics.bin_indices`), so a value such as
  ``0.8999999999999999`` from an isotonic block mean falls in the bin
  ``[0.8, 0.9)`` exactly as in :func:`confgrid.analysis.metrics.ece`.
* Spearman's rho between p and mu (average ranks for ties; NaN when either is
  constant).

The bootstrap resamples items (an item's k samples stay together, since the
target is a per-item quantity), the same items for every estimator of one
(model, dataset, target): the intervals are paired. Each resample is a row of
count weights, so an estimator undefined on some items is evaluated on the
resampled items where it is defined.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from confgrid.analysis.bootstrap import interval
from confgrid.analysis.kernels import brier_weighted, ece_weighted, spearman_weighted
from confgrid.analysis.metrics import UndefinedMetricWarning, spearman

__all__ = ["CAPABILITY_METRICS", "CapabilityBootstrap", "capability_bootstrap", "brier_to_target", "ece_to_target",
           "spearman_to_target", "item_weights"]

#: Metrics of capability calibration, in table order.
CAPABILITY_METRICS = ("brier", "ece", "spearman")


def _check(p, mu) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    if p.shape != mu.shape or p.ndim != 1:
        raise ValueError(f"estimate and target must be 1-D of one length, got shapes {p.shape} and {mu.shape}")
    for name, v in (("estimate", p), ("target", mu)):
        bad = ~np.isnan(v) & ((v < 0) | (v > 1))
        if bad.any():
            raise ValueError(f"{name} must lie in [0, 1]; got {v[bad][0]!r} at position {int(np.flatnonzero(bad)[0])}")
    return p, mu


def item_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Count weights of an item bootstrap: row r holds how often each of the n items is drawn in resample r.

    Returns
    -------
    ndarray of shape (n_resamples, n), float64, rows summing to n. The draws are
    ``default_rng(SeedSequence(seed)).integers(0, n, (n_resamples, n))``.
    """
    if n_resamples < 1 or n < 1:
        return np.zeros((max(int(n_resamples), 0), max(int(n), 0)))
    rng = np.random.default_rng(np.random.SeedSequence(int(seed)))
    idx = rng.integers(0, n, size=(int(n_resamples), n), dtype=np.int64)
    flat = (idx + (np.arange(n_resamples, dtype=np.int64) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=n_resamples * n).astype(np.float64).reshape(n_resamples, n)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """:func:`confgrid.analysis.metrics.spearman` without its warning (NaN when undefined)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return spearman(x, y)


def brier_to_target(p, mu) -> float:
    """Brier score of estimates ``p`` (n,) against targets ``mu`` (n,), both in [0, 1]; NaN rows dropped.

    Study 004 Table 3. Empty input: NaN. Raises ValueError on values outside [0, 1] or shapes that differ.
    """
    p, mu = _check(p, mu)
    ok = ~(np.isnan(p) | np.isnan(mu))
    if not ok.any():
        return float("nan")
    return float(brier_weighted(p[ok], mu[ok], np.ones((1, int(ok.sum()))))[0])  # the one weighted kernel


def ece_to_target(p, mu, n_bins: int = 10, closure: str = "left") -> float:
    """ECE of ``p`` against ``mu`` (both (n,), in [0, 1]) with ``n_bins`` equal-width bins, 1.0 in the last bin
    (``closure="left"``; ``"right"``: ``(k/B, (k+1)/B]``, 0 in the first bin; :data:`metrics.CLOSURES`).

    Study 004 Table 13 (with the last-bin fix stated in the module docstring). Empty input: NaN.
    """
    p, mu = _check(p, mu)
    ok = ~(np.isnan(p) | np.isnan(mu))
    if not ok.any():
        return float("nan")
    return float(ece_weighted(p[ok], mu[ok], np.ones((1, int(ok.sum()))), n_bins, closure)[0])


def spearman_to_target(p, mu) -> float:
    """Spearman's rho between ``p`` and ``mu`` ((n,), average ranks on ties); NaN if either is constant or n < 2.

    Study 004 Table 12; equal to ``scipy.stats.spearmanr(p, mu).statistic``.
    """
    p, mu = _check(p, mu)
    ok = ~(np.isnan(p) | np.isnan(mu))
    return _spearman(p[ok], mu[ok])


@dataclass(frozen=True)
class CapabilityBootstrap:
    """Point values and paired-bootstrap intervals of every (estimator, metric) against one target.

    Attributes: ``names`` (E estimator names), ``point``, ``lo``, ``hi`` (E, 3) in the order of
    :data:`CAPABILITY_METRICS`, ``n`` (E,) items with a defined estimate, ``resamples`` (E, 3, R).
    """

    names: tuple[str, ...]
    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n: np.ndarray
    resamples: np.ndarray


def capability_bootstrap(estimates: dict[str, np.ndarray], target: np.ndarray, n_resamples: int = 1000,
                         seed: int = 0, level: float = 0.95, n_bins: int = 10,
                         closure: str = "left") -> CapabilityBootstrap:
    """Brier, ECE and Spearman of each estimator against ``target``, paired over resampled items.

    Parameters
    ----------
    estimates : dict name -> ndarray (n,), float64 in [0, 1], NaN where the estimator has no value
    target : ndarray (n,), float64 in [0, 1] (NaN items are left out of every estimator)
    n_resamples, seed : the item bootstrap (:func:`item_weights`; every estimator gets the same draws)
    level : interval level (percentile interval, :func:`confgrid.analysis.bootstrap.interval`)
    n_bins, closure : the ECE bins (:func:`ece_to_target`)

    Raises
    ------
    ValueError
        Values outside [0, 1], or an estimate whose length differs from the target's.
    """
    mu = np.asarray(target, dtype=np.float64)
    names = tuple(estimates)
    E, M = len(names), len(CAPABILITY_METRICS)
    point = np.full((E, M), np.nan)
    res = np.full((E, M, int(n_resamples)), np.nan)
    n_def = np.zeros(E, dtype=np.int64)
    W = item_weights(len(mu), int(n_resamples), seed) if len(mu) else np.zeros((int(n_resamples), 0))
    for e, name in enumerate(names):
        p, t = _check(estimates[name], mu)
        ok = ~(np.isnan(p) | np.isnan(t))
        n_def[e] = int(ok.sum())
        if not ok.any():
            continue
        pe, te, w = p[ok], t[ok], W[:, ok]
        point[e] = [brier_to_target(pe, te), ece_to_target(pe, te, n_bins, closure), _spearman(pe, te)]
        if n_resamples:
            res[e, 0] = brier_weighted(pe, te, w)
            res[e, 1] = ece_weighted(pe, te, w, n_bins, closure)
            res[e, 2] = spearman_weighted(pe, te, w)  # the one kernel, as the run's evaluator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = interval(res, level) if n_resamples else (np.full((E, M), np.nan), np.full((E, M), np.nan))
    return CapabilityBootstrap(names, point, np.asarray(lo), np.asarray(hi), n_def, res)
