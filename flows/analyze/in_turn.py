"""``confgrid analyze`` one setting at a time: vectorized alignment, named warnings, Parquet settings in turn, Ray.

Alignment (:func:`align`) pairs the signals of a setting on the items every
signal scored, as before, on categorical codes instead of Python sets.

Out of core (:func:`analyze_in_turn`): for a Parquet input without a model
column, the setting column is read first (one row group at a time); then each
setting's rows are read from the row groups that hold it, checked, aligned
and bootstrapped, and only its result tables are kept. Peak memory is about
that of the largest setting plus one row group of the setting column, not of
the whole file. With Ray each setting is one task (one CPU) that reads its own
rows from the file, so the file must be readable at the same path by every
worker. The numbers equal the whole-file path's (same seeds, same arrays).

Clusters (``--group-col``): each setting's aligned items carry their cluster
(flows/analyze/groups.py), on both paths and with or without Ray; an item whose
rows name different clusters is an input error.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.analysis.registry import METRICS
from confgrid.analysis.resampling import setting_seed
from confgrid.analysis.closure import edge_bins
from confgrid.analysis.evaluation import Comparisons, UnitPlan, plan_unit
from confgrid.flows.analyze.check import Problems, check_ids
from confgrid.flows.analyze.groups import setting_groups
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units, ensure_ray
from confgrid.flows.analyze.input import (
    AnalyzeWarning,
    CheckOptions,
    InputRows,
    check_chunk,
    input_format,
    raise_problems,
)
from confgrid.flows.analyze.read import (
    AnalyzeInputError,
    Chunk,
    open_parquet,
    read_parquet,
)

__all__ = [
    "ALL_PAIRS",
    "Setting",
    "align",
    "unit_of",
    "analyze_in_turn",
    "in_turn_wanted",
    "named_undefined",
    "object_frame",
    "parquet_settings",
]

ALIGNMENT_COLUMNS = ["setting", "signal", "n_items", "n_used", "n_left_out", "left_out_examples"]


@dataclass
class Setting:
    """One setting's aligned arrays: ``confidence`` and ``correct`` of shape (S, n) float64, signals (list) and
    items (a pandas Index) sorted as str; with ``--group-col``, ``groups`` (n,) int64 cluster codes (ordered as
    the labels sort) and ``n_clusters``."""

    name: str
    signals: list[str]
    items: Any
    confidence: np.ndarray
    correct: np.ndarray
    seed: int
    messages: list[str] = field(default_factory=list)
    groups: np.ndarray | None = None
    n_clusters: int | None = None


def _split(frame: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """(setting name, row indices) per setting present, sorted by name."""
    codes = frame["setting"].cat.codes.to_numpy()
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    bounds = np.flatnonzero(np.diff(sc)) + 1
    cats = frame["setting"].cat.categories
    out = []
    for rows in np.split(order, bounds) if order.size else []:
        if codes[rows[0]] >= 0:
            out.append((str(cats[codes[rows[0]]]), rows))
    return out


def _align_one(name: str, sub: pd.DataFrame, base_seed: int, group_col: str | None = None,
               pos: np.ndarray | None = None, unit: str = "row") -> tuple[Setting, list[dict[str, Any]]]:
    """Align one setting's rows (``pos``, ``unit``: their places, for the --group-col messages)."""
    sig_codes = sub["signal"].cat.codes.to_numpy()
    item_codes = sub["item_id"].cat.codes.to_numpy().astype(np.int64)
    sig_cats, item_cats = sub["signal"].cat.categories, sub["item_id"].cat.categories
    present = np.unique(sig_codes)
    signals = [str(sig_cats[c]) for c in present]
    count = np.bincount(item_codes, minlength=len(item_cats))
    common_codes = np.flatnonzero(count == present.size)  # each (item, signal) at most once: checked
    col = np.full(len(item_cats), -1, np.int64)
    col[common_codes] = np.arange(common_codes.size)
    n = common_codes.size
    conf, corr = np.empty((present.size, n)), np.empty((present.size, n))
    table, left_msg = [], []
    c_all, y_all = sub["confidence"].to_numpy(np.float64), sub["correct"].to_numpy(np.float64)
    for s, code in enumerate(present):
        rows = np.flatnonzero(sig_codes == code)
        k = col[item_codes[rows]]
        used = k >= 0
        conf[s, k[used]] = c_all[rows[used]]
        corr[s, k[used]] = y_all[rows[used]]
        left = np.sort(item_codes[rows[~used]])
        table.append({"setting": name, "signal": signals[s], "n_items": int(rows.size), "n_used": int(n),
                      "n_left_out": int(left.size),
                      "left_out_examples": " ".join(str(item_cats[i]) for i in left[:5])})
        if left.size:
            left_msg.append(f"{signals[s]!r}: {left.size} of {rows.size}")
    msgs = []
    if left_msg:
        msgs.append(f"setting {name!r}: items not scored by every signal are left out of the paired analysis "
                    f"({', '.join(left_msg)}); {n} items used. See alignment.csv.")
    items = item_cats.take(common_codes)  # an Index of str (no Python list of a million items)
    st = Setting(name, signals, items, conf, corr, setting_seed(name, "", base_seed), msgs)
    if group_col is not None:
        g = sub["group"].cat
        st.groups = setting_groups(name, group_col, item_codes, g.codes.to_numpy().astype(np.int64), common_codes,
                                   item_cats, g.categories, np.zeros(len(sub), np.int64) if pos is None else pos,
                                   unit)
        st.n_clusters = int(np.unique(st.groups).size)
    return st, table


