"""Reading and checking the input of ``confgrid analyze``: CSV, JSON Lines or Parquet, every bad row by its place.

The column roles are :data:`ROLES` and :data:`OPTIONAL_ROLES` (flows/analyze/read.py). Reading (read.py) and checking
(check.py) are column-wise. Bad input raises :class:`AnalyzeInputError` listing the problems, with hints (percentages,
uncertainty scores); nothing is computed then. A confidence or correctness value within 1e-6 outside [0, 1] is clipped
with an :class:`AnalyzeWarning`; ``threshold`` and ``uncertainty`` (:data:`UNCERTAINTY`) change how numbers are read.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from scipy.special import expit

from confgrid.analysis.signals import SCHEMA
from confgrid.flows.analyze.check import (KEPT_PROBLEMS, IdColumn, Problems, check_ids, duplicates, parse_numbers,
                                          range_check, sorted_codes)
from confgrid.flows.analyze.read import FLAGS as _FLAGS
from confgrid.flows.analyze.read import (ID_ROLES, NAMED_ONLY, OPTIONAL_ROLES, ROLES, AnalyzeInputError, Chunk,
                                         read_csv, read_jsonl, read_parquet)
from confgrid.registry import Registry

__all__ = ["ALIGN", "MAX_PROBLEMS", "SignalRows", "check_clusters", "signal_rows", "UNCERTAINTY",
           "UncertaintyTransform", "INPUT_FORMATS", "InputFormat", "AnalyzeWarning", "CheckOptions", "InputRows",
           "check_chunk", "input_format", "raise_problems", "read_rows", "role_columns"]

@dataclass(frozen=True)
class InputFormat:
    """A file format ``confgrid analyze`` reads: its extensions, what it is, and its chunk reader."""

    name: str
    suffixes: tuple[str, ...]
    description: str
    read: Callable[[Path, dict[str, str]], Chunk]


#: The input formats by name (the one Registry class), chosen by the file's extension.
INPUT_FORMATS: Registry[InputFormat] = Registry("input format", value_type=InputFormat)
for _f in (InputFormat("csv", (".csv",), "CSV with a header row", read_csv),
           InputFormat("jsonl", (".jsonl", ".ndjson"), "JSON Lines", read_jsonl),
           InputFormat("parquet", (".parquet", ".pq"), "Parquet", read_parquet)):
    INPUT_FORMATS.register(_f.name, _f)
#: problems listed in an input error before "... and K more"
MAX_PROBLEMS = 20


def _rank(u: np.ndarray, groups: np.ndarray) -> np.ndarray:
    frame = pd.DataFrame({"g": groups, "u": u})
    r = frame.groupby("g", sort=False)["u"].rank(method="average").to_numpy()
    n = frame.groupby("g", sort=False)["u"].transform("count").to_numpy().astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 1, (n - r) / (n - 1), 0.5)


@dataclass(frozen=True)
class UncertaintyTransform:
    """A ``--uncertainty`` transform of an uncertainty score u (lower = more confident) to a confidence c.

    ``apply(u, groups)``: float64 u (n,) (NaN stays NaN) to c in [0, 1], ``groups`` (n,) int64 the (setting, signal)
    of each row; monotone decreasing within a group, so AUROC and AURC are those of -u. ``nonnegative``: u >= 0.
    """

    name: str
    rule: str
    apply: Callable[[np.ndarray, np.ndarray], np.ndarray]
    nonnegative: bool = False
    #: within its (setting, signal) group, not row by row (a rank)
    grouped: bool = False


#: ``--uncertainty`` transforms by name (the one Registry class).
UNCERTAINTY: Registry[UncertaintyTransform] = Registry("uncertainty transform", value_type=UncertaintyTransform)
for _t in (
    UncertaintyTransform("exp-neg", "c = exp(-u), u >= 0 (an NLL or entropy in nats: c is the geometric-mean "
                         "probability)", lambda u, groups: np.exp(-u), nonnegative=True),
    UncertaintyTransform("sigmoid-neg", "c = 1 / (1 + exp(u)), any real u", lambda u, groups: expit(-u)),
    UncertaintyTransform("rank", "c = (n - r) / (n - 1) with r the average rank (1..n, ties share) of u among the n "
                         "rows of its setting and signal; c = 0.5 when n = 1", _rank, grouped=True),
):
    UNCERTAINTY.register(_t.name, _t)


class AnalyzeWarning(UserWarning):
    """Something the user should know about the analysis (items left out by alignment, clipped values...)."""


@dataclass(frozen=True)
class CheckOptions:
    """How numbers are read: ``threshold`` (correct >= T becomes 1, else 0; None: keep graded values) and
    ``uncertainty`` (a key of :data:`UNCERTAINTY`: the confidence column holds an uncertainty score)."""

    threshold: float | None = None
    uncertainty: str | None = None

    def __post_init__(self) -> None:
        t = self.threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < float(t) <= 1.0):
            raise AnalyzeInputError(f"--threshold: must be a number in (0, 1], got {t!r} (correct >= T counts as "
                                    "correct; the Rank-Calibration convention for ROUGE is 0.7)")
        if self.uncertainty is not None and self.uncertainty not in UNCERTAINTY:
            raise AnalyzeInputError(f"--uncertainty: unknown transform {self.uncertainty!r}; choose from "
                                    f"{', '.join(UNCERTAINTY.names())}")


@dataclass
class _Stats:
    """Range statistics of the parsed confidence values, for the hints (summed over chunks)."""

    lo: float = math.inf
    hi: float = -math.inf
    n_far: int = 0  # finite values outside [0, 1] beyond the clip tolerance
    n_above_one: int = 0
    n_finite: int = 0
    n_nonfinite: int = 0  # inf, -inf (NaN is an empty cell, reported by the reader)
    nonfinite: list[str] = field(default_factory=list)  # the first few, "inf at line 7"

    @classmethod
    def of(cls, x: np.ndarray, far: np.ndarray, pos: np.ndarray, unit: str) -> _Stats:
        """The statistics of a chunk's parsed values ``x`` (n,) whose rows ``far`` lie outside [0, 1]."""
        ok, inf = x[np.isfinite(x)], far[np.isinf(x[far])]
        return cls(float(ok.min(initial=math.inf)), float(ok.max(initial=-math.inf)), far.size - inf.size,
                   int((ok > 1.0).sum()), ok.size, inf.size,
                   [f"{float(x[i])!r} at {unit} {pos[i]}" for i in inf[:_SHOWN_NONFINITE]])

    def merge(self, other: _Stats) -> None:
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        for count in ("n_far", "n_above_one", "n_finite", "n_nonfinite"):
            setattr(self, count, getattr(self, count) + getattr(other, count))
        self.nonfinite += other.nonfinite[: max(0, _SHOWN_NONFINITE - len(self.nonfinite))]


