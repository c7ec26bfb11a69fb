"""Paired comparisons between signals of one setting (study 000).

* gap ``g = metric(verbalized) - metric(token)``, per resample (paired).
  A positive gap favours the token score under ECE, AURC and Brier (lower is
  better) and the verbalized score under AUROC (higher is better).
* shift between two scoring contexts ``a`` and ``b`` of the token score:
  ``dg = g(b) - g(a)`` per resample (equal to ``metric(token_a) -
  metric(token_b)``).
* flip: the gap changes sign between two contexts; *fully resolved* when both
  gap intervals exclude zero and the signs differ.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .bootstrap import BootstrapResult, interval, n_undefined
from .metrics import get_metric

__all__ = ["gaps", "shifts", "flip", "fully_resolved", "flips", "excludes_zero"]


def excludes_zero(lo, hi):
    """True where the interval ``[lo, hi]`` lies strictly on one side of 0 (``nan`` -> False)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    out = (lo > 0) | (hi < 0)
    return bool(out) if out.ndim == 0 else out


def _favours(metric: str, point: float) -> str:
    if not np.isfinite(point) or point == 0:
        return "neither"
    verbal_better = (point < 0) if get_metric(metric).lower_is_better else (point > 0)
    return "verbalized" if verbal_better else "token"


def _names(result: BootstrapResult, signal_names) -> list[str]:
    names = list(signal_names if signal_names is not None else (result.signal_names or []))
    if len(names) != result.point.shape[0]:
        raise ValueError(f"need {result.point.shape[0]} signal names, got {len(names)}: {names}")
    if len(set(names)) != len(names):
        raise ValueError(f"signal names must be unique, got {names}")
    return names


def _gap_values(result, names, verbalized, token, j):
    v, t = names.index(verbalized), names.index(token)
    return (
        result.point[v, j] - result.point[t, j],
        result.resamples[v, j] - result.resamples[t, j],
    )


def _index(names, name, what):
    if name not in names:
        raise ValueError(f"{what} {name!r} not among signals {names}")
    return names.index(name)


def gaps(
    result: BootstrapResult,
    signal_names: Sequence[str] | None = None,
    verbalized: str = "verbalized",
    level: float = 0.95,
) -> pd.DataFrame:
    """Gap ``metric(verbalized) - metric(token)`` for every other signal and metric.

    Returns
    -------
    DataFrame
        One row per (token signal, metric) with columns ``signal`` (the token
        signal), ``metric``, ``point``, ``lo``, ``hi`` (percentile interval of
        the paired per-resample gaps), ``excludes_zero``, ``favours``
        (``"token"``, ``"verbalized"`` or ``"neither"``, from the point gap)
        and ``n_undefined`` (resamples where the gap is ``nan``).
    """
    names = _names(result, signal_names)
    _index(names, verbalized, "verbalized signal")
    rows = []
    for token in names:
        if token == verbalized:
            continue
        for j, metric in enumerate(result.metrics):
            point, vals = _gap_values(result, names, verbalized, token, j)
            lo, hi = interval(vals, level)
            rows.append(
                dict(
                    signal=token,
                    metric=metric,
                    point=float(point),
                    lo=lo,
                    hi=hi,
                    excludes_zero=excludes_zero(lo, hi),
                    favours=_favours(metric, point),
                    n_undefined=int(n_undefined(vals)),
                )
            )
    cols = ["signal", "metric", "point", "lo", "hi", "excludes_zero", "favours", "n_undefined"]
    return pd.DataFrame(rows, columns=cols)


def shifts(
    result: BootstrapResult,
    signal_names: Sequence[str] | None,
    pairs: Sequence[tuple[str, str]],
    verbalized: str = "verbalized",
    level: float = 0.95,
) -> pd.DataFrame:
    """Shift of the gap between two contexts: ``dg = g(context_b) - g(context_a)``.

    ``pairs`` lists ``(context_a, context_b)`` token-signal names. Computed
    per resample (paired), then the percentile interval.

    Returns
    -------
    DataFrame
        Columns ``context_a``, ``context_b``, ``metric``, ``point``, ``lo``,
        ``hi``, ``excludes_zero``, ``n_undefined``.
    """
    names = _names(result, signal_names)
    _index(names, verbalized, "verbalized signal")
    rows = []
    for a, b in pairs:
        _index(names, a, "context_a")
        _index(names, b, "context_b")
        for j, metric in enumerate(result.metrics):
            pa, va = _gap_values(result, names, verbalized, a, j)
            pb, vb = _gap_values(result, names, verbalized, b, j)
            d = vb - va
            lo, hi = interval(d, level)
            rows.append(
                dict(
                    context_a=a,
                    context_b=b,
                    metric=metric,
                    point=float(pb - pa),
                    lo=lo,
                    hi=hi,
                    excludes_zero=excludes_zero(lo, hi),
                    n_undefined=int(n_undefined(d)),
                )
            )
    cols = ["context_a", "context_b", "metric", "point", "lo", "hi", "excludes_zero", "n_undefined"]
    return pd.DataFrame(rows, columns=cols)


def flip(g_a_point: float, g_b_point: float) -> bool:
    """True when the two gaps have strictly opposite signs (a zero or ``nan`` gap never flips)."""
    sa, sb = np.sign(g_a_point), np.sign(g_b_point)
    return bool(sa != 0 and sb != 0 and np.isfinite(sa) and np.isfinite(sb) and sa != sb)


def fully_resolved(g_a: tuple[float, float, float], g_b: tuple[float, float, float]) -> bool:
    """A flip where both gap intervals exclude zero.

    Parameters
    ----------
    g_a, g_b : (point, lo, hi)
    """
    (pa, la, ha), (pb, lb, hb) = g_a, g_b
    return flip(pa, pb) and excludes_zero(la, ha) and excludes_zero(lb, hb)


def flips(
    result: BootstrapResult,
    signal_names: Sequence[str] | None,
    pairs: Sequence[tuple[str, str]],
    verbalized: str = "verbalized",
    level: float = 0.95,
) -> pd.DataFrame:
    """Per (context pair, metric): the two gaps, ``flip`` and ``fully_resolved``."""
    g = gaps(result, signal_names, verbalized, level).set_index(["signal", "metric"])
    rows = []
    for a, b in pairs:
        for metric in result.metrics:
            ra, rb = g.loc[(a, metric)], g.loc[(b, metric)]
            ta = (ra.point, ra.lo, ra.hi)
            tb = (rb.point, rb.lo, rb.hi)
            rows.append(
                dict(
                    context_a=a,
                    context_b=b,
                    metric=metric,
                    g_a=ra.point,
                    g_b=rb.point,
                    flip=flip(ra.point, rb.point),
                    fully_resolved=fully_resolved(ta, tb),
                )
            )
    cols = ["context_a", "context_b", "metric", "g_a", "g_b", "flip", "fully_resolved"]
    return pd.DataFrame(rows, columns=cols)