def align(rows: InputRows | pd.DataFrame, base_seed: int, warn: bool = True,
          group_col: str | None = None) -> tuple[list[Setting], pd.DataFrame]:
    """Every setting aligned (see the module docstring); warns (:class:`AnalyzeWarning`) about left-out items.

    ``group_col`` (the frame then has a ``group`` column): each setting's clusters, see :func:`setting_groups`
    (raises :class:`AnalyzeInputError` when an item's rows name different clusters).
    """
    frame = rows.frame if isinstance(rows, InputRows) else rows
    pos = rows.pos if isinstance(rows, InputRows) else np.arange(len(frame), dtype=np.int64)
    unit = rows.unit if isinstance(rows, InputRows) else "row"
    settings, table = [], []
    for name, idx in _split(frame):
        st, t = _align_one(name, frame.iloc[idx], base_seed, group_col, pos[idx], unit)
        settings.append(st)
        table.extend(t)
        if warn:
            for m in st.messages:
                warnings.warn(m, AnalyzeWarning, stacklevel=2)
    return settings, pd.DataFrame(table, columns=ALIGNMENT_COLUMNS)


#: what ``confgrid analyze`` compares in a generic input: every ordered pair of signals of a setting
ALL_PAIRS = Comparisons(against=None, all_pairs=True)


def unit_of(st: Setting, comparisons: Comparisons = ALL_PAIRS, edge_bins: Sequence[int] = ()) -> UnitPlan:
    """The one evaluator's unit of an aligned setting (every signal on the setting's common items, ``kind``
    ``input``; analysis/evaluation.py); its seed is the setting's (``setting_seed(setting, "", seed)``);
    ``edge_bins``: the bin counts whose edges the confidences are counted on (analysis/closure.py)."""
    S, n = len(st.signals), len(st.items)
    items = np.asarray(st.items, dtype=object) if n else np.empty(0, dtype=object)
    return plan_unit({"setting": st.name}, items, st.signals, st.confidence.reshape(S, n),
                     st.correct.reshape(S, n), np.ones((S, n), dtype=bool), ["input"] * S,
                     {s: {"kind": "input"} for s in st.signals}, comparisons, st.seed, st.groups,
                     edge_bins=edge_bins)


