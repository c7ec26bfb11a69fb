"""Count-weighted metric kernels: every metric of a signal evaluated for many resamples at once.

A resample is a vector of counts (how often each item was drawn); a kernel takes a :class:`SortedSignal` (the items
sorted once by confidence, tie groups and ECE bins as contiguous blocks) and a ``(b, n)`` count matrix and returns the
``b`` metric values, with the same binning, tie and edge rules as the point functions of analysis/metrics.py and
analysis/estimators.py (the tests check each kernel against them on row-duplicated data). Used by the bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .binning import Binning, debiased_terms
from .estimators import KDE_BANDWIDTH, equal_mass_group_bins, kde_group_values
from .metrics import aurc_tie_groups, bin_indices, check_closure, harmonic_numbers, validate_inputs
from .registry import get_metric

__all__ = [
    "SortedSignal",
    "ece_weighted",
    "brier_weighted",
    "WEIGHTED_KERNELS",
    "has_weighted_kernel",
    "weighted_kernel",
]


# --- weighted kernels ---


#: target elements per (rows, n) work array of the fused path: row blocks this
#: size keep the working set (index block, counts, sparse product) in the
#: per-core L2 cache
_BLOCK_ELEMS = 1 << 17


def _block_rows(n: int) -> int:
    return max(1, _BLOCK_ELEMS // max(int(n), 1))


@dataclass(frozen=True)
class SortedSignal:
    """One signal with its items sorted once by ascending confidence.

    Tie groups (equal confidence) and ECE bins are contiguous blocks of the sorted order; ``tie_starts`` /
    ``bin_starts`` are their first positions. ``closure`` is the bin closure of ``bin_starts``
    (:data:`metrics.CLOSURES`); the bins of other counts or closures are computed once per signal and kept
    (:meth:`with_bins`).
    """

    order: np.ndarray  # (n,) permutation: sorted position -> item
    conf: np.ndarray  # (n,) sorted confidence
    correct: np.ndarray  # (n,) sorted correctness
    tie_starts: np.ndarray  # (G,) start of each tie group, ascending confidence
    bin_starts: np.ndarray  # start of each non-empty ECE bin
    n_bins: int
    closure: str = "left"
    _rebinned: dict = field(default_factory=dict, compare=False, repr=False)
    bin_mid: np.ndarray | None = None  # (len(bin_starts),) midpoint of each non-empty bin (with_binning)

    @classmethod
    def from_arrays(cls, confidence, correct, n_bins: int = 10, closure: str = "left") -> "SortedSignal":
        """Sort ``confidence`` (n,) once (stable), with ``correct`` (n,) alongside, tie groups and the ECE bins of
        ``n_bins`` under ``closure``; ValueError on non-finite or out-of-range values."""
        c, y = validate_inputs(confidence, correct)
        if not (np.isfinite(c).all() and np.isfinite(y).all()):
            raise ValueError("SortedSignal needs finite confidence and correct")
        order = np.argsort(c, kind="stable")
        cs, ys = c[order], y[order]
        n = cs.size
        if n:
            tie_starts = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]])
            bins = bin_indices(cs, n_bins, closure)
            bin_starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
        else:
            check_closure(closure)
            tie_starts = bin_starts = np.zeros(0, dtype=np.int64)
        return cls(order, cs, ys, tie_starts, bin_starts, int(n_bins), closure)

    def sort_weights(self, w, integer: bool = True) -> np.ndarray:
        """``w`` (b, n) or (n,) in sorted order; ``integer``: multiplicities (AUROC and AURC need them: their tie
        terms count draws), else any finite weights >= 0 (ECE, Brier and the gap sum weights only)."""
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or w.shape[1] != self.order.size:
            raise ValueError(f"w must have shape (b, {self.order.size}), got {w.shape}")
        if w.size and not np.isfinite(w).all():
            raise ValueError("w must be finite")
        if w.size and (w.min() < 0 or (integer and not np.array_equal(w, np.rint(w)))):
            raise ValueError("w must hold non-negative integer counts (multiplicities)" if integer
                             else "w must be non-negative")
        return w[:, self.order]

    def with_bins(self, n_bins: int, closure: str | None = None) -> "SortedSignal":
        """The same signal with ECE bins for another ``n_bins`` and/or closure (default: this one's); kept per pair."""
        closure = self.closure if closure is None else check_closure(closure)
        if (int(n_bins), closure) == (self.n_bins, self.closure):
            return self
        key = (int(n_bins), closure)
        if key not in self._rebinned:
            bins = bin_indices(self.conf, n_bins, closure)
            starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]]) if bins.size else bins
            self._rebinned[key] = SortedSignal(self.order, self.conf, self.correct, self.tie_starts, starts,
                                               int(n_bins), closure)
        return self._rebinned[key]

    def with_binning(self, binning: Binning) -> "SortedSignal":
        """The same signal with the bins of a fixed-edge :class:`~confgrid.analysis.binning.Binning` (``width`` or
        ``centred``; its ``n_bins`` None: this signal's), and ``bin_mid``, the midpoint of each non-empty bin.
        Computed once per binning and kept. ValueError for equal-mass bins (their bins are per resample)."""
        B = binning.bins(self.n_bins)
        if binning.scheme == "width" and binning.bin_confidence == "mean":
            return self.with_bins(B, binning.closure)
        key = (B, binning.scheme, binning.closure, binning.bin_confidence)
        if key not in self._rebinned:
            bins = binning.indices(self.conf, B)
            starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]]) if bins.size else bins
            mid = binning.midpoints(B)[bins[starts]] if binning.bin_confidence == "midpoint" else None
            self._rebinned[key] = SortedSignal(self.order, self.conf, self.correct, self.tie_starts, starts, B,
                                               binning.closure, bin_mid=mid)
        return self._rebinned[key]


