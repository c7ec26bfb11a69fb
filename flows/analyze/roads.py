"""The inputs ``confgrid analyze`` reads, one registry entry each, all ending in the run's evaluator.

Each entry (:class:`Road`) says which files it takes and reads one into the one evaluator's units
(analysis/evaluation.py ``UnitPlan``: ``plan_units`` for a signal table, its per-unit ``plan_unit`` for an aligned
setting of five columns), which every entry bootstraps with the run's ``bootstrap_units``
(flows/evaluate/bootstrap_ray.py, in process or on Ray Data, bit for bit the same); :func:`analyze` then makes
the tables with the run's ``estimates``. The first entry, in registration order, that accepts the input reads it,
the fallback entries (``columns``) last:

==============  ===============================================================================================
entry           input
==============  ===============================================================================================
signal_table    a run's ``tables/signals.parquet`` or a Parquet file in its schema (flows/analyze/run_table.py)
in_turn         Parquet of five columns without a model column: one setting at a time (flows/analyze/in_turn.py;
                memory of the largest setting, not of the file), unless ``--whole-file``
columns         CSV, JSONL or Parquet of five columns, read whole (flows/analyze/input.py)
==============  ===============================================================================================

Adding an input: write ``read(path, spec) -> Analyzed`` that yields units and their bootstrap results through
``bootstrap_units``, and ``ROADS.register("name", Road(...))``: it is tried after the entries registered before it
and before the fallback (a duplicate name is an error; ``ROADS.get`` of an unknown one lists the choices).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from confgrid.analysis.bootstrap import BootstrapResult
from confgrid.analysis.closure import edge_bins
from confgrid.analysis.evaluation import Comparisons, UnitPlan
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.flows.analyze.in_turn import (
    ALIGNMENT_COLUMNS,
    ALL_PAIRS,
    align,
    analyze_in_turn,
    in_turn_wanted,
    named_undefined,
    unit_of,
)
from confgrid.flows.analyze.input import INPUT_FORMATS, CheckOptions, InputRows, _columns, read_rows
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.analyze.run_table import is_signal_table, read_signal_table
from confgrid.flows.analyze.spec import AnalyzeSpec
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units
from confgrid.registry import Registry

__all__ = ["ROADS", "Analyzed", "Road", "road_for"]


@dataclass(frozen=True)
class Analyzed:
    """What a road gives the evaluator.

    Attributes
    ----------
    settings : list
        One record per unit with ``name``, ``signals``, ``seed``, ``items`` (sized like the unit's items) and
        ``n_clusters`` (None without clusters): the MLflow children and the cluster columns.
    units : list of UnitPlan
        The evaluator's units, in table order.
    results : list of BootstrapResult
        ``bootstrap_units`` of ``units``, in the same order.
    alignment : DataFrame
        setting, signal, n_items, n_used, n_left_out, left_out_examples.
    n_rows : int
        Data rows read.
    n_graded : int
        Correctness values strictly between 0 and 1.
    rows : InputRows or None
        The checked rows of a whole-file read (the comparison across models needs them), else None.
    """

    settings: list[Any]
    units: list[UnitPlan]
    results: list[BootstrapResult]
    alignment: pd.DataFrame
    n_rows: int
    n_graded: int = 0
    rows: InputRows | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Road:
    """An input ``confgrid analyze`` reads: which files (``accepts``), how (``read``), in words (``description``);
    ``fallback``: tried after every other entry (it accepts what no other reader takes)."""

    name: str
    description: str
    accepts: Callable[[AnalyzeSpec], bool]
    read: Callable[[AnalyzeSpec], Analyzed]
    fallback: bool = False


#: The inputs by name (the one Registry class), tried in registration order.
ROADS: Registry[Road] = Registry("analyze input", value_type=Road)


def road_for(spec: AnalyzeSpec) -> Road:
    """The first entry of :data:`ROADS` that accepts ``spec.input`` (registration order, fallback entries last).

    Raises
    ------
    AnalyzeInputError
        An option the input cannot take (``--in-turn`` for CSV, ...), or no entry takes it.
    """
    for road in sorted((r for _, r in ROADS.items()), key=lambda r: r.fallback):  # stable: registration order kept
        if road.accepts(spec):
            return road
    raise AnalyzeInputError(f"{spec.input}: no reader takes it; readers: "
                            + "; ".join(f"{n} ({ROADS.get(n).description})" for n in ROADS.names()))


def _comparisons(spec: AnalyzeSpec) -> Comparisons:
    """Every ordered pair of a setting's signals, or ``--against``/``--signal-pairs``."""
    if spec.against is None and not spec.signal_pairs:
        return ALL_PAIRS
    return Comparisons(against=spec.against, pairs=spec.signal_pairs)


def _bootstrap(spec: AnalyzeSpec, units: list[UnitPlan]) -> list[BootstrapResult]:
    """The run's ``bootstrap_units`` of ``units`` under the spec's metrics, resamples, bins and workers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)  # re-said with setting and signal by the roads
        return bootstrap_units(units, spec.metric_names, spec.n_resamples, n_bins=spec.n_bins,
                               use_ray=spec.use_ray, num_workers=spec.num_workers, chunk_size=spec.chunk_size)


def _read_signal_table(spec: AnalyzeSpec) -> Analyzed:
    table = read_signal_table(spec.input, spec.metric_names, spec.seed, spec.n_bins, group_col=spec.group_col,
                              against=spec.against, pairs=spec.signal_pairs)
    return Analyzed(table.settings, table.units, _bootstrap(spec, table.units), table.alignment, table.n_rows)


def _wants_in_turn(spec: AnalyzeSpec) -> bool:
    if not spec.in_turn and spec.input.suffix.lower() not in INPUT_FORMATS.get("parquet").suffixes:
        return False  # not Parquet, and not asked: another entry's file (--in-turn on it is refused below)
    wanted = in_turn_wanted(spec.input, _columns(spec.column_roles), spec.in_turn)
    if wanted and spec.interval == "jeffreys":
        raise AnalyzeInputError("--interval jeffreys draws from each setting's items, which the in-turn road (the "
                                "default for Parquet input without a model column, or --in-turn) frees after its "
                                "bootstrap: add --whole-file, or choose percentile, basic or bc")
    return wanted


def _read_in_turn(spec: AnalyzeSpec) -> Analyzed:
    cols = _columns(spec.column_roles)
    outcomes, plan = analyze_in_turn(spec.input, cols, CheckOptions(spec.threshold, spec.uncertainty),
                                     spec.metric_names, spec.n_resamples, spec.seed, spec.chunk_size, spec.n_bins,
                                     use_ray=spec.use_ray, num_workers=spec.num_workers,
                                     comparisons=_comparisons(spec))
    return Analyzed([o.setting for o in outcomes], [o.unit for o in outcomes], [o.result for o in outcomes],
                    pd.DataFrame([r for o in outcomes for r in o.alignment], columns=ALIGNMENT_COLUMNS),
                    plan.n_rows, sum(o.n_graded for o in outcomes))


def _read_columns(spec: AnalyzeSpec) -> Analyzed:
    """Align every setting of the whole input and bootstrap them (with ``--group-col``, their clusters)."""
    rows = read_rows(spec.input, spec.column_roles, CheckOptions(spec.threshold, spec.uncertainty))
    settings, alignment = align(rows, spec.seed, group_col=spec.group_col)
    bins = edge_bins(spec.metric_names, spec.n_bins)
    units = [unit_of(st, _comparisons(spec), bins) for st in settings]
    results = _bootstrap(spec, units)
    for st, res in zip(settings, results, strict=True):
        for m in named_undefined(st, res.point, spec.metric_names, spec.n_bins):
            warnings.warn(m, UndefinedMetricWarning, stacklevel=4)
    return Analyzed(settings, units, results, alignment, int(rows.pos.size), rows.n_graded, rows)


for _road in (Road("signal_table", "a run's tables/signals.parquet, or Parquet in its schema",
                   lambda spec: is_signal_table(spec.input), _read_signal_table),
              Road("in_turn", "Parquet of five columns without a model column, one setting at a time",
                   _wants_in_turn, _read_in_turn),
              Road("columns", "CSV, JSONL or Parquet of five columns, read whole", lambda spec: True, _read_columns,
                   fallback=True)):
    ROADS.register(_road.name, _road)
