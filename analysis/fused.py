"""The fused count-space evaluation of resample chunks (the engine of analysis/bootstrap.py).

Per row block of resamples, the count matrix ``W`` (b, n) is built once (``np.bincount``) and shared by every signal;
one sparse product ``W @ M`` gives every signal's binned sums (ECE, Brier, signed gap) and its counts per *segment* (a
run of equally-correct answers in the signal's fixed sorted order); AUROC and AURC need only the cumulative counts at
segment ends (exact integer arithmetic and harmonic tables; :class:`_FusedSignal`, :class:`_Prepared`). Nothing is
sorted per resample.

Supports (one paired resample, signals on different items): every signal ``s`` may be evaluated on its own subset of
the ``n`` items, its *support* (a boolean row of ``masks``), while all signals share the same resampled counts over
the ``n`` items. A resample then holds ``tot_s = W[:, support].sum(1)`` answers of signal ``s``, which varies from
resample to resample; the metrics divide by ``tot_s`` and AURC uses the tables of any total
(:func:`confgrid.analysis.clusters.total_tables`), exactly as for cluster resamples; a support of every item takes the
plain path. So a signal on 180 items and one on 150 are compared on the same resamples (the gap on the items both
have is one more support).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse
from threadpoolctl import threadpool_limits

from .clusters import Clusters, resample_rows, row_counts, total_tables, v_diff
from .kernels import SortedSignal, _block_rows, has_weighted_kernel, weighted_kernel
from .metrics import UndefinedMetricWarning, bin_indices, harmonic_numbers
from .registry import METRICS
from .reweighting import REWEIGHTABLE_METRICS, omega

__all__ = ["prepare", "evaluate_chunk", "ReweightedCell", "one_blas_thread", "FUSED_METRICS"]


#: elements per np.bincount call that builds the (rows, n) count matrix (a small cache-resident int64 scratch buffer)
_BINCOUNT_ELEMS = 1 << 15

#: metrics the fused path computes itself (every other one: kernels.weighted_kernel or the per-resample fallback)
FUSED_METRICS = frozenset({"ece", "auroc", "aurc", "brier", "calibration_gap", "overconfidence"})
_RANK_METRICS = frozenset({"auroc", "aurc"})
_LINEAR_METRICS = FUSED_METRICS - _RANK_METRICS


def one_blas_thread():
    """Context pinning BLAS to one thread (threadpoolctl), restored on exit.

    The kernels' BLAS products (``kde_ece``, ``w @ v`` sums) then give the same values whatever the cores a process
    sees (another thread count can round differently), and these small products run faster on one thread.
    """
    return threadpool_limits(limits=1, user_api="blas")


def _aurc_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``V[a]`` for ``a = 0..n`` as a float64 pair ``(hi, lo)`` with ``hi + lo ~ V``.

    ``V[a] = sum_{q=n-a}^{n-1} (H[n] - H[q])``: an error at descending position ``p`` of a resample of ``n`` answers
    counts in every ``C_k / k`` with ``k >= p``, i.e. adds ``H[n] - H[p-1]`` to ``n * AURC``; a unit of ``m`` answers
    at positions ``K+1..K+m`` (ascending cumulative counts ``A = n-K-m`` below it and ``A' = n-K`` up to it) with mean
    error ``r`` adds ``r (V[A'] - V[A])`` in expectation over the orders of its ties. Built in extended precision, so
    ``(hi[a2] - hi[a1]) + (lo[a2] - lo[a1])`` is accurate to a few ulps even where ``V[a2]`` and ``V[a1]`` nearly
    cancel.
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

    Items are ordered by ``(confidence, correct)``, so each tie group lists its wrong answers first, and the order is
    cut into *units*: a tie group with mixed correctness, or a maximal run of tie groups that each hold one
    correctness value, the same for the whole run. Inside a unit the order of the answers changes neither AUROC (ties
    count one half; two answers with the same correctness contribute the same either way) nor the expected AURC (every
    position of the unit carries the unit's mean error). A *segment* is a run of equal correctness inside a unit. A
    resample enters AUROC and AURC only through ``B``, the cumulative counts at segment ends (its counts per segment
    from the sparse product of :class:`_Prepared`, then a cumsum):

    * ``2 U = sum_u p_u (A_u + A'_u) - P**2``, ``A_u`` / ``A'_u`` the count
      below / up to unit ``u``, ``p_u`` its correct mass, ``P = sum_u p_u``;
    * ``n AURC = sum_u r_u (V[A'_u] - V[A_u])``, ``r_u`` the unit's mean error (see :func:`_aurc_table`).

    For binary correctness with no mixed tie group the units alternate wrong / correct, every quantity but ``V`` is an
    exact integer and AUROC is one correctly rounded division.
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
    """One setting's signals ready for chunk evaluation (see :func:`prepare`).

    ``M`` (n, L) is a sparse matrix with, per finite signal ``s``, the columns ``cols[s] = (e, k0)``: ``n_bins`` ECE
    columns ``(y - c) [bin == j]`` from ``e``, then ``(c - y)**2`` (Brier) and ``c - y`` (signed gap), and from ``k0``
    one 0/1 column per segment of :class:`_FusedSignal`. For a row block of counts ``W`` (b, n),
    ``(W @ M).T = M.T @ W.T`` holds every signal's binned sums and its exact per-segment counts: ``4 S`` multiply-adds
    per item and resample (scipy's sparse kernels: sequential sums, no threads, so each value depends only on its own
    column of ``M``). Stored as ``MT = M.T`` in CSR.
    """

    __slots__ = ("sigs", "fused", "n", "aurc_hi", "aurc_lo", "MT", "cols", "rows", "sorted_rows", "local",
                 "reweight", "same_as", "reweighted")

    def __init__(self, sigs: list, n: int, rows: list[np.ndarray | None], reweight: list | None,
                 same_as: list[int | None]):
        self.sigs = sigs
        self.n = int(n)
        #: each signal's :class:`~confgrid.analysis.reweighting.Reweight` (None: counts only)
        self.reweight = list(reweight) if reweight is not None else [None] * len(sigs)
        #: a signal identical to an earlier one (values, support, reweighting): that one's index (copied)
        self.same_as = same_as
        self.reweighted: list = [None] * len(sigs)  # ReweightedCell of each reweighted signal, built once
        #: each signal's support (ascending item indices), None = every item
        self.rows = rows
        self.fused = [None if (s is None or s.order.size == 0) else _FusedSignal(s) for s in sigs]
        self.aurc_hi, self.aurc_lo = _aurc_table(self.n)
        # the items of each signal in its sorted order (global indices), and global -> local for a support
        self.sorted_rows = [None if sig is None else sig.order if r is None else r[sig.order]
                            for sig, r in zip(sigs, self.rows, strict=True)]
        self.local = [None] * len(sigs)
        rows_, cols, vals = [], [], []
        self.cols: dict[int, tuple[int, int]] = {}
        width = 0
        for s, (sig, f) in enumerate(zip(sigs, self.fused)):
            if sig is None or f is None:
                continue
            m = sig.order.size
            items = np.arange(self.n) if self.rows[s] is None else self.rows[s]
            if self.rows[s] is not None:
                loc = np.full(self.n, -1, dtype=np.int64)
                loc[self.rows[s]] = np.arange(m)
                self.local[s] = loc
            c = np.empty(m)
            c[sig.order] = sig.conf
            y = np.empty(m)
            y[sig.order] = sig.correct
            e, k0 = width, width + sig.n_bins + 2
            rows_ += [items, items, items, items]
            cols += [e + bin_indices(c, sig.n_bins), np.full(m, e + sig.n_bins),
                     np.full(m, e + sig.n_bins + 1), k0 + f.seg_of_item]
            vals += [y - c, (c - y) ** 2, c - y, np.ones(m)]
            self.cols[s] = (e, k0)
            width = k0 + f.n_seg
        # stored transposed (L, n) in CSR: row j of M.T @ W.T sums its few items' count rows
        self.MT = scipy.sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(cols), np.concatenate(rows_))), shape=(width, self.n)
        ) if rows_ else None


def prepare(conf: np.ndarray, corr: np.ndarray, n_bins: int, masks=None, reweight=None) -> _Prepared:
    """One setting's signals (S, n) ready for :func:`evaluate_chunk`; ``masks`` (S, n) bool: each one's support;
    ``reweight``: per signal a :class:`~confgrid.analysis.reweighting.Reweight` or None (analysis/reweighting.py);
    both checked by the callers (analysis/bootstrap.py)."""
    # each signal's support as ascending item indices, None for every item
    rows = [None] * conf.shape[0] if masks is None else [None if m.all() else np.flatnonzero(m) for m in masks]
    seen: dict[tuple, int] = {}
    same: list[int | None] = []  # the first earlier signal with the same values, support and reweighting (copied)
    sigs: list[SortedSignal | None] = []  # None: a copy, or a non-finite value on the support
    for s, r in enumerate(rows):
        c, y = (conf[s], corr[s]) if r is None else (conf[s, r], corr[s, r])
        key = (None if r is None else r.tobytes(), c.tobytes(), y.tobytes(),
               None if reweight is None or reweight[s] is None else id(reweight[s]))
        same.append(seen.get(key))
        seen.setdefault(key, s)
        fin = bool(c.size and np.isfinite(c).all() and np.isfinite(y).all())  # no items: every value nan
        sigs.append(SortedSignal.from_arrays(c, y, n_bins) if fin and same[s] is None else None)
    return _Prepared(sigs, conf.shape[1], rows, reweight, same)


class ReweightedCell:
    """A reweighted signal ready for resample blocks (analysis/reweighting.py).

    A weight ``W[r, i] q_k(r) / p_k(r)`` is constant within an outcome stratum ``k``, so the count-weighted ECE, Brier
    and signed gap factor through per-stratum sums: with ``D[r, b, k] = sum W[r, i] (y_i - c_i)`` over the items of
    bin ``b`` and stratum ``k``, ``Q``, ``G`` and ``C`` the per-stratum sums of ``W (c - y)^2``, ``W (c - y)`` and
    ``W``, and ``w_k = q_k / p_k``: ``ECE = sum_b |sum_k w_k D[b, k]| / sum_k w_k C[k]``,
    ``Brier = sum_k w_k Q[k] / sum_k w_k C[k]``, signed gap ``sum_k w_k G[k] / sum_k w_k C[k]`` -- the kernel's own
    sums (analysis/kernels.py ``_ece_sorted`` with real weights), grouped by stratum and read off one sparse product
    ``W @ M`` per block (as the fused path reads every other signal's). Equal to the kernel with real weights to
    rounding (tests/analysis/test_reweighting.py).
    """

    def __init__(self, sig: SortedSignal, sorted_rows: np.ndarray, rw, n: int):
        self.rw = rw
        G, nb = int(rw.n_strata), sig.n_bins
        self.G, self.nb = G, nb
        k = rw.strata[sorted_rows]
        if (k < 0).any():
            raise ValueError("a reweighted signal's items need an outcome stratum (>= 0) on its whole support")
        b = bin_indices(sig.conf, nb, sig.closure)
        m = sorted_rows.size
        d = sig.correct - sig.conf
        cols = np.concatenate([b * G + k, nb * G + k, nb * G + G + k, nb * G + 2 * G + k])
        vals = np.concatenate([d, d * d, -d, np.ones(m)])
        rows = np.tile(sorted_rows, 4)
        self.MT = scipy.sparse.csr_matrix((vals, (cols, rows)), shape=(nb * G + 3 * G, int(n)))

    def values(self, W: np.ndarray, metrics) -> np.ndarray:
        """``(M, b)`` values on the resamples of ``W`` (b, n); ``nan`` for a metric outside
        :data:`~confgrid.analysis.reweighting.REWEIGHTABLE_METRICS` and on a resample without support."""
        G, nb = self.G, self.nb
        S = (self.MT @ np.ascontiguousarray(W.T)).T  # (b, L)
        om = omega(W, self.rw)
        D = S[:, : nb * G].reshape(-1, nb, G)
        Q, Gp, C = (S[:, nb * G + j * G : nb * G + (j + 1) * G] for j in range(3))
        out = np.full((len(metrics), W.shape[0]), np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            tot = (C * om).sum(axis=1)
            ok = np.isfinite(tot) & (tot > 0)
            den = np.where(ok, tot, 1.0)
            for j, name in enumerate(metrics):
                if name not in REWEIGHTABLE_METRICS:
                    continue
                if name == "ece":
                    num = np.abs((D * om[:, None, :]).sum(axis=2)).sum(axis=1)
                elif name == "brier":
                    num = (Q * om).sum(axis=1)
                else:  # calibration_gap, overconfidence: mean of c - y
                    num = (Gp * om).sum(axis=1)
                out[j] = np.where(ok, num / den, np.nan)
        return out


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

    ``seg_counts`` (n_seg, b): the resamples' counts per segment (float64 holding exact integers; every column sums to
    ``n``, or to ``tot`` (b,), the row counts of cluster resamples, whose AURC uses ``V_T`` of :func:`clusters.v_diff`
    with ``tables``). Arrays are laid out segment-major, so every step is vectorized over the resamples.
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


def evaluate_chunk(prep: _Prepared, metrics, idx_chunk, clusters: Clusters | None = None) -> np.ndarray:
    """``(S, M, b)`` values of one chunk; ``idx_chunk`` (b, n) in range (checked by the callers).

    With ``clusters``, ``idx_chunk`` (b, G) holds drawn clusters: each row weighs its cluster's multiplicity and a
    resample has ``tot`` rows (varying), which the fused metrics use in place of ``n``. A signal with a support (see
    the module docstring) counts only its items: its resample size ``tot_s`` varies too, and a resample without any of
    its items is ``nan``. Call inside :func:`one_blas_thread` (the callers do).
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
    kernel = [name for name in metrics if name not in FUSED_METRICS and has_weighted_kernel(name)]
    kernels = {name: weighted_kernel(name) for name in kernel}
    varying = clusters is not None or any(r is not None for r in prep.rows)
    tables = None  # AURC of resamples of varying size: tables of any total up to the chunk's largest
    if varying and "aurc" in rank:
        t_max = n if clusters is None else max(n, int(clusters.sizes[idx_chunk].sum(axis=1).max()))
        tables = total_tables(t_max)
    H = harmonic_numbers(n) if kernel and clusters is None else None
    slow = [name for name in metrics if name not in FUSED_METRICS and not has_weighted_kernel(name)]
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
            W, tot = _counts_block(blk, n, buf), None
        else:
            W = row_counts(blk, clusters, buf)
            tot = W.sum(axis=1)  # exact integer row counts of the resamples
            H = harmonic_numbers(int(tot.max())) if kernel else None
        picks = (blk if clusters is None else resample_rows(blk, clusters)) if slow else None
        # (L, b) = M.T @ W.T: sparse rows times the contiguous count columns, see _Prepared
        E = prep.MT @ np.ascontiguousarray(W.T) if (need_e and prep.MT is not None) else None
        for s, sig in enumerate(sigs):
            if sig is None:
                continue
            if prep.reweight[s] is not None:  # distribution-aligned: the kernel's sums, grouped by stratum
                if prep.reweighted[s] is None:
                    prep.reweighted[s] = ReweightedCell(sig, prep.sorted_rows[s], prep.reweight[s], n)
                out[s, :, rows] = prep.reweighted[s].values(W, metrics)
                continue
            support = prep.rows[s]
            tot_s = tot if support is None else W[:, support].sum(axis=1)  # exact integers
            div = n if tot_s is None else tot_s
            if need_e:
                e, k0 = prep.cols[s]
                nb = sig.n_bins
            with np.errstate(invalid="ignore", divide="ignore"):
                if linear:
                    if ece_j is not None:
                        out[s, ece_j, rows] = np.abs(E[e : e + nb]).sum(axis=0) / div
                    if brier_j is not None:
                        out[s, brier_j, rows] = E[e + nb] / div
                    for j in gap_j:
                        out[s, j, rows] = E[e + nb + 1] / div
                if rank:
                    f = prep.fused[s]
                    for name, v in _rank_block(f, prep, E[k0 : k0 + f.n_seg], rank, tot_s, tables).items():
                        out[s, col[name], rows] = v
            if tot_s is not None and support is not None:  # a resample without this signal's items
                empty = np.flatnonzero(tot_s == 0)
                if empty.size:
                    out[s, :, lo + empty] = np.nan
            if kernel:
                ws = W[:, prep.sorted_rows[s]]
                Hs = H if support is None else harmonic_numbers(int(tot_s.max()) if tot_s.size else 0)
                for name in kernel:
                    out[s, col[name], rows] = kernels[name](sig, ws, Hs)
            for name in slow:
                sel = picks if support is None else [p[p >= 0] for p in (prep.local[s][r] for r in picks)]
                out[s, col[name], rows] = _fallback_rows(sig, name, sel)
    for s, first in enumerate(prep.same_as):  # identical signals: the same values, computed once
        if first is not None:
            out[s] = out[first]
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