def named_undefined(st: Setting, point: np.ndarray, metrics: list[str], n_bins: int) -> list[str]:
    """Messages for the undefined point estimates of ``st``, each naming the setting, the signal and the metric."""
    out = []
    for s, j in zip(*np.nonzero(np.isnan(point)), strict=True):
        info = METRICS.get(metrics[j])
        kw = {"n_bins": n_bins} if info.takes_n_bins else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UndefinedMetricWarning)
            info.func(st.confidence[s], st.correct[s], **kw)
        why = "; ".join(str(w.message) for w in caught if issubclass(w.category, UndefinedMetricWarning))
        out.append(f"setting {st.name!r}, signal {st.signals[s]!r}, {metrics[j]}: {why or 'undefined (nan)'}")
    return out


# ---------------------------------------------------------------------------
# the whole file at once
# ---------------------------------------------------------------------------


def object_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical id columns as object columns of str (what the model comparison takes)."""
    return frame.assign(**{c: frame[c].astype(object) for c in frame.columns
                           if isinstance(frame[c].dtype, pd.CategoricalDtype)})


def in_turn_wanted(path: Path, cols: dict[str, str], in_turn: bool | None) -> bool:
    """Whether to analyze one setting at a time: Parquet without a model column (by default, or asked)."""
    fmt = input_format(path)
    has_model = False
    if fmt == "parquet" and "model" in cols:
        has_model = cols["model"] in open_parquet(path).schema_arrow.names
    ok = fmt == "parquet" and not has_model
    if in_turn and not ok:

        raise AnalyzeInputError(f"--in-turn: needs a Parquet input without a model column, got {path.name!r}"
                                f"{' (it has a model column)' if has_model else ''}; convert the file with "
                                "pandas.read_csv(...).to_parquet(...) or leave --in-turn out")
    return ok if in_turn is None else bool(in_turn)



# ---------------------------------------------------------------------------
# Parquet settings in turn
# ---------------------------------------------------------------------------


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


@dataclass
class Outcome:
    """What one setting gives back: its problems (as ``(pos, kind, message)``, the first ones) and count, hints'
    statistics, the aligned setting without its arrays, alignment rows, result and ``(kind, message)`` warnings;
    ``error``: an input error found at alignment (``(message, problems)``: an item naming several clusters)."""

    name: str | None
    problems: list[tuple[int, int, str]]
    n_problems: int
    stats: dict
    n_rows: int
    n_graded: int
    setting: Setting | None = None
    alignment: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    messages: list[tuple[str, str]] = field(default_factory=list)
    error: tuple[str, list[str]] | None = None
    unit: UnitPlan | None = None


def _one(plan: Plan, name: str | None, options: CheckOptions, metrics: list[str], n_resamples: int, seed: int,
         chunk_size: int, n_bins: int, compute: bool, comparisons: Comparisons = ALL_PAIRS) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalyzeWarning)
        rows, problems = check_chunk(_setting_chunk(plan, name), plan.cols, options)
    messages = [("analyze", str(w.message)) for w in caught if issubclass(w.category, AnalyzeWarning)]
    out = Outcome(name, problems.keyed(), problems.count(), rows.stats, int(rows.pos.size), rows.n_graded,
                  messages=messages)
    if name is None or out.n_problems or not compute:
        return out
    try:  # the group column (--group-col) is the role "group" of plan.cols
        st, table = _align_one(name, rows.frame, seed, plan.cols.get("group"), rows.pos, rows.unit)
    except AnalyzeInputError as exc:  # sent back as data: a Ray task's exception would not keep .problems
        out.error = (str(exc), exc.problems)
        return out
    del rows
    out.unit = unit_of(st, comparisons, edge_bins(metrics, n_bins))
    with warnings.catch_warnings():  # re-said below with setting and signal
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        res = bootstrap_units([out.unit], metrics, n_resamples, n_bins=n_bins, chunk_size=chunk_size)[0]
    undefined = named_undefined(st, res.point, metrics, n_bins)
    out.messages += [("analyze", m) for m in st.messages] + [("undefined", m) for m in undefined]
    out.unit.drop_arrays()
    # the arrays and item ids are not needed any more (only their count is): memory stays that of one setting
    st.confidence = st.correct = np.zeros((len(st.signals), 0))
    st.items, st.groups = range(len(st.items)), None
    out.setting, out.alignment, out.result = st, table, res
    return out


def analyze_in_turn(path: Path, cols: dict[str, str], options: CheckOptions, metrics: list[str], n_resamples: int,
                    seed: int, chunk_size: int, n_bins: int, use_ray: bool = False, num_workers: int | None = None,
                    comparisons: Comparisons = ALL_PAIRS) -> tuple[list[Outcome], Plan]:
    """Check and analyze each setting of a Parquet file in turn (or as Ray tasks); raise every problem at the end.

    Returns the outcomes in setting order (each with its result) and the plan.
    Warnings (left-out items, clipped values, undefined metrics) are emitted in
    setting order. Raises :class:`AnalyzeInputError` with the problems of every
    setting in file order, as the whole-file reader would.
    """
    plan = parquet_settings(path, cols)
    names: list[str | None] = list(plan.groups) + ([None] if plan.bad_groups else [])
    args = (options, metrics, n_resamples, seed, chunk_size, n_bins)
    outcomes: list[Outcome] = []
    kw = {"comparisons": comparisons}
    if use_ray:
        outcomes = _ray_outcomes(plan, names, args, num_workers, comparisons)
    else:
        failed = False
        for name in names:
            out = _one(plan, name, *args, compute=not failed, **kw)
            failed = failed or out.n_problems > 0 or out.error is not None
            outcomes.append(out)
    keyed = sorted((p for o in outcomes for p in o.problems), key=lambda p: (p[0], p[1]))
    total = sum(o.n_problems for o in outcomes)
    if total:
        _raise(path, keyed, total, [o.stats for o in outcomes], cols)
    # bad rows first, then the first setting whose items name several clusters (as the whole-file read)
    for o in outcomes:
        if o.error is not None:
            raise AnalyzeInputError(*o.error)
    if sum(o.n_rows for o in outcomes) == 0:
        raise AnalyzeInputError(f"{path}: no data rows")
    for o in outcomes:
        for cat, m in o.messages:
            warnings.warn(m, UndefinedMetricWarning if cat == "undefined" else AnalyzeWarning, stacklevel=2)
    return [o for o in outcomes if o.name is not None], plan


def _raise(path: Path, keyed: list[tuple[int, int, str]], total: int, stats: list[dict], cols: dict[str, str]) -> None:
    """The input error of the whole file from the settings' first problems (already in file order)."""
    class _Keyed(Problems):
        def count(self) -> int:
            return total

        def keyed(self, k: int = 0) -> list[tuple[int, int, str]]:
            return keyed

    raise_problems(path, _Keyed("row"), stats, cols)


def _ray_outcomes(plan: Plan, names: list[str | None], args: tuple, num_workers: int | None,
                  comparisons: Comparisons = ALL_PAIRS) -> list[Outcome]:
    import ray  # lazy: Ray starts only when --ray asks for it

    ensure_ray()
    task = ray.remote(num_cpus=1)(_one)
    limit = num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending: dict[Any, int] = {}
    results: dict[int, Outcome] = {}
    queue = list(enumerate(names))
    while queue or pending:
        while queue and len(pending) < limit:
            i, name = queue.pop(0)
            pending[task.remote(plan, name, *args, compute=True, comparisons=comparisons)] = i
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            results[pending.pop(ref)] = ray.get(ref)
    return [results[i] for i in range(len(names))]
