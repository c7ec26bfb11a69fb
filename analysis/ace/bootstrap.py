"""Study 001's resampling of a matched cell and its reliability criteria (Appendix E.6).

Each cell is a unit of the one evaluator (analysis/ace/units.py, analysis/reweighting.py). Its ``B`` (2,000)
resamples of the cell's ``n`` questions are drawn **jointly for the pair** as the count matrix ``W`` of shape
``(B, n)`` that the paired bootstrap itself draws (:func:`confgrid.analysis.bootstrap.resample_counts`, the one
resampling stream), seeded per cell by :func:`confgrid.analysis.resampling.setting_seed` of ``("A vs B",
"dataset|method", seed)`` (:func:`cell_seed`, :func:`cell_counts`). Study 001's own vectorized bootstrap of the
cell is the tests' oracle (tests/reference/ace_cell_bootstrap.py).

Reliability (Appendix E.6): 95% percentile intervals
(:func:`confgrid.analysis.bootstrap.interval`); for a point-estimate
reversal the **retention probability**, the share of resamples (where both
gaps are defined) in which the raw and aligned gaps have strictly opposite
signs; the **strict criterion**: a point-estimate reversal whose raw and
aligned intervals both exclude zero
(:func:`confgrid.analysis.compare.excludes_zero`), on opposite sides.
"""

from __future__ import annotations

import numpy as np

from confgrid.analysis.bootstrap import resample_counts
from confgrid.analysis.compare import excludes_zero, flip
from confgrid.analysis.resampling import setting_seed

from .frame import Cell

__all__ = ["DEFAULT_RESAMPLES", "cell_seed", "cell_counts", "retention_probability", "strict_reversal"]

DEFAULT_RESAMPLES = 2000


def cell_seed(cell: Cell, base_seed: int = 0) -> int:
    """Seed of a cell's resamples: ``setting_seed("A vs B", "dataset|method", base_seed)``."""
    return setting_seed(*cell.seed_names, base_seed)


def cell_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Count matrix ``W`` of shape ``(n_resamples, n)``, float64: the paired bootstrap's own resamples of ``n``
    items under ``seed`` (:func:`confgrid.analysis.bootstrap.resample_counts`, the one resampling stream)."""
    return resample_counts(n, n_resamples, seed)


def retention_probability(raw, aligned) -> tuple[float, int]:
    """Share of resamples where the raw and aligned gaps have strictly opposite signs.

    Parameters
    ----------
    raw, aligned : array-like of shape (B,)
        Paired resampled gaps.

    Returns
    -------
    (probability, n_defined)
        Over the ``n_defined`` resamples where both are finite; a zero gap
        is no opposite sign. ``nan`` when none is defined.

    Examples
    --------
    >>> retention_probability([0.1, -0.2, 0.3, np.nan], [-0.1, -0.1, 0.0, 0.2])
    (0.3333333333333333, 3)
    """
    r, a = np.asarray(raw, dtype=np.float64), np.asarray(aligned, dtype=np.float64)
    ok = np.isfinite(r) & np.isfinite(a)
    k = int(ok.sum())
    if k == 0:
        return float("nan"), 0
    return float(np.mean(np.sign(r[ok]) * np.sign(a[ok]) < 0)), k


def strict_reversal(raw: tuple[float, float, float], aligned: tuple[float, float, float]) -> bool:
    """The strict criterion of study 001 (Table 10) for one comparison.

    A point-estimate reversal (:func:`confgrid.analysis.compare.flip`) whose
    raw and aligned 95% intervals both exclude zero and lie on opposite
    sides of it.

    Parameters
    ----------
    raw, aligned : (point, lo, hi)

    Examples
    --------
    >>> strict_reversal((0.05, 0.02, 0.08), (-0.03, -0.05, -0.01))
    True
    >>> strict_reversal((0.05, 0.02, 0.08), (-0.03, -0.05, 0.01))
    False
    """
    (rp, rl, rh), (ap, al, ah) = raw, aligned
    if not (flip(rp, ap) and excludes_zero(rl, rh) and excludes_zero(al, ah)):
        return False
    return bool((rl > 0 and ah < 0) or (rh < 0 and al > 0))
