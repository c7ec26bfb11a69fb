"""Capability-calibration metrics against a continuous target, with an item-level paired bootstrap.

Study 004 section 3 (capability calibration) and Appendix Tables 3, 12, 13: an estimate ``p_i`` in [0, 1] of item
``i`` is rated against the item's target ``mu_i`` in [0, 1] (the expected accuracy over k_eval samples, or one
sample's correctness for the response target):

* Brier score: ``mean_i (p_i - mu_i)^2``.
* ECE: 10 equal-width bins ``[k/10, (k+1)/10)``, a confidence of exactly 1.0 in the last bin, ``sum_b (n_b / n)
  |mean_b p - mean_b mu|`` (the study's official code drops p = 1.0 from every bin while keeping it in n; that is not
  copied). Computed by the one ECE kernel (:func:`confgrid.analysis.kernels.ece_weighted`, bins of
  :func:`confgrid.analysis.metrics.bin_indices`), so a value such as ``0.8999999999999999`` from an isotonic block
  mean falls in the bin ``[0.8, 0.9)`` exactly as in :func:`confgrid.analysis.metrics.ece`.
* Spearman's rho between p and mu (average ranks for ties; NaN when either is constant).

The run's evaluator bootstraps these metrics over items (analysis/evaluation.py, the one kernels of
analysis/kernels.py); study 004's own item bootstrap and its Brier and Spearman on one sample are the tests' oracle
(tests/reference/capability_bootstrap.py).
"""

from __future__ import annotations

import numpy as np

from confgrid.analysis.kernels import ece_weighted

__all__ = ["CAPABILITY_METRICS", "ece_to_target"]

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
