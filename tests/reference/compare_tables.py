"""The per-setting gap, shift and flip tables of one bootstrap result (study 000): a test-only oracle.

These were ``confgrid.analysis.compare.gaps/shifts/flips/advantages``; the package computes the same quantities for
every setting at once in the one evaluator (analysis/evaluation.py) and, over settings, in analysis/means.py and
analysis/tables.py. The tests check those against these per-setting tables.

Not independent of the package: the rules come from ``confgrid.analysis.compare`` (:func:`better_signal`,
:func:`advantage`, :func:`flip`, :func:`fully_resolved`, :func:`excludes_zero`) and the percentile interval from
``confgrid.analysis.bootstrap``, so an oracle of the layout and of the aggregation over settings, not of the
rules; the rules are checked against hand values in test_favours.py, test_signed_flips.py and test_compare.py.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from confgrid.analysis import compare as C
from confgrid.analysis.bootstrap import BootstrapResult, interval, n_undefined
from confgrid.analysis.compare import better_signal, excludes_zero, flip, fully_resolved
from confgrid.analysis.registry import get_metric

__all__ = ["advantage", "advantages", "gaps", "shifts", "flips", "tidy"]


def _names(result: BootstrapResult, signal_names, *check: tuple[str, str]) -> list[str]:
    """The signal names (``signal_names`` or the result's), unique, one per row; each ``(what, name)`` of ``check``
    must be among them."""
    names = list(signal_names if signal_names is not None else (result.signal_names or []))
    if len(names) != result.point.shape[0]:
        raise ValueError(f"need {result.point.shape[0]} signal names, got {len(names)}: {names}")
    if len(set(names)) != len(names):
        raise ValueError(f"signal names must be unique, got {names}")
    for what, name in check:
        if name not in names:
            raise ValueError(f"{what} {name!r} not among signals {names}")
    return names


def advantage(result: BootstrapResult, names: Sequence[str], verbalized: str, token: str,
              metric_index: int) -> tuple[float, np.ndarray]:
    """:func:`confgrid.analysis.compare.advantage` of two named signals of a result under one metric.

    Raises
    ------
    ValueError
        If ``verbalized`` or ``token`` is not among ``names``.
    """
    names = _names(result, names, ("verbalized signal", verbalized), ("token signal", token))
    v, t, j = names.index(verbalized), names.index(token), metric_index
    p, r = C.advantage(get_metric(result.metrics[j]).signed, result.point[v, j], result.point[t, j],
                       result.resamples[v, j], result.resamples[t, j])
    return float(p), r


def _rows(result, signal_names, verbalized, level, advantages_: bool) -> pd.DataFrame:
    """One row per (token signal, metric): the gap (or the advantage) with its interval."""
    names = _names(result, signal_names, ("verbalized signal", verbalized))
    rows = []
    for token in names:
        if token == verbalized:
            continue
        v, t = names.index(verbalized), names.index(token)
        for j, metric in enumerate(result.metrics):
            point, vals = (advantage(result, names, verbalized, token, j) if advantages_
                           else _gap_values(result, names, verbalized, token, j))
            lo, hi = interval(vals, level)
            rows.append(dict(signal=token, metric=metric, point=float(point), lo=lo, hi=hi,
                             excludes_zero=excludes_zero(lo, hi),
                             favours=better_signal(metric, result.point[v, j], result.point[t, j], "verbalized",
                                                   "token"),
                             n_undefined=int(n_undefined(vals))))
    cols = ["signal", "metric", "point", "lo", "hi", "excludes_zero", "favours", "n_undefined"]
    return pd.DataFrame(rows, columns=cols)


def _gap_values(result, names, verbalized, token, j):
    v, t = names.index(verbalized), names.index(token)
    return (
        result.point[v, j] - result.point[t, j],
        result.resamples[v, j] - result.resamples[t, j],
    )


def advantages(result: BootstrapResult, signal_names: Sequence[str] | None = None, verbalized: str = "verbalized",
               level: float = 0.95) -> pd.DataFrame:
    """:func:`advantage` of every token signal over ``verbalized``, per metric, with its interval: the layout of
    :func:`gaps` without ``favours`` (for an unsigned metric the rows equal the gaps)."""
    return _rows(result, signal_names, verbalized, level, True).drop(columns="favours")


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
        (``"token"``, ``"verbalized"`` or ``"neither"``: :func:`better_signal`
        of the two point values, so for a signed metric the signal closer to
        0) and ``n_undefined`` (resamples where the gap is ``nan``).
    """
    return _rows(result, signal_names, verbalized, level, False)


def _pair_names(result, signal_names, verbalized, pairs) -> list[str]:
    return _names(result, signal_names, ("verbalized signal", verbalized),
                  *(x for a, b in pairs for x in (("context_a", a), ("context_b", b))))


def shifts(result: BootstrapResult, signal_names: Sequence[str] | None, pairs: Sequence[tuple[str, str]],
           verbalized: str = "verbalized", level: float = 0.95) -> pd.DataFrame:
    """Shift of the gap between two contexts: ``dg = g(context_b) - g(context_a)``.

    ``pairs`` lists ``(context_a, context_b)`` token-signal names. Computed
    per resample (paired), then the percentile interval.

    Returns
    -------
    DataFrame
        Columns ``context_a``, ``context_b``, ``metric``, ``point``, ``lo``,
        ``hi``, ``excludes_zero``, ``n_undefined``.
    """
    names = _pair_names(result, signal_names, verbalized, pairs)
    rows, diffs = [], []
    for a, b in pairs:
        for j, metric in enumerate(result.metrics):
            pa, va = _gap_values(result, names, verbalized, a, j)
            pb, vb = _gap_values(result, names, verbalized, b, j)
            diffs.append(vb - va)
            rows.append(dict(context_a=a, context_b=b, metric=metric, point=float(pb - pa)))
    if rows:  # one percentile call over every (pair, metric) row of resamples
        d = np.vstack(diffs)
        lo, hi = interval(d, level)
        und = n_undefined(d)
        for r, l_, h_, u in zip(rows, lo, hi, und, strict=True):
            r.update(lo=float(l_), hi=float(h_), excludes_zero=excludes_zero(l_, h_), n_undefined=int(u))
    cols = ["context_a", "context_b", "metric", "point", "lo", "hi", "excludes_zero", "n_undefined"]
    return pd.DataFrame(rows, columns=cols)


def flips(result: BootstrapResult, signal_names: Sequence[str] | None, pairs: Sequence[tuple[str, str]],
          verbalized: str = "verbalized", level: float = 0.95) -> pd.DataFrame:
    """Per (context pair, metric): the two gaps, ``flip`` and ``fully_resolved``.

    ``flip``: the better signal differs between ``context_a`` and
    ``context_b`` by point estimate, i.e. their :func:`advantage` points have
    strictly opposite signs. For an unsigned metric that is the sign of the
    gap (study 000 section 3.5); for a signed metric (``calibration_gap``,
    ``overconfidence``) it is the sign of ``|v| - |t|``, which signal is
    closer to 0, the rule of :func:`better_signal`. A ``nan`` or zero
    (tie) in either context is no flip. ``fully_resolved``: a flip where the
    percentile interval of the paired per-resample advantage excludes zero
    in both contexts.

    Returns
    -------
    DataFrame
        Columns ``context_a``, ``context_b``, ``metric``, ``g_a``, ``g_b``
        (the point **gaps** ``metric(verbalized) - metric(token)``, also for
        a signed metric), ``flip``, ``fully_resolved``.
    """
    names = _pair_names(result, signal_names, verbalized, pairs)
    rows = []
    memo: dict[tuple[str, int], tuple[float, tuple[float, float, float]]] = {}

    def context(c: str, j: int) -> tuple[float, tuple[float, float, float]]:
        """(point gap, (advantage point, lo, hi)) of context ``c`` under metric ``j``, computed once per call."""
        if (c, j) not in memo:
            g, _ = _gap_values(result, names, verbalized, c, j)
            p, v = advantage(result, names, verbalized, c, j)
            memo[(c, j)] = (float(g), (p, *interval(v, level)))
        return memo[(c, j)]

    for a, b in pairs:
        for j, metric in enumerate(result.metrics):
            (ga, ta), (gb, tb) = context(a, j), context(b, j)
            pa, pb = ta[0], tb[0]
            rows.append(
                dict(
                    context_a=a,
                    context_b=b,
                    metric=metric,
                    g_a=float(ga),
                    g_b=float(gb),
                    flip=flip(pa, pb),
                    fully_resolved=fully_resolved(ta, tb),
                )
            )
    cols = ["context_a", "context_b", "metric", "g_a", "g_b", "flip", "fully_resolved"]
    return pd.DataFrame(rows, columns=cols)


def tidy(results: dict[str, BootstrapResult]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The per-setting metrics, gaps and advantages of several results in the layout of a run's tidy tables
    (``setting``, ``signal``, ``context`` = the signal's name, ``metric``, ``point`` or ``gap``, ``lo``, ``hi``)."""
    mrows, grows, arows = [], [], []
    for s, r in results.items():
        lo, hi = r.interval()
        for i, sig in enumerate(r.signal_names):
            for j, m in enumerate(r.metrics):
                mrows.append(dict(setting=s, signal=sig, context=sig, metric=m, point=r.point[i, j],
                                  lo=lo[i, j], hi=hi[i, j]))
        g = gaps(r).rename(columns={"point": "gap"}).assign(setting=s)
        grows.append(g.assign(context=g["signal"]))
        a = advantages(r).assign(setting=s)
        arows.append(a.assign(context=a["signal"]))
    return pd.DataFrame(mrows), pd.concat(grows, ignore_index=True), pd.concat(arows, ignore_index=True)
