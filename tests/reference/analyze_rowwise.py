"""The per-row reader of ``confgrid analyze`` before the column-wise one (commit 5a5d572): a test oracle.

Not product code: the reference that tests/flows/analyze/test_analyze_scale.py compares
flows/analyze/input.py against (same accepted rows, same problems). Its rules are those of commit 5a5d572; the
column mapping, the JSON Lines reader and the missing-value rule are written here in their own way (whole-file
reads, tables of rules), so that the oracle shares no code with the product it checks. Its original docstring
follows.

Reading and checking the input of ``confgrid analyze``: CSV, JSON Lines or Parquet, every bad row by its place.

Split from flows/analyze/analysis.py (the analysis itself). The roles of the input
columns are :data:`ROLES` (``setting``, ``item_id``, ``signal``,
``confidence``, ``correct``) and :data:`OPTIONAL_ROLES` (``model``: read when
the file has the column, to compare models). Bad input raises
:class:`AnalyzeInputError` listing every problem; nothing is computed then.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = ["ROLES", "OPTIONAL_ROLES", "MAX_PROBLEMS", "AnalyzeInputError", "read_input"]

#: the five roles of the input columns, in report order
ROLES = ("setting", "item_id", "signal", "confidence", "correct")
#: optional roles: read when the file has the column (``model``: compare models, study 001)
OPTIONAL_ROLES = ("model",)
_FLAGS = {"setting": "--setting-col", "item_id": "--item-col", "signal": "--signal-col",
          "confidence": "--confidence-col", "correct": "--correct-col", "model": "--model-col"}
_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
#: problems listed in an input error before "... and K more"
MAX_PROBLEMS = 20

class AnalyzeInputError(ValueError):
    """The input or an option cannot be analyzed; nothing was written.

    Attributes
    ----------
    problems : list of str
        Every problem found (``"line 5: confidence 1.5 is outside [0, 1]"``),
        in file order; the message lists the first :data:`MAX_PROBLEMS`.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


def _columns(columns: Mapping[str, str] | None) -> dict[str, str]:
    """Role -> column name: the names given, every required role's own name otherwise, and an optional role only
    when named or when its own name is not taken by a required role."""
    given = {r: n for r, n in (columns or {}).items() if n is not None}
    unknown = [r for r in (columns or {}) if r not in (*ROLES, *OPTIONAL_ROLES)]
    empty = [r for r in given if r not in unknown and not str(given[r]).strip()]
    first = next((r for r in (columns or {}) if r in unknown or r in empty), None)
    if first in unknown:
        raise AnalyzeInputError(f"columns: unknown role {first!r}; roles are {', '.join((*ROLES, *OPTIONAL_ROLES))}")
    if first is not None:
        raise AnalyzeInputError(f"{_FLAGS[first]}: empty column name")
    cols = {r: str(given.get(r, r)) for r in ROLES}
    cols.update({r: str(given.get(r, r)) for r in OPTIONAL_ROLES if r in given or r not in cols.values()})
    taken = Counter(cols.values())
    if max(taken.values()) > 1:
        pairs = [f"{r}={c!r}" for r, c in cols.items() if taken[c] > 1]
        raise AnalyzeInputError(f"one column cannot serve two roles: {', '.join(pairs)}")
    return cols


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------


@dataclass
class _Raw:
    """Required columns of the input as Python values, with each row's place in the file."""

    values: dict[str, list[Any]]  # role -> values
    where: list[str]  # "line 5" / "row 3"
    pos: list[int]  # sort key of each row (line or row number)
    problems: list[tuple[int, str]]  # structural problems (malformed lines), by position


def _format(path: Path) -> str:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise AnalyzeInputError(
            f"INPUT {str(path)!r}: unsupported extension {path.suffix!r}; use one of "
            f"{', '.join(sorted(_FORMATS))} (CSV with a header row, JSON Lines, Parquet)"
        )
    return fmt


def _missing_columns(path: Path, found: Sequence[str], cols: dict[str, str]) -> None:
    missing = [r for r in ROLES if cols[r] not in found]
    if missing:
        lack = "; ".join(f"{cols[r]!r} (the {r} column; map another name with {_FLAGS[r]} NAME)" for r in missing)
        shown = ", ".join(repr(c) for c in found) if found else "none"
        raise AnalyzeInputError(f"{path}: missing column(s) {lack}. Columns found: {shown}")


