"""Study 001's resampling of a matched cell and its reliability criteria (Appendix E.6).

Each cell is a unit of the one evaluator (analysis/ace/units.py, analysis/reweighting.py). Its ``B`` (2,000)
resamples of the cell's ``n`` questions are drawn **jointly for the pair** as the count matrix ``W`` of shape
``(B, n)`` that the paired bootstrap itself draws (:func:`confgrid.analysis.bootstrap.resample_counts`, the one
resampling stream), seeded per cell by :func:`confgrid.analysis.resampling.setting_seed` of ``("A vs B",
"dataset|method", seed)`` (:func:`cell_seed`). Study 001's own vectorized bootstrap of the
cell is the tests' oracle (tests/reference/ace_cell_bootstrap.py).

Reliability (Appendix E.6): 95% percentile intervals; for a point-estimate reversal the **retention probability**
(:func:`confgrid.analysis.compare.retention_probability`) and the **strict criterion** (:func:`strict_reversal`).
"""

from __future__ import annotations

from confgrid.analysis.compare import fully_resolved
from confgrid.analysis.resampling import setting_seed

from .frame import Cell

__all__ = ["DEFAULT_RESAMPLES", "cell_seed", "strict_reversal"]

DEFAULT_RESAMPLES = 2000


def cell_seed(cell: Cell, base_seed: int = 0) -> int:
    """Seed of a cell's resamples: ``setting_seed("A vs B", "dataset|method", base_seed)``."""
    return setting_seed(*cell.seed_names, base_seed)


def strict_reversal(raw: tuple[float, float, float], aligned: tuple[float, float, float]) -> bool:
    """The strict criterion of study 001 (Table 10) for one comparison.

    A reversal with both 95% intervals excluding zero (:func:`confgrid.analysis.compare.fully_resolved`), the raw
    and aligned intervals on opposite sides of it.

    ``raw``, ``aligned``: ``(point, lo, hi)``.

    Examples
    --------
    >>> strict_reversal((0.05, 0.02, 0.08), (-0.03, -0.05, -0.01))
    True
    >>> strict_reversal((0.05, 0.02, 0.08), (-0.03, -0.05, 0.01))
    False
    """
    (_, rl, rh), (_, al, ah) = raw, aligned
    return bool(fully_resolved(raw, aligned)) and bool((rl > 0 and ah < 0) or (rh < 0 and al > 0))
