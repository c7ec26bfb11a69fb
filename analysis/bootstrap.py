"""Vectorized paired bootstrap over items (study 000, Appendix A).

Per setting (one model x one dataset) there are ``S`` signals, all scored on the same ``n`` items (aligned rows). One
matrix of resampled item indices of shape ``(B, n)`` is shared by every signal and metric, so differences between
signals are paired.

Resamples are drawn in fixed chunks of ``chunk_size`` rows; chunk ``c`` comes from
``np.random.default_rng(np.random.SeedSequence([seed, c]))`` as ``rng.integers(0, n, size=(rows_in_chunk, n))``. The
numbers therefore do not depend on how many workers process the chunks or in which order.

Each resample is a count matrix row (how often each item was drawn), evaluated for a whole block of resamples at once:
the count-weighted kernels of analysis/kernels.py (``O(b * n)``; ``kde_ece`` ``O(b * G^2)``) and, for ECE, AUROC,
AURC, Brier and the signed gap, the fused path of analysis/fused.py (the same values to ~1e-14, nothing sorted per
resample; memory a small multiple of ``chunk_size * n * 8`` bytes). Metrics without a kernel (``smoothed_ece``,
``smece``: the bandwidth depends on the resample) call the point function per resample (:func:`has_weighted_kernel`).

With ``groups`` (a cluster label per item) the same chunks draw ``G`` cluster indices instead of ``n`` item indices
and every row of a drawn cluster weighs its cluster's multiplicity (analysis/clusters.py).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .resampling import (
    DEFAULT_CHUNK_SIZE,
    chunk_indices,
    counts_from_indices,
    resample_indices,
)
from .clusters import cluster_codes, row_counts
from .fused import ReweightedCell, evaluate_chunk, one_blas_thread, prepare
from .kernels import SortedSignal
from .metrics import UndefinedMetricWarning, validate_inputs
from .registry import METRICS, get_metric

__all__ = [
    "bootstrap_chunks",
    "BootstrapResult",
    "paired_bootstrap",
    "interval",
    "n_undefined",
    "resample_counts",
]



# --- chunk and full bootstrap ---


def _check_metrics(metrics: Sequence[str]) -> list[str]:
    if isinstance(metrics, str):
        metrics = [metrics]
    metrics = list(metrics)
    if not metrics:
        raise ValueError("metrics must name at least one metric")
    for name in metrics:
        get_metric(name)  # raises listing the choices; no kernel -> per-resample fallback
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics contains duplicates: {metrics}")
    return metrics


def _stack_inputs(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=np.float64)
    if conf.ndim == 1:
        conf = conf[None, :]
    if conf.ndim != 2:
        raise ValueError(f"confidence must have shape (S, n), got {conf.shape}")
    corr = np.asarray(correct, dtype=np.float64)
    if corr.ndim == 1:
        corr = np.broadcast_to(corr, conf.shape)
    if corr.shape != conf.shape:
        raise ValueError(
            f"correct must have shape (n,) or (S, n) = {conf.shape}, got {np.shape(correct)}"
        )
    for s in range(conf.shape[0]):
        try:
            validate_inputs(conf[s], corr[s])
        except ValueError as exc:
            raise ValueError(f"signal {s}: {exc}") from None
    return conf, corr



def bootstrap_chunks(
    confidence,
    correct,
    metrics: Sequence[str],
    n_resamples: int,
    seed: int,
    chunks: Sequence[int],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    n_bins: int = 10,
    groups=None,
    masks=None,
    reweight=None,
) -> list[np.ndarray]:
    """Evaluate several resample chunks of one setting (the unit of work of a worker).

    Each chunk's index matrix is regenerated with :func:`chunk_indices` (seeded by ``SeedSequence([seed, chunk])``)
    and evaluated by the same code as :func:`paired_bootstrap`, so the values are bit-identical to the corresponding
    slice of ``paired_bootstrap(...).resamples`` whichever worker computes them and however chunks are grouped.

    Parameters
    ----------
    confidence : ndarray of shape (S, n), n >= 1
    correct : ndarray of shape (S, n) or (n,)
    n_resamples, seed, chunk_size, n_bins, groups, masks, reweight
        As in :func:`paired_bootstrap` (with ``groups`` a chunk draws ``chunk_indices(G, ...)`` cluster indices).
    chunks : sequence of int in ``[0, n_chunks(n_resamples, chunk_size))``

    Returns
    -------
    list of ndarray of shape (S, M, rows_in_chunk), float64
        One array per entry of ``chunks``, in that order.
    """
    metrics = _check_metrics(metrics)
    conf, corr = _stack_inputs(confidence, correct)
    n = conf.shape[1]
    if n == 0:
        raise ValueError("bootstrap_chunks needs n >= 1 rows")
    clusters = cluster_codes(groups, n) if groups is not None else None
    k = n if clusters is None else clusters.n_clusters
    prep = prepare(conf, corr, n_bins, _check_supports(masks, reweight, conf.shape), reweight)
    out = []
    with one_blas_thread():
        for c in chunks:
            idx = chunk_indices(k, n_resamples, seed, int(c), chunk_size)
            out.append(evaluate_chunk(prep, metrics, idx, clusters))
    return out


def n_undefined(values: np.ndarray) -> np.ndarray:
    """Number of ``nan`` resamples along the last axis."""
    return np.isnan(np.asarray(values, dtype=np.float64)).sum(axis=-1)


def interval(values, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the resample axis (last axis).

    ``np.nanpercentile`` at ``(1 - level)/2`` and ``(1 + level)/2`` (2.5 and 97.5 for ``level=0.95``), linear method;
    ``nan`` resamples are ignored (count them with :func:`n_undefined`); an all-``nan`` slice gives ``nan``.

    Returns
    -------
    lo, hi : ndarray of shape ``values.shape[:-1]`` (float for 1-D input)
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    v = np.asarray(values, dtype=np.float64)
    q = [50.0 * (1.0 - level), 50.0 * (1.0 + level)]
    if v.ndim == 0:
        raise ValueError("values must have a resample axis (at least 1-D)")
    # np.percentile on the rows without nan (one vectorized call), np.nanpercentile (a Python loop over rows)
    # only on the rows that have one: the same numbers as np.nanpercentile on everything, many times faster
    rows = v.reshape(int(np.prod(v.shape[:-1], dtype=np.int64)), v.shape[-1])
    out = np.full((2, rows.shape[0]), np.nan)
    has_nan = np.isnan(rows).any(axis=1)
    clean = ~has_nan
    if rows.shape[1] and clean.any():
        out[:, clean] = np.percentile(rows[clean], q, axis=-1, method="linear")
    if rows.shape[1] and has_nan.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-nan slices
            out[:, has_nan] = np.nanpercentile(rows[has_nan], q, axis=-1, method="linear")
    lo, hi = out[0].reshape(v.shape[:-1]), out[1].reshape(v.shape[:-1])
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


@dataclass
class BootstrapResult:
    """Output of :func:`paired_bootstrap`.

    Attributes
    ----------
    point : ndarray of shape (S, M)
        Point estimates (metrics.py on the full data).
    resamples : ndarray of shape (S, M, B), float64
        Metric per resample; ``nan`` where undefined.
    metrics : list of str
        The ``M`` metric names, in column order.
    signal_names : list of str or None
    n_clusters : int or None
        ``G`` of a cluster bootstrap (``groups`` given), else None.
    """

    point: np.ndarray
    resamples: np.ndarray
    metrics: list[str]
    signal_names: list[str] | None = None
    n_resamples: int = 0
    seed: int = 0
    chunk_size: int = DEFAULT_CHUNK_SIZE
    n_bins: int = 10
    extra: dict = field(default_factory=dict)
    n_clusters: int | None = None

    def interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)``, each of shape (S, M)."""
        return interval(self.resamples, level)

    @property
    def n_undefined(self) -> np.ndarray:
        """(S, M) count of resamples where the metric was undefined."""
        return n_undefined(self.resamples)