#: Non-finite values the hint names by their place.
_SHOWN_NONFINITE = 5


@dataclass
class InputRows:
    """Checked input rows. ``frame``: columns ``setting``, ``item_id``, ``signal`` (Categorical of str, sorted),
    ``confidence``, ``correct`` (float64 in [0, 1]); with a model column also ``model`` and ``dataset`` first and
    ``setting`` = ``"model/dataset"``; with ``--group-col`` also ``group`` (Categorical of str, the cluster of each
    row). ``pos``: each row's line (``unit`` ``"line"``) or 0-based row (``"row"``) number. ``n_graded``: correctness
    values strictly between 0 and 1 before any threshold.
    """

    frame: pd.DataFrame
    pos: np.ndarray
    unit: str
    n_graded: int = 0
    stats: dict[str, _Stats] = field(default_factory=dict)

    def objects(self) -> pd.DataFrame:
        """``frame`` with its Categorical columns as object columns of str (what the model comparison takes)."""
        f = self.frame
        return f.assign(**{c: f[c].astype(object) for c in f.columns if isinstance(f[c].dtype, pd.CategoricalDtype)})



def role_columns(columns: Mapping[str, str] | None) -> dict[str, str]:
    """Role -> column name of an input, from ``--*-col`` overrides (AnalyzeInputError: an unknown role, an empty
    name, a column in two roles)."""
    cols = {r: r for r in (*ROLES, *OPTIONAL_ROLES)}
    for role, name in (columns or {}).items():
        if role not in cols:
            raise AnalyzeInputError(f"columns: unknown role {role!r}; roles are {', '.join((*ROLES, *OPTIONAL_ROLES))}")
        if name is not None:
            if not str(name).strip():
                raise AnalyzeInputError(f"{_FLAGS[role]}: empty column name")
            cols[role] = str(name)
    given = {r for r, n in (columns or {}).items() if n is not None}
    for r in OPTIONAL_ROLES:  # an optional role named like a required one by default is simply not read
        if r not in given and (r in NAMED_ONLY or cols[r] in [cols[x] for x in ROLES]):
            del cols[r]
    names = list(cols.values())
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        roles = [f"{r}={c!r}" for r, c in cols.items() if c in clash]
        raise AnalyzeInputError(f"one column cannot serve two roles: {', '.join(roles)}")
    return cols


