"""Reading ``confgrid analyze`` input into pyarrow columns, each row with its place in the file.

CSV and JSON Lines go through pyarrow's readers when the file has the plain shape on which they split rows as Python's
``csv`` / ``json`` modules do (every record on one line, no lone carriage return, no NUL byte, valid UTF-8, no ragged
row, for JSON Lines no mixed or nested types in the role columns), else through those modules line by line: the same
columns, line numbers and structural problems either way. Parquet is read whole or by row group (:func:`read_parquet`).
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from confgrid.errors import FieldsPickle

__all__ = ["FLAGS", "HOLDS", "ID_ROLES", "NAMED_ONLY", "OPTIONAL_ROLES", "ROLES", "AnalyzeInputError", "Chunk",
           "PyValues", "missing_columns", "open_parquet", "read_csv", "read_jsonl", "read_parquet"]

#: the five roles of the input columns, in report order
ROLES = ("setting", "item_id", "signal", "confidence", "correct")
#: the roles holding ids (the rest are numbers)
ID_ROLES = ("setting", "item_id", "signal", "model", "group")
#: optional roles: read when the file has the column (``model``: compare models, study 001), ``group`` only when
#: named (the clusters of a cluster bootstrap, ``--group-col``; the file must have it then)
OPTIONAL_ROLES = ("model", "group")
#: optional roles read only when named, and then required
NAMED_ONLY = ("group",)
FLAGS = {"setting": "--setting-col", "item_id": "--item-col", "signal": "--signal-col",
         "confidence": "--confidence-col", "correct": "--correct-col", "model": "--model-col",
         "group": "--group-col"}
#: what each role's column holds (the help of its flag)
HOLDS = {"setting": "the setting (unit of pairing)", "item_id": "the question id", "signal": "the confidence method",
         "confidence": "confidence in [0, 1]", "correct": "correctness (0/1 or in [0, 1])",
         "model": "the model (optional; with two or more models the accuracy-controlled comparison of study 001 runs "
                  "too)", "group": "each item's cluster"}
#: roles with few distinct values: read as dictionary columns where the format allows
_FEW = ("setting", "signal", "model")
_CSV_FIELD_LIMIT = 131072  # csv.field_size_limit() default: longer lines take the csv-module path


class AnalyzeInputError(FieldsPickle, ValueError):
    """The input or an option cannot be analyzed; nothing was written.

    Attributes
    ----------
    problems : list of str
        The problems found (``"line 5: confidence 1.5 is outside [0, 1]"``), in file order (at most
        :data:`~confgrid.flows.analyze.check.KEPT_PROBLEMS`); the message lists the first ``MAX_PROBLEMS``.
    n_problems : int
    hints : list of str
        What to do about them (e.g. percentages: divide by 100), also at the end of the message.
    """

    def __init__(self, message: str, problems: Sequence[str] = (), n_problems: int | None = None,
                 hints: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)
        self.n_problems = len(self.problems) if n_problems is None else int(n_problems)
        self.hints = list(hints)


@dataclass
class Chunk:
    """Role columns of some rows: ``arrays`` (role -> pyarrow array, ``n`` long), ``pos`` (int64 line or row number of
    each row), ``unit`` (``"line"`` / ``"row"``) and structural problems ``(pos, message)``."""

    arrays: dict[str, pa.Array]
    pos: np.ndarray
    unit: str
    structural: list[tuple[int, str]] = field(default_factory=list)


def missing_columns(path: Path, found: Sequence[str], cols: dict[str, str]) -> None:
    """Raise :class:`AnalyzeInputError` naming the role columns absent from ``found`` and the flag to map each."""
    missing = [r for r in (*ROLES, *NAMED_ONLY) if r in cols and cols[r] not in found]
    if missing:
        lack = "; ".join(f"{cols[r]!r} (named by {FLAGS[r]})" if r in NAMED_ONLY
                         else f"{cols[r]!r} (the {r} column; map another name with {FLAGS[r]} NAME)" for r in missing)
        shown = ", ".join(repr(c) for c in found) if found else "none"
        raise AnalyzeInputError(f"{path}: missing column(s) {lack}. Columns found: {shown}")


def _roles_of(cols: dict[str, str], names: Sequence[str]) -> list[str]:
    return [*ROLES, *(r for r in OPTIONAL_ROLES if r in cols and cols[r] in names)]


# --- line structure of a text file (numpy over the bytes, in blocks) ---


def _utf8_ok(data: bytes) -> bool:
    if data.isascii():
        return True
    dec = codecs.getincrementaldecoder("utf-8")()
    try:
        for i in range(0, len(data), 1 << 24):
            dec.decode(data[i:i + (1 << 24)])
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


_BLOCK = 1 << 24


def _lines(data: bytes) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Lines of a text file: ``(bom, start, length without CR/LF, odd number of '"', only blanks)``, or None when the
    file is not plain (invalid UTF-8, a NUL byte, a lone CR)."""
    bom = 3 if data.startswith(codecs.BOM_UTF8) else 0
    if not _utf8_ok(data) or b"\x00" in data or (b"\r" in data and data.count(b"\r") != data.count(b"\r\n")):
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.concatenate([np.flatnonzero(buf[i:i + _BLOCK] == 10) + i for i in range(bom, buf.size, _BLOCK)]
                          or [np.zeros(0, np.int64)]).astype(np.int64)
    if buf.size > bom and data[-1:] != b"\n":
        ends = np.append(ends, buf.size)
    starts = np.concatenate([[bom], ends[:-1] + 1]).astype(np.int64) if ends.size else np.zeros(0, np.int64)
    length = ends - starts
    cr = np.zeros(ends.size, bool)
    has = (length > 0) & (ends < buf.size)
    cr[has] = buf[ends[has] - 1] == 13
    length = length - cr
    quotes = np.concatenate([np.flatnonzero(buf[i:i + _BLOCK] == 34) + i for i in range(bom, buf.size, _BLOCK)]
                            or [np.zeros(0, np.int64)]) if b'"' in data else np.zeros(0, np.int64)
    odd = ((np.searchsorted(quotes, ends) - np.searchsorted(quotes, starts)) % 2).astype(bool)
    blank = length == 0
    first = np.zeros(starts.size, np.uint8)
    first[~blank] = buf[starts[~blank]]
    for i in np.flatnonzero(~blank & ((first == 32) | (first == 9))):  # rare: a line starting with a blank
        blank[i] = not data[starts[i]:starts[i] + length[i]].strip(b" \t")
    return bom, starts, length, odd, blank


