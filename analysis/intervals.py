"""Bootstrap interval methods, and the degenerate interval.

Every interval comes from the paired resamples of one unit (analysis/bootstrap.py) and the point estimate on the full
data; the method is declared (``bootstrap.interval``, ``--interval``); coverage: docs/concepts/intervals.md.

* ``percentile`` (the default): the ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the resampled
  values (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, section 13.3).
* ``basic`` (the reverse percentile): ``[2 t - q_hi, 2 t - q_lo]`` with ``t`` the point estimate: the resampled
  spread reflected around ``t``, which moves the interval against the estimator's bias (Davison & Hinkley 1997,
  *Bootstrap Methods and their Application*, eq. 5.6).
* ``bc`` (bias-corrected percentile): quantiles at ``Phi(2 z0 + z_a)`` with ``z0 = Phi^-1(share of resamples
  below t, ties counting one half)`` (Efron & Tibshirani 1993, section 14.3, the BCa interval with acceleration
  0). Where ``t`` lies at or outside the percentile interval of its own resamples (a perfectly calibrated sample's
  ECE of 0) the interval would collapse: it gets the percentile interval, and says so (:func:`interval_methods`).
* ``basic`` and ``bc`` may leave a metric's range (a negative Brier bound) or not contain the point estimate.
* ``jeffreys`` (boundary-aware, binned ECE only): every resample keeps the bootstrap's draw of the items and replaces
  each bin's accuracy by a draw from its Jeffreys posterior ``Beta(k_b + 1/2, n_b - k_b + 1/2)``
  (:func:`jeffreys_resamples`); the percentile interval of those values. 50 of 50 answers right then no longer claim
  an accuracy of exactly 1 (Brown, Cai & DasGupta 2001, "Interval estimation for a binomial proportion", Statistical
  Science 16(2), on the Jeffreys interval). Metrics without fixed bins (AUROC, Brier, equal-mass and debiased ECE)
  keep the percentile interval, and their ``interval`` column says ``percentile``. Gaps draw the two signals' bins
  independently on the same items, which ignores that their outcomes are shared: wider, not narrower.

A value whose defined resamples are all equal has no spread: its interval is **degenerate** (a point; ``interval``
says ``degenerate``) and never resolves a comparison (``excludes_zero`` False, for verdicts and early stopping).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

from .bootstrap import interval as percentile_interval
from .clusters import cluster_codes, row_counts
from .registry import get_metric
from .resampling import DEFAULT_CHUNK_SIZE, chunk_indices, counts_from_indices, n_chunks

__all__ = ["INTERVALS", "DEGENERATE", "check_interval", "bootstrap_interval", "degenerate", "jeffreys_resamples",
           "jeffreys_eligible", "interval_methods"]

#: the interval methods, by name (module docstring)
INTERVALS = ("percentile", "basic", "bc", "jeffreys")
#: the ``interval`` column's word for a value whose resamples have no spread
DEGENERATE = "degenerate"


def check_interval(method: str) -> str:
    """Return ``method`` if it is one of :data:`INTERVALS`, else raise ``ValueError`` naming it and the choices."""
    if method not in INTERVALS:
        raise ValueError(f"interval method must be one of {', '.join(INTERVALS)}; got {method!r}")
    return method


#: resampled values closer than this (relative to 1 or their size) count as equal: sums of the same answers in
#: another order differ in the last bits
SPREAD_TOL = 1e-12


def degenerate(resamples) -> np.ndarray:
    """Whether each row's defined resamples are all equal, to :data:`SPREAD_TOL` (at least one defined).

    ``resamples`` (..., R) float, ``nan`` where undefined; returns a bool array of shape ``resamples.shape[:-1]``.

    Examples
    --------
    >>> degenerate(np.array([[0.1, 0.1, np.nan], [0.1, 0.2, 0.1], [np.nan, np.nan, np.nan],
    ...                      [0.01, 0.010000000000000002, 0.01]])).tolist()
    [True, False, False, True]
    """
    v = np.asarray(resamples, dtype=np.float64)
    ok = np.isfinite(v)
    lo = np.where(ok, v, np.inf).min(axis=-1)
    hi = np.where(ok, v, -np.inf).max(axis=-1)
    with np.errstate(invalid="ignore"):
        return ok.any(axis=-1) & (hi - lo <= SPREAD_TOL * np.maximum(1.0, np.abs(hi)))


def _row_quantiles(v: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Linear-interpolation quantile ``p[i, j]`` of the defined values of row ``v[i]`` (``np.percentile``'s linear
    method per row); ``nan`` for a row without a defined value."""
    s = np.sort(v, axis=1)  # nan sort last
    k = np.isfinite(v).sum(axis=1)
    bad = ~np.isfinite(p)
    p = np.where(bad, 0.0, p)
    pos = p * np.maximum(k - 1, 0)[:, None]
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0)[:, None])
    frac = pos - lo
    rows = np.arange(v.shape[0])[:, None]
    out = s[rows, lo] * (1.0 - frac) + s[rows, hi] * frac
    out[frac == 0] = s[rows, lo][frac == 0]  # exact at an order statistic (no 0 * inf)
    out[k == 0] = np.nan
    out[bad] = np.nan
    return out