def _sorted(conf, correct, n_bins: int = 10) -> SortedSignal:
    return conf if isinstance(conf, SortedSignal) else SortedSignal.from_arrays(conf, correct, n_bins)


def _per_draw(num: np.ndarray, tot: np.ndarray) -> np.ndarray:
    """``num / tot`` per resample, ``nan`` where it drew no row (``tot == 0``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, num / tot, np.nan)


def _group_sums(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sums of contiguous column blocks of ``x`` (b, n) starting at ``starts``."""
    if starts.size == x.shape[1]:  # every block has one column
        return x
    return np.add.reduceat(x, starts, axis=1)


def _ece_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    # ECE = sum_b (n_b/n)|acc_b - conf_b| = (1/n) sum_b |sum_y_b - sum_c_b|; with bin midpoints m_b,
    # sum_c_b is n_b m_b
    sy = _group_sums(ws * sig.correct, sig.bin_starts)
    if sig.bin_mid is None:
        sc = _group_sums(ws * sig.conf, sig.bin_starts)
    else:
        sc = _group_sums(ws, sig.bin_starts) * sig.bin_mid
    return _per_draw(np.abs(sy - sc).sum(axis=1), ws.sum(axis=1))


def _auroc_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    pos = _group_sums(ws * sig.correct, sig.tie_starts)  # (b, G)
    neg = _group_sums(ws * (1.0 - sig.correct), sig.tie_starts)
    P, N = pos.sum(axis=1), neg.sum(axis=1)
    neg_below = np.cumsum(neg, axis=1) - neg
    U = np.sum(pos * (neg_below + 0.5 * neg), axis=1)
    ok = (P > 0) & (N > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, U / np.where(ok, P * N, 1.0), np.nan)


def _aurc_sorted(sig: SortedSignal, ws: np.ndarray, H: np.ndarray | None = None) -> np.ndarray:
    # tie groups in descending confidence = ascending groups reversed
    m = np.ascontiguousarray(_group_sums(ws, sig.tie_starts)[:, ::-1])
    e = np.ascontiguousarray(_group_sums(ws * (1.0 - sig.correct), sig.tie_starts)[:, ::-1])
    K = np.cumsum(m, axis=1) - m
    C = np.cumsum(e, axis=1) - e
    tot = m.sum(axis=1)
    if H is None:
        H = harmonic_numbers(int(np.rint(tot.max())) if tot.size else 0)
    return _per_draw(aurc_tie_groups(m, e, K, C, H).sum(axis=1), tot)


def _brier_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    return _per_draw(ws @ ((sig.conf - sig.correct) ** 2), ws.sum(axis=1))


