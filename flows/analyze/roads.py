"""The inputs ``confgrid analyze`` reads, one registry entry each, all on the run's road.

Each entry (:class:`Road`) reads the files it takes into signal rows (the schema of a run's
``tables/signals.parquet``), which :func:`evaluate_input` takes as a run does: ``plan_units``, ``bootstrap_units`` (in
process or on Ray Data, bit for bit the same), then the run's ``estimates``. The first entry in registration order
that accepts the input reads it, fallback entries last: ``signal_table`` (a run's signal table: its units, statuses,
alignment and comparisons), ``in_turn`` (five-column Parquet without a model column, one setting at a time, unless
``--whole-file``), ``columns`` (CSV, JSONL or Parquet of five columns, read whole). Adding an input: see :data:`ROADS`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from confgrid.analysis.ace.units import without_comparison
from confgrid.analysis.bootstrap import BootstrapResult
from confgrid.analysis.closure import edge_bins
from confgrid.analysis.evaluation import Comparisons, UnitPlan, plan_units
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.analysis.registry import METRICS
from confgrid.analysis.signals import UNIT_COLUMNS, check, conform
from confgrid.flows.analyze.check import check_ids
from confgrid.flows.analyze.input import (INPUT_FORMATS, AnalyzeWarning, CheckOptions, InputRows, SignalRows,
                                          role_columns, check_chunk, input_format, raise_problems, read_rows, signal_rows)
from confgrid.flows.analyze.read import AnalyzeInputError, Chunk, open_parquet, read_parquet
from confgrid.flows.analyze.spec import AnalyzeSpec
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units
from confgrid.flows.evaluate.run_evaluation import RUN_COMPARISONS
from confgrid.registry import Registry

__all__ = ["ALIGNMENT_COLUMNS", "ROADS", "Analyzed", "Road", "UnitSummary", "checked", "evaluate_input", "road_for"]

log = logging.getLogger("confgrid")

ALIGNMENT_COLUMNS = ["setting", "signal", "n_items", "n_used", "n_left_out", "left_out_examples"]
#: The columns that make a Parquet file a signal table (read as such, not as five columns).
SIGNAL_TABLE_COLUMNS = (*UNIT_COLUMNS, "item_id", "signal", "confidence", "target", "status", "align")


@dataclass(frozen=True)
class UnitSummary:
    """What the MLflow record and the cluster columns need of a unit once its arrays are freed."""

    name: str
    signals: list[str]
    seed: int
    n_items: int
    n_clusters: int | None = None

    @classmethod
    def of(cls, u: UnitPlan) -> UnitSummary:
        return cls(u.name, list(u.signals), u.seed, len(u.items),
                   None if u.groups is None else int(pd.unique(u.groups).size))


@dataclass(frozen=True)
class Analyzed:
    """What the evaluator made of an input's signal rows (:func:`evaluate_input`)."""

    #: the entry of :data:`ROADS` that read the input
    road: str
    #: one per unit, in table order (the MLflow children, the cluster columns)
    settings: list[UnitSummary]
    #: the evaluator's units, in table order (arrays freed by an ``in_turn`` road)
    units: list[UnitPlan]
    #: ``bootstrap_units`` of ``units``, in the same order
    results: list[BootstrapResult]
    #: :data:`ALIGNMENT_COLUMNS`, a row per (unit, signal)
    alignment: pd.DataFrame
    #: data rows read
    n_rows: int
    #: correctness values strictly between 0 and 1
    n_graded: int = 0
    #: the checked rows of a whole-file read with a model column (the comparison across models), else None
    rows: InputRows | None = field(default=None, repr=False)


def _input_comparisons(spec: AnalyzeSpec) -> Comparisons:
    """Every ordered pair of a setting's signals, or ``--against``/``--signal-pairs``."""
    if spec.against is None and not spec.signal_pairs:
        return Comparisons(against=None, all_pairs=True)
    return Comparisons(against=spec.against, pairs=spec.signal_pairs)