def _check_supports(masks, reweight, shape: tuple[int, int]) -> np.ndarray | None:
    """``masks`` as a (S, n) bool array (None stays None), after checking ``reweight`` has ``S`` entries."""
    if reweight is not None and len(reweight) != shape[0]:
        raise ValueError(f"reweight needs one entry (Reweight or None) per signal: {shape[0]}, got {len(reweight)}")
    if masks is None:
        return None
    m = np.asarray(masks)
    if m.shape != tuple(shape) or m.dtype != bool:
        raise ValueError(f"masks must be a bool array of shape (S, n) = {tuple(shape)}, got {m.dtype} {m.shape}")
    return m


def _point_estimates(conf, corr, metrics, n_bins, masks=None, reweight=None) -> np.ndarray:
    S, n = conf.shape
    point = np.full((S, len(metrics)), np.nan)
    for s in range(S):
        c, y = (conf[s], corr[s]) if masks is None else (conf[s][masks[s]], corr[s][masks[s]])
        if reweight is not None and reweight[s] is not None:
            point[s] = _reweighted_point(c, y, np.arange(n) if masks is None else np.flatnonzero(masks[s]),
                                         reweight[s], metrics, n_bins, n)
            continue
        for j, name in enumerate(metrics):
            info = METRICS.get(name)
            kw = {"n_bins": n_bins} if info.takes_n_bins else {}
            point[s, j] = info.func(c, y, **kw)
    return point


def _reweighted_point(c, y, rows, rw, metrics, n_bins: int, n: int) -> np.ndarray:
    """A reweighted cell's point estimate: its weights at ``W = 1`` (analysis/reweighting.py)."""
    out = np.full(len(metrics), np.nan)
    if not (c.size and np.isfinite(c).all() and np.isfinite(y).all()):
        return out
    sig = SortedSignal.from_arrays(c, y, n_bins)
    out = ReweightedCell(sig, rows[sig.order], rw, n).values(np.ones((1, n)), metrics)[:, 0]
    if np.isnan(out).any():
        warnings.warn("a distribution-aligned value is undefined: a stratum of the target has no row of the "
                      "reweighted side (the support condition fails), or the metric takes no real weights; "
                      "returning nan", UndefinedMetricWarning, stacklevel=4)
    return out


