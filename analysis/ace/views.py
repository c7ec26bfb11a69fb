"""Point estimates of the raw, instance-aligned and distribution-aligned views (study 001).

Per cell (a pair ``A``, ``B`` on one dataset and method, :class:`frame.Cell`) and metric in ``{"ece", "brier"}`` (ECE
with 10 equal-width bins, the bins and the bin-edge rule of :func:`confgrid.analysis.metrics.bin_indices`), each view
gives ``value_a``, ``value_b`` and the gap ``value_a - value_b`` (lower is better for both metrics, so a positive gap
favours ``B``).

Views (study 001 section 4, Appendices B and E.7)
-------------------------------------------------
``raw``
    Each model's metric on its own answers; accuracies ``a_A``, ``a_B`` (the mean correctness).
``ia`` (instance-aligned, section 4.1)
    Items where the outcomes match, ``D_IA = {i : h(z_A) = h(z_B)}``: exact score match ``h(z) = z`` by default
    (binary: both right or both wrong), or ``h`` = one of ``ia_strata`` equal-width strata of ``[0, 1]``. The metric
    of each model on ``D_IA``; retention ``|D_IA| / |D|``. Parts: ``ia_both_right`` (``h(z) = h(1)`` for both),
    ``ia_both_wrong`` (``h(z) = h(0)`` for both) and, for graded correctness only, ``ia_partial`` (the rest of
    ``D_IA``).
``da`` (distribution-aligned, section 4.2, Appendix B)
    Model ``m``'s rows are weighted so that its weighted outcome distribution equals a target ``q``:
    ``w_i = q_k / p_{m,k}`` with ``k`` the outcome stratum of row ``i`` and ``p_{m,k}`` the share of ``m``'s rows in
    it. For binary correctness the strata are ``{0, 1}`` and, with ``q`` = ``B``'s composition, ``w = a_B / a_A`` if
    correct and ``(1 - a_B) / (1 - a_A)`` if wrong (the study's formula). Graded correctness (Appendix E.7): the exact
    levels when the pair has at most ``max_levels`` (10) distinct values, else ``n_strata`` (10) equal-width strata
    (bin-edge rule of ``bin_indices``). Weights enter the bin counts, bin accuracy and bin confidence of ECE and the
    mean of Brier. Directions reported:

    * ``da_a_to_b``: ``A`` reweighted to ``B``'s composition, ``B`` raw;
    * ``da_b_to_a``: ``B`` reweighted to ``A``'s composition, ``A`` raw;
    * ``da_target``: both reweighted to a common target, by default the pair's mean composition ``(p_A + p_B) / 2``
      (``target="mean"``), or a declared accuracy ``t`` (binary correctness only: ``q = (1 - t, t)``);
    * ``da`` -- **the** DA gap of reversals and patterns: the **more accurate model is reweighted to the less accurate
      model's outcome composition** (``da_a_to_b`` when ``a_A >= a_B``, else ``da_b_to_a``). This is Appendix B's
      ``w^(A)`` with ``A`` the stronger model and Appendix E.7's choice of the weaker model's distribution as the
      target; it never asks the weaker model to "gain" accuracy. The direction is fixed by the point estimate and kept
      in every bootstrap resample (the statistic must not change between resamples).

    Support: a stratum with target mass but no row of the reweighted model (binary: an accuracy of exactly 0 or 1
    against a different target) makes the weights undefined; the value is ``nan`` with an
    :class:`~confgrid.analysis.metrics.UndefinedMetricWarning`, not an error. Effective sample size: Kish
    ``ESS = (sum w)^2 / sum w^2`` and ``ESS / N`` (Appendix E.5), with an :class:`~frame.ACEWarning` below
    :data:`ESS_WARNING` (0.5).
``da_resample`` (the alternative of section 4.2, for comparison)
    The reweighted model of ``da`` keeps, per outcome stratum, a seeded random subset of its rows so that the kept
    rows have the target composition as nearly as whole rows allow (the largest such subset: ``N' = min_k n_k / q_k``
    over strata with ``q_k > 0``, then ``floor(q_k N')`` rows of stratum ``k``); the value is the mean over
    ``n_draws`` (20) draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from confgrid.analysis.metrics import bin_indices, undefined

from .da import (
    DAWeights,
    Strata,
    da_weights,
    outcome_distribution,
    outcome_strata,
    resample_rows,
)
from .frame import ACEInputError, Cell
from .weighted import METRICS, metric_value

__all__ = [
    "IA_VIEWS",
    "DA_VIEWS",
    "IASplit",
    "ia_split",
    "ViewOptions",
    "DEFAULT_OPTIONS",
    "ViewValue",
    "CellViews",
    "stronger_to_weaker",
    "cell_views",
]

#: Views produced by ``"ia"`` and ``"da"``.
IA_VIEWS = ("ia", "ia_both_right", "ia_both_wrong", "ia_partial")
DA_VIEWS = ("da", "da_a_to_b", "da_b_to_a", "da_target")


# ---------------------------------------------------------------------------
# instance alignment
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IASplit:
    """Instance-aligned subsets of a cell (study 001, section 4.1, Appendix E.7).

    Attributes
    ----------
    aligned, both_right, both_wrong, partial : ndarray of shape (n,), bool
        ``D_IA`` and its parts (``partial`` is empty for binary correctness).
    """

    aligned: np.ndarray
    both_right: np.ndarray
    both_wrong: np.ndarray
    partial: np.ndarray

    @property
    def retention(self) -> float:
        """``|D_IA| / |D|`` (``nan`` for no items)."""
        return float(self.aligned.mean()) if self.aligned.size else float("nan")

    def mask(self, view: str) -> np.ndarray:
        """The mask of an IA view name (:data:`IA_VIEWS`)."""
        return {"ia": self.aligned, "ia_both_right": self.both_right,
                "ia_both_wrong": self.both_wrong, "ia_partial": self.partial}[view]


def ia_split(correct_a, correct_b, ia_strata: int | None = None) -> IASplit:
    """``D_IA = {i : h(z_A) = h(z_B)}`` and its parts.

    Parameters
    ----------
    correct_a, correct_b : array-like of shape (n,)
    ia_strata : int, optional
        ``None``: exact match, ``h(z) = z``. An integer ``k >= 2``: ``h`` is the index of ``k`` equal-width strata of
        ``[0, 1]`` (bin-edge rule of ``bin_indices``).

    Returns
    -------
    IASplit
        ``both_right``: ``h(z_A) = h(z_B) = h(1)``; ``both_wrong``: ``= h(0)``; ``partial``: the rest of ``D_IA``.

    Raises
    ------
    ValueError
        If ``ia_strata`` is given and below 2 (one stratum would make every item both right and both wrong).

    Examples
    --------
    >>> s = ia_split([1, 1, 0, 0], [1, 0, 0, 1])
    >>> s.aligned.tolist(), s.both_right.tolist(), s.retention
    ([True, False, True, False], [True, False, False, False], 0.5)
    """
    za = np.asarray(correct_a, dtype=np.float64)
    zb = np.asarray(correct_b, dtype=np.float64)
    if ia_strata is None:
        ha, hb, top, bottom = za, zb, 1.0, 0.0
    elif isinstance(ia_strata, bool) or not isinstance(ia_strata, (int, np.integer)) or ia_strata < 2:
        raise ValueError(f"ia_strata must be None or an integer >= 2, got {ia_strata!r}")
    else:
        ha, hb = bin_indices(za, ia_strata), bin_indices(zb, ia_strata)
        top, bottom = ia_strata - 1, 0
    aligned = ha == hb
    right = aligned & (ha == top)
    wrong = aligned & (ha == bottom)
    return IASplit(aligned, right, wrong, aligned & ~right & ~wrong)


# ---------------------------------------------------------------------------
# one cell
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewOptions:
    """Choices of the views (validated).

    Attributes
    ----------
    n_bins : int
        ECE bins (10).
    target : "mean" or float
        Common target of ``da_target``: the pair's mean composition, or an
        accuracy in ``[0, 1]`` (binary correctness only).
    ia_strata : int or None
        ``None``: IA by exact score match; ``k >= 2``: by ``k`` equal-width strata.
    max_levels, n_strata : int
        DA strata: exact levels up to ``max_levels`` distinct values, else ``n_strata`` equal-width strata.
    n_draws : int
        Draws averaged by ``da_resample``.
    """

    n_bins: int = 10
    target: str | float = "mean"
    ia_strata: int | None = None
    max_levels: int = 10
    n_strata: int = 10
    n_draws: int = 20

    def __post_init__(self) -> None:
        for name in ("n_bins", "max_levels", "n_strata", "n_draws"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ACEInputError(f"{name} must be an integer >= 1, got {v!r}")
        if self.ia_strata is not None and (
            isinstance(self.ia_strata, bool) or not isinstance(self.ia_strata, (int, np.integer))
            or self.ia_strata < 2
        ):
            raise ACEInputError(f"ia_strata must be None (exact match) or an integer >= 2, got {self.ia_strata!r}")
        t = self.target
        accuracy = isinstance(t, (int, float)) and not isinstance(t, bool) and 0.0 <= float(t) <= 1.0
        if t != "mean" and not accuracy:
            raise ACEInputError(f"target must be 'mean' or an accuracy in [0, 1], got {t!r}")

    def target_distribution(self, p_a: np.ndarray, p_b: np.ndarray, strata: Strata) -> np.ndarray:
        """``q`` of ``da_target`` for the compositions ``p_a``, ``p_b``.

        Raises
        ------
        ACEInputError
            A numeric target with graded correctness.
        """
        if self.target == "mean":
            return 0.5 * (np.asarray(p_a) + np.asarray(p_b))
        if strata.levels != (0.0, 1.0):
            raise ACEInputError(
                f"target={self.target!r} (an accuracy) needs binary correctness; this pair has "
                f"{strata.describe()}; use target='mean'"
            )
        t = float(self.target)
        return np.array([1.0 - t, t])


#: The study's choices (10 bins, pair-mean target, exact IA match, 10 levels / strata, 20 draws).
DEFAULT_OPTIONS = ViewOptions()


@dataclass(frozen=True)
class ViewValue:
    """One view of one metric in one cell.

    Attributes
    ----------
    value_a, value_b : float
        ``nan`` where undefined.
    n_a, n_b : int
        Rows (CA: item-candidate pairs) entering each side.
    retention : float
        IA views: ``|subset| / |D|``; else ``nan``.
    ess_a, ess_b : float
        DA views: Kish ESS of each side's weights (``n`` for an unweighted side); else ``nan``.
    """

    view: str
    metric: str
    value_a: float
    value_b: float
    n_a: int
    n_b: int
    retention: float = float("nan")
    ess_a: float = float("nan")
    ess_b: float = float("nan")
    note: str = ""

    @property
    def gap(self) -> float:
        """``value_a - value_b``."""
        return float(self.value_a - self.value_b)


@dataclass(frozen=True)
class CellViews:
    """Point estimates of a cell.

    Attributes
    ----------
    acc_a, acc_b : float
        Mean correctness of each model.
    strata : Strata
        DA strata of the pair.
    direction : str
        ``"a_to_b"`` or ``"b_to_a"``: the direction of the ``da`` view.
    """

    values: tuple[ViewValue, ...]
    acc_a: float
    acc_b: float
    strata: Strata
    direction: str
    ia: IASplit

    def get(self, view: str, metric: str) -> ViewValue:
        for v in self.values:
            if v.view == view and v.metric == metric:
                return v
        raise KeyError(f"no view {view!r} for metric {metric!r}")


def stronger_to_weaker(acc_a: float, acc_b: float) -> str:
    """Direction of the ``da`` view: reweight the more accurate model (``A`` on ties).

    Examples
    --------
    >>> stronger_to_weaker(0.8, 0.6), stronger_to_weaker(0.5, 0.7), stronger_to_weaker(0.5, 0.5)
    ('a_to_b', 'b_to_a', 'a_to_b')
    """
    return "a_to_b" if acc_a >= acc_b else "b_to_a"


def _weighted_pair(view, metrics, cell, wa: DAWeights | None, wb: DAWeights | None, n_bins, note=""):
    out = []
    for metric in metrics:
        vals = []
        for conf, corr, dw in ((cell.conf_a, cell.correct_a, wa), (cell.conf_b, cell.correct_b, wb)):
            if dw is not None and not dw.supported:
                vals.append(float("nan"))
            else:
                vals.append(metric_value(metric, conf, corr, None if dw is None else dw.weights, n_bins))
        ess = [cell.n if dw is None else dw.ess for dw in (wa, wb)]
        out.append(ViewValue(view, metric, vals[0], vals[1], cell.n, cell.n, ess_a=ess[0], ess_b=ess[1], note=note))
    return out


def _resample_view(metrics, cell, direction, strata, opts: ViewOptions, rng) -> list[ViewValue]:
    a_side = direction == "a_to_b"
    conf, corr = (cell.conf_a, cell.correct_a) if a_side else (cell.conf_b, cell.correct_b)
    other = cell.correct_b if a_side else cell.correct_a
    q = outcome_distribution(other, strata)
    draws = [resample_rows(corr, q, strata, rng) for _ in range(opts.n_draws)]
    out = []
    for metric in metrics:
        fixed = metric_value(metric, *((cell.conf_b, cell.correct_b) if a_side else (cell.conf_a, cell.correct_a)),
                             n_bins=opts.n_bins)
        if draws[0] is None:
            val, kept, note = float("nan"), 0, "unsupported: a stratum of the target has no row"
            undefined("da_resample", note)
        else:
            v = np.array([metric_value(metric, conf[d], corr[d], n_bins=opts.n_bins) for d in draws])
            val, kept = float(np.mean(v)), int(draws[0].size)
            note = f"mean of {opts.n_draws} draws of {kept} rows, sd {np.std(v):.4g}"
        va, vb = (val, fixed) if a_side else (fixed, val)
        na, nb = (kept, cell.n) if a_side else (cell.n, kept)
        out.append(ViewValue("da_resample", metric, va, vb, na, nb, note=note))
    return out


def cell_views(
    cell: Cell,
    metrics: Sequence[str] = METRICS,
    views: Sequence[str] = ("ia", "da"),
    opts: ViewOptions = DEFAULT_OPTIONS,
    rng: np.random.Generator | None = None,
    strata: Strata | None = None,
    direction: str | None = None,
) -> CellViews:
    """Raw, IA and DA point estimates of one cell.

    Parameters
    ----------
    cell : Cell
        ``n >= 1`` matched items.
    metrics : sequence of str
        Names in :data:`METRICS`.
    views : sequence of str
        Any of ``"ia"`` (:data:`IA_VIEWS`; ``ia_partial`` only for graded correctness), ``"da"`` (:data:`DA_VIEWS`),
        ``"da_resample"``; ``raw`` is always computed.
    rng : numpy Generator, optional
        Needed for ``"da_resample"`` (seed it from the cell).
    strata : Strata, optional
        DA strata; default :func:`outcome_strata` of the pair.
    direction : {"a_to_b", "b_to_a"}, optional
        Direction of ``da``; default :func:`stronger_to_weaker`. (A bootstrap
        resample keeps the point estimate's strata and direction.)

    Raises
    ------
    ValueError
        Unknown metric or view, or ``"da_resample"`` without ``rng``.
    """
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ValueError(f"metrics must be among {list(METRICS)}, got {bad}")
    bad = [v for v in views if v not in ("ia", "da", "da_resample")]
    if bad:
        raise ValueError(f"views must be among ['ia', 'da', 'da_resample'] here, got {bad}")
    acc_a, acc_b = float(np.mean(cell.correct_a)), float(np.mean(cell.correct_b))
    if strata is None:
        strata = outcome_strata(cell.correct_a, cell.correct_b, max_levels=opts.max_levels, n_strata=opts.n_strata)
    if direction is None:
        direction = stronger_to_weaker(acc_a, acc_b)
    elif direction not in ("a_to_b", "b_to_a"):
        raise ValueError(f"direction must be 'a_to_b' or 'b_to_a', got {direction!r}")
    ia = ia_split(cell.correct_a, cell.correct_b, opts.ia_strata)
    out = _weighted_pair("raw", metrics, cell, None, None, opts.n_bins)
    if "ia" in views:
        graded = strata.levels != (0.0, 1.0)
        for view in IA_VIEWS if graded else IA_VIEWS[:3]:
            m = ia.mask(view)
            for metric in metrics:
                va = metric_value(metric, cell.conf_a[m], cell.correct_a[m], n_bins=opts.n_bins)
                vb = metric_value(metric, cell.conf_b[m], cell.correct_b[m], n_bins=opts.n_bins)
                k = int(m.sum())
                out.append(ViewValue(view, metric, va, vb, k, k, retention=k / cell.n))
    if "da" in views or "da_resample" in views:
        p_a = outcome_distribution(cell.correct_a, strata)
        p_b = outcome_distribution(cell.correct_b, strata)
    if "da" in views:
        names = (cell.pair.a, cell.pair.b)
        w_ab = da_weights(cell.correct_a, p_b, strata, f"{names[0]} -> {names[1]}")
        w_ba = da_weights(cell.correct_b, p_a, strata, f"{names[1]} -> {names[0]}")
        q = opts.target_distribution(p_a, p_b, strata)
        t_a = da_weights(cell.correct_a, q, strata, f"{names[0]} -> target")
        t_b = da_weights(cell.correct_b, q, strata, f"{names[1]} -> target")
        ab = _weighted_pair("da_a_to_b", metrics, cell, w_ab, None, opts.n_bins)
        ba = _weighted_pair("da_b_to_a", metrics, cell, None, w_ba, opts.n_bins)
        note = f"{names[0] if direction == 'a_to_b' else names[1]} reweighted to the other's composition"
        main = [ViewValue("da", v.metric, v.value_a, v.value_b, v.n_a, v.n_b, ess_a=v.ess_a, ess_b=v.ess_b,
                          note=note) for v in (ab if direction == "a_to_b" else ba)]
        tgt = "pair mean" if opts.target == "mean" else f"accuracy {float(opts.target):g}"
        out += main + ab + ba + _weighted_pair("da_target", metrics, cell, t_a, t_b, opts.n_bins,
                                               note=f"both reweighted to the {tgt}")
    if "da_resample" in views:
        if rng is None:
            raise ValueError("views 'da_resample' needs a seeded rng")
        out += _resample_view(metrics, cell, direction, strata, opts, rng)
    return CellViews(tuple(out), acc_a, acc_b, strata, direction, ia)