@dataclass(frozen=True)
class Road:
    """An input ``confgrid analyze`` reads (an entry of :data:`ROADS`)."""

    name: str
    description: str
    #: ``accepts(spec) -> bool``: whether it reads ``spec.input`` (AnalyzeInputError: an option it cannot take)
    accepts: Callable[[AnalyzeSpec], bool]
    #: ``read(spec) -> iterable of SignalRows``: the input as signal rows, whole or in parts
    read: Callable[[AnalyzeSpec], Iterable[SignalRows]]
    #: ``comparisons(spec) -> Comparisons``: which signals the units compare
    comparisons: Callable[[AnalyzeSpec], Comparisons] = _input_comparisons
    #: the parts come one at a time: each part's arrays are freed after its bootstrap
    in_turn: bool = False
    #: warn of the items the alignment leaves out, and name each undefined point estimate by setting and signal
    checked: bool = True
    #: tried after every other entry (it accepts what no other reader takes)
    fallback: bool = False


#: The inputs by name, tried in registration order, fallback entries last. Adding one: a ``read(spec)`` yielding
#: SignalRows (input.py ``signal_rows`` makes them of checked rows), then ``ROADS.register("name", Road(...))``.
ROADS: Registry[Road] = Registry("analyze input", value_type=Road)


def road_for(spec: AnalyzeSpec) -> Road:
    """The first entry of :data:`ROADS` that accepts ``spec.input`` (registration order, fallback entries last);
    AnalyzeInputError for an option the input cannot take (``--in-turn`` for CSV, ...), or when no entry takes it."""
    for road in sorted((r for _, r in ROADS.items()), key=lambda r: r.fallback):  # stable: registration order kept
        if road.accepts(spec):
            return road
    raise AnalyzeInputError(f"{spec.input}: no reader takes it; readers: "
                            + "; ".join(f"{n} ({ROADS.get(n).description})" for n in ROADS.names()))


def evaluate_input(spec: AnalyzeSpec) -> Analyzed:
    """Read ``spec.input`` with its road and take its signal rows, part by part, on the run's road (``plan_units``,
    ``bootstrap_units``); AnalyzeInputError from the road, or for an item in two clusters of a signal table."""
    road = road_for(spec)
    comparisons, bins, names = road.comparisons(spec), edge_bins(spec.metric_names, spec.n_bins), spec.metric_names
    settings, units, results, alignment = [], [], [], []
    n_rows = n_graded = 0
    rows = None
    for part in road.read(spec):
        try:
            plans = plan_units(part.table, comparisons, spec.seed, clustered=spec.group_col is not None,
                               edge_bins=bins)
        except ValueError as exc:
            raise AnalyzeInputError(f"{spec.input}: {exc}") from None
        n_rows, n_graded, rows = n_rows + part.n_rows, n_graded + part.n_graded, part.rows
        # per unit and signal: its rows, the items it is evaluated on and those left out
        part_alignment = [[{"setting": u.name, "signal": s, "n_items": u.n_rows.get(s, 0), "n_used": u.n_of(i),
                            "n_left_out": u.n_rows.get(s, 0) - u.n_of(i),
                            "left_out_examples": part.examples.get((u.name, s), "")} for i, s in enumerate(u.signals)]
                          for u in plans]
        for u, table in zip(plans, part_alignment, strict=True):
            left = [f"{r['signal']!r}: {r['n_left_out']} of {r['n_items']}" for r in table if r["n_left_out"]]
            if road.checked and left:
                warnings.warn(f"setting {u.name!r}: items not scored by every signal are left out of the paired "
                              f"analysis ({', '.join(left)}); {table[0]['n_used']} items used. See alignment.csv.",
                              AnalyzeWarning, stacklevel=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)  # re-said below with setting and signal
            part_results = bootstrap_units(plans, names, spec.n_resamples, n_bins=spec.n_bins, use_ray=spec.use_ray,
                                           num_workers=spec.num_workers, chunk_size=spec.chunk_size)
        for u, res, table in zip(plans, part_results, part_alignment, strict=True):
            settings.append(UnitSummary.of(u))
            alignment += table
            if road.checked:
                for m in _named_undefined(u, res.point, names, spec.n_bins):
                    warnings.warn(m, UndefinedMetricWarning, stacklevel=3)
            if road.in_turn:
                u.drop_arrays()  # memory stays that of one part
        units += plans
        results += part_results
    return Analyzed(road.name, settings, units, results, pd.DataFrame(alignment, columns=ALIGNMENT_COLUMNS), n_rows,
                    n_graded, rows)


