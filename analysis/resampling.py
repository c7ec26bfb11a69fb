"""Seeds and resample indices of the paired bootstrap (split from analysis/bootstrap.py).

Every resample is a row of item indices (or of cluster indices, analysis/clusters.py); chunk ``c`` of a
setting is drawn from ``SeedSequence([seed, c])``, so the draws depend only on ``(n, n_resamples, seed,
chunk_size)`` and a worker can draw its own chunk. The setting seed is a SHA-256 of the setting's name.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterator

import numpy as np

__all__ = ["DEFAULT_CHUNK_SIZE", "setting_seed", "n_chunks", "chunk_indices", "resample_indices",
           "counts_from_indices"]

#: Resamples per chunk: memory is bounded by a small multiple of ``chunk_size * n * 8`` bytes.
DEFAULT_CHUNK_SIZE = 1000

def setting_seed(model: str, dataset: str, base_seed: int = 0) -> int:
    """Stable seed of one setting, ``0 <= seed < 2**63``.

    SHA-256 of the JSON encoding of ``[model, dataset, base_seed]`` (so it is the same in every process and Python
    version, unlike ``hash()``), first 8 bytes big-endian with the top bit cleared.

    Examples
    --------
    >>> setting_seed("m", "d") == setting_seed("m", "d")
    True
    >>> setting_seed("m", "d") != setting_seed("m", "d", base_seed=1)
    True
    """
    payload = json.dumps([str(model), str(dataset), int(base_seed)], ensure_ascii=True)
    digest = hashlib.sha256(payload.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def _check_resample_args(n: int, n_resamples: int, seed: int, chunk_size: int) -> None:
    if int(n) < 1:
        raise ValueError(f"n must be >= 1 to draw resamples, got {n}")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")


def n_chunks(n_resamples: int, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Number of chunks holding ``n_resamples`` rows."""
    return -(-int(n_resamples) // int(chunk_size))


def chunk_indices(
    n: int, n_resamples: int, seed: int, chunk_index: int, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> np.ndarray:
    """The index matrix of chunk ``chunk_index`` alone (for a worker).

    Returns
    -------
    ndarray of shape (rows_in_chunk, n), dtype int64
        ``rows_in_chunk = min(chunk_size, n_resamples - chunk_index * chunk_size)``.
    """
    _check_resample_args(n, n_resamples, seed, chunk_size)
    total = n_chunks(n_resamples, chunk_size)
    if not 0 <= int(chunk_index) < total:
        raise ValueError(f"chunk_index must be in [0, {total}), got {chunk_index}")
    rows = min(int(chunk_size), int(n_resamples) - int(chunk_index) * int(chunk_size))
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(chunk_index)]))
    return rng.integers(0, int(n), size=(rows, int(n)), dtype=np.int64)


def resample_indices(
    n: int, n_resamples: int, seed: int, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(chunk_index, idx)`` for every chunk, ``idx`` of shape ``(b, n)`` int64."""
    _check_resample_args(n, n_resamples, seed, chunk_size)
    for c in range(n_chunks(n_resamples, chunk_size)):
        yield c, chunk_indices(n, n_resamples, seed, c, chunk_size)


def counts_from_indices(idx: np.ndarray, n: int | None = None) -> np.ndarray:
    """Multiplicity of each item in each resample.

    Parameters
    ----------
    idx : ndarray of shape (b, k), int
        Item indices of ``b`` resamples.
    n : int, optional
        Number of items; defaults to ``k``.

    Returns
    -------
    ndarray of shape (b, n), dtype float64
        ``w[r, i]`` = number of times item ``i`` occurs in row ``r``.

    Examples
    --------
    >>> counts_from_indices(np.array([[0, 0, 2], [1, 2, 2]])).tolist()
    [[2.0, 0.0, 1.0], [0.0, 1.0, 2.0]]
    """
    idx = np.asarray(idx)
    if idx.ndim != 2:
        raise ValueError(f"idx must be 2-D (b, n), got shape {idx.shape}")
    b, k = idx.shape
    n = k if n is None else int(n)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    flat = (idx.astype(np.int64, copy=False) + (np.arange(b, dtype=np.int64) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).astype(np.float64).reshape(b, n)