def input_format(path: Path) -> str:
    """``"csv"``, ``"jsonl"`` or ``"parquet"`` from the extension; :class:`AnalyzeInputError` otherwise or if absent."""
    by_suffix = {s: f.name for _, f in INPUT_FORMATS.items() for s in f.suffixes}
    fmt = by_suffix.get(path.suffix.lower())
    if fmt is None:
        raise AnalyzeInputError(
            f"INPUT {str(path)!r}: unsupported extension {path.suffix!r}; use one of "
            f"{', '.join(sorted(by_suffix))} ({', '.join(f.description for _, f in INPUT_FORMATS.items())})")
    if not path.is_file():
        raise AnalyzeInputError(f"INPUT {str(path)!r}: no such file")
    return fmt


# --- checking a chunk of rows ---


def _label(cols: dict[str, str], role: str) -> str:
    return role if cols[role] == role else f"{cols[role]!r} ({role})"


def _categorical(codes: np.ndarray, cats: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object), validate=False)


def _composite(model: IdColumn, dataset: IdColumn) -> tuple[np.ndarray, list[str]]:
    """``"model/dataset"`` codes (-1 unless both are valid); equal strings merged, categories sorted."""
    ok, n_d = (model.codes >= 0) & (dataset.codes >= 0), max(len(dataset.categories), 1)
    uniq, inv = np.unique(np.where(ok, model.codes * n_d + dataset.codes, -1)[ok], return_inverse=True)
    codes = np.full(ok.size, -1, np.int64)
    codes[ok] = inv
    return sorted_codes(codes, [f"{model.categories[k // n_d]}/{dataset.categories[k % n_d]}" for k in uniq.tolist()])


def _merged_ties(groups: np.ndarray, u: np.ndarray, c: np.ndarray) -> int:
    """Groups where the transform mapped distinct u to one c (float round-off)."""
    ok = ~np.isnan(u)
    a = pd.DataFrame({"g": groups[ok], "v": u[ok]}).drop_duplicates().groupby("g").size()
    b = pd.DataFrame({"g": groups[ok], "v": c[ok]}).drop_duplicates().groupby("g").size()
    return int((a != b.reindex(a.index)).sum())