def _read_csv(path: Path, cols: dict[str, str]) -> _Raw:
    """Every record of the file at once, each numbered by its first line (a quoted field may span lines)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        ends = [(0, None)] + [(reader.line_num, row) for row in reader]
    records = [(ends[k - 1][0] + 1, row) for k, (_, row) in enumerate(ends) if k and row
               and not (len(row) == 1 and not row[0].strip())]
    if not records:
        raise AnalyzeInputError(f"{path}: empty file (expected a header row naming the columns)")
    (start, head), body = records[0], records[1:]
    header = [h.strip() for h in head]
    _missing_columns(path, header, cols)
    repeated = sorted({cols[r] for r in ROLES if header.count(cols[r]) > 1})
    if repeated:
        raise AnalyzeInputError(f"{path}: header line {start} repeats column(s) {', '.join(repeated)}")
    index = {r: header.index(cols[r]) for r in (*ROLES, *OPTIONAL_ROLES) if r in cols and cols[r] in header}
    problems = [(no, f"line {no}: {len(row)} fields, but the header has {len(header)}") for no, row in body
                if len(row) != len(header)]
    values = {r: [row[i] if i < len(row) else None for _, row in body] for r, i in index.items()}
    return _Raw(values, [f"line {no}" for no, _ in body], [no for no, _ in body], problems)


def _read_jsonl(path: Path, cols: dict[str, str]) -> _Raw:
    """Every line of the file at once (universal newlines, as iterating over the text file did)."""
    with open(path, encoding="utf-8-sig") as f:
        lines = f.read().split("\n")
    records, problems = [], []
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append((no, f"line {no}: not valid JSON ({exc.msg} at character {exc.pos + 1})"))
        else:
            if isinstance(rec, dict):
                records.append((no, rec))
            else:
                problems.append((no, f"line {no}: expected a JSON object, got {type(rec).__name__}"))
    seen = list(dict.fromkeys(k for _, rec in records for k in rec))
    if records:
        _missing_columns(path, seen, cols)
    elif not problems:
        raise AnalyzeInputError(f"{path}: no records (expected one JSON object per line)")
    roles = [*ROLES, *(r for r in OPTIONAL_ROLES if r in cols and cols[r] in seen)]
    values = {r: [rec.get(cols[r]) for _, rec in records] for r in roles}
    return _Raw(values, [f"line {no}" for no, _ in records], [no for no, _ in records], problems)


def _read_parquet(path: Path, cols: dict[str, str]) -> _Raw:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input error
        raise AnalyzeInputError(f"{path}: cannot read as Parquet ({exc})") from None
    names = pf.schema_arrow.names
    _missing_columns(path, names, cols)
    roles = [*ROLES, *(r for r in OPTIONAL_ROLES if r in cols and cols[r] in names)]
    table = pf.read(columns=[cols[r] for r in roles])
    values = {r: table.column(cols[r]).to_pylist() for r in roles}
    n = table.num_rows
    return _Raw(values, [f"row {i}" for i in range(n)], list(range(n)), [])


def read_input(path: str | Path, columns: Mapping[str, str] | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Read and check an input file: ``(rows, where)``, rows with the five roles (and ``model``, ``dataset``),
    where each row's place; :class:`AnalyzeInputError` listing every problem (missing file or columns, bad rows)."""
    path = Path(path)
    fmt = _format(path)
    if not path.is_file():
        raise AnalyzeInputError(f"INPUT {str(path)!r}: no such file")
    cols = _columns(columns)
    try:
        raw = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}[fmt](path, cols)
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start:exc.start + 1].hex()
        raise AnalyzeInputError(f"{path}: not UTF-8 text (invalid byte 0x{bad}); save the file as UTF-8") from None
    except csv.Error as exc:
        raise AnalyzeInputError(f"{path}: unreadable CSV ({exc})") from None
    problems = list(raw.problems)
    n = len(raw.where)
    ok = np.ones(n, dtype=bool)
    parsed: dict[str, list[Any]] = {}
    for role in (r for r in (*ROLES, *OPTIONAL_ROLES) if r in raw.values):
        label = role if cols[role] == role else f"{cols[role]!r} ({role})"
        out = []
        for i, v in enumerate(raw.values[role]):
            value, msg = (_id if role in ("setting", "item_id", "signal", "model") else _number)(v, role, label)
            if msg is not None:
                problems.append((raw.pos[i], f"{raw.where[i]}: {msg}"))
                ok[i] = False
            out.append(value)
        parsed[role] = out
    rows = pd.DataFrame({
        "setting": pd.Series(parsed["setting"], dtype=object),
        "item_id": pd.Series(parsed["item_id"], dtype=object),
        "signal": pd.Series(parsed["signal"], dtype=object),
        "confidence": pd.Series(parsed["confidence"], dtype=np.float64),
        "correct": pd.Series(parsed["correct"], dtype=np.float64),
    })
    if "model" in parsed:  # one setting per (model, setting): each model's own metrics; the comparison pairs them
        rows.insert(0, "model", pd.Series(parsed["model"], dtype=object))
        rows.insert(1, "dataset", rows["setting"])
        rows["setting"] = [f"{m}/{d}" if m is not None and d is not None else None
                           for m, d in zip(rows["model"], rows["dataset"], strict=True)]
    where = pd.Series(raw.where, dtype=object)
    keyed = rows[["setting", "item_id", "signal"]].notna().all(axis=1).to_numpy()
    if keyed.any():
        keys = rows.loc[keyed, ["setting", "item_id", "signal"]]
        dup = keys.duplicated(keep="first")
        if dup.any():
            first = {}
            for i, k in zip(keys.index, map(tuple, keys.to_numpy()), strict=True):
                if k in first:
                    problems.append((raw.pos[i], f"{raw.where[i]}: duplicate (setting, item_id, signal) = "
                                                 f"({k[0]!r}, {k[1]!r}, {k[2]!r}); first at {raw.where[first[k]]}"))
                else:
                    first[k] = i
    if problems:
        problems.sort(key=lambda p: p[0])  # stable: within a row, role order
        msgs = [m for _, m in problems]
        shown = "\n".join(f"  {m}" for m in msgs[:MAX_PROBLEMS])
        more = f"\n  ... and {len(msgs) - MAX_PROBLEMS} more problem(s)" if len(msgs) > MAX_PROBLEMS else ""
        raise AnalyzeInputError(
            f"{path}: {len(msgs)} problem(s) in the input; nothing was computed or written.\n{shown}{more}", msgs
        )
    if n == 0:
        raise AnalyzeInputError(f"{path}: no data rows")
    return rows, where