def paired_bootstrap(
    confidence,
    correct,
    metrics: Sequence[str],
    n_resamples: int = 10_000,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    n_bins: int = 10,
    signal_names: Sequence[str] | None = None,
    groups=None,
    masks=None,
    reweight=None,
) -> BootstrapResult:
    """Paired percentile bootstrap of every (signal, metric) of one setting, all on the same resampled items.

    Parameters
    ----------
    confidence : ndarray of shape (S, n)
        One confidence row per signal, aligned on the same ``n`` items.
    correct : ndarray of shape (S, n) or (n,)
    seed : int
        Non-negative; see :func:`setting_seed`.
    chunk_size : int, default=1000
        Rows per chunk (memory: a small multiple of ``chunk_size * n * 8`` bytes). The resamples are fixed by
        ``(n, n_resamples, seed, chunk_size)`` (module docstring); another ``chunk_size`` changes the draws, not their
        distribution.
    signal_names : list of str, optional
    groups : array-like of shape (n,), optional
        A cluster label per item (any hashable): each resample draws ``G`` of the ``G`` distinct clusters with
        replacement (``chunk_indices(G, ...)``) and keeps all their rows, weighted by the cluster's multiplicity
        (analysis/clusters.py). None: the row-level draw.
    masks : array-like of bool, shape (S, n), optional
        Each signal's *support*, the items it is evaluated on (values outside are ignored, may be NaN): the shared
        resamples over all ``n`` items count only its drawn items (a resample with none is ``nan``), so signals on
        different items stay paired (analysis/fused.py). None: every signal on every item.
    reweight : sequence of Reweight or None, optional
        ``S`` entries: a :class:`~confgrid.analysis.reweighting.Reweight` makes that signal distribution-aligned
        (study 001, section 4.2; analysis/reweighting.py): its ECE, Brier and signed gap use the weights re-estimated
        on every resample, its other metrics are ``nan``. None: counts only.

    Returns
    -------
    BootstrapResult
        ``point`` (S, M) and ``resamples`` (S, M, n_resamples); with no rows every value is ``nan`` (with an
        :class:`UndefinedMetricWarning`). ``n_clusters`` is ``G`` with ``groups``.

    Raises
    ------
    ValueError
        Bad inputs or metric names; ``groups`` of the wrong shape or with a missing label.
    """
    metrics = _check_metrics(metrics)
    conf, corr = _stack_inputs(confidence, correct)
    S, n = conf.shape
    if signal_names is not None and len(signal_names) != S:
        raise ValueError(f"signal_names has {len(signal_names)} names for {S} signals")
    clusters = cluster_codes(groups, n) if groups is not None and n else None
    masks = _check_supports(masks, reweight, conf.shape)
    point = _point_estimates(conf, corr, metrics, n_bins, masks, reweight)  # warns on undefined
    kw = dict(
        metrics=metrics,
        signal_names=list(signal_names) if signal_names is not None else None,
        n_resamples=int(n_resamples),
        seed=int(seed),
        chunk_size=int(chunk_size),
        n_bins=int(n_bins),
        n_clusters=clusters.n_clusters if clusters is not None else None,
    )
    if n == 0:
        return BootstrapResult(point, np.full((S, len(metrics), int(n_resamples)), np.nan), **kw)
    prep = prepare(conf, corr, n_bins, masks, reweight)
    res = np.empty((S, len(metrics), int(n_resamples)))
    with one_blas_thread():
        k = n if clusters is None else clusters.n_clusters
        for c, idx in resample_indices(k, n_resamples, seed, chunk_size):
            start = c * int(chunk_size)
            res[:, :, start : start + idx.shape[0]] = evaluate_chunk(prep, metrics, idx, clusters)
    return BootstrapResult(point, res, **kw)


def resample_counts(n: int, n_resamples: int, seed: int, chunk_size: int = DEFAULT_CHUNK_SIZE,
                    groups=None) -> np.ndarray:
    """The multiplicity of each of ``n`` items in each resample that :func:`paired_bootstrap` draws with these
    arguments (row-level, or of each item's cluster with ``groups``).

    For a quantity that is not a metric of a signal but must stay paired with a unit's metrics (e.g. study 004's
    uniform-random Brier baseline): ``(W @ x) / W.sum(axis=1)`` is the resampled mean of a per-item value ``x``.

    Returns
    -------
    ndarray of shape (n_resamples, n), float64
        Exact integers; a row sums to ``n`` (row-level) or to the drawn clusters' rows. ``n == 0``: shape
        ``(n_resamples, 0)``.

    Raises
    ------
    ValueError
        Bad ``n_resamples``, ``seed`` or ``chunk_size``; ``groups`` of the wrong shape or with a missing label.
    """
    if int(n) == 0:
        return np.zeros((int(n_resamples), 0))
    clusters = cluster_codes(groups, n) if groups is not None else None
    k = n if clusters is None else clusters.n_clusters
    out = [counts_from_indices(idx, n) if clusters is None else row_counts(idx, clusters)
           for _, idx in resample_indices(k, n_resamples, seed, chunk_size)]
    return np.concatenate(out)
