"""``confgrid analyze --group-col COL``: the clusters of the paired bootstrap, per setting.

With ``--group-col COL`` the bootstrap of every setting resamples the
distinct values of ``COL`` (clusters) with all their items instead of single
items (analysis/clusters.py; issue 12: row-level intervals on
Rank-Calibration outputs, 10 generations per question analysed as items,
were 2.1-2.7x narrower than question-level ones). ``COL`` is read with the
other columns (flows/analyze/read.py, flows/analyze/input.py: role
``group``, checked like an id); a missing value is a bad row reported by its
place like any other. Used by the alignment of flows/analyze/in_turn.py (whole
file and Parquet settings in turn alike). An item belongs to one cluster:
its rows (one per signal) must agree on ``COL``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from confgrid.flows.analyze.read import AnalyzeInputError

__all__ = ["setting_groups"]


def setting_groups(setting: str, column: str, item_codes: np.ndarray, group_codes: np.ndarray,
                   items: np.ndarray, item_cats, group_cats, pos: np.ndarray, unit: str) -> np.ndarray:
    """The cluster of each of a setting's aligned items, as an int64 code.

    Parameters
    ----------
    setting, column : str
        The setting and the group column's name in the file, for messages.
    item_codes, group_codes : ndarray of shape (r,), int64
        Each of the setting's ``r`` rows' item and cluster, as codes into
        ``item_cats`` and ``group_cats`` (every code >= 0: missing values are
        bad rows, reported before alignment). Rows in file order.
    items : ndarray of shape (n,), int64
        The aligned items (codes into ``item_cats``), in bootstrap order.
    item_cats, group_cats : sequence of str
        The labels; ``group_cats`` sorted, so the codes order the clusters as
        their labels sort (what :func:`~confgrid.analysis.clusters.cluster_codes`
        does with the labels themselves: the same draws).
    pos : ndarray of shape (r,), int64
        Each row's line or row number, for messages; ``unit`` is ``"line"`` or ``"row"``.

    Returns
    -------
    ndarray of shape (n,), int64
        The cluster code of each aligned item.

    Raises
    ------
    AnalyzeInputError
        Rows of one item name different clusters (the first five such items
        listed in file order, each with the places of its rows).
    """
    first = np.full(len(item_cats), -1, np.int64)
    first[item_codes[::-1]] = group_codes[::-1]  # the first row of each item (later writes win)
    off = np.flatnonzero(group_codes != first[item_codes])
    if off.size:
        mixed = pd.unique(item_codes[np.isin(item_codes, item_codes[off])])  # in order of first appearance
        lines = []
        for item in mixed[:5]:
            at = np.flatnonzero(item_codes == item)
            seen = ", ".join(f"{group_cats[g]!r} at {unit} {p}" for g, p in zip(group_codes[at], pos[at], strict=True))
            lines.append(f"item {item_cats[item]!r}: {seen}")
        more = f" (and {len(mixed) - 5} more items)" if len(mixed) > 5 else ""
        raise AnalyzeInputError(
            f"setting {setting!r}: the rows of an item must name one cluster in the group column {column!r} "
            f"(--group-col), but {len(mixed)} item(s) name several{more}:\n  " + "\n  ".join(lines), lines)
    return first[items]
