"""Summaries over settings from per-setting bootstrap results: a test-only oracle of analysis/means.py.

This was ``confgrid.analysis.summary``, the package's second road to study 000's Tables 2-4 and 15 (per setting
:class:`BootstrapResult` objects keyed by signal names); the package now computes them as one aggregate of the
evaluator's estimates (analysis/means.py), and tests/analysis/test_means.py checks that against this.

Summaries over settings: mean |shift|, intervals excluding zero, flips.

Study 000 reports, per axis and metric, the mean over the 20 settings of
``|dg|`` (the shift of the gap ``g = metric(verbalized) - metric(token)``),
with a 95% interval obtained as Appendix A says: "for a mean over settings,
we average the resampled values across settings and take the percentiles of
that average". Here that is, per resample ``r``,
``mean_s |dg_s[r]|`` (:func:`mean_over_settings` of the
per-setting ``|dg|`` resamples), then :func:`bootstrap.interval`. The point
is the mean of the per-setting ``|point dg|``. Besides it: the number of
settings whose ``dg`` interval excludes zero, and flips of the better signal
by point estimate and fully resolved (:func:`compare.flip`,
:func:`compare.fully_resolved`). Every flip count here compares the signs of
:func:`compare.advantage`: the gap for an unsigned metric (study 000 section
3.5), ``|v| - |t|`` for a signed one (``calibration_gap``,
``overconfidence``), so that a flip means the better signal by
:func:`compare.better_signal`'s rule changes, and a resolved flip needs the
intervals of those advantages, not of the gaps, to exclude zero.

Resamples of different settings are independent draws; averaging them
resample by resample needs every setting to have the same number of
resamples ``B``. Two results can only be *paired* (an axis other than the
context, e.g. two correctness rules) when they were resampled with the same
indices: same items, same ``seed``, ``n_resamples`` and ``chunk_size``; the
functions check the last three.

Entry points
------------
* :func:`summarize_deltas` - the core, on plain per-setting numbers.
* :func:`summarize_shifts` - context shifts from per-setting
  :class:`BootstrapResult` objects (the flows path).
* :func:`summarize_gaps` - mean signed gap over settings per signal (Tables 2, 3).
* :func:`summarize_estimators` - an estimator replacing a base metric (Table 15).
* :func:`summarize_axis` - the same signal under two results (correctness
  rule, aggregation, bin count computed in separate runs).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from confgrid.analysis.bootstrap import BootstrapResult, interval
from confgrid.analysis.compare import better_signal, excludes_zero, flip, fully_resolved
from confgrid.analysis.means import SUMMARY_COLUMNS
from confgrid.analysis.registry import get_metric
from reference.compare_tables import advantage

__all__ = [
    "SUMMARY_COLUMNS",
    "summarize_deltas",
    "gap_values",
    "summarize_shifts",
    "summarize_gaps",
    "summarize_estimators",
    "summarize_axis",
]

Triple = tuple[float, float, float]


def summarize_deltas(
    points: Mapping[str, float],
    resamples: Mapping[str, np.ndarray] | None = None,
    intervals: Mapping[str, tuple[float, float]] | None = None,
    g_a: Mapping[str, Triple] | None = None,
    g_b: Mapping[str, Triple] | None = None,
    level: float = 0.95,
) -> dict:
    """Summary over settings of one per-setting difference ``dg``.

    Parameters
    ----------
    points : mapping setting -> float
        Point estimate of ``dg`` per setting (the settings summarized).
    resamples : mapping setting -> ndarray of shape (B,), optional
        Paired resamples of ``dg`` per setting (same ``B`` for all). Gives
        the interval of the mean ``|dg|`` and, unless ``intervals`` is given,
        the per-setting intervals.
    intervals : mapping setting -> (lo, hi), optional
        Per-setting intervals of ``dg`` (for ``n_excludes_zero``).
    g_a, g_b : mapping setting -> (point, lo, hi), optional
        Before and after the change, the :func:`compare.advantage` with the
        interval of its paired resamples, for the flip counts: for an
        unsigned metric the gap, for a signed metric ``|v| - |t|`` (passing
        a signed metric's gaps would count changes of the gap's sign, not of
        the better signal).
    level : float, default=0.95

    Returns
    -------
    dict
        ``n_settings``; ``mean_abs`` = mean over settings of ``|points|``;
        ``lo``, ``hi`` = percentile interval of ``mean_s |dg_s[r]|`` over
        resamples ``r`` (``nan`` without ``resamples``); ``max_abs``;
        ``n_excludes_zero`` (``nan`` without resamples or intervals);
        ``n_flips`` (by point estimate: strictly opposite signs, a ``nan``
        or zero point never flips) and ``n_resolved_flips`` (also both
        intervals exclude zero), ``nan`` without ``g_a`` / ``g_b``.

    Examples
    --------
    >>> r = summarize_deltas({"s1": 0.2, "s2": -0.4},
    ...                      {"s1": np.array([0.1, 0.3]), "s2": np.array([-0.5, -0.1])})
    >>> round(r["mean_abs"], 12), r["n_settings"]
    (0.3, 2)
    """
    settings = list(points)
    if not settings:
        raise ValueError("summarize_deltas needs at least one setting")
    p = np.array([points[s] for s in settings], dtype=np.float64)
    out = {"n_settings": len(settings), "mean_abs": float(np.mean(np.abs(p))),
           "max_abs": float(np.max(np.abs(p)))}
    lo = hi = float("nan")
    if resamples is not None:
        missing = [s for s in settings if s not in resamples]
        if missing:
            raise ValueError(f"resamples missing for settings {missing}")
        avg = mean_over_settings([np.abs(np.asarray(resamples[s], dtype=np.float64)) for s in settings])
        lo, hi = interval(avg, level)
        if intervals is None:
            intervals = {s: interval(np.asarray(resamples[s], dtype=np.float64), level) for s in settings}
    out["lo"], out["hi"] = float(lo), float(hi)
    out["n_excludes_zero"] = (
        int(sum(excludes_zero(*intervals[s]) for s in settings)) if intervals is not None else float("nan")
    )
    if g_a is not None and g_b is not None:
        out["n_flips"] = int(sum(flip(g_a[s][0], g_b[s][0]) for s in settings))
        out["n_resolved_flips"] = int(sum(fully_resolved(tuple(g_a[s]), tuple(g_b[s])) for s in settings))
    else:
        out["n_flips"] = out["n_resolved_flips"] = float("nan")
    return {k: out[k] for k in SUMMARY_COLUMNS}


def mean_over_settings(resamples: Sequence[np.ndarray]) -> np.ndarray:
    """Average resampled values across settings, resample by resample.

    Each setting's array has shape ``(..., B)`` (same shape for all); the
    mean over settings is taken per resample (a ``nan`` in any setting makes
    that resample ``nan``), and :func:`interval` of the result gives the
    interval of the mean (study 000, Appendix A).

    Returns
    -------
    ndarray of shape (..., B)
    """
    arrs = [np.asarray(a, dtype=np.float64) for a in resamples]
    if not arrs:
        raise ValueError("mean_over_settings needs at least one setting")
    shapes = {a.shape for a in arrs}
    if len(shapes) != 1:
        raise ValueError(f"all settings must have the same resample shape, got {sorted(shapes)}")
    return np.mean(np.stack(arrs, axis=0), axis=0)


# ---------------------------------------------------------------------------
# from BootstrapResult objects
# ---------------------------------------------------------------------------


def _names(result: BootstrapResult, signal_names) -> list[str]:
    if isinstance(signal_names, Mapping):
        signal_names = None
    names = list(signal_names if signal_names is not None else (result.signal_names or []))
    if len(names) != result.point.shape[0]:
        raise ValueError(f"need {result.point.shape[0]} signal names, got {len(names)}: {names}")
    return names


def _names_for(setting, result, signal_names) -> list[str]:
    if isinstance(signal_names, Mapping):
        return _names(result, signal_names[setting])
    return _names(result, signal_names)


def gap_values(
    result: BootstrapResult,
    signal_names: Sequence[str] | None,
    token: str,
    metric: str,
    verbalized: str = "verbalized",
) -> tuple[float, np.ndarray]:
    """Point and paired resamples ``(B,)`` of ``g = metric(verbalized) - metric(token)``."""
    names = _names(result, signal_names)
    v, t = _signal_rows(names, token, verbalized)
    j = list(result.metrics).index(metric)
    return float(result.point[v, j] - result.point[t, j]), result.resamples[v, j] - result.resamples[t, j]


def _signal_rows(names: Sequence[str], token: str, verbalized: str) -> tuple[int, int]:
    for what, nm in (("verbalized signal", verbalized), ("token signal", token)):
        if nm not in names:
            raise ValueError(f"{what} {nm!r} not among signals {list(names)}")
    return list(names).index(verbalized), list(names).index(token)


def _advantage(
    result: BootstrapResult, names: Sequence[str], token: str, metric: str, verbalized: str
) -> tuple[float, np.ndarray]:
    """:func:`compare.advantage` by metric name: the gap, or ``|v| - |t|`` for a signed metric."""
    return advantage(result, names, verbalized, token, list(result.metrics).index(metric))


def _token_side(metric: str) -> float:
    """``+1`` when a positive advantage favours the token signal (lower is better, or signed), else ``-1``."""
    return 1.0 if get_metric(metric).lower_is_better else -1.0


def _favoured(result: BootstrapResult, names: Sequence[str], token: str, metric: str, verbalized: str) -> str:
    """``"verbalized"``, ``"token"`` or ``"neither"``: :func:`compare.better_signal` of the two point values."""
    v, t = _signal_rows(names, token, verbalized)
    j = list(result.metrics).index(metric)
    return better_signal(metric, result.point[v, j], result.point[t, j], "verbalized", "token")


def _triple(point: float, res: np.ndarray, level: float) -> Triple:
    lo, hi = interval(res, level)
    return (float(point), float(lo), float(hi))


def _checked(results: Mapping[str, BootstrapResult], metrics=None) -> list[str]:
    """``metrics`` (default: the first result's), once every setting is known to have the same resample count."""
    if not results:
        raise ValueError("results must hold at least one setting")
    Bs = {r.resamples.shape[-1] for r in results.values()}
    if len(Bs) > 1:
        raise ValueError(f"every setting needs the same number of resamples, got {sorted(Bs)}")
    return list(metrics if metrics is not None else next(iter(results.values())).metrics)


def _shift(results, signal_names, a: tuple[str, str], b: tuple[str, str], verbalized: str, level: float,
           orient: bool = False) -> dict:
    """:func:`summarize_deltas` of ``dg = g(b) - g(a)`` per setting, ``a`` and ``b`` (token signal, metric); with
    ``orient`` each advantage is first turned so that positive favours the token signal (:func:`_token_side`)."""
    pts, res, ga, gb = {}, {}, {}, {}
    for s, r in results.items():
        names = _names_for(s, r, signal_names)
        (pa, va), (pb, vb) = (gap_values(r, names, sig, met, verbalized) for sig, met in (a, b))
        pts[s], res[s] = pb - pa, vb - va
        ga[s], gb[s] = (_triple(o * p, o * w, level) for sig, met in (a, b)
                        for o in [_token_side(met) if orient else 1.0]
                        for p, w in [_advantage(r, names, sig, met, verbalized)])
    return summarize_deltas(pts, res, None, ga, gb, level)


def summarize_shifts(results: Mapping[str, BootstrapResult], pairs: Sequence[tuple[str, str]],
                     metrics: Sequence[str] | None = None, signal_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
                     verbalized: str = "verbalized", level: float = 0.95) -> pd.DataFrame:
    """Mean ``|dg|`` over settings of the context shifts ``dg = g(b) - g(a)``.

    Parameters
    ----------
    results : mapping setting -> BootstrapResult
        One :func:`bootstrap.paired_bootstrap` result per setting, all with
        the same number of resamples.
    pairs : sequence of (context_a, context_b)
        Token-signal names; ``dg = g(context_b) - g(context_a)``.
    metrics : sequence of str, optional
        Defaults to the metrics of the first result.
    signal_names : list, or mapping setting -> list, optional
        Signal names when the results do not carry them.
    verbalized : str, default="verbalized"
    level : float, default=0.95

    Returns
    -------
    DataFrame
        One row per (pair, metric): ``context_a``, ``context_b``, ``metric``
        and :data:`SUMMARY_COLUMNS`. ``n_flips``: settings whose better
        signal differs between the two contexts (:func:`compare.flip` per
        setting: opposite signs of the gap for an unsigned metric, of
        ``|v| - |t|`` for a signed one); ``n_resolved_flips``: those whose
        advantage intervals both exclude zero.
    """
    metrics = _checked(results, metrics)
    rows = [{"context_a": a, "context_b": b, "metric": metric,
             **_shift(results, signal_names, (a, metric), (b, metric), verbalized, level)}
            for a, b in pairs for metric in metrics]
    return pd.DataFrame(rows, columns=["context_a", "context_b", "metric", *SUMMARY_COLUMNS])


def summarize_gaps(results: Mapping[str, BootstrapResult], signals: Sequence[str], metrics: Sequence[str] | None = None,
                   signal_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None, verbalized: str = "verbalized",
                   level: float = 0.95) -> pd.DataFrame:
    """Mean **signed** gap over settings per token signal and metric (Tables 2 and 3).

    Returns
    -------
    DataFrame
        Columns ``signal``, ``metric``, ``n_settings``, ``point`` (mean of
        the per-setting point gaps), ``lo``, ``hi`` (percentiles of the
        per-resample mean over settings), ``n_excludes_zero`` (settings whose
        own gap interval excludes zero), ``n_favours_token`` (settings whose
        token signal is the better one by point estimate,
        :func:`compare.better_signal`: for a signed metric such as
        ``calibration_gap`` the one closer to 0, whatever the sign of the gap).
    """
    metrics = _checked(results, metrics)
    rows = []
    for sig in signals:
        for metric in metrics:
            pts, res, fav = [], [], []
            for s, r in results.items():
                names = _names_for(s, r, signal_names)
                p, v = gap_values(r, names, sig, metric, verbalized)
                pts.append(p)
                res.append(v)
                fav.append(_favoured(r, names, sig, metric, verbalized))
            lo, hi = interval(mean_over_settings(res), level)
            rows.append(dict(
                signal=sig, metric=metric, n_settings=len(pts), point=float(np.mean(pts)),
                lo=float(lo), hi=float(hi),
                n_excludes_zero=int(sum(excludes_zero(*interval(v, level)) for v in res)),
                n_favours_token=fav.count("token"),
            ))
    cols = ["signal", "metric", "n_settings", "point", "lo", "hi", "n_excludes_zero", "n_favours_token"]
    return pd.DataFrame(rows, columns=cols)


def summarize_estimators(results: Mapping[str, BootstrapResult], signals: Sequence[str], estimators: Sequence[str],
                         base: str = "ece", context_pair: tuple[str, str] | None = None,
                         signal_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None, verbalized: str = "verbalized",
                         level: float = 0.95) -> pd.DataFrame:
    """An estimator replacing ``base`` (10-bin ECE): study 000 Table 15.

    For each token signal (context) and estimator, per setting
    ``dg = g_estimator - g_base`` (same signal, same resamples).

    Returns
    -------
    DataFrame
        Columns ``signal``, ``estimator``, :data:`SUMMARY_COLUMNS` (here
        ``n_flips`` = settings where the estimator, not the context, flips
        the better signal: the :func:`compare.advantage` of ``base`` and of
        the estimator have opposite signs once both are oriented so that
        positive favours the token signal (the gap for a lower-is-better
        metric, minus the gap for a higher-is-better one, ``|v| - |t|`` for
        a signed estimator such as ``calibration_gap``); ``n_resolved_flips``
        likewise with both advantage intervals excluding zero), and
        ``context_flips``: settings where the better signal differs between
        ``context_pair[0]`` and ``context_pair[1]`` under the estimator, by
        point estimate (opposite signs of the estimator's advantage in the
        two contexts, :func:`compare.better_signal`'s rule: signed estimators
        compare distances from 0; a tie or ``nan`` in either context is no
        flip; ``nan`` without ``context_pair``). ``mean_abs`` and the other
        shift columns stay those of ``dg = g_estimator - g_base``.
    """
    _checked(results)
    rows = []
    for sig in signals:
        for est in estimators:
            row = {"signal": sig, "estimator": est,
                   **_shift(results, signal_names, (sig, base), (sig, est), verbalized, level, orient=True)}
            if context_pair is not None:
                cf = 0
                for s, r in results.items():
                    names = _names_for(s, r, signal_names)
                    pa, pb = (_advantage(r, names, c, est, verbalized)[0] for c in context_pair)
                    cf += flip(pa, pb)
                row["context_flips"] = int(cf)
            else:
                row["context_flips"] = float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=["signal", "estimator", *SUMMARY_COLUMNS, "context_flips"])


