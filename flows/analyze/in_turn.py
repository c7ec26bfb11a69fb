"""``confgrid analyze`` of a Parquet file one setting at a time (the ``in_turn`` road of flows/analyze/roads.py).

The setting column is read first (one row group at a time); then each setting's rows are read from the row groups that
hold it, checked (flows/analyze/input.py) and given to the evaluator as signal rows, whose arrays the road frees after
their bootstrap. Peak memory is about that of the largest setting plus one row group of the setting column, not of the
whole file; the numbers equal the whole-file read's (the same signal rows, seeds and units). Problems of every setting
are raised together at the end, in file order, as the whole-file reader would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from confgrid.flows.analyze.check import check_ids
from confgrid.flows.analyze.input import CheckOptions, SignalRows, check_chunk, raise_problems, signal_rows
from confgrid.flows.analyze.read import AnalyzeInputError, Chunk, open_parquet, read_parquet

__all__ = ["parquet_settings", "settings_in_turn"]


@dataclass
class Plan:
    """Where each setting lives in a Parquet file: ``groups[name]`` = row groups holding it; ``bad_groups``: row
    groups with a missing setting."""

    path: Path
    cols: dict[str, str]
    groups: dict[str, list[int]]
    bad_groups: list[int]
    n_rows: int


def parquet_settings(path: Path, cols: dict[str, str]) -> Plan:
    """Read the setting column one row group at a time and note which row groups hold each setting."""
    pf = open_parquet(path)
    read_parquet(path, cols, row_groups=[], roles=["setting"])  # missing columns are named before any work
    groups: dict[str, list[int]] = {}
    bad: list[int] = []
    for g in range(pf.metadata.num_row_groups):
        col = check_ids(pf.read_row_group(g, columns=[cols["setting"]]).column(0), "setting")
        for c in np.unique(col.codes):
            if c < 0:
                bad.append(g)
            else:
                groups.setdefault(col.categories[c], []).append(g)
    return Plan(path, cols, dict(sorted(groups.items())), bad, pf.metadata.num_rows)


def _setting_chunk(plan: Plan, name: str | None) -> Chunk:
    """The rows of one setting (``None``: the rows with a missing setting), in file order, with their row numbers."""
    groups = plan.bad_groups if name is None else plan.groups[name]
    chunk = read_parquet(plan.path, plan.cols, row_groups=groups)
    col = check_ids(chunk.arrays["setting"], "setting")
    if name is None:
        keep = np.flatnonzero(col.codes < 0)
    else:
        at = col.categories.index(name)
        keep = np.flatnonzero(col.codes == at)
    take = pa.array(keep, pa.int64())
    return Chunk({r: a.take(take) for r, a in chunk.arrays.items()}, chunk.pos[keep], chunk.unit)


def settings_in_turn(path: Path, cols: dict[str, str], options: CheckOptions,
                     group_col: str | None = None) -> Iterator[SignalRows]:
    """Each setting of a Parquet file as signal rows (:func:`~confgrid.flows.analyze.input.signal_rows`), in setting
    order, one at a time.

    After a setting with a problem the later ones are still checked, not yielded.

    Raises
    ------
    AnalyzeInputError
        Once every setting is read: the bad rows of every setting, in file order; else the first setting whose items
        name several clusters; else no data rows.
    """
    plan = parquet_settings(path, cols)
    keyed, stats, total, error, n_rows = [], [], 0, None, 0
    for name in [*plan.groups, *([None] if plan.bad_groups else [])]:
        rows, problems = check_chunk(_setting_chunk(plan, name), cols, options)
        n_rows += rows.pos.size
        stats.append(rows.stats)
        keyed += problems.keyed()
        total += problems.count()
        if name is None or total or error is not None:
            continue
        try:
            part = signal_rows(rows, group_col)
        except AnalyzeInputError as exc:  # raised after the bad rows of every setting, as the whole-file read
            error = exc
            continue
        del rows
        yield part
    if total:
        raise_problems(path, sorted(keyed, key=lambda p: (p[0], p[1])), total, stats, cols)
    if error is not None:
        raise error
    if n_rows == 0:
        raise AnalyzeInputError(f"{path}: no data rows")