def check_chunk(chunk: Chunk, cols: dict[str, str], options: CheckOptions = CheckOptions()
                ) -> tuple[InputRows, Problems]:
    """The rows of ``chunk`` checked column by column (every row, nan / missing codes where a value is bad) and their
    problems; warns (:class:`AnalyzeWarning`) about clipped values and ties made by an uncertainty transform."""
    problems = Problems(chunk.unit)
    if chunk.structural:
        at, said = zip(*chunk.structural, strict=True)
        problems.add(np.array(at), 0, lambda sel: [said[i] for i in sel])
    present = [r for r in (*ROLES, *OPTIONAL_ROLES) if r in chunk.arrays]
    kind = {r: i + 1 for i, r in enumerate(present)}
    ids, nums, stats = {}, {}, {}
    for role in present:
        label = _label(cols, role)
        if role in ID_ROLES:
            col = check_ids(chunk.arrays[role], label)
            problems.add(chunk.pos[col.bad], kind[role], col.formatter())
            ids[role] = col
            continue
        parsed = parse_numbers(chunk.arrays[role], role, label)
        problems.add(chunk.pos[parsed.bad], kind[role], parsed.fmt)
        if role == "confidence" and options.uncertainty is not None:
            nums[role] = parsed  # transformed below, once the groups are known
            continue
        x, far, fmt, clipped = range_check(parsed, role, label)
        problems.add(chunk.pos[far], kind[role], fmt)
        stats[role] = _Stats.of(parsed.x, far, chunk.pos, chunk.unit)
        if clipped.size:
            warnings.warn(f"{label}: {clipped.size} value(s) within 1e-6 outside [0, 1] (float32 round-off) "
                          f"clipped to [0, 1]; first at {chunk.unit} {chunk.pos[clipped[0]]}", AnalyzeWarning,
                          stacklevel=3)
        nums[role] = x
    if "model" in ids:
        setting_codes, setting_cats = _composite(ids["model"], ids["setting"])
    else:
        setting_codes, setting_cats = ids["setting"].codes, ids["setting"].categories
    if options.uncertainty is not None:
        parsed = nums["confidence"]
        u = parsed.x
        label = _label(cols, "confidence")
        transform = UNCERTAINTY.get(options.uncertainty)
        bad_u = np.flatnonzero(~np.isnan(u) & (~np.isfinite(u) | ((u < 0) if transform.nonnegative else False)))
        anyreal = [t.name for _, t in UNCERTAINTY.items() if not t.nonnegative]
        need = f"a finite u >= 0 (use {' or '.join(anyreal)} for any real u)" if transform.nonnegative \
            else "a finite value"
        problems.add(chunk.pos[bad_u], kind["confidence"],
                     lambda sel, b=bad_u, p=parsed: [f"{label} {s} is not an uncertainty score for --uncertainty "
                                                     f"{options.uncertainty}: need {need}" for s in p.shown(b[sel])])
        u = u.copy()
        u[bad_u] = math.nan
        groups = setting_codes * (len(ids["signal"].categories) + 1) + ids["signal"].codes
        c = transform.apply(u, groups)
        if not transform.grouped:
            merged = _merged_ties(groups, u, c)
            if merged:
                warnings.warn(f"--uncertainty {options.uncertainty}: distinct uncertainty values became one "
                              f"confidence (float round-off) in {merged} (setting, signal) group(s); AUROC and AURC "
                              "there are not exactly those of -u; --uncertainty rank keeps every order exactly",
                              AnalyzeWarning, stacklevel=3)
        nums["confidence"] = c
    keys = [setting_codes, ids["item_id"].codes, ids["signal"].codes]
    dup, first = duplicates(keys, chunk.pos)
    if dup.size:
        names = [setting_cats, ids["item_id"].categories, ids["signal"].categories]

        def fmt(sel: np.ndarray) -> list[str]:
            out = []
            for i in sel:
                k = [names[j][keys[j][dup[i]]] for j in range(3)]
                out.append(f"duplicate (setting, item_id, signal) = ({k[0]!r}, {k[1]!r}, {k[2]!r}); first at "
                           f"{chunk.unit} {chunk.pos[first[i]]}")
            return out

        problems.add(chunk.pos[dup], len(present) + 1, fmt)
    y = nums["correct"]
    n_graded = int(((y > 0.0) & (y < 1.0)).sum())
    if options.threshold is not None:
        y = np.where(np.isnan(y), y, (y >= float(options.threshold)).astype(np.float64))
    cat = {r: _categorical(c.codes, c.categories) for r, c in ids.items()}
    frame = pd.DataFrame({**({"model": cat["model"], "dataset": cat["setting"]} if "model" in ids else {}),
                          "setting": _categorical(setting_codes, setting_cats), "item_id": cat["item_id"],
                          "signal": cat["signal"], "confidence": nums["confidence"], "correct": y,
                          **({"group": cat["group"]} if "group" in ids else {})})  # group: each row's cluster
    return InputRows(frame, chunk.pos, chunk.unit, n_graded, stats), problems


def _hints(stats: dict[str, _Stats], cols: dict[str, str]) -> list[str]:
    out = []
    for role in ("confidence", "correct"):
        st = stats.get(role)
        if st is None:
            continue
        label = _label(cols, role)
        if st.n_nonfinite:
            more = f" (first {len(st.nonfinite)} shown)" if st.n_nonfinite > len(st.nonfinite) else ""
            out.append(f"{label}: {st.n_nonfinite} non-finite value(s): {', '.join(st.nonfinite)}{more}; {role} "
                       "must be a finite number in [0, 1] (an empty cell is a missing value)")
        if st.n_far == 0 or 2 * st.n_far < st.n_finite:  # a hint speaks of a column, not of a few stray values
            continue
        if st.lo >= 0.0 and st.hi <= 100.0 and st.n_above_one:
            verb = "exceeds" if st.n_above_one == 1 else "exceed"
            out.append(f"{label}: every value lies in [0, 100] and {st.n_above_one} {verb} 1; they look like "
                       f"percentages: divide the column by 100 ({role} must lie in [0, 1])")
        elif role == "confidence":
            what = "negative values" if st.lo < 0 else f"values up to {st.hi:g}"
            logp = "; if they are log-probabilities (<= 0), give exp(value) instead" if st.hi <= 0 else ""
            out.append(f"{label}: {what} (range {st.lo:g} to {st.hi:g}) look like an uncertainty score (lower = "
                       f"more confident: an NLL, an entropy), not a confidence; pass --uncertainty exp-neg "
                       f"(c = exp(-u), u >= 0), sigmoid-neg (c = 1 / (1 + exp(u))) or rank; each keeps the order, "
                       f"so AUROC and AURC are exact{logp}")
    return out


