"""The cluster columns of the estimates tables: which column a clustered paired bootstrap resampled, and how many
clusters each unit had (``cluster_col``, ``n_clusters``), and the printed words on the resampled unit.

The one place a run (``bootstrap.cluster``) and ``confgrid analyze --group-col`` add them; the clusters themselves are
drawn by analysis/clusters.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from confgrid.analysis.evaluation import unit_names

__all__ = ["cluster_note", "with_cluster_columns"]


def with_cluster_columns(df: pd.DataFrame, column: str | None, n_clusters: Mapping[str, int]) -> pd.DataFrame:
    """``df`` with ``cluster_col`` (the group column) and ``n_clusters`` (per unit, keyed by
    :func:`~confgrid.analysis.evaluation.unit_name`: the setting of an ``analyze`` input) after ``n``.

    Unchanged when ``column`` is None (a row-level bootstrap), so row-level outputs keep their columns. The one place
    a run and ``analyze`` add them.
    """
    if column is None or df.empty:
        return df
    out = df.copy()
    at = list(out.columns).index("n") + 1 if "n" in out.columns else len(out.columns)
    out.insert(at, "cluster_col", column)
    out.insert(at + 1, "n_clusters", unit_names(out).map(dict(n_clusters)).fillna(0).astype("int64"))
    return out


def cluster_note(column: str | None, n_clusters: Mapping[str, int]) -> str:
    """The printed header's words on the resampled unit: ``"paired resamples"`` (items), or with a group column
    ``"paired resamples of clusters of 'q' (12 to 40 cluster(s) per setting; clustered intervals)"``."""
    if column is None:
        return "paired resamples"
    counts = sorted(set(n_clusters.values()))
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return f"paired resamples of clusters of {column!r} ({span} cluster(s) per setting; clustered intervals)"
