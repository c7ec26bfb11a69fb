"""How many items does a comparison need? A sample-size planner from a pilot's resampled variance.

For a pair of signals A, B and a metric, the paired bootstrap's interval of the gap ``metric(A) - metric(B)`` has a
half-width proportional to the standard deviation of the resampled gap, and that standard deviation shrinks as
``c / sqrt(n)`` with the number of items ``n`` (the items or, for a clustered bootstrap, the clusters are the
resampled unit). The planner measures that law on the pilot instead of assuming it (:func:`plan_size`):

1. subsample sizes ``n_k``: :data:`SUBSAMPLE_FRACTIONS` of the pilot's ``N`` units (at least :data:`MIN_SUBSAMPLE`);
2. at each ``n_k``, ``B`` resamples of ``n_k`` units drawn with replacement from the pilot (the bootstrap of a
   sample of that size, the m-out-of-n bootstrap), the gap computed on each by the evaluator's weighted kernels,
   and its standard deviation ``sd_k``;
3. a least-squares fit of ``log sd_k = log c + slope * log n_k``; the prediction uses ``c`` with the slope fixed
   at ``-1/2`` (``c = exp(mean(log sd_k + log n_k / 2))``) and reports the free slope as a check;
4. the gap ``delta`` (the smallest gap worth detecting, given by the user) is resolved with power ``power`` when
   ``|delta| >= (z_{1 - alpha/2} + z_power) * c / sqrt(n)``, so ``n = (c (z_{1 - alpha/2} + z_power) / delta)^2``
   (the normal approximation of a two-sided test at level ``1 - alpha``, e.g. Julious, "Sample sizes for clinical
   trials", 2010, ch. 3).

The pilot is *too small to tell* (status ``pilot_too_small``) when it has fewer than :data:`MIN_PILOT` units, or the
free slope lies outside :data:`SLOPE_RANGE` (the spread of the resampled gap does not follow the ``1/sqrt(n)`` law on
this pilot, e.g. an ECE dominated by its binning at small n), or the resampled gaps have no spread at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from .clusters import cluster_codes
from .kernels import WEIGHTED_KERNELS, SortedSignal, _apply, weighted_kernel
from .registry import get_metric
from .resampling import counts_from_indices

__all__ = ["SizePlan", "plan_size", "MIN_PILOT", "MIN_SUBSAMPLE", "SUBSAMPLE_FRACTIONS", "SLOPE_RANGE",
           "gap_resamples"]

#: Fewer pilot units than this: too small to tell.
MIN_PILOT = 30
#: The smallest subsample.
MIN_SUBSAMPLE = 15
#: Subsample sizes as fractions of the pilot.
SUBSAMPLE_FRACTIONS = (0.25, 0.35, 0.5, 0.7, 1.0)
#: The free slope of log sd against log n must lie here for the 1/sqrt(n) law to be trusted.
SLOPE_RANGE = (-0.8, -0.3)


@dataclass(frozen=True)
class SizePlan:
    """The planner's answer for one unit.

    Attributes
    ----------
    n_pilot : int
        Units (items, or clusters) in the pilot.
    pilot_gap : float
        The pilot's own gap ``metric(A) - metric(B)``.
    sizes, sds : tuple of int, tuple of float
        The subsample sizes and the standard deviation of the resampled gap at each.
    c : float
        ``sd(n) = c / sqrt(n)``, fitted with the slope fixed at -1/2.
    slope : float
        The free slope of ``log sd`` on ``log n`` (about -0.5 when the law holds).
    n_required : int or None
        Units needed for the interval of a gap of ``gap`` to exclude 0 with ``power`` (None: too small to tell).
    status : {"ok", "pilot_too_small"}
    reason : str
        Why the pilot is too small (empty when ``ok``).
    """

    n_pilot: int
    pilot_gap: float
    sizes: tuple[int, ...]
    sds: tuple[float, ...]
    c: float
    slope: float
    n_required: int | None
    status: str
    reason: str = ""

    def power_at(self, n: int, gap: float, level: float = 0.95) -> float:
        """The predicted probability that the interval of a true gap ``gap`` excludes 0 with ``n`` units:
        ``Phi(|gap| sqrt(n) / c - z_{1 - alpha/2})`` (NaN when too small to tell)."""
        if self.status != "ok" or not np.isfinite(self.c) or self.c <= 0:
            return float("nan")
        return float(norm.cdf(abs(gap) * np.sqrt(n) / self.c - norm.ppf(0.5 + level / 2)))


def gap_resamples(conf_a, conf_b, target, metric: str, weights: np.ndarray, n_bins: int = 10,
                  target_b=None) -> np.ndarray:
    """The gap ``metric(A) - metric(B)`` on each row of ``weights`` (multiplicities of the items, (R, n)).

    Uses the bootstrap's count-weighted kernels (:func:`confgrid.analysis.kernels.weighted_kernel`); ``target_b``
    (n,): B's own target where it differs from A's (a method graded under its own rule). Returns (R,) float64 (NaN
    where undefined).
    """
    info = get_metric(metric)
    kernel = weighted_kernel(info.name)
    if kernel is None:
        raise ValueError(f"metric {metric!r} has no weighted kernel; the planner supports "
                         f"{', '.join(sorted(WEIGHTED_KERNELS))} and every binned ECE")
    a, b = (_apply(kernel, SortedSignal.from_arrays(conf, tgt, n_bins), weights, integer=True)
            for conf, tgt in ((conf_a, target), (conf_b, target if target_b is None else target_b)))
    return a - b


def plan_size(conf_a, conf_b, target, metric: str, gap: float, *, power: float = 0.8, level: float = 0.95,
              n_resamples: int = 1000, seed: int = 0, groups=None, n_bins: int = 10, target_b=None) -> SizePlan:
    """How many units the paired interval of a gap of ``gap`` needs to exclude 0 with probability ``power``.

    Parameters
    ----------
    conf_a, conf_b : array-like of shape (N,), float in [0, 1]
        The two signals' confidences on the pilot's items (instance-aligned: the items both have).
    target : array-like of shape (N,), float in [0, 1]
        Correctness (or a graded target) of each item; ``target_b`` (N,): B's own, where it differs.
    metric : str
        A registered metric with a weighted kernel (``ece``, ``brier``, ``auroc``, ``aurc``, ...).
    gap : float
        The smallest gap ``metric(A) - metric(B)`` worth detecting (its sign does not matter), non-zero.
    power : float in (0, 1)
        Wanted probability that the interval excludes 0 when the true gap is ``gap``.
    level : float in (0, 1)
        The interval's level (the run's ``bootstrap.level``).
    n_resamples : int
        Resamples per subsample size.
    seed : int
        Seed of the subsamples (``default_rng(SeedSequence([seed, 22]))``, sizes in increasing order).
    groups : array-like of shape (N,), optional
        Each item's cluster: clusters are the resampled unit and ``n`` counts clusters.

    Raises
    ------
    ValueError
        Inputs of different lengths, a value outside [0, 1], ``gap == 0`` or a gap larger than the metric's range
        allows (1; 2 for Spearman and signed metrics), ``power`` or ``level`` outside (0, 1), fewer than 3
        resamples, a metric without a weighted kernel (each naming the value and what is allowed).
    """
    a = np.asarray(conf_a, dtype=np.float64)
    b = np.asarray(conf_b, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    yb = y if target_b is None else np.asarray(target_b, dtype=np.float64)
    if not (a.shape == b.shape == y.shape == yb.shape and a.ndim == 1):
        raise ValueError(f"conf_a, conf_b and target must be 1-D of one length, got {a.shape}, {b.shape}, {y.shape}")
    for name, v in (("conf_a", a), ("conf_b", b), ("target", y), ("target_b", yb)):
        if v.size and (not np.isfinite(v).all() or v.min() < 0 or v.max() > 1):
            raise ValueError(f"{name} must be finite and in [0, 1]")
    if not np.isfinite(gap) or gap == 0:
        raise ValueError(f"gap={gap!r}: give the smallest non-zero gap worth detecting, e.g. 0.02")
    info = get_metric(metric)
    bound = 2.0 if info.signed or info.name == "spearman" else 1.0  # the metrics lie in [0, 1] or [-1, 1]
    if abs(gap) > bound:
        raise ValueError(f"gap={gap!r}: {metric}(A) - {metric}(B) lies in [-{bound:g}, {bound:g}]; give the smallest "
                         "gap worth detecting, e.g. 0.02")
    if int(n_resamples) < 3:
        raise ValueError(f"n_resamples={n_resamples!r}: at least 3 resamples per subsample size are needed for a "
                         "spread (hundreds for a stable one; default 1000)")
    for name, v in (("power", power), ("level", level)):
        if not 0 < v < 1:
            raise ValueError(f"{name}={v!r} must lie in (0, 1)")
    if groups is not None:
        cl = cluster_codes(groups, a.size)
        codes, N = cl.codes, cl.n_clusters
    else:
        codes, N = np.arange(a.size), a.size
    pilot_gap = float(gap_resamples(a, b, y, metric, np.ones((1, a.size)), n_bins, yb)[0]) if a.size else np.nan
    if N < MIN_PILOT:
        return SizePlan(N, pilot_gap, (), (), np.nan, np.nan, None, "pilot_too_small",
                        f"{N} unit(s); the planner needs at least {MIN_PILOT}")
    sizes = tuple(sorted({max(MIN_SUBSAMPLE, int(round(f * N))) for f in SUBSAMPLE_FRACTIONS}))
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 22]))
    sds = []
    for n_k in sizes:
        # n_k units drawn with replacement from the N pilot units: unit multiplicities (R, N), then per item
        unit_w = counts_from_indices(rng.integers(0, N, size=(int(n_resamples), n_k)), N)
        g = gap_resamples(a, b, y, metric, unit_w[:, codes], n_bins, yb)
        sds.append(float(np.nanstd(g, ddof=1)) if np.isfinite(g).sum() > 2 else np.nan)
    sd = np.asarray(sds)
    ns = np.asarray(sizes, dtype=np.float64)
    if not np.isfinite(sd).all() or (sd <= 0).any():
        return SizePlan(N, pilot_gap, sizes, tuple(sds), np.nan, np.nan, None, "pilot_too_small",
                        "the resampled gap has no spread (or is undefined) at some subsample size")
    slope = float(np.polyfit(np.log(ns), np.log(sd), 1)[0])
    c = float(np.exp(np.mean(np.log(sd) + 0.5 * np.log(ns))))
    if not SLOPE_RANGE[0] <= slope <= SLOPE_RANGE[1]:
        return SizePlan(N, pilot_gap, sizes, tuple(sds), c, slope, None, "pilot_too_small",
                        f"the spread of the resampled gap falls as n^{slope:.2f}, not n^-0.5 (allowed slopes "
                        f"{SLOPE_RANGE[0]} to {SLOPE_RANGE[1]}); a larger pilot is needed to extrapolate")
    z = norm.ppf(0.5 + level / 2) + norm.ppf(power)
    n_req = int(np.ceil((c * z / abs(gap)) ** 2))
    return SizePlan(N, pilot_gap, sizes, tuple(sds), c, slope, max(n_req, 1), "ok")