def _average_ranks(ws: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) of the draws of ``n`` items in sorted order, per resample row.

    ``ws`` (b, n) counts in ascending order of the ranked value, ``starts`` the first position of each tie group. A
    group holding ``W_g`` draws after ``C_g`` smaller ones ranks them ``C_g + 1 .. C_g + W_g``: each gets the average
    ``C_g + (W_g + 1) / 2`` (scipy's ``rankdata(method="average")``). Returns (b, n) float64, in the order of ``ws``.
    """
    n = ws.shape[1]
    g = _group_sums(ws, starts)
    below = np.cumsum(g, axis=1) - g
    per_group = below + (g + 1.0) / 2.0
    return np.repeat(per_group, np.diff(np.r_[starts, n]), axis=1)


def _spearman_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    # ranks of the confidence (the sorted order) and of the target (its own stable order), weighted Pearson
    rx = _average_ranks(ws, sig.tie_starts)
    perm = np.argsort(sig.correct, kind="stable")
    ys = sig.correct[perm]
    ystarts = np.flatnonzero(np.r_[True, ys[1:] != ys[:-1]]) if ys.size else np.zeros(0, dtype=np.int64)
    ry = np.empty_like(ws)
    ry[:, perm] = _average_ranks(ws[:, perm], ystarts)
    tot = ws.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = rx - ((ws * rx).sum(axis=1) / tot)[:, None]
        dy = ry - ((ws * ry).sum(axis=1) / tot)[:, None]
        vx, vy = (ws * dx * dx).sum(axis=1), (ws * dy * dy).sum(axis=1)
        ok = (tot >= 2) & (vx > 0) & (vy > 0)
        return np.where(ok, (ws * dx * dy).sum(axis=1) / np.sqrt(np.where(ok, vx * vy, 1.0)), np.nan)


def _kernel_doc(name: str, extra: str = "", real: bool = False) -> str:
    weights = ("Row weights per resample: any finite values >= 0 (bootstrap multiplicities, or the real\n"
               "        weights of ACE's distribution-aligned view)") if real else "Integer multiplicities of each item per resample"
    return f"""Count-weighted {name} of ``b`` resamples at once.

    Parameters
    ----------
    conf : ndarray of shape (n,) or SortedSignal
        Confidence in ``[0, 1]`` (finite), or a prepared :class:`SortedSignal`
        (then ``correct`` is ignored).
    correct : ndarray of shape (n,)
        Correctness, binary or graded in ``[0, 1]``.
    w : ndarray of shape (b, n) or (n,)
        {weights}.{extra}

    Returns
    -------
    ndarray of shape (b,), float64
        ``nan`` where the metric is undefined for a resample (no rows;
        AUROC with one class). With ``w = 1`` equals the point estimate of
        :mod:`confgrid.analysis.metrics`.
    """


def _apply(kernel, sig: SortedSignal, w, integer: bool = True) -> np.ndarray:
    ws = sig.sort_weights(w, integer)
    n = ws.shape[1]
    step = _block_rows(n)
    tot = ws.sum(axis=1)
    H = harmonic_numbers(int(np.rint(tot.max())) if tot.size and integer else 0)
    return np.concatenate(
        [kernel(sig, ws[lo : lo + step], H) for lo in range(0, ws.shape[0], step)]
    ) if ws.shape[0] else np.zeros(0)


def _binned(binning: Binning, conf, correct, w, n_bins: int) -> np.ndarray:
    """The kernel of ``binning`` on ``n_bins`` bins (the sorted signal re-binned if needed)."""
    sig = _sorted(conf, correct, n_bins).with_bins(n_bins, "left" if binning.scheme == "mass" else binning.closure)
    return _apply(lambda s, ws, H: _binning_sorted(s, ws, binning), sig, w, integer=False)


def ece_weighted(conf, correct, w, n_bins: int = 10, closure: str = "left") -> np.ndarray:
    return _binned(Binning(None, "width", check_closure(closure)), conf, correct, w, n_bins)


def brier_weighted(conf, correct, w) -> np.ndarray:
    return _apply(WEIGHTED_KERNELS["brier"], _sorted(conf, correct), w, integer=False)


ece_weighted.__doc__ = _kernel_doc(
    "ECE", "\n    n_bins : int, default=10\n        Equal-width bins, as in :func:`metrics.ece`."
    "\n    closure : {'left', 'right', 'right_float', 'left_float'}, default='left'\n        The bin closure "
    "(:data:`metrics.CLOSURES`); a prepared signal is re-binned to it.", real=True
)
brier_weighted.__doc__ = _kernel_doc("Brier score", real=True)



# --- kernels of the alternative estimators (analysis/estimators.py) ---------


def _gap_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    return _per_draw(ws @ (sig.conf - sig.correct), ws.sum(axis=1))


def _binning_sorted(sig: SortedSignal, ws: np.ndarray, binning: Binning) -> np.ndarray:
    """Any binned ECE (:class:`~confgrid.analysis.binning.Binning`) of a block of resamples."""
    if binning.scheme == "mass":
        return _ece_equal_mass_sorted(sig, ws, binning.closure, binning.bins(sig.n_bins))
    rs = sig.with_binning(binning)
    if binning.estimator == "plugin":
        return _ece_sorted(rs, ws)
    # debiased (binning.debiased_terms) per non-empty bin of each resample, weighted n_b / n
    n_b = _group_sums(ws, rs.bin_starts)
    sy = _group_sums(ws * rs.correct, rs.bin_starts)
    sc = n_b * rs.bin_mid if rs.bin_mid is not None else _group_sums(ws * rs.conf, rs.bin_starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = n_b > 0
        den = np.where(ok, n_b, 1.0)
        terms = np.where(ok, n_b * debiased_terms(sy / den, sc / den, den), 0.0)
    return _per_draw(terms.sum(axis=1), ws.sum(axis=1))


def _ks_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    # cumulative sums of (y - c) evaluated at tie-group ends only
    d = _group_sums(ws * (sig.correct - sig.conf), sig.tie_starts)
    if d.shape[1] == 0:
        return np.full(ws.shape[0], np.nan)
    return _per_draw(np.abs(np.cumsum(d, axis=1)).max(axis=1), ws.sum(axis=1))


def _ece_equal_mass_sorted(sig: SortedSignal, ws: np.ndarray, closure: str = "left", n_bins: int | None = None
                           ) -> np.ndarray:
    # equal-mass bins per resample from the cumulative counts of the tie groups
    B = sig.n_bins if n_bins is None else int(n_bins)
    tot = ws.sum(axis=1)
    m = _group_sums(ws, sig.tie_starts)
    d = _group_sums(ws * (sig.correct - sig.conf), sig.tie_starts)
    ends = np.rint(np.cumsum(m, axis=1)).astype(np.int64)
    starts = ends - np.rint(m).astype(np.int64) if closure != "left" else None
    out = np.full(ws.shape[0], np.nan)
    tot_i = np.rint(tot).astype(np.int64)
    for T in np.unique(tot_i):
        if T <= 0:
            continue
        rows = np.flatnonzero(tot_i == T)
        bins = equal_mass_group_bins(ends[rows], int(T), B, closure,
                                     None if starts is None else starts[rows])  # (r, G)
        flat = (bins + (np.arange(rows.size, dtype=np.int64) * B)[:, None]).ravel()
        sums = np.bincount(flat, weights=d[rows].ravel(), minlength=rows.size * B).reshape(rows.size, B)
        out[rows] = np.abs(sums).sum(axis=1) / T
    return out


def _kde_sorted(sig: SortedSignal, ws: np.ndarray) -> np.ndarray:
    m = _group_sums(ws, sig.tie_starts)
    sy = _group_sums(ws * sig.correct, sig.tie_starts)
    u = sig.conf[sig.tie_starts]
    return _per_draw(kde_group_values(u, m, sy, KDE_BANDWIDTH), ws.sum(axis=1))


#: metric name -> kernel(sorted_signal, sorted_weights, harmonic_numbers) -> (b,)
WEIGHTED_KERNELS = {
    "ece": lambda sig, ws, H: _ece_sorted(sig, ws),
    "auroc": lambda sig, ws, H: _auroc_sorted(sig, ws),
    "aurc": lambda sig, ws, H: _aurc_sorted(sig, ws, H),
    "brier": lambda sig, ws, H: _brier_sorted(sig, ws),
    "spearman": lambda sig, ws, H: _spearman_sorted(sig, ws),
    "calibration_gap": lambda sig, ws, H: _gap_sorted(sig, ws),
    "overconfidence": lambda sig, ws, H: _gap_sorted(sig, ws),
    "ks_ece": lambda sig, ws, H: _ks_sorted(sig, ws),
    "kde_ece": lambda sig, ws, H: _kde_sorted(sig, ws),
}


def weighted_kernel(name: str):
    """The vectorized count-weighted kernel ``kernel(sorted_signal, sorted_weights, harmonic_numbers) -> (b,)`` of
    metric ``name``, or None: :data:`WEIGHTED_KERNELS`, and for every binned ECE (a listed one, a convention or a name
    of the grammar, analysis/binning.py) the one kernel of its :class:`~confgrid.analysis.binning.Binning`. Raises as
    :func:`~confgrid.analysis.registry.get_metric` for a name that is no metric."""
    if name in WEIGHTED_KERNELS:
        return WEIGHTED_KERNELS[name]
    binning = get_metric(name).binning
    if binning is None:
        return None
    return lambda sig, ws, H: _binning_sorted(sig, ws, binning)


def has_weighted_kernel(name: str) -> bool:
    """Whether the bootstrap evaluates ``name`` with a vectorized count-weighted kernel.

    Metrics without one (``smoothed_ece``, ``smece``: their bandwidth depends on the resample) are evaluated by the
    **slower fallback**: their point function called on each resample's rows, one Python call per resample.
    """
    return weighted_kernel(name) is not None
