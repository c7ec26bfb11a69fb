"""Vectorized paired bootstrap over items (study 000, Appendix A).

Per setting (one model x one dataset) there are ``S`` signals, all scored on
the same ``n`` items (aligned rows). One matrix of resampled item indices of
shape ``(B, n)`` is shared by every signal and metric, so differences
between signals are paired.

Resamples are drawn in fixed chunks of ``chunk_size`` rows; chunk ``c`` comes
from ``np.random.default_rng(np.random.SeedSequence([seed, c]))`` as
``rng.integers(0, n, size=(rows_in_chunk, n))``. The numbers therefore do
not depend on how many workers process the chunks or in which order.

The weighted kernels take a count matrix ``w`` of shape ``(b, n)`` (how many
times each item occurs in each resample) and evaluate a metric on all ``b``
resamples at once without a Python loop over resamples: items are sorted by
confidence once per signal, tie groups and ECE bins become contiguous blocks
and are summed with ``np.add.reduceat``; every kernel is ``O(b * n)``
(except ``kde_ece``: ``O(b * G^2)`` matrix products over the ``G`` distinct
confidences). Metrics without a kernel (``smoothed_ece``, ``smece``, whose
bandwidth depends on the resample) fall back to calling the point function
on each resample's rows, one Python call per resample: exact but much
slower (see :func:`has_weighted_kernel`).

The bootstrap itself (:func:`paired_bootstrap`, :func:`bootstrap_chunk`,
:func:`bootstrap_chunks`) evaluates ECE, AUROC, AURC, Brier and the signed
gap on a fused path with the same values (to rounding, ~1e-14): per row
block, the count matrix ``w`` is built once (``np.bincount``) and shared by
all signals; one sparse product ``w @ M`` (``4 S`` multiply-adds per item
and resample) gives every signal's binned sums (ECE, Brier, gap) and its
counts per *segment*, a run of equally-correct answers in the signal's fixed
sorted order; AUROC and AURC need only the cumulative counts at segment
ends (exact integer arithmetic and a precomputed harmonic table; see
:class:`_FusedSignal` and :class:`_Prepared`). Nothing is sorted per
resample. The resamples of a chunk are processed in row blocks of about
``2**17 / n`` rows (vectorized within a block) so the working arrays stay in
cache and memory stays bounded by a small multiple of ``chunk_size * n * 8``
bytes.

With ``groups`` (a cluster label per item) the same chunks draw ``G``
cluster indices instead of ``n`` item indices and every row of a drawn
cluster weighs its cluster's multiplicity (analysis/clusters.py).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# the count-weighted kernels (analysis/kernels.py), importable from here as before
from .kernels import (  # noqa: F401
    WEIGHTED_KERNELS,
    SortedSignal,
    _block_rows,
    aurc_weighted,
    auroc_weighted,
    brier_weighted,
    calibration_gap_weighted,
    ece_equal_mass_weighted,
    ece_weighted,
    has_weighted_kernel,
    kde_ece_weighted,
    ks_ece_weighted,
)
from .resampling import (  # noqa: F401 - importable from here as before
    DEFAULT_CHUNK_SIZE,
    chunk_indices,
    counts_from_indices,
    n_chunks,
    resample_indices,
    setting_seed,
)
from .clusters import Clusters, cluster_codes, resample_rows, row_counts, total_tables, v_diff
from .metrics import UndefinedMetricWarning, bin_indices, harmonic_numbers, validate_inputs
from .registry import METRICS, get_metric

__all__ = [
    "setting_seed",
    "chunk_indices",
    "resample_indices",
    "counts_from_indices",
    "bootstrap_chunk",
    "bootstrap_chunks",
    "BootstrapResult",
    "paired_bootstrap",
    "interval",
    "n_undefined",
    "mean_over_settings",
    "n_chunks",
    "DEFAULT_CHUNK_SIZE",
    "UndefinedMetricWarning",
]



# ---------------------------------------------------------------------------
# chunk and full bootstrap
# ---------------------------------------------------------------------------


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


def _finite_signals(conf: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return np.isfinite(conf).all(axis=1) & np.isfinite(corr).all(axis=1)


def _prepare_signals(conf, corr, n_bins) -> list[SortedSignal | None]:
    fin = _finite_signals(conf, corr)
    return [
        SortedSignal.from_arrays(conf[s], corr[s], n_bins) if fin[s] else None
        for s in range(conf.shape[0])
    ]



#: elements per np.bincount call that builds the (rows, n) count matrix: the
#: int64 bincount output stays a small cache-resident scratch buffer
_BINCOUNT_ELEMS = 1 << 15

#: metrics the fused count-space path of the chunk evaluator computes itself
#: (every other metric goes through WEIGHTED_KERNELS or the per-resample fallback)
_FUSED_METRICS = frozenset({"ece", "auroc", "aurc", "brier", "calibration_gap", "overconfidence"})
_RANK_METRICS = frozenset({"auroc", "aurc"})
_LINEAR_METRICS = _FUSED_METRICS - _RANK_METRICS


def _one_blas_thread():
    """Context pinning BLAS to one thread (threadpoolctl), restored on exit.

    The weighted kernels some metrics fall back to (``kde_ece``'s matrix
    products, ``w @ v`` sums) call BLAS; one thread everywhere (in process and
    in every Ray task) makes their values independent of how many cores a
    process sees (a BLAS product can round differently with another thread
    count), and on a shared machine a multi-threaded BLAS on these small
    products is many times slower than one thread.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn depends on threadpoolctl
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _aurc_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``V[a]`` for ``a = 0..n`` as a float64 pair ``(hi, lo)`` with ``hi + lo ~ V``.

    ``V[a] = sum_{q=n-a}^{n-1} (H[n] - H[q])``: an error at descending
    position ``p`` of a resample of ``n`` answers counts in every ``C_k / k``
    with ``k >= p``, i.e. adds ``H[n] - H[p-1]`` to ``n * AURC``; a unit of
    ``m`` answers at positions ``K+1..K+m`` (ascending cumulative counts
    ``A = n-K-m`` below it and ``A' = n-K`` up to it) with mean error ``r``
    adds ``r (V[A'] - V[A])`` in expectation over the orders of its ties.
    Built in extended precision, so ``(hi[a2] - hi[a1]) + (lo[a2] - lo[a1])``
    is accurate to a few ulps even where ``V[a2]`` and ``V[a1]`` nearly cancel.
    """
    inv = 1.0 / np.arange(int(n), 0, -1, dtype=np.longdouble)  # 1/n, 1/(n-1), .., 1
    d = np.cumsum(inv)  # H[n] - H[q] for q = n-1, n-2, .., 0
    v = np.zeros(int(n) + 1, dtype=np.longdouble)
    np.cumsum(d, out=v[1:])
    hi = v.astype(np.float64)
    lo = (v - hi.astype(np.longdouble)).astype(np.float64)
    return hi, lo


class _FusedSignal:
    """Per-signal constants of the fused path (built once per setting).

    Items are ordered by ``(confidence, correct)``, so each tie group lists
    its wrong answers first, and the order is cut into *units*: a tie group
    with mixed correctness, or a maximal run of tie groups that each hold one
    correctness value, the same for the whole run. Inside a unit the order of
    the answers changes neither AUROC (ties count one half; two answers with
    the same correctness contribute the same either way) nor the expected
    AURC (every position of the unit carries the unit's mean error). A
    *segment* is a run of equal correctness inside a unit. A resample enters
    AUROC and AURC only through ``B``, the cumulative counts at segment ends
    (its counts per segment from the sparse product of :class:`_Prepared`,
    then a cumsum):

    * ``2 U = sum_u p_u (A_u + A'_u) - P**2``, ``A_u`` / ``A'_u`` the count
      below / up to unit ``u``, ``p_u`` its correct mass, ``P = sum_u p_u``;
    * ``n AURC = sum_u r_u (V[A'_u] - V[A_u])``, ``r_u`` the unit's mean error
      (see :func:`_aurc_table`).

    For binary correctness with no mixed tie group the units alternate
    wrong / correct, every quantity but ``V`` is an exact integer and AUROC is
    one correctly rounded division.
    """

    __slots__ = ("seg_of_item", "n_seg", "unit_lo", "unit_hi", "seg_unit_start", "y_seg", "y_unit",
                 "single", "binary", "k_pos", "k_neg", "n_units")

    def __init__(self, sig: SortedSignal):
        c0, y0 = sig.conf, sig.correct
        n = c0.size
        sub = np.lexsort((y0, c0))  # by confidence, then correctness (c0 is sorted already)
        c, y = c0[sub], y0[sub]
        new_tie = np.r_[True, c[1:] != c[:-1]]
        gstart = np.flatnonzero(new_tie)
        pure = (np.minimum.reduceat(y, gstart) == np.maximum.reduceat(y, gstart))[np.cumsum(new_tie) - 1]
        y_change = np.r_[True, y[1:] != y[:-1]]
        new_unit = (new_tie & ~(pure & np.r_[True, pure[:-1]])) | (new_tie & y_change)
        new_unit[0] = True
        new_seg = new_unit | y_change
        seg_start = np.flatnonzero(new_seg)
        self.n_seg = seg_start.size
        seg_sorted = np.cumsum(new_seg) - 1
        self.seg_of_item = np.empty(n, dtype=np.int64)
        self.seg_of_item[sig.order[sub]] = seg_sorted
        unit_first_seg = np.flatnonzero(new_unit[seg_start])
        # columns of B = [0, cumulative count at each segment end]: unit u spans columns (lo, hi]
        self.unit_lo = unit_first_seg
        self.unit_hi = np.r_[unit_first_seg[1:], seg_start.size]
        self.n_units = unit_first_seg.size
        self.seg_unit_start = unit_first_seg
        self.y_seg = y[seg_start]
        self.single = unit_first_seg.size == seg_start.size  # one segment per unit
        self.y_unit = self.y_seg[unit_first_seg]
        self.binary = bool(np.all((y == 0.0) | (y == 1.0)))
        # single + binary: units alternate, the correct ones start at k_pos, the wrong ones at k_neg
        first = int(self.y_unit[0] == 1.0) if n else 0
        self.k_pos, self.k_neg = (0, 1) if first else (1, 0)


class _Prepared:
    """One setting's signals ready for chunk evaluation (see :func:`_prepare`).

    ``M`` (n, L) is a sparse matrix with, per finite signal ``s``, the
    columns ``cols[s] = (e, k0)``: ``n_bins`` ECE columns ``(y - c) [bin == j]``
    from ``e``, then ``(c - y)**2`` (Brier) and ``c - y`` (signed gap), and
    from ``k0`` one 0/1 column per segment of :class:`_FusedSignal`. For a row
    block of counts ``W`` (b, n), ``(W @ M).T = M.T @ W.T`` holds every
    signal's binned sums and its exact per-segment counts: ``4 S``
    multiply-adds per item and resample (scipy's sparse kernels: sequential
    sums, no threads, so each value depends only on its own column of ``M``).
    Stored as ``MT = M.T`` in CSR.
    """

    __slots__ = ("sigs", "fused", "n", "aurc_hi", "aurc_lo", "MT", "cols")

    def __init__(self, sigs: list, n: int, n_bins: int):
        import scipy.sparse

        self.sigs = sigs
        self.n = int(n)
        self.fused = [None if (s is None or self.n == 0) else _FusedSignal(s) for s in sigs]
        self.aurc_hi, self.aurc_lo = _aurc_table(self.n)
        rows, cols, vals = [], [], []
        self.cols: dict[int, tuple[int, int]] = {}
        items = np.arange(self.n)
        width = 0
        for s, (sig, f) in enumerate(zip(sigs, self.fused)):
            if sig is None or f is None:
                continue
            c = np.empty(self.n)
            c[sig.order] = sig.conf
            y = np.empty(self.n)
            y[sig.order] = sig.correct
            e, k0 = width, width + sig.n_bins + 2
            rows += [items, items, items, items]
            cols += [e + bin_indices(c, sig.n_bins), np.full(self.n, e + sig.n_bins),
                     np.full(self.n, e + sig.n_bins + 1), k0 + f.seg_of_item]
            vals += [y - c, (c - y) ** 2, c - y, np.ones(self.n)]
            self.cols[s] = (e, k0)
            width = k0 + f.n_seg
        # stored transposed (L, n) in CSR: row j of M.T @ W.T sums its few items' count rows
        self.MT = scipy.sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(cols), np.concatenate(rows))), shape=(width, self.n)
        ) if rows else None


def _prepare(conf: np.ndarray, corr: np.ndarray, n_bins: int) -> _Prepared:
    return _Prepared(_prepare_signals(conf, corr, n_bins), conf.shape[1], n_bins)


def _counts_block(idx: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """Counts of ``idx`` (b, n) into ``out[:b]`` (float64): one bincount per small row group."""
    b = idx.shape[0]
    step = max(1, _BINCOUNT_ELEMS // max(n, 1))
    offs = np.arange(step, dtype=np.int64)[:, None] * n
    for lo in range(0, b, step):
        part = idx[lo : lo + step]
        r = part.shape[0]
        flat = np.add(part, offs[:r], dtype=np.int64).ravel()
        out[lo : lo + r] = np.bincount(flat, minlength=r * n).reshape(r, n)
    return out[:b]


def _rank_block(f: _FusedSignal, P: _Prepared, seg_counts: np.ndarray, names, tot=None,
                tables=None) -> dict[str, np.ndarray]:
    """AUROC / AURC of one signal on a block of ``b`` resamples.

    ``seg_counts`` (n_seg, b): the resamples' counts per segment (float64
    holding exact integers; every column sums to ``n``, or to ``tot`` (b,),
    the row counts of cluster resamples, whose AURC uses ``V_T`` of
    :func:`clusters.v_diff` with ``tables``). Arrays are laid out
    segment-major, so every step is vectorized over the resamples.
    """
    k, b = seg_counts.shape
    n = P.n if tot is None else tot
    Bt = np.empty((b, k + 1), dtype=np.int64)  # (the cumsum is fastest along contiguous rows)
    Bt[:, 0] = 0
    Bt[:, 1:] = seg_counts.T
    np.cumsum(Bt[:, 1:], axis=1, out=Bt[:, 1:])
    B = Bt.T  # B[j] = count in segments < j (exact integers), shape (k + 1, b)
    res: dict[str, np.ndarray] = {}
    hi_t, lo_t = P.aurc_hi, P.aurc_lo
    U = f.n_units
    if f.binary and f.single:  # alternating units, exact integers
        if "auroc" in names:
            lp, hp = B[f.k_pos : U : 2], B[f.k_pos + 1 : U + 1 : 2]
            Pc = (hp - lp).sum(axis=0)
            num = ((hp * hp - lp * lp).sum(axis=0) - Pc * Pc).astype(np.float64)
            Pf = Pc.astype(np.float64)
        if "aurc" in names:
            a, z = slice(f.k_neg, U, 2), slice(f.k_neg + 1, U + 1, 2)
            if tot is None:
                vh, vl = np.take(hi_t, B), np.take(lo_t, B)
                dv = (vh[z] - vh[a]) + (vl[z] - vl[a])
            else:
                dv = v_diff(tables, B[a], B[z], tot)
            res["aurc"] = dv.sum(axis=0) / n
    else:
        lo_c, hi_c = B[f.unit_lo], B[f.unit_hi]  # count below / up to each unit
        p_seg = np.diff(B, axis=0) * f.y_seg[:, None]
        p_u = p_seg if f.single else np.add.reduceat(p_seg, f.seg_unit_start, axis=0)
        if "auroc" in names:
            Pf = p_u.sum(axis=0)
            num = (p_u * (lo_c + hi_c)).sum(axis=0) - Pf * Pf
        if "aurc" in names:
            dv = ((np.take(hi_t, hi_c) - np.take(hi_t, lo_c)) + (np.take(lo_t, hi_c) - np.take(lo_t, lo_c))
                  if tot is None else v_diff(tables, lo_c, hi_c, tot))
            m_u = (hi_c - lo_c).astype(np.float64)
            r_u = (m_u - p_u) / np.maximum(m_u, 1.0)  # mean error of the unit (0 when empty)
            res["aurc"] = (r_u * dv).sum(axis=0) / n
    if "auroc" in names:
        Nf = n - Pf
        ok = (Pf > 0) & (Nf > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            res["auroc"] = np.where(ok, num / np.where(ok, 2.0 * Pf * Nf, 1.0), np.nan)
    return res


def _chunk_from_prepared(prep: _Prepared, metrics, idx_chunk, clusters: Clusters | None = None) -> np.ndarray:
    """``(S, M, b)`` values of one chunk; ``idx_chunk`` (b, n) in range (checked by the callers).

    With ``clusters``, ``idx_chunk`` (b, G) holds drawn clusters: each row
    weighs its cluster's multiplicity and a resample has ``tot`` rows
    (varying), which the fused metrics use in place of ``n``.
    Call inside :func:`_one_blas_thread` (the callers do).
    """
    idx_chunk = np.asarray(idx_chunk)
    b = idx_chunk.shape[0]
    n = prep.n
    sigs = prep.sigs
    out = np.full((len(sigs), len(metrics), b), np.nan)
    if n == 0:  # no rows: every metric is undefined on every resample
        return out
    rank = [name for name in metrics if name in _RANK_METRICS]
    linear = [name for name in metrics if name in _LINEAR_METRICS]
    kernel = [name for name in metrics if name not in _FUSED_METRICS and name in WEIGHTED_KERNELS]
    tables = None  # AURC of cluster resamples: harmonic tables up to the chunk's largest resample
    if clusters is not None and "aurc" in rank:
        tables = total_tables(int(clusters.sizes[idx_chunk].sum(axis=1).max()))
    H = harmonic_numbers(n) if kernel and clusters is None else None
    slow = [name for name in metrics if name not in _FUSED_METRICS and name not in WEIGHTED_KERNELS]
    col = {name: j for j, name in enumerate(metrics)}
    step = _block_rows(n)
    need_e = bool(linear or rank)
    buf = np.empty((min(step, b), n))
    ece_j, brier_j = col.get("ece"), col.get("brier")
    gap_j = [col[name] for name in ("calibration_gap", "overconfidence") if name in col]
    # vectorized over the resamples of each block; blocks only bound the working set
    for lo in range(0, b, step):
        blk = idx_chunk[lo : lo + step]
        rows = slice(lo, lo + blk.shape[0])
        if clusters is None:
            W, tot, div = _counts_block(blk, n, buf), None, n
        else:
            W = row_counts(blk, clusters, buf)
            tot = div = W.sum(axis=1)  # exact integer row counts of the resamples
            H = harmonic_numbers(int(tot.max())) if kernel else None
        picks = (blk if clusters is None else resample_rows(blk, clusters)) if slow else None
        # (L, b) = M.T @ W.T: sparse rows times the contiguous count columns, see _Prepared
        E = prep.MT @ np.ascontiguousarray(W.T) if (need_e and prep.MT is not None) else None
        for s, sig in enumerate(sigs):
            if sig is None:
                continue
            if need_e:
                e, k0 = prep.cols[s]
                nb = sig.n_bins
            if linear:
                if ece_j is not None:
                    out[s, ece_j, rows] = np.abs(E[e : e + nb]).sum(axis=0) / div
                if brier_j is not None:
                    out[s, brier_j, rows] = E[e + nb] / div
                for j in gap_j:
                    out[s, j, rows] = E[e + nb + 1] / div
            if rank:
                f = prep.fused[s]
                for name, v in _rank_block(f, prep, E[k0 : k0 + f.n_seg], rank, tot, tables).items():
                    out[s, col[name], rows] = v
            if kernel:
                ws = W[:, sig.order]
                for name in kernel:
                    out[s, col[name], rows] = WEIGHTED_KERNELS[name](sig, ws, H)
            for name in slow:
                out[s, col[name], rows] = _fallback_rows(sig, name, picks)
    return out


def _fallback_rows(sig: SortedSignal, name: str, idx) -> np.ndarray:
    """Slow path: the point function on each resample's rows (``idx``: one index array per resample)."""
    info = METRICS.get(name)
    kw = {"n_bins": sig.n_bins} if info.takes_n_bins else {}
    conf = np.empty_like(sig.conf)
    conf[sig.order] = sig.conf
    corr = np.empty_like(sig.correct)
    corr[sig.order] = sig.correct
    out = np.empty(len(idx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for r, rows in enumerate(idx):
            out[r] = info.func(conf[rows], corr[rows], **kw)
    return out


def bootstrap_chunk(confidence, correct, metrics: Sequence[str], idx_chunk, n_bins: int = 10,
                    groups=None) -> np.ndarray:
    """Evaluate every (signal, metric) on one chunk of resamples.

    Parameters
    ----------
    confidence : ndarray of shape (S, n)
        One confidence row per signal, aligned on the same ``n`` items.
    correct : ndarray of shape (S, n) or (n,)
        Correctness per signal, or one vector shared by all signals.
    metrics : list of str
        Names from :data:`registry.METRICS` (``"ece"``, ``"auroc"``,
        ``"aurc"``, ``"brier"``).
    idx_chunk : ndarray of shape (b, n), int
        Resampled item indices (one row per resample), e.g. from
        :func:`chunk_indices`; with ``groups``, shape (b, G): drawn cluster
        indices in ``[0, G)`` (cluster order of :func:`clusters.cluster_codes`).
    n_bins : int, default=10
        ECE bins.
    groups : array-like of shape (n,), optional
        A cluster label per item (see :func:`paired_bootstrap`).

    Returns
    -------
    ndarray of shape (S, M, b), float64
        ``nan`` where a metric is undefined on a resample, and for the whole
        row of a signal with non-finite inputs.
    """
    metrics = _check_metrics(metrics)
    conf, corr = _stack_inputs(confidence, correct)
    idx_chunk = np.asarray(idx_chunk)
    n = conf.shape[1]
    clusters = cluster_codes(groups, n) if groups is not None else None
    k = n if clusters is None else clusters.n_clusters
    if idx_chunk.ndim != 2 or idx_chunk.shape[1] != k:
        raise ValueError(f"idx_chunk must have shape (b, {k}), got {idx_chunk.shape}")
    if idx_chunk.size and (idx_chunk.min() < 0 or idx_chunk.max() >= k):
        raise ValueError(f"indices must lie in [0, {k})")
    with _one_blas_thread():
        return _chunk_from_prepared(_prepare(conf, corr, n_bins), metrics, idx_chunk, clusters)


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
) -> list[np.ndarray]:
    """Evaluate several resample chunks of one setting (the unit of work of a worker).

    Each chunk's index matrix is regenerated with :func:`chunk_indices`
    (seeded by ``SeedSequence([seed, chunk])``) and evaluated by the same code
    as :func:`paired_bootstrap`, so the values are bit-identical to the
    corresponding slice of ``paired_bootstrap(...).resamples`` whichever
    worker computes them and however chunks are grouped. The signals are
    sorted and prepared once for all the chunks.

    Parameters
    ----------
    confidence : ndarray of shape (S, n), n >= 1
    correct : ndarray of shape (S, n) or (n,)
    metrics : list of str
    n_resamples, seed, chunk_size, n_bins : int
        As in :func:`paired_bootstrap`.
    chunks : sequence of int
        Chunk indices in ``[0, n_chunks(n_resamples, chunk_size))``.
    groups : array-like of shape (n,), optional
        A cluster label per item, as in :func:`paired_bootstrap` (the chunk
        then draws ``chunk_indices(G, ...)`` cluster indices).

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
    prep = _prepare(conf, corr, n_bins)
    out = []
    with _one_blas_thread():
        for c in chunks:
            idx = chunk_indices(k, n_resamples, seed, int(c), chunk_size)
            out.append(_chunk_from_prepared(prep, metrics, idx, clusters))
    return out


def n_undefined(values: np.ndarray) -> np.ndarray:
    """Number of ``nan`` resamples along the last axis."""
    return np.isnan(np.asarray(values, dtype=np.float64)).sum(axis=-1)


def interval(values, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the resample axis (last axis).

    ``np.nanpercentile`` at ``(1 - level)/2`` and ``(1 + level)/2`` (2.5 and
    97.5 for ``level=0.95``), linear method; undefined (``nan``) resamples are
    ignored (count them with :func:`n_undefined`); an all-``nan`` slice gives
    ``nan``.

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
    n_resamples, seed, chunk_size, n_bins : int
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

    def metric_index(self, name: str) -> int:
        try:
            return self.metrics.index(name)
        except ValueError:
            raise ValueError(f"metric {name!r} not in this result; have {self.metrics}") from None

    def signal_index(self, name: str, signal_names: Sequence[str] | None = None) -> int:
        names = list(signal_names if signal_names is not None else (self.signal_names or []))
        if len(names) != self.point.shape[0]:
            raise ValueError(
                f"need {self.point.shape[0]} signal names, got {len(names)}: {names}"
            )
        try:
            return names.index(name)
        except ValueError:
            raise ValueError(f"signal {name!r} not found; have {names}") from None


def _point_estimates(conf, corr, metrics, n_bins) -> np.ndarray:
    S = conf.shape[0]
    point = np.full((S, len(metrics)), np.nan)
    for s in range(S):
        for j, name in enumerate(metrics):
            info = METRICS.get(name)
            kw = {"n_bins": n_bins} if info.takes_n_bins else {}
            point[s, j] = info.func(conf[s], corr[s], **kw)
    return point


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
) -> BootstrapResult:
    """Paired percentile bootstrap of every (signal, metric) of one setting.

    Every signal and metric is recomputed on the same resampled items, so
    differences between signals can be taken per resample.

    Parameters
    ----------
    confidence : ndarray of shape (S, n)
        One confidence row per signal, aligned on the same ``n`` items.
    correct : ndarray of shape (S, n) or (n,)
    metrics : list of str
    n_resamples : int, default=10_000
    seed : int
        Non-negative; see :func:`setting_seed`.
    chunk_size : int, default=1000
        Rows per chunk; memory is bounded by a small multiple of
        ``chunk_size * n * 8`` bytes. Chunk ``c`` is seeded with
        ``SeedSequence([seed, c])``, so the resamples are fixed by
        ``(n, n_resamples, seed, chunk_size)``; changing ``chunk_size`` changes
        the draws (not their distribution).
    n_bins : int, default=10
    signal_names : list of str, optional
        Stored on the result for :mod:`confgrid.analysis.compare`.
    groups : array-like of shape (n,), optional
        A cluster label per item (ints, strings, any hashable); given, the
        bootstrap resamples clusters (analysis/clusters.py): each resample
        draws ``G`` of the ``G`` distinct clusters with replacement (chunk
        ``c``: ``chunk_indices(G, ...)``, seeded as above) and keeps all their
        rows, each row weighted by its cluster's multiplicity. None (default):
        the row-level draw, unchanged.

    Returns
    -------
    BootstrapResult
        ``point`` (S, M) and ``resamples`` (S, M, n_resamples); with no rows
        every value is ``nan`` (with an :class:`UndefinedMetricWarning`).
        ``n_clusters`` is ``G`` with ``groups``.

    Raises
    ------
    ValueError
        Bad inputs or metric names; ``groups`` of the wrong shape or with a
        missing label.
    """
    metrics = _check_metrics(metrics)
    conf, corr = _stack_inputs(confidence, correct)
    S, n = conf.shape
    if signal_names is not None and len(signal_names) != S:
        raise ValueError(f"signal_names has {len(signal_names)} names for {S} signals")
    clusters = cluster_codes(groups, n) if groups is not None and n else None
    point = _point_estimates(conf, corr, metrics, n_bins)  # warns on undefined
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
    prep = _prepare(conf, corr, n_bins)
    res = np.empty((S, len(metrics), int(n_resamples)))
    with _one_blas_thread():
        k = n if clusters is None else clusters.n_clusters
        for c, idx in resample_indices(k, n_resamples, seed, chunk_size):
            start = c * int(chunk_size)
            res[:, :, start : start + idx.shape[0]] = _chunk_from_prepared(prep, metrics, idx, clusters)
    return BootstrapResult(point, res, **kw)


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
