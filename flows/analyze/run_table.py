"""``confgrid analyze`` of a signal table: a run's ``tables/signals.parquet`` (or one written in its schema).

The one signal table (analysis/signals.py) carries its units of pairing,
statuses and alignment, so it needs no checking of five columns and no
alignment of its own: its rows go through the one evaluator exactly as in the
run (analysis/evaluation.py ``plan_units``, flows/evaluate/bootstrap_ray.py
``bootstrap_units``, ``estimates``), with the run's comparisons by default
(every signal against verbalized, the token shifts of study 000). Given the
run's seed, resamples and level, the tables equal the run's, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from confgrid.analysis.closure import edge_bins
from confgrid.analysis.evaluation import Comparisons, UnitPlan, plan_units
from confgrid.analysis.signals import UNIT_COLUMNS, check, conform
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.evaluate.run_evaluation import RUN_COMPARISONS

__all__ = ["is_signal_table", "read_signal_table", "TableAnalysis", "SIGNAL_TABLE_COLUMNS"]

#: The columns that make a Parquet file a signal table (read as such, not as five columns).
SIGNAL_TABLE_COLUMNS = (*UNIT_COLUMNS, "item_id", "signal", "confidence", "target", "status", "align")


def is_signal_table(path: Path) -> bool:
    """Whether ``path`` is a Parquet file in the signal-table schema (:data:`SIGNAL_TABLE_COLUMNS`)."""
    if Path(path).suffix.lower() not in (".parquet", ".pq"):
        return False
    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - not readable as Parquet: the usual reader says why
        return False
    return set(SIGNAL_TABLE_COLUMNS) <= names


@dataclass
class _Setting:
    """What analyze's tables need of a unit (the role of flows/analyze/in_turn.py ``Setting``)."""

    name: str
    signals: list[str]
    seed: int
    items: Any
    n_clusters: int | None = None


@dataclass
class TableAnalysis:
    """Units and the alignment rows of a signal table."""

    settings: list[_Setting]
    alignment: pd.DataFrame
    units: list[UnitPlan] = field(default_factory=list)
    n_rows: int = 0


def read_signal_table(path: Path, metrics: list[str], seed: int, n_bins: int, *, group_col: str | None = None,
                      against: str | None = None, pairs: tuple[tuple[str, str], ...] = ()) -> TableAnalysis:
    """Read a signal table and plan its units as a run does (``plan_units``; flows/analyze/roads.py bootstraps
    them with the run's ``bootstrap_units``).

    Raises
    ------
    AnalyzeInputError
        A value outside [0, 1], a duplicate row, a ``--group-col`` other than ``cluster``.
    """
    if group_col not in (None, "cluster"):
        raise AnalyzeInputError(f"--group-col {group_col!r}: a signal table names each item's cluster in its "
                                "'cluster' column; use --group-col cluster or leave it out")
    table = conform(pd.read_parquet(path))
    try:
        check(table)
    except ValueError as exc:
        raise AnalyzeInputError(f"{path}: {exc}") from None
    if table.empty:
        raise AnalyzeInputError(f"{path}: no data rows")
    comparisons = Comparisons(against=RUN_COMPARISONS.against if against is None else against, pairs=pairs,
                              token_shifts=True)
    try:
        plans = plan_units(table, comparisons, seed, clustered=group_col is not None,
                           edge_bins=edge_bins(metrics, n_bins))
    except ValueError as exc:
        raise AnalyzeInputError(f"{path}: {exc}") from None
    settings, align_rows = [], []
    for u in plans:
        settings.append(_Setting(u.name, list(u.signals), u.seed, range(len(u.items)),
                                 None if u.groups is None else int(pd.unique(u.groups).size)))
        for i, s in enumerate(u.signals):
            n = u.n_rows.get(s, 0)
            align_rows.append({"setting": u.name, "signal": s, "n_items": n, "n_used": u.n_of(i),
                               "n_left_out": n - u.n_of(i), "left_out_examples": ""})
    return TableAnalysis(settings, pd.DataFrame(align_rows), plans, len(table))