def _named_undefined(u: UnitPlan, point: np.ndarray, metrics: list[str], n_bins: int) -> list[str]:
    """Messages for the undefined point estimates of a unit's own cells, each naming setting, signal and metric."""
    out = []
    for s, j in zip(*np.nonzero(np.isnan(point[:len(u.signals)])), strict=True):
        info = METRICS.get(metrics[j])
        kw = {"n_bins": n_bins} if info.takes_n_bins else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UndefinedMetricWarning)
            info.func(u.confidence[s][u.masks[s]], u.target[s][u.masks[s]], **kw)
        why = "; ".join(str(w.message) for w in caught if issubclass(w.category, UndefinedMetricWarning))
        out.append(f"setting {u.name!r}, signal {u.signals[s]!r}, {metrics[j]}: {why or 'undefined (nan)'}")
    return out


# --- the entries ---


def _is_signal_table(spec: AnalyzeSpec) -> bool:
    """Whether the input is a Parquet file in the signal-table schema (:data:`SIGNAL_TABLE_COLUMNS`)."""
    if spec.input.suffix.lower() not in INPUT_FORMATS.get("parquet").suffixes:
        return False
    try:
        names = set(pq.read_schema(spec.input).names)
    except Exception:  # noqa: BLE001 - not readable as Parquet: the usual reader says why
        return False
    return set(SIGNAL_TABLE_COLUMNS) <= names


def _read_signal_table(spec: AnalyzeSpec) -> list[SignalRows]:
    """A run's signal table as it is: it carries its units, statuses and alignment (analysis/signals.py); study 001's
    comparison rows are left out (analysis/ace/units.py ``without_comparison``)."""
    if spec.group_col not in (None, "cluster"):
        raise AnalyzeInputError(f"--group-col {spec.group_col!r}: a signal table names each item's cluster in its "
                                "'cluster' column; use --group-col cluster or leave it out")
    whole = conform(pd.read_parquet(spec.input))
    table = checked(without_comparison(whole), spec.input)
    if len(table) < len(whole):
        log.info("analyze: %d row(s) of answer set 'comparison' (study 001's inputs) left out: their cells are planned "
                 "from a grid's comparison section, which analyze has not", len(whole) - len(table))
    if table.empty:
        raise AnalyzeInputError(f"{spec.input}: no data rows")
    return [SignalRows(table, len(table))]


def checked(table: pd.DataFrame, where: Any) -> pd.DataFrame:
    """``table`` after analysis/signals.py ``check`` (a value outside [0, 1], a duplicate row: AnalyzeInputError)."""
    try:
        check(table)
    except ValueError as exc:
        raise AnalyzeInputError(f"{where}: {exc}") from None
    return table


def _run_comparisons(spec: AnalyzeSpec) -> Comparisons:
    """The run's comparisons (every signal against verbalized, study 000's token shifts), or ``--against``."""
    return Comparisons(against=RUN_COMPARISONS.against if spec.against is None else spec.against,
                       pairs=spec.signal_pairs, token_shifts=True)


