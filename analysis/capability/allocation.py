"""Inference budget allocation from a capability estimate (study 004, section 6.2 and Figure 12).

A budget of ``B x N`` samples is spread over N items. Greedy: every next sample goes to the item with the largest
marginal gain in the chance of at least one correct sample, ``p_i (1 - p_i)^{k_i}`` (k_i samples already given; p
clipped to [1e-6, 1 - 1e-6]); ties go to the lower item index. Since the gain of an item falls with every sample it
gets, the greedy allocation is the ``B x N`` largest gains ``p_i (1 - p_i)^j``, j < n, taken at once. Uniform: B
samples per item. An item counts as solved when any of its allocated samples, drawn without replacement from its n
stored samples in a seeded random order, is correct; the solved share is averaged over seeds. No item gets more than
its n stored samples; a budget above n per item is marked ``capped``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["P_CLIP", "greedy_allocation", "uniform_allocation", "solved_share"]

#: Clipping of the estimate in the marginal gain (study 004 section 6.2).
P_CLIP = 1e-6


def greedy_allocation(p: np.ndarray, budget: int, n_max: int) -> np.ndarray:
    """Samples per item of the greedy allocation.

    Parameters
    ----------
    p : ndarray (N,), float64 in [0, 1], the estimate per item (NaN not allowed)
    budget : int >= 0, total samples (B x N)
    n_max : int >= 0, stored samples per item (the most an item can get)

    Returns
    -------
    ndarray (N,), int64 summing to ``min(budget, N * n_max)``.
    """
    p = np.clip(np.asarray(p, dtype=np.float64), P_CLIP, 1.0 - P_CLIP)
    if np.isnan(p).any():
        raise ValueError("estimate p has NaN: allocate only over items with an estimate")
    N = len(p)
    total = min(int(budget), N * int(n_max))
    if total <= 0 or N == 0:
        return np.zeros(N, dtype=np.int64)
    j = np.arange(int(n_max), dtype=np.float64)
    gains = p[:, None] * (1.0 - p[:, None]) ** j[None, :]  # (N, n_max), decreasing along j
    # order: gain descending, then item, then j (a stable sort of -gain over the row-major flattening)
    order = np.argsort(-gains.ravel(), kind="stable")[:total]
    return np.bincount(order // int(n_max), minlength=N).astype(np.int64)


def uniform_allocation(n_items: int, per_item: int, n_max: int) -> np.ndarray:
    """``min(per_item, n_max)`` samples for each of ``n_items`` items, int64 (N,)."""
    return np.full(int(n_items), min(int(per_item), int(n_max)), dtype=np.int64)


def solved_share(correct: np.ndarray, alloc: np.ndarray, seeds: int | list[int] = 10) -> tuple[float, float]:
    """Mean and standard deviation over seeds of the share of items solved by an allocation.

    Parameters
    ----------
    correct : ndarray (N, n), the stored samples' correctness (> 0.5 counts as correct)
    alloc : ndarray (N,), int, samples given to each item (<= n)
    seeds : number of seeds (0 .. seeds-1) or the seeds; seed s orders each item's samples by
        ``default_rng(SeedSequence([s])).permuted`` along the sample axis.
    """
    corr = np.asarray(correct, dtype=np.float64) > 0.5
    alloc = np.asarray(alloc, dtype=np.int64)
    N, n = corr.shape
    if np.any(alloc > n) or np.any(alloc < 0):
        raise ValueError(f"an allocation must lie in [0, {n}] per item")
    seed_list = list(range(int(seeds))) if isinstance(seeds, int | np.integer) else list(seeds)
    shares = []
    for s in seed_list:
        rng = np.random.default_rng(np.random.SeedSequence([int(s)]))
        perm = rng.permuted(np.broadcast_to(np.arange(n), (N, n)).copy(), axis=1)
        ordered = np.take_along_axis(corr, perm, axis=1)
        taken = np.arange(n)[None, :] < alloc[:, None]
        shares.append(float((ordered & taken).any(axis=1).mean()) if N else float("nan"))
    arr = np.asarray(shares)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