def raise_problems(path: Path, keyed: list[tuple[int, int, str]], total: int,
                   stats: Sequence[dict[str, _Stats]] = (), cols: dict[str, str] | None = None) -> None:
    """Raise :class:`AnalyzeInputError` listing the ``total`` problems (if any) from the first ones ``keyed`` in file
    order (:meth:`~confgrid.flows.analyze.check.Problems.keyed`), with hints from ``stats``."""
    if not total:
        return
    merged: dict[str, _Stats] = {}
    for part in stats:
        for role, st in part.items():
            merged.setdefault(role, _Stats()).merge(st)
    hints = _hints(merged, cols or role_columns(None))
    msgs = [m for _, _, m in keyed]
    shown = "\n".join(f"  {m}" for m in msgs[:MAX_PROBLEMS])
    more = f"\n  ... and {total - MAX_PROBLEMS} more problem(s)" if total > MAX_PROBLEMS else ""
    tail = "".join(f"\nhint: {h}" for h in hints)
    raise AnalyzeInputError(
        f"{path}: {total} problem(s) in the input; nothing was computed or written.\n{shown}{more}{tail}", msgs,
        total, hints)


# --- entry points ---


def read_rows(path: str | Path, columns: Mapping[str, str] | None = None,
              options: CheckOptions = CheckOptions()) -> InputRows:
    """A whole input file read and checked column-wise (:class:`InputRows`, in file order).

    ``columns``: role -> column name for the roles named differently; ``"group"`` names the cluster column, then
    required. Raises :class:`AnalyzeInputError` on an unsupported extension, a missing file or column, or bad rows
    (``problems``, ``n_problems``, ``hints``): missing values (empty, null, NaN), non-numbers, confidence or correct
    outside [0, 1] by more than 1e-6, duplicate (setting, item_id, signal) rows (naming both places), malformed lines.
    """
    path, cols = Path(path), role_columns(columns)
    try:
        chunk = INPUT_FORMATS.get(input_format(path)).read(path, cols)
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start:exc.start + 1].hex()
        raise AnalyzeInputError(f"{path}: not UTF-8 text (invalid byte 0x{bad}); save the file as UTF-8") from None
    except csv.Error as exc:
        raise AnalyzeInputError(f"{path}: unreadable CSV ({exc})") from None
    rows, problems = check_chunk(chunk, cols, options)
    raise_problems(path, problems.keyed(KEPT_PROBLEMS), problems.count(), [rows.stats], cols)
    if rows.pos.size == 0:
        raise AnalyzeInputError(f"{path}: no data rows")
    return rows


# --- checked rows as signal rows (the run's schema): what every input road gives the evaluator ---

#: the ``align`` label of five-column rows: a setting's signals are compared on the items every one of them scored
ALIGN = "input"


@dataclass(frozen=True)
class SignalRows:
    """A part of an input as signal rows: what a road of flows/analyze/roads.py gives the evaluator."""

    #: rows of the one signal table (analysis/signals.py ``SCHEMA``, conformed), ordered so that ``plan_units``
    #: meets the units, signals and items in the order of the tables
    table: pd.DataFrame
    #: input rows this part was read from
    n_rows: int
    #: correctness values strictly between 0 and 1, before any threshold
    n_graded: int = 0
    #: ``(setting, signal) -> "item item ..."``: the first five items (sorted as str) the alignment leaves out of
    #: the signal; empty for a signal table (its ``left_out_examples`` stay empty)
    examples: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: the checked rows of a whole-file read with a model column (the comparison across models reads them)
    rows: InputRows | None = field(default=None, repr=False)