def _wants_in_turn(spec: AnalyzeSpec) -> bool:
    """Parquet without a model column, unless ``--whole-file``; ``--in-turn`` on another input is an error."""
    if not spec.in_turn and spec.input.suffix.lower() not in INPUT_FORMATS.get("parquet").suffixes:
        return False  # not Parquet, and not asked: another entry's file
    cols = role_columns(spec.column_roles)
    parquet = input_format(spec.input) == "parquet"
    has_model = parquet and "model" in cols and cols["model"] in open_parquet(spec.input).schema_arrow.names
    if spec.in_turn and not (parquet and not has_model):
        raise AnalyzeInputError(f"--in-turn: needs a Parquet input without a model column, got "
                                f"{spec.input.name!r}{' (it has a model column)' if has_model else ''}; convert "
                                "the file with pandas.read_csv(...).to_parquet(...) or leave --in-turn out")
    wanted = parquet and not has_model if spec.in_turn is None else spec.in_turn
    if wanted and spec.interval == "jeffreys":
        raise AnalyzeInputError("--interval jeffreys draws from each setting's items, which the in-turn road (the "
                                "default for Parquet input without a model column, or --in-turn) frees after its "
                                "bootstrap: add --whole-file, or choose percentile, basic or bc")
    return wanted


def _read_in_turn(spec: AnalyzeSpec) -> Iterator[SignalRows]:
    """Each setting of a Parquet file as signal rows, in setting order, one at a time.

    The setting column is read first (a row group at a time), then each setting's rows from the row groups that hold
    it: peak memory is about that of the largest setting plus one row group of the setting column, and the numbers
    equal the whole-file read's. After a setting with a problem the later ones are checked, not yielded; once every
    setting is read, AnalyzeInputError lists the bad rows of all in file order, else names the first setting whose
    items name several clusters, else says there are no data rows.
    """
    path, cols, options = spec.input, role_columns(spec.column_roles), CheckOptions(spec.threshold, spec.uncertainty)
    pf = open_parquet(path)
    read_parquet(path, cols, row_groups=[], roles=["setting"])  # missing columns are named before any work
    groups: dict[str | None, list[int]] = {}  # setting (None: missing) -> the row groups that hold it
    for g in range(pf.metadata.num_row_groups):
        col = check_ids(pf.read_row_group(g, columns=[cols["setting"]]).column(0), "setting")
        for c in np.unique(col.codes):
            groups.setdefault(None if c < 0 else col.categories[c], []).append(g)
    keyed, stats, total, error, n_rows = [], [], 0, None, 0
    for name in sorted(groups, key=lambda n: (n is None, n or "")):
        chunk = read_parquet(path, cols, row_groups=groups[name])
        col = check_ids(chunk.arrays["setting"], "setting")
        keep = np.flatnonzero(col.codes == (-1 if name is None else col.categories.index(name)))
        take = pa.array(keep, pa.int64())
        chunk = Chunk({r: a.take(take) for r, a in chunk.arrays.items()}, chunk.pos[keep], chunk.unit)
        rows, problems = check_chunk(chunk, cols, options)
        n_rows += rows.pos.size
        stats.append(rows.stats)
        keyed += problems.keyed()
        total += problems.count()
        if total or error is not None:  # the rows of a missing setting always have a problem
            continue
        try:
            part = signal_rows(rows, spec.group_col)
        except AnalyzeInputError as exc:  # raised after the bad rows of every setting, as the whole-file read
            error = exc
            continue
        del rows, chunk
        yield part
    if total:
        raise_problems(path, sorted(keyed, key=lambda p: (p[0], p[1])), total, stats, cols)
    if error is not None:
        raise error
    if n_rows == 0:
        raise AnalyzeInputError(f"{path}: no data rows")


def _read_columns(spec: AnalyzeSpec) -> list[SignalRows]:
    rows = read_rows(spec.input, spec.column_roles, CheckOptions(spec.threshold, spec.uncertainty))
    return [signal_rows(rows, spec.group_col, keep="model" in rows.frame.columns)]


for _road in (Road("signal_table", "a run's tables/signals.parquet, or Parquet in its schema", _is_signal_table,
                   _read_signal_table, _run_comparisons, checked=False),
              Road("in_turn", "Parquet of five columns without a model column, one setting at a time",
                   _wants_in_turn, _read_in_turn, in_turn=True),
              Road("columns", "CSV, JSONL or Parquet of five columns, read whole", lambda spec: True, _read_columns,
                   fallback=True)):
    ROADS.register(_road.name, _road)
