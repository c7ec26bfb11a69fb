"""Paired comparisons between signals of one setting (study 000).

* gap ``g = metric(verbalized) - metric(token)``, per resample (paired). A positive gap favours the token score under
  ECE, AURC and Brier (lower is better) and the verbalized score under AUROC (higher is better). For a signed metric
  (``calibration_gap``, ``overconfidence``: 0 is best) the sign of the gap does not say which signal is better;
  :func:`better_signal` is the one rule that decides, from the two values, for every metric.
* shift between two scoring contexts ``a`` and ``b`` of the token score: ``dg = g(b) - g(a)`` per resample (equal to
  ``metric(token_a) - metric(token_b)``).
* advantage: the paired statistic whose sign says which signal is better (:func:`advantage`). For an unsigned metric
  it is the gap itself; for a signed metric it is ``a = |metric(verbalized)| - |metric(token)|`` per resample and for
  the point, positive when the token signal is closer to 0 (the sign agrees with :func:`better_signal`).
* flip between two contexts: the better signal differs, by point estimate, i.e. the two advantages have strictly
  opposite signs (for an unsigned metric: the two gaps do, study 000 section 3.5). *Fully resolved*: a flip where, in
  both contexts, the percentile interval of the paired per-resample advantage excludes zero. For a signed metric the
  gap interval is no evidence either way (``-0.5`` against ``+0.1`` gives a gap of ``-0.6`` although ``+0.1`` is
  better), so it is never used.
"""

from __future__ import annotations

import numpy as np

from .registry import get_metric

__all__ = ["better_signal", "advantage", "flip", "fully_resolved", "excludes_zero", "retention_probability"]


def excludes_zero(lo, hi):
    """True where the interval ``[lo, hi]`` lies strictly on one side of 0 (``nan`` -> False)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    out = (lo > 0) | (hi < 0)
    return bool(out) if out.ndim == 0 else out


def better_signal(metric: str, value_a: float, value_b: float, name_a: str, name_b: str) -> str:
    """The signal with the better value of ``metric``, by point estimate.

    The one rule for which signal a comparison favours (the evaluator's and the means'): the lower value wins when
    ``MetricInfo.lower_is_better``, the higher otherwise; for a signed metric (best value 0) the smaller ``|value|``.

    Parameters
    ----------
    metric : str
        A registered metric name (:data:`confgrid.analysis.registry.METRICS`).
    value_a, value_b : float
    name_a, name_b : str
        What to return for each side (signal names, or ``"verbalized"`` / ``"token"``).

    Returns
    -------
    str
        ``name_a``, ``name_b``, or ``"neither"`` when the two values (their absolute values for a signed metric) are
        equal or either is not finite (``nan``, ``inf``).

    Raises
    ------
    UnknownMetricError
        (:class:`~confgrid.registry.UnknownNameError`) if ``metric`` is not registered.
    ValueError
        If ``name_a == name_b`` (the answer would be ambiguous).

    Examples
    --------
    >>> better_signal("calibration_gap", -0.5, 0.1, "verbalized", "token")
    'token'
    >>> better_signal("ece", 0.05, 0.12, "verbalized", "token")
    'verbalized'
    >>> better_signal("auroc", 0.61, 0.74, "verbalized", "token")
    'token'
    >>> better_signal("overconfidence", 0.2, -0.2, "verbalized", "token")
    'neither'
    >>> better_signal("ece", float("nan"), 0.1, "verbalized", "token")
    'neither'
    """
    info = get_metric(metric)
    if name_a == name_b:
        raise ValueError(f"better_signal: name_a and name_b must differ, both are {name_a!r}")
    a, b = float(value_a), float(value_b)
    if not (np.isfinite(a) and np.isfinite(b)):
        return "neither"
    if info.signed:  # best value 0: compare distances from 0 (lower_is_better is True for these)
        a, b = abs(a), abs(b)
    if a == b:
        return "neither"
    a_better = (a < b) if info.lower_is_better else (a > b)
    return name_a if a_better else name_b


def advantage(signed, point_a, point_b, resamples_a, resamples_b) -> tuple[np.ndarray, np.ndarray]:
    """Point and paired resamples of the statistic whose sign says which of two signals is better.

    The gap ``metric(a) - metric(b)`` for an unsigned metric, ``|metric(a)| - |metric(b)|`` for a signed one (module
    docstring); :func:`flip` compares its signs between two contexts, and on finite values its sign agrees with
    :func:`better_signal` (positive, negative, zero: one side, the other, ``"neither"``).

    Parameters
    ----------
    signed : bool or ndarray of shape (R,)
        Whether each row's metric is signed.
    point_a, point_b : float or ndarray of shape (R,)
    resamples_a, resamples_b : ndarray of shape (B,) or (R, B), paired

    Returns
    -------
    point : ndarray of shape () or (R,)
        ``nan`` where either point value is ``nan``.
    resamples : ndarray of shape (B,) or (R, B)
        ``nan`` where either resampled value is ``nan``.

    Examples
    --------
    >>> p, a = advantage(True, -0.5, 0.1, np.array([-0.5, -0.4]), np.array([0.1, 0.45]))
    >>> round(float(p), 12), np.round(a, 12).tolist()  # the gap would be -0.6: the sign would say "a"
    (0.4, [0.4, -0.05])
    """
    s = np.asarray(signed, dtype=bool)
    pa, pb = np.asarray(point_a, dtype=np.float64), np.asarray(point_b, dtype=np.float64)
    ra, rb = np.asarray(resamples_a, dtype=np.float64), np.asarray(resamples_b, dtype=np.float64)
    return (np.where(s, np.abs(pa) - np.abs(pb), pa - pb),
            np.where(s[..., None], np.abs(ra) - np.abs(rb), ra - rb))


def flip(g_a_point, g_b_point):
    """True when the two values have strictly opposite signs (a zero or ``nan`` value never flips); a bool for two
    numbers, a bool array elementwise for arrays.

    Pass the two contexts' :func:`advantage` points (for a signed metric not its gaps: module docstring).

    Examples
    --------
    >>> flip(-0.1, 0.05), flip(0.1, 0.2), flip(0.0, 0.1), flip(float("nan"), 0.1)
    (True, False, False, False)
    """
    sa, sb = np.sign(g_a_point), np.sign(g_b_point)
    out = (sa != 0) & (sb != 0) & np.isfinite(sa) & np.isfinite(sb) & (sa != sb)
    return bool(out) if out.ndim == 0 else out


def fully_resolved(g_a: tuple[float, float, float], g_b: tuple[float, float, float]) -> bool:
    """A :func:`flip` where both intervals exclude zero.

    Parameters
    ----------
    g_a, g_b : (point, lo, hi)
        The :func:`advantage` of each context with the percentile interval of its paired resamples (for an unsigned
        metric the gap and its interval; for a signed metric the interval of ``|v| - |t|``, never that of the gap).
    """
    (pa, la, ha), (pb, lb, hb) = g_a, g_b
    return flip(pa, pb) and excludes_zero(la, ha) and excludes_zero(lb, hb)


def retention_probability(raw, aligned) -> tuple[float, int]:
    """Share of resamples where two paired resampled gaps ``(B,)`` (raw and aligned) have strictly opposite signs.

    Returns ``(probability, n_defined)`` over the ``n_defined`` resamples where both are finite (study 001's retention
    probability, Appendix E.6, and the evaluator's flip share); a zero gap never counts; ``nan`` when none is defined.

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