# --- CSV ---


def _header(path: Path, header: list[str], cols: dict[str, str], line: int) -> dict[str, int]:
    missing_columns(path, header, cols)
    dup = sorted({cols[r] for r in ROLES if header.count(cols[r]) > 1})
    if dup:
        raise AnalyzeInputError(f"{path}: header line {line} repeats column(s) {', '.join(dup)}")
    return {r: header.index(cols[r]) for r in _roles_of(cols, header)}


def _read_csv_fast(path: Path, data: bytes, cols: dict[str, str]) -> Chunk | None:
    lines = _lines(data)
    if lines is None:
        return None
    _, starts, length, odd, _ = lines
    if odd.any() or (length.size and length.max() > _CSV_FIELD_LIMIT):
        return None  # a quoted field spans lines, or a field the csv module would refuse
    filled = np.flatnonzero(length > 0)
    if filled.size == 0:
        return None
    h = int(filled[0])
    text = data[starts[h]:starts[h] + length[h]].decode("utf-8")
    header = next(csv.reader([text]))
    if len(header) == 1 and not header[0].strip():
        return None
    header = [x.strip() for x in header]
    index = _header(path, header, cols, h + 1)
    body = filled[1:]
    names = [f"c{i}" for i in range(len(header))]
    bad: list[int] = []

    def invalid(row: Any) -> str:
        bad.append(1)
        return "skip"

    offset = int(starts[h] + length[h])
    try:
        table = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(data)[offset:]),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=True),
            parse_options=pcsv.ParseOptions(invalid_row_handler=invalid, newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(include_columns=[names[i] for i in index.values()],
                                                column_types={names[i]: pa.dictionary(pa.int32(), pa.string())
                                                              if r in _FEW else pa.string() for r, i in index.items()},
                                                strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowException):
        return None
    if bad or table.num_rows != body.size:
        return None
    arrays = {r: table.column(names[i]) for r, i in index.items()}
    return Chunk(arrays, body + 1, "line")


def _read_csv_rows(path: Path, cols: dict[str, str]) -> Chunk:
    """The csv-module reader: multi-line quoted fields, blank lines, ragged rows, each by its first line."""
    values: dict[str, list[Any]] = {}
    pos, structural = [], []
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header, index, last = None, {}, 0
        for row in reader:
            start, last = last + 1, reader.line_num  # a quoted field may span lines
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if header is None:
                header = [h.strip() for h in row]
                index = _header(path, header, cols, start)
                values = {r: [] for r in index}
                continue
            if len(row) != len(header):
                structural.append((start, f"{len(row)} fields, but the header has {len(header)}"))
            for r, i in index.items():
                values[r].append(row[i] if i < len(row) else None)
            pos.append(start)
    if header is None:
        raise AnalyzeInputError(f"{path}: empty file (expected a header row naming the columns)")
    return Chunk({r: pa.array(v, pa.string()) for r, v in values.items()}, np.asarray(pos, np.int64), "line",
                 structural)


# --- JSON Lines ---


def _read_jsonl_fast(path: Path, data: bytes, cols: dict[str, str]) -> Chunk | None:
    lines = _lines(data)
    if lines is None:
        return None
    bom, _, _, _, blank = lines
    filled = np.flatnonzero(~blank)  # a line is blank with only spaces/tabs (other whitespace: the json module)
    if filled.size == 0:
        return None
    try:
        table = pjson.read_json(pa.BufferReader(pa.py_buffer(data)[bom:]),
                                read_options=pjson.ReadOptions(use_threads=True, block_size=1 << 24))
    except (pa.ArrowInvalid, pa.ArrowException):
        return None
    if table.num_rows != filled.size:
        return None
    names = table.column_names
    missing_columns(path, names, cols)
    roles = _roles_of(cols, names)
    arrays = {r: table.column(cols[r]) for r in roles}
    for r, a in arrays.items():
        t = a.type
        if pa.types.is_nested(t) or (r in ID_ROLES and pa.types.is_floating(t)):
            return None  # JSON lists/objects and ids that may have been promoted from int: the json module
    return Chunk(arrays, filled + 1, "line")


def _read_jsonl_rows(path: Path, cols: dict[str, str]) -> Chunk:
    values: dict[str, list[Any]] = {r: [] for r in (*ROLES, *(o for o in OPTIONAL_ROLES if o in cols))}
    pos, structural, seen = [], [], {}
    with open(path, encoding="utf-8-sig") as f:
        for no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                structural.append((no, f"not valid JSON ({exc.msg} at character {exc.pos + 1})"))
                continue
            if not isinstance(rec, dict):
                structural.append((no, f"expected a JSON object, got {type(rec).__name__}"))
                continue
            for k in rec:
                seen.setdefault(k, None)
            for r, column in values.items():
                column.append(rec.get(cols[r]))
            pos.append(no)
    if pos:
        missing_columns(path, list(seen), cols)
    elif not structural:
        raise AnalyzeInputError(f"{path}: no records (expected one JSON object per line)")
    for r in OPTIONAL_ROLES:
        if r not in cols or cols[r] not in seen:
            values.pop(r, None)
    return Chunk({r: PyValues(v) for r, v in values.items()}, np.asarray(pos, np.int64), "line", structural)


def read_csv(path: Path, cols: dict[str, str]) -> Chunk:
    """Role columns of a CSV file with a header row (line numbers: the header is line 1 when it is first): the pyarrow
    path on the file's bytes when it takes the file, else the csv module (the bytes freed before)."""
    return _read_csv_fast(path, path.read_bytes(), cols) or _read_csv_rows(path, cols)


def read_jsonl(path: Path, cols: dict[str, str]) -> Chunk:
    """Role columns of a JSON Lines file (line numbers from 1; blank lines skipped, bad lines reported), as
    :func:`read_csv` through pyarrow or the json module."""
    return _read_jsonl_fast(path, path.read_bytes(), cols) or _read_jsonl_rows(path, cols)


class PyValues(list):
    """Python values as the json module gave them (the line-by-line path): the checks take them one by one."""

    def to_pylist(self) -> list[Any]:
        return self

    def take(self, rows: pa.Array) -> PyValues:
        return PyValues(self[i] for i in rows.to_pylist())


# --- Parquet ---


def open_parquet(path: Path, read_dictionary: Sequence[str] | None = None):
    """``pyarrow.parquet.ParquetFile`` or :class:`AnalyzeInputError` naming the file."""
    try:
        return pq.ParquetFile(path, read_dictionary=read_dictionary)
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input error
        raise AnalyzeInputError(f"{path}: cannot read as Parquet ({exc})") from None


def read_parquet(path: Path, cols: dict[str, str], row_groups: Sequence[int] | None = None,
                 roles: Sequence[str] | None = None) -> Chunk:
    """Role columns of a Parquet file (rows numbered from 0), or of some of its row groups."""
    pf = open_parquet(path)
    names = pf.schema_arrow.names
    missing_columns(path, names, cols)
    roles = list(roles) if roles is not None else _roles_of(cols, names)
    few = [cols[r] for r in roles if r in _FEW and pa.types.is_string(pf.schema_arrow.field(cols[r]).type)]
    if few:  # settings, signals, models: few distinct values, read as dictionaries and checked once each
        pf = open_parquet(path, read_dictionary=few)
    columns = [cols[r] for r in roles]
    if row_groups is None:
        table = pf.read(columns=columns)
        pos = np.arange(table.num_rows, dtype=np.int64)
    else:
        meta = pf.metadata
        offsets = np.concatenate([[0], np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])])
        table = pf.read_row_groups(list(row_groups), columns=columns)
        pos = np.concatenate([np.arange(offsets[g], offsets[g + 1], dtype=np.int64) for g in row_groups]) \
            if row_groups else np.zeros(0, np.int64)
    return Chunk({r: table.column(c) for r, c in zip(roles, columns, strict=True)}, pos, "row")