def check_clusters(rows: InputRows, column: str) -> None:
    """Raise :class:`AnalyzeInputError` when the rows of one (setting, item) name different clusters in the group
    column ``column`` (``--group-col``): the first such setting (as settings sort), its first five such items in file
    order, each with the places of its rows. An item belongs to one cluster (analysis/clusters.py)."""
    f = rows.frame
    s, i, g = (f[c].cat.codes.to_numpy().astype(np.int64) for c in ("setting", "item_id", "group"))
    key = s * max(len(f["item_id"].cat.categories), 1) + i
    first = pd.Series(g).groupby(key).transform("first").to_numpy()
    off = np.flatnonzero(g != first)
    if not off.size:
        return
    setting = int(s[off].min())
    mine = np.flatnonzero(s == setting)
    mixed = pd.unique(i[mine][np.isin(key[mine], key[off])])  # in order of first appearance
    items, groups = f["item_id"].cat.categories, f["group"].cat.categories
    lines = []
    for item in mixed[:5]:
        at = mine[i[mine] == item]
        seen = ", ".join(f"{groups[g[r]]!r} at {rows.unit} {rows.pos[r]}" for r in at)
        lines.append(f"item {items[item]!r}: {seen}")
    more = f" (and {len(mixed) - 5} more items)" if len(mixed) > 5 else ""
    raise AnalyzeInputError(
        f"setting {f['setting'].cat.categories[setting]!r}: the rows of an item must name one cluster in the group "
        f"column {column!r} (--group-col), but {len(mixed)} item(s) name several{more}:\n  " + "\n  ".join(lines),
        lines)


def _schema_table(n: int, given: Mapping[str, Any]) -> pd.DataFrame:
    """``n`` signal rows in the columns of analysis/signals.py ``SCHEMA``, text as Categoricals (megabytes per million
    rows). ``given``: a column's Categorical, float64 array or one str for all; the rest empty, as ``conform`` fills."""
    def column(name: str, typ: pa.DataType) -> Any:
        value = given.get(name)
        if value is not None and not isinstance(value, str):
            return value
        if pa.types.is_string(typ):
            return pd.Categorical.from_codes(np.zeros(n, np.int8), pd.Index(["" if value is None else value],
                                                                            dtype=object))
        if pa.types.is_floating(typ):
            return np.full(n, np.nan)
        if name == "replaced":
            return np.zeros(n, bool)
        if pa.types.is_integer(typ):
            return pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, bool))
        return pd.arrays.BooleanArray(np.zeros(n, bool), np.ones(n, bool))

    return pd.DataFrame({c: column(c, t) for c, t in zip(SCHEMA.names, SCHEMA.types, strict=True)})


def signal_rows(rows: InputRows, group_col: str | None = None, keep: bool = False) -> SignalRows:
    """Checked five-column rows as signal rows of kind ``input``, aligned by :data:`ALIGN`.

    Rows are sorted by (setting, signal, item) as str, the order ``plan_units`` keeps. A setting is a unit on its own
    (``model``, ``dataset`` and ``target_kind`` empty: its seed is ``setting_seed(setting, "", seed)``). With
    ``group_col`` the clusters go to the ``cluster`` column (:func:`check_clusters` first: AnalyzeInputError for an
    item in several). ``keep``: keep ``rows`` (the comparison across models).
    """
    f = rows.frame
    if group_col is not None:
        check_clusters(rows, group_col)
    codes = {c: f[c].cat.codes.to_numpy() for c in ("setting", "signal", "item_id", "group") if c in f.columns}
    order = np.lexsort((codes["item_id"], codes["signal"], codes["setting"]))
    text = {c: pd.Categorical.from_codes(code[order], f[c].cat.categories) for c, code in codes.items()}
    table = _schema_table(len(order), {**text, "cluster": text.pop("group", text["item_id"]), "kind": "input",
                                       "target_kind": "", "align": ALIGN, "status": "ok",
                                       "confidence": f["confidence"].to_numpy()[order],
                                       "target": f["correct"].to_numpy()[order]})
    # the items a setting's signals do not all have, per (setting, signal): its first five, sorted as str
    per = pd.DataFrame({"s": codes["setting"], "i": codes["item_id"], "g": codes["signal"]})
    n_sig = per.groupby("s")["g"].transform("nunique")
    left = per[(per.groupby(["s", "i"])["g"].transform("size") < n_sig).to_numpy()].sort_values(["s", "g", "i"])
    cats = {c: f[c].cat.categories for c in ("setting", "signal", "item_id")}
    examples = {(cats["setting"][s], cats["signal"][g]): " ".join(str(cats["item_id"][i]) for i in grp["i"][:5])
                for (s, g), grp in left.groupby(["s", "g"], sort=False)}
    return SignalRows(table, int(rows.pos.size), rows.n_graded, examples, rows if keep else None)
