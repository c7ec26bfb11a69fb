"""Clusters of rows for the clustered paired bootstrap.

When rows are not independent (several generations of one question, the questions of one passage or category), a
row-level bootstrap treats them as independent and its intervals are too narrow. The cluster bootstrap
(Davison & Hinkley 1997, *Bootstrap Methods and their Application*, section 3.8, "strategy 1": resample whole
clusters, keep every row of a drawn cluster) draws ``G`` clusters with replacement from the ``G`` distinct clusters,
and every row of a drawn cluster gets that cluster's multiplicity as its count weight. The count-weighted metric
kernels (analysis/kernels.py) then evaluate the resample without copying any rows.

Conventions (a reader could choose otherwise):

* cluster ``k`` is the ``k``-th distinct label in sorted order (``np.unique``; labels that cannot be sorted together,
  e.g. ints mixed with strings, are ordered by their string form, then by type name);
* the draws of chunk ``c`` are ``default_rng(SeedSequence([seed, c])).integers(0, G, size=(rows, G))``, the row-level
  draw of analysis/bootstrap.py with ``G`` in place of ``n``: with ``G = n`` singleton clusters labelled in row order
  the two bootstraps draw the same resamples;
* a resample has ``sum_k m_k size_k`` rows (``m_k`` the multiplicity of cluster ``k``), which varies from resample to
  resample when clusters differ in size; every metric is computed on the rows the resample has (the mean over its
  rows, not over ``n``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Clusters", "cluster_codes", "row_counts", "resample_rows", "total_tables", "v_diff"]


@dataclass(frozen=True)
class Clusters:
    """The cluster of each of ``n`` rows.

    Attributes
    ----------
    codes : ndarray of shape (n,), int64
        Cluster index of each row, in ``[0, G)``.
    labels : ndarray of shape (G,)
        The label of each cluster, in cluster order (sorted; see the module docstring).
    sizes : ndarray of shape (G,), int64
        Rows per cluster (each >= 1).
    members : tuple of G ndarrays of int64
        The rows of each cluster, ascending.
    """

    codes: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray
    members: tuple

    @property
    def n_clusters(self) -> int:
        """``G``, the number of distinct clusters."""
        return int(self.sizes.size)

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.codes.size)


def _is_missing(v) -> bool:
    if v is None:
        return True
    if isinstance(v, (float, np.floating)) and np.isnan(v):
        return True
    return isinstance(v, str) and not v.strip()


def cluster_codes(groups, n: int | None = None) -> Clusters:
    """Cluster codes of a label per row.

    Parameters
    ----------
    groups : array-like of shape (n,)
        A cluster label per row: ints, strings or any hashable values. Rows with equal labels form one cluster.
    n : int, optional
        Expected number of rows (the bootstrap's ``n``); checked when given.

    Raises
    ------
    ValueError
        ``groups`` is not 1-D, has the wrong length, is empty, or holds a missing label (None, NaN, empty string; the
        message gives the first such row).

    Examples
    --------
    >>> c = cluster_codes(["b", "a", "b"])
    >>> c.codes.tolist(), c.labels.tolist(), c.sizes.tolist()
    ([1, 0, 1], ['a', 'b'], [1, 2])
    """
    arr = np.asarray(groups)
    if arr.ndim != 1:
        raise ValueError(f"groups must be 1-D with one cluster label per row, got shape {arr.shape}")
    if n is not None and arr.size != int(n):
        raise ValueError(f"groups has {arr.size} labels for {int(n)} rows")
    if arr.size == 0:
        raise ValueError("groups is empty: a cluster bootstrap needs at least one row")
    if arr.dtype.kind in "fcOUS":
        missing = [i for i, v in enumerate(arr.tolist()) if _is_missing(v)] if arr.dtype.kind != "f" else \
            np.flatnonzero(np.isnan(arr)).tolist()
        if missing:
            raise ValueError(f"groups[{missing[0]}] is a missing cluster label ({arr[missing[0]]!r}); "
                             f"{len(missing)} row(s) have none, and every row needs a cluster")
    try:
        labels, codes = np.unique(arr, return_inverse=True)
    except TypeError:  # mixed types that do not sort together: by string form, then type name
        keys = {v: (str(v), type(v).__name__) for v in dict.fromkeys(arr.tolist())}
        ordered = sorted(keys, key=keys.get)
        pos = {v: i for i, v in enumerate(ordered)}
        codes = np.fromiter((pos[v] for v in arr.tolist()), dtype=np.int64, count=arr.size)
        labels = np.empty(len(ordered), dtype=object)
        labels[:] = ordered
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    sizes = np.bincount(codes, minlength=labels.size).astype(np.int64)
    order = np.argsort(codes, kind="stable")
    members = tuple(np.split(order, np.cumsum(sizes)[:-1]))
    return Clusters(codes, labels, sizes, members)


def row_counts(cluster_idx: np.ndarray, clusters: Clusters, out: np.ndarray | None = None) -> np.ndarray:
    """Row weights of cluster resamples: each row gets its cluster's multiplicity.

    Parameters
    ----------
    cluster_idx : ndarray of shape (b, G), int
        Drawn cluster indices of ``b`` resamples, in ``[0, G)``.
    out : ndarray of shape (>= b, n), float64, optional
        Scratch buffer; the result is ``out[:b]``.

    Returns
    -------
    ndarray of shape (b, n), float64
        ``w[r, i]`` = how many times row ``i``'s cluster was drawn in resample ``r`` (exact integers); row ``r`` sums
        to the resample's row count.
    """
    idx = np.asarray(cluster_idx)
    b, G = idx.shape
    flat = (idx.astype(np.int64, copy=False) + (np.arange(b, dtype=np.int64) * G)[:, None]).ravel()
    mult = np.bincount(flat, minlength=b * G).reshape(b, G).astype(np.float64)
    if out is None:
        return mult[:, clusters.codes]
    np.take(mult, clusters.codes, axis=1, out=out[:b])
    return out[:b]


def resample_rows(cluster_idx: np.ndarray, clusters: Clusters) -> list[np.ndarray]:
    """The rows of each cluster resample (the drawn clusters' rows concatenated, in draw order).

    For metrics without a count-weighted kernel and for brute-force checks: ``cluster_idx`` (b, G) int gives a list of
    ``b`` int64 arrays of row indices.
    """
    return [np.concatenate([clusters.members[k] for k in row]) for row in np.asarray(cluster_idx)]


def total_tables(t_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Harmonic tables for AURC on resamples of up to ``t_max`` rows (the fused path of analysis/bootstrap.py).

    Returns ``(h_hi, h_lo, c_hi, c_lo)``, each of shape (t_max + 1,), float64 pairs with ``hi + lo`` ~ the
    extended-precision value: ``H[k] = sum_{q=1}^k 1/q`` and ``CH[k] = sum_{q=0}^{k-1} H[q]``. A prefix does not
    depend on ``t_max`` (sequential cumulative sums), so any table size gives the same numbers.
    """
    t_max = int(t_max)
    h = np.zeros(t_max + 1, dtype=np.longdouble)
    np.cumsum(1.0 / np.arange(1, t_max + 1, dtype=np.longdouble), out=h[1:])
    ch = np.zeros(t_max + 1, dtype=np.longdouble)
    np.cumsum(h[:-1], out=ch[1:])
    pairs = []
    for v in (h, ch):
        hi = v.astype(np.float64)
        pairs += [hi, (v - hi.astype(np.longdouble)).astype(np.float64)]
    return tuple(pairs)


def v_diff(tables, a1: np.ndarray, a2: np.ndarray, tot: np.ndarray) -> np.ndarray:
    """``V_T[a2] - V_T[a1]`` for resamples of ``T = tot`` rows, elementwise.

    ``V_T[a] = sum_{q=T-a}^{T-1} (H[T] - H[q]) = a H[T] - CH[T] + CH[T-a]``: the AURC mass of a run of answers between
    ascending cumulative counts ``a1 < a2`` (``_aurc_table`` in analysis/fused.py is this table for ``T = n``).

    Parameters
    ----------
    tables : tuple
        :func:`total_tables` of at least ``max(tot)``.
    a1, a2 : ndarray of shape (k, b), int
    tot : ndarray of shape (b,), float64 holding integers

    Returns
    -------
    ndarray of shape (k, b), float64
    """
    h_hi, h_lo, c_hi, c_lo = tables
    T = tot.astype(np.int64)
    x1, x2 = T - a1, T - a2
    m = (a2 - a1).astype(np.float64)
    dc = (np.take(c_hi, x2) - np.take(c_hi, x1)) + (np.take(c_lo, x2) - np.take(c_lo, x1))
    return m * h_hi[T] + (m * h_lo[T] + dc)