#: (test, what) of a missing value, tried in turn
_MISSING = ((lambda v: v is None, "null"), (lambda v: isinstance(v, float) and v != v, "NaN"),
            (lambda v: isinstance(v, str) and v.strip() == "", "empty"))


def _missing(v: Any) -> str | None:
    return next((f"missing ({what})" for test, what in _MISSING if test(v)), None)


def _id(v: Any, role: str, label: str) -> tuple[str | None, str | None]:
    if isinstance(v, (list, dict)):  # never missing
        return None, f"{label} must be a single value, got {json.dumps(v)[:40]}"
    why = _missing(v)
    return (None, f"{label} is {why}") if why else (str(v), None)


def _number(v: Any, role: str, label: str) -> tuple[float, str | None]:
    why = _missing(v)
    if why is not None:
        return math.nan, f"{label} is {why}"
    if isinstance(v, bool):
        x = float(v)
    elif isinstance(v, (int, float, np.integer, np.floating)):
        x = float(v)
    elif isinstance(v, str):
        s = v.strip()
        if role == "correct" and s.lower() in ("true", "false"):
            x = 1.0 if s.lower() == "true" else 0.0
        else:
            try:
                x = float(s)
            except ValueError:
                return math.nan, f"{label} {v!r} is not a number"
            if math.isnan(x):
                return math.nan, f"{label} is missing ({s!r})"
    else:
        return math.nan, f"{label} {json.dumps(v, default=str)[:40]} is not a number"
    if not 0.0 <= x <= 1.0:
        hint = " (use 0/1 or a graded value in between)" if role == "correct" else ""
        shown = v.strip() if isinstance(v, str) else str(v)
        return math.nan, f"{label} {shown} is outside [0, 1]{hint}"
    return x, None
