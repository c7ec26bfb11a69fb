"""``confgrid analyze --group-col COL``: the clusters of the paired bootstrap, per setting.

With ``--group-col COL`` the bootstrap of every setting resamples the
distinct values of ``COL`` (clusters) with all their items instead of single
items (analysis/clusters.py; issue 12: row-level intervals on
Rank-Calibration outputs, 10 generations per question analysed as items,
were 2.1-2.7x narrower than question-level ones). ``COL`` is read with the
other columns (flows/analyze_input.py, role ``group``); a missing value is a
bad row reported by its place like any other. An item belongs to one cluster:
its rows (one per signal) must agree on ``COL``.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from confgrid.flows.analyze_input import AnalyzeInputError

__all__ = ["setting_groups", "with_cluster_columns", "cluster_note"]


def setting_groups(sub: pd.DataFrame, items: list[str], setting: str, column: str,
                   where: pd.Series | None = None) -> np.ndarray:
    """The cluster label of each of a setting's aligned items.

    Parameters
    ----------
    sub : DataFrame
        The setting's rows (columns item_id, group; the index of ``where``).
    items : list of str
        The aligned items, in bootstrap order.
    setting : str
        For messages.
    column : str
        The group column's name in the file, for messages.
    where : Series of str, optional
        Each row's place in the file (``"line 5"``), for messages.

    Returns
    -------
    ndarray of shape (len(items),), object
        The label of each item.

    Raises
    ------
    AnalyzeInputError
        Rows of one item name different clusters (every such item listed, with
        the places of its rows).
    """
    per = sub.groupby("item_id", sort=False)["group"]
    mixed = per.nunique()
    mixed = mixed[mixed > 1]
    if len(mixed):
        lines = []
        for item in mixed.index[:5]:
            rows = sub[sub["item_id"] == item]
            seen = ", ".join(f"{g!r}" + (f" at {where[i]}" if where is not None else "")
                             for i, g in zip(rows.index, rows["group"], strict=True))
            lines.append(f"item {item!r}: {seen}")
        more = f" (and {len(mixed) - 5} more items)" if len(mixed) > 5 else ""
        raise AnalyzeInputError(
            f"setting {setting!r}: the rows of an item must name one cluster in the group column {column!r} "
            f"(--group-col), but {len(mixed)} item(s) name several{more}:\n  " + "\n  ".join(lines), lines)
    first = per.first()
    return first.reindex(items).to_numpy(dtype=object)


def with_cluster_columns(df: pd.DataFrame, column: str | None, n_clusters: Mapping[str, int]) -> pd.DataFrame:
    """``df`` with ``cluster_col`` (the group column) and ``n_clusters`` (per setting) after ``n``.

    Unchanged when ``column`` is None (a row-level bootstrap), so row-level
    outputs keep their columns.
    """
    if column is None or df.empty:
        return df
    out = df.copy()
    at = list(out.columns).index("n") + 1 if "n" in out.columns else len(out.columns)
    out.insert(at, "cluster_col", column)
    out.insert(at + 1, "n_clusters", out["setting"].map(dict(n_clusters)).astype("int64"))
    return out


def cluster_note(column: str | None, n_clusters: Mapping[str, int]) -> str:
    """The printed header's words on the resampled unit: ``"paired resamples"`` (items), or with a group column
    ``"paired resamples of clusters of 'q' (12 to 40 cluster(s) per setting; clustered intervals)"``."""
    if column is None:
        return "paired resamples"
    counts = sorted(set(n_clusters.values()))
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return f"paired resamples of clusters of {column!r} ({span} cluster(s) per setting; clustered intervals)"
