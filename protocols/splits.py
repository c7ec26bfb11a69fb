"""Train / evaluation split of a dataset's items (study 004: probes and isotonic maps fitted on a train split).

An item's place is fixed by a hash, not by its position: items are ordered by
``sha256(f"{seed}\\x1f{dataset}\\x1f{item_id}")`` and the first ``round(train_fraction * n)`` are the train split. The
same item stays in the same split whatever else is loaded with it only as long as n does not change; a different
``limit`` draws other items, and the split is recomputed over them (so its train share stays exact).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["SPLITS", "train_eval_split"]

#: Values of ``methods[].split``.
SPLITS = ("all", "train", "eval")


def train_eval_split(item_ids: Sequence[str], dataset: str, train_fraction: float, seed: int = 0) -> dict[str, str]:
    """``{item_id: "train" | "eval"}`` for the items of one dataset.

    Parameters
    ----------
    item_ids : the dataset's item ids (unique)
    dataset : the dataset's name in the grid (part of the hash, so two datasets split independently)
    train_fraction : share in (0, 1) of the items in the train split (rounded half to even, as ``round``)
    seed : non-negative seed of the order

    Raises
    ------
    ValueError
        ``train_fraction`` outside (0, 1), a negative seed, or repeated item ids.
    """
    if not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction!r}")
    if int(seed) < 0:
        raise ValueError(f"split seed must be >= 0, got {seed!r}")
    ids = list(item_ids)
    if len(set(ids)) != len(ids):
        raise ValueError(f"dataset {dataset!r}: item ids repeat; a split needs unique ids")
    key = lambda i: hashlib.sha256(f"{int(seed)}\x1f{dataset}\x1f{i}".encode()).hexdigest()  # noqa: E731
    order = sorted(ids, key=key)
    n_train = round(float(train_fraction) * len(ids))
    train = set(order[:n_train])
    return {i: ("train" if i in train else "eval") for i in ids}
