"""Study 004's own item bootstrap of the capability metrics: a test-only oracle.

This was ``confgrid.analysis.capability.metrics.capability_bootstrap`` (and ``brier_to_target``,
``spearman_to_target``). The run's evaluator computes the same
metrics as rows of the one signal table (flows/evaluate/capability.py, analysis/evaluation.py);
tests/flows/evaluate/test_capability_grid.py checks its points against this, and tests/analysis/test_capability.py checks this against a
loop over resampled items.

The bootstrap resamples items (an item's k samples stay together, since the target is a per-item quantity),
the same items for every estimator of one (model, dataset, target): the intervals are paired. Each resample is a
row of count weights, so an estimator undefined on some items is evaluated on the resampled items where it is
defined.

Not independent of the package: the point values come from ``brier_to_target``, ``ece_to_target`` and its
Spearman, and the resamples from the one weighted kernels (analysis/kernels.py), so it is kept as the oracle it
is, of the layout, the pairing and the draws; the metrics have their own independent checks in
tests/analysis/test_capability.py (numpy, scipy).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from confgrid.analysis.bootstrap import interval
from confgrid.analysis.capability.metrics import CAPABILITY_METRICS, _check, ece_to_target
from confgrid.analysis.kernels import brier_weighted, ece_weighted
from confgrid.analysis.metrics import UndefinedMetricWarning, spearman

from .weighted_values import weighted_values

__all__ = ["CapabilityBootstrap", "capability_bootstrap", "item_weights", "brier_to_target", "spearman_to_target"]


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


def spearman_to_target(p, mu) -> float:
    """Spearman's rho between ``p`` and ``mu`` ((n,), average ranks on ties); NaN if either is constant or n < 2.

    Study 004 Table 12; equal to ``scipy.stats.spearmanr(p, mu).statistic``.
    """
    p, mu = _check(p, mu)
    ok = ~(np.isnan(p) | np.isnan(mu))
    return _spearman(p[ok], mu[ok])


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
            res[e, 2] = weighted_values("spearman", pe, te, w)  # the one kernel, as the run's evaluator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = interval(res, level) if n_resamples else (np.full((E, M), np.nan), np.full((E, M), np.nan))
    return CapabilityBootstrap(names, point, np.asarray(lo), np.asarray(hi), n_def, res)