def _bc_share(t: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Share of each row's defined resamples below ``t`` (ties one half); ``nan`` without one."""
    k = np.isfinite(rows).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((rows < t).sum(axis=1) + 0.5 * (rows == t).sum(axis=1)) / k


def interval_methods(point, resamples, method: str, level: float = 0.95) -> np.ndarray:
    """The method each value's interval really uses: ``method``, except ``bc`` falls back to ``percentile`` where the
    point estimate lies at or outside the percentile interval of its resamples (to :data:`SPREAD_TOL`; module
    docstring). Object array shaped like ``point``."""
    check_interval(method)
    t = np.asarray(point, dtype=np.float64)
    out = np.full(t.shape, method, dtype=object)
    if method != "bc" or t.size == 0:
        return out
    lo, hi = percentile_interval(np.asarray(resamples, dtype=np.float64), level)
    tol = SPREAD_TOL * np.maximum(1.0, np.abs(t))
    with np.errstate(invalid="ignore"):
        out[(t <= lo + tol) | (t >= hi - tol)] = "percentile"
    return out


def bootstrap_interval(point, resamples, level: float = 0.95, method: str = "percentile"
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The interval of each value from its point estimate and paired resamples.

    Parameters
    ----------
    point : array-like of shape S (any), float
        The estimate on the full data.
    resamples : array-like of shape S + (R,), float
        ``nan`` where undefined (left out; count them with :func:`~confgrid.analysis.bootstrap.n_undefined`).
    level : float in (0, 1), default 0.95
    method : {"percentile", "basic", "bc", "jeffreys"}, default "percentile"
        Module docstring. ``percentile`` is :func:`confgrid.analysis.bootstrap.interval`, value for value;
        ``jeffreys`` is the percentile interval of :func:`jeffreys_resamples` (pass those as ``resamples``).

    Returns
    -------
    lo, hi : ndarray of shape S, float64
        ``nan`` where no resample is defined (or, for ``basic`` and ``bc``, where the point estimate is undefined).

    Raises
    ------
    ValueError
        An unknown method, a level outside (0, 1), or shapes that disagree.

    Examples
    --------
    A biased statistic: the resamples sit above the point estimate 0.04, so ``basic`` and ``bc`` move down.

    >>> r = np.array([[0.04, 0.05, 0.06, 0.07, 0.08]])
    >>> [np.round(x, 4).tolist() for x in bootstrap_interval(np.array([0.04]), r, 0.5, "percentile")]
    [[0.05], [0.07]]
    >>> [np.round(x, 4).tolist() for x in bootstrap_interval(np.array([0.04]), r, 0.5, "basic")]
    [[0.01], [0.03]]
    """
    check_interval(method)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    t = np.asarray(point, dtype=np.float64)
    v = np.asarray(resamples, dtype=np.float64)
    if v.shape[:-1] != t.shape:
        raise ValueError(f"resamples must have shape point.shape + (R,) = {t.shape} + (R,), got {v.shape}")
    lo, hi = percentile_interval(v, level)
    if method in ("percentile", "jeffreys"):
        return lo, hi
    if method == "basic":
        return 2.0 * t - hi, 2.0 * t - lo
    rows = v.reshape(-1, v.shape[-1])
    tt = t.reshape(-1, 1)
    share = _bc_share(tt, rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        z0 = ndtri(share)  # +-inf where no resample lies on one side: the percentile interval there
    z = ndtri(np.array([(1.0 - level) / 2.0, (1.0 + level) / 2.0]))
    p = ndtr(2.0 * np.where(np.isfinite(z0), z0, 0.0)[:, None] + z[None, :])
    q = _row_quantiles(rows, p)
    q[~np.isfinite(tt[:, 0])] = np.nan
    return q[:, 0].reshape(t.shape), q[:, 1].reshape(t.shape)


def jeffreys_eligible(metric: str) -> bool:
    """Whether :func:`jeffreys_resamples` computes ``metric``: a plug-in binned ECE with fixed edges (equal-width or
    centred bins, mean or midpoint bin confidence)."""
    b = get_metric(metric).binning
    return b is not None and b.scheme != "mass" and b.estimator == "plugin"


def jeffreys_resamples(confidence, target, masks, metrics, n_resamples: int, seed: int, n_bins: int = 10,
                       groups=None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> np.ndarray:
    """Resampled binned ECEs with each bin's accuracy drawn from its Jeffreys posterior (module docstring).

    Resample ``r`` draws the items exactly as :func:`~confgrid.analysis.bootstrap.paired_bootstrap` with the same
    ``seed`` and ``chunk_size`` does (its chunk index matrices, or its cluster draws), giving each bin ``b`` of a
    signal ``n_b`` answers with ``k_b`` right (real counts for graded correctness), then draws ``theta_b ~ Beta(k_b +
    1/2, n_b - k_b + 1/2)`` and takes ``sum_b |n_b theta_b - sum_b c| / sum_b n_b`` (bin confidence: mean or midpoint,
    as the metric says). Draws: stream ``SeedSequence([seed, chunk, 1, cell])``, restarted for every metric. The
    answers in a bin count as independent (docs/concepts/intervals.md).

    Parameters
    ----------
    confidence, target : ndarray of shape (S, n)
        Per signal (cell), aligned on the ``n`` items; values outside ``masks`` are ignored.
    masks : ndarray of bool, shape (S, n), or None
        Each cell's support (None: every item).
    metrics : sequence of str
        Metric names; those not :func:`jeffreys_eligible` get ``nan``.
    n_bins : int, default 10
        The run's ECE bins (for ``ece``; ``ece_<B>`` has its own).
    groups : array-like of shape (n,), optional
        Cluster labels: the clusters are resampled, as the bootstrap does.

    Returns
    -------
    ndarray of shape (S, len(metrics), n_resamples), float64
        ``nan`` for an ineligible metric and a resample without the signal's items.

    Examples
    --------
    50 answers stated 0.9, all right: the percentile bootstrap claims ECE = 0.1 exactly; the Jeffreys resamples
    put the 95% interval near [0.05, 0.10]:

    >>> r = jeffreys_resamples(np.full((1, 50), 0.9), np.ones((1, 50)), None, ["ece"], 2000, 0)
    >>> [round(float(x), 2) for x in np.percentile(r[0, 0], [2.5, 97.5])]
    [0.05, 0.1]
    """
    conf = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    S, n = conf.shape
    m = np.ones((S, n), dtype=bool) if masks is None else np.asarray(masks, dtype=bool)
    out = np.full((S, len(metrics), int(n_resamples)), np.nan)
    todo = [(j, get_metric(name).binning) for j, name in enumerate(metrics) if jeffreys_eligible(name)]
    if not todo or n == 0:
        return out
    clusters = None if groups is None else cluster_codes(groups, n)
    units = n if clusters is None else int(clusters.sizes.size)
    # one-hot bin matrices per (cell, metric): (n_s, B) rows of the cell's items, with y and c weights
    prep = {}
    for s in range(S):
        sup = np.flatnonzero(m[s])
        for j, b in todo:
            B = b.bins(n_bins)
            oh = np.zeros((sup.size, B))
            oh[np.arange(sup.size), b.indices(conf[s, sup], B)] = 1.0
            mid = b.midpoints(B) if b.bin_confidence == "midpoint" else None
            prep[(s, j)] = (sup, oh, oh * y[s, sup, None], None if mid is not None else oh * conf[s, sup, None], mid)
    for c in range(n_chunks(n_resamples, chunk_size)):
        idx = chunk_indices(units, n_resamples, seed, c, chunk_size)
        W = counts_from_indices(idx, n) if clusters is None else row_counts(idx, clusters)
        rows = slice(c * chunk_size, c * chunk_size + W.shape[0])
        for (s, j), (sup, oh, ohy, ohc, mid) in prep.items():
            # one stream per (chunk, cell), restarted for every metric: two binnings that put the answers in the
            # same bins get the same draws (common random numbers), e.g. ece and ece_right without edge values
            rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(c), 1, int(s)]))
            w = W[:, sup]
            n_b, k_b = w @ oh, w @ ohy
            sc = n_b * mid if mid is not None else w @ ohc
            theta = rng.beta(k_b + 0.5, np.maximum(n_b - k_b, 0.0) + 0.5)
            tot = n_b.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[s, j, rows] = np.where(tot > 0, np.abs(n_b * theta - sc).sum(axis=1) / tot, np.nan)
    return out