def _check_paired(ra: BootstrapResult, rb: BootstrapResult, setting) -> None:
    for attr in ("n_resamples", "seed", "chunk_size"):
        if getattr(ra, attr) != getattr(rb, attr):
            raise ValueError(
                f"setting {setting!r}: results are not paired ({attr} {getattr(ra, attr)} != {getattr(rb, attr)})"
            )
    if ra.resamples.shape[-1] != rb.resamples.shape[-1]:
        raise ValueError(f"setting {setting!r}: different numbers of resamples")


def summarize_axis(results_a: Mapping[str, BootstrapResult], results_b: Mapping[str, BootstrapResult], signal: str,
                   metrics: Sequence[str], signal_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
                   verbalized: str = "verbalized", level: float = 0.95) -> pd.DataFrame:
    """The gap of one token signal under two protocols run separately.

    ``dg = g_b - g_a`` per setting, where ``results_a`` and ``results_b``
    come from two runs over the same items with the same seeds (e.g. the
    default correctness rule and exact match). Only settings present in
    both are used.

    Returns
    -------
    DataFrame
        Columns ``signal``, ``metric``, :data:`SUMMARY_COLUMNS`; ``n_flips``
        counts settings whose better signal differs between the two runs
        (opposite signs of :func:`compare.advantage`: the gap, or
        ``|v| - |t|`` for a signed metric).
    """
    common = [s for s in results_a if s in results_b]
    if not common:
        raise ValueError("results_a and results_b share no setting")
    for s in common:
        _check_paired(results_a[s], results_b[s], s)
    rows = []
    for metric in metrics:
        pts, res, ga, gb = {}, {}, {}, {}
        for s in common:
            na, nb = _names_for(s, results_a[s], signal_names), _names_for(s, results_b[s], signal_names)
            pa, va = gap_values(results_a[s], na, signal, metric, verbalized)
            pb, vb = gap_values(results_b[s], nb, signal, metric, verbalized)
            pts[s], res[s] = pb - pa, vb - va
            ga[s] = _triple(*_advantage(results_a[s], na, signal, metric, verbalized), level)
            gb[s] = _triple(*_advantage(results_b[s], nb, signal, metric, verbalized), level)
        rows.append({"signal": signal, "metric": metric, **summarize_deltas(pts, res, None, ga, gb, level)})
    return pd.DataFrame(rows, columns=["signal", "metric", *SUMMARY_COLUMNS])
