"""The per-row reader of ``confgrid analyze`` as it was before the column-wise one (commit 5a5d572), kept verbatim.

Not product code: the reference that tests/flows/analyze/test_analyze_scale.py compares
flows/analyze/input.py against (same accepted rows, same problems), and the
"before" of benchmarks/analyze_bench.py. Its original docstring follows.

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
        if r not in given and cols[r] in [cols[x] for x in ROLES]:
            del cols[r]
    names = list(cols.values())
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        roles = [f"{r}={c!r}" for r, c in cols.items() if c in clash]
        raise AnalyzeInputError(f"one column cannot serve two roles: {', '.join(roles)}")
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
    values: dict[str, list[Any]] = {r: [] for r in ROLES}
    where, pos, problems = [], [], []
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header, index, last = None, {}, 0
        for row in reader:
            start, last = last + 1, reader.line_num  # a quoted field may span lines
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if header is None:
                header = [h.strip() for h in row]
                _missing_columns(path, header, cols)
                dup = sorted({cols[r] for r in ROLES if header.count(cols[r]) > 1})
                if dup:
                    raise AnalyzeInputError(f"{path}: header line {start} repeats column(s) {', '.join(dup)}")
                index = {r: header.index(cols[r]) for r in ROLES}
                for r in OPTIONAL_ROLES:
                    if r in cols and cols[r] in header:
                        index[r] = header.index(cols[r])
                        values[r] = []
                continue
            if len(row) != len(header):
                problems.append((start, f"line {start}: {len(row)} fields, but the header has {len(header)}"))
            for r in index:
                values[r].append(row[index[r]] if index[r] < len(row) else None)
            where.append(f"line {start}")
            pos.append(start)
    if header is None:
        raise AnalyzeInputError(f"{path}: empty file (expected a header row naming the columns)")
    return _Raw(values, where, pos, problems)


def _read_jsonl(path: Path, cols: dict[str, str]) -> _Raw:
    values: dict[str, list[Any]] = {r: [] for r in ROLES}
    where, pos, problems, seen = [], [], [], {}
    with open(path, encoding="utf-8-sig") as f:
        for no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                problems.append((no, f"line {no}: not valid JSON ({exc.msg} at character {exc.pos + 1})"))
                continue
            if not isinstance(rec, dict):
                problems.append((no, f"line {no}: expected a JSON object, got {type(rec).__name__}"))
                continue
            for k in rec:
                seen.setdefault(k, None)
            for r in (*ROLES, *(o for o in OPTIONAL_ROLES if o in cols)):
                values.setdefault(r, []).append(rec.get(cols[r]))
            where.append(f"line {no}")
            pos.append(no)
    if where:
        _missing_columns(path, list(seen), cols)
    elif not problems:
        raise AnalyzeInputError(f"{path}: no records (expected one JSON object per line)")
    for r in OPTIONAL_ROLES:
        if r not in cols or cols[r] not in seen:
            values.pop(r, None)
    return _Raw(values, where, pos, problems)


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
    """Read and check an input file.

    Parameters
    ----------
    path : path
        ``.csv``, ``.jsonl`` / ``.ndjson`` or ``.parquet`` / ``.pq``.
    columns : mapping, optional
        Role -> column name for the roles of :data:`ROLES` that are named
        differently in the file.

    Returns
    -------
    rows : DataFrame
        Columns ``setting``, ``item_id``, ``signal`` (str), ``confidence``,
        ``correct`` (float64), one row per input row, in file order.
    where : Series of str
        Each row's place in the file (``"line 5"``, ``"row 3"``), same index.

    Raises
    ------
    AnalyzeInputError
        Unsupported extension, missing file or columns, or bad rows (all of
        them in :attr:`AnalyzeInputError.problems`).
    """
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


def _missing(v: Any) -> str | None:
    if v is None:
        return "missing (null)"
    if isinstance(v, float) and math.isnan(v):
        return "missing (NaN)"
    if isinstance(v, str) and not v.strip():
        return "missing (empty)"
    return None


def _id(v: Any, role: str, label: str) -> tuple[str | None, str | None]:
    why = _missing(v)
    if why is not None:
        return None, f"{label} is {why}"
    if isinstance(v, (list, dict)):
        return None, f"{label} must be a single value, got {json.dumps(v)[:40]}"
    return str(v), None


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
