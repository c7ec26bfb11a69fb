"""Column-wise checks of ``confgrid analyze`` input: ids, numbers, duplicates, each problem by its place.

The rules and messages are those of tests/reference/analyze_rowwise.py (the per-row oracle). Common pyarrow types are
checked with vectorized pyarrow / numpy operations; only values that need Python's own semantics (strings that are not
plain decimals, ``true``/``false``, floats used as ids, nested JSON values) go through the scalar rules, once per
distinct value. Problems are kept as positions and a formatter (:class:`Problems`): millions of bad rows cost arrays,
not strings; the first :data:`KEPT_PROBLEMS` are written out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["CLIP_TOLERANCE", "KEPT_PROBLEMS", "IdColumn", "NumberColumn", "Problems", "check_ids", "duplicates",
           "parse_numbers", "range_check", "sorted_codes"]

#: problems written out as strings (the count is always exact)
KEPT_PROBLEMS = 10_000
#: a confidence or correctness value at most this far outside [0, 1] is clipped (float32 round-off), not rejected
CLIP_TOLERANCE = 1e-6
#: strings parsed by pyarrow's cast (correctly rounded, as Python's float()); others go through float()
_DECIMAL = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"

Formatter = Callable[[np.ndarray], list[str]]


@dataclass
class Problems:
    """Problems of the input by position; ``kind`` orders the problems of one row (structure, roles, duplicate).
    ``add(pos, kind, fmt)``: ``pos`` (int64) line or row numbers; ``fmt(sel)`` the messages of the problems ``sel``
    (indices into ``pos``), without the ``"line N: "`` prefix."""

    unit: str
    parts: list[tuple[np.ndarray, int, Formatter]] = field(default_factory=list)

    def add(self, pos: np.ndarray, kind: int, fmt: Formatter) -> None:
        pos = np.asarray(pos, dtype=np.int64)
        if pos.size:
            self.parts.append((pos, kind, fmt))

    def count(self) -> int:
        return int(sum(p.size for p, _, _ in self.parts))

    def keyed(self, k: int = KEPT_PROBLEMS) -> list[tuple[int, int, str]]:
        """The first ``k`` problems in file order as ``(pos, kind, "line N: message")``."""
        if not self.parts:
            return []
        pos = np.concatenate([p for p, _, _ in self.parts])
        kind = np.concatenate([np.full(p.size, kd, dtype=np.int64) for p, kd, _ in self.parts])
        part = np.concatenate([np.full(p.size, i, dtype=np.int64) for i, (p, _, _) in enumerate(self.parts)])
        local = np.concatenate([np.arange(p.size, dtype=np.int64) for p, _, _ in self.parts])
        order = np.lexsort((local, part, kind, pos))[:k]
        out: list[tuple[int, int, str]] = [None] * order.size  # type: ignore[list-item]
        for i in np.unique(part[order]):
            at = np.flatnonzero(part[order] == i)
            msgs = self.parts[i][2](local[order[at]])
            for j, m in zip(at, msgs, strict=True):
                out[j] = (int(pos[order[j]]), int(kind[order[j]]), f"{self.unit} {int(pos[order[j]])}: {m}")
        return out


# --- scalar rules (the per-row reader's), used on distinct values only ---


def _missing(v: Any) -> str | None:
    if v is None:
        return "missing (null)"
    if isinstance(v, float) and math.isnan(v):
        return "missing (NaN)"
    if isinstance(v, str) and not v.strip():
        return "missing (empty)"
    return None


def _id(v: Any, label: str) -> tuple[str | None, str | None]:
    why = _missing(v)
    if why is not None:
        return None, f"{label} is {why}"
    if isinstance(v, (list, dict)):
        return None, f"{label} must be a single value, got {json.dumps(v)[:40]}"
    return str(v), None


def _number(v: Any, role: str, label: str) -> tuple[float, str | None, str]:
    """``(x, message, shown)``: the value before the range check, or nan and why not; ``shown`` as messages print it."""
    why = _missing(v)
    if why is not None:
        return math.nan, f"{label} is {why}", ""
    if isinstance(v, (bool, int, float, np.integer, np.floating)):
        return float(v), None, str(v)
    if isinstance(v, str):
        s = v.strip()
        if role == "correct" and s.lower() in ("true", "false"):
            return (1.0 if s.lower() == "true" else 0.0), None, s
        try:
            x = float(s)
        except ValueError:
            return math.nan, f"{label} {v!r} is not a number", s
        if math.isnan(x):
            return math.nan, f"{label} is missing ({s!r})", s
        return x, None, s
    return math.nan, f"{label} {json.dumps(v, default=str)[:40]} is not a number", ""


# --- ids ---


@dataclass
class IdColumn:
    """A checked id column: ``codes`` (int64, -1 where bad) into ``categories`` (str, sorted as Python sorts str)."""

    codes: np.ndarray
    categories: list[str]
    bad: np.ndarray  # row indices with a problem
    messages: list[str]  # distinct messages
    message_codes: np.ndarray  # per bad row, index into messages

    def formatter(self) -> Formatter:
        return lambda sel: [self.messages[c] for c in self.message_codes[sel]]


def _combine(arr):
    """One array from a chunked one; dictionary chunks get one shared dictionary (small for setting, signal)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            return arr.chunk(0)
        if pa.types.is_dictionary(arr.type) and arr.num_chunks:
            arr = arr.unify_dictionaries()
            indices = pa.concat_arrays([c.indices for c in arr.chunks])
            return pa.DictionaryArray.from_arrays(indices, arr.chunk(0).dictionary)
        return arr.combine_chunks()
    return arr


def sorted_codes(codes: np.ndarray, cats: list[str]) -> tuple[np.ndarray, list[str]]:
    """Merge equal categories and sort them (Python str order); ``codes`` remapped, -1 kept."""
    uniq, inv = np.unique(np.array(cats, dtype=object), return_inverse=True) if cats else (np.array([], object), [])
    remap = np.append(np.asarray(inv, dtype=np.int64), -1)
    return remap[codes], [str(u) for u in uniq]


def check_ids(arr: pa.Array | pa.ChunkedArray, label: str) -> IdColumn:
    """Check an id column (setting, item_id, signal, model) of ``n`` rows: a value is missing when null, NaN or blank
    (the message says which); a JSON list or object is not an id; any other value becomes ``str(value)``."""
    arr = _combine(arr)
    n = len(arr)
    t = getattr(arr, "type", None)  # None: Python values (PyValues), checked one by one
    if t is not None and pa.types.is_dictionary(t):
        inner = check_ids(arr.dictionary, label)
        idx = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False)
        null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        safe = np.where(null, 0, idx).astype(np.int64) if n else np.zeros(0, np.int64)
        codes = inner.codes[safe] if inner.codes.size else np.full(n, -1, np.int64)
        codes = np.where(null, -1, codes)
        dict_msg = np.full(len(arr.dictionary), -1, np.int64)
        dict_msg[inner.bad] = inner.message_codes
        messages = list(inner.messages)
        row_msg = np.where(null, len(messages), dict_msg[safe] if dict_msg.size else -1)
        messages.append(f"{label} is missing (null)")
        bad = np.flatnonzero(row_msg >= 0)
        return IdColumn(codes, inner.categories, bad, messages, row_msg[bad])
    if t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)):
        null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        s = arr if not pa.types.is_integer(t) else pc.cast(arr, pa.string())
        enc = pc.dictionary_encode(s)
        # categories in Python's str order (UTF-8 byte order is code-point order): sort the distinct values once
        order = pc.array_sort_indices(enc.dictionary)
        rank = np.empty(len(order), np.int64)
        rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
        ordered = enc.dictionary.take(order)
        idx = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False)
        codes = np.where(null, -1, rank[idx] if rank.size else -1).astype(np.int64)
        cats = ordered.to_pylist()
        # only a distinct value without an ASCII letter or digit can be blank: those go through the scalar rule
        plain = np.asarray(pc.match_substring_regex(ordered, "[0-9A-Za-z]").to_numpy(zero_copy_only=False), bool)
        cat_msg, seen = np.full(len(cats), -1, np.int64), {}
        for c in np.flatnonzero(~plain):
            _, msg = _id(cats[c], label)
            if msg is not None:
                cat_msg[c] = seen.setdefault(msg, len(seen))
        messages = list(seen)
        row_msg = np.full(n, -1, np.int64)
        if seen:
            row_msg = np.where(codes >= 0, cat_msg[np.maximum(codes, 0)], -1)
            codes = np.where(row_msg >= 0, -1, codes)
        if null.any():
            row_msg[null] = len(messages)
            messages.append(f"{label} is missing (null)")
        bad = np.flatnonzero(row_msg >= 0)
        return IdColumn(codes, cats, bad, messages, row_msg[bad])
    # floats, booleans, nested values: the scalar rule on each distinct value
    values = arr.to_pylist()
    cache: dict[Any, tuple[int, int]] = {}
    cats, messages = [], []
    codes, row_msg = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for i, v in enumerate(values):
        key = (type(v), json.dumps(v, sort_keys=True, default=str)) if isinstance(v, (list, dict)) else (type(v), v)
        if isinstance(v, float) and math.isnan(v):
            key = (float, "nan")
        hit = cache.get(key)
        if hit is None:
            value, msg = _id(v, label)
            if msg is None:
                hit = (len(cats), -1)
                cats.append(value)
            else:
                if msg not in messages:
                    messages.append(msg)
                hit = (-1, messages.index(msg))
            cache[key] = hit
        codes[i], row_msg[i] = hit
    codes, cats = sorted_codes(codes, cats)
    bad = np.flatnonzero(row_msg >= 0)
    return IdColumn(codes, cats, bad, messages, row_msg[bad])


# --- numbers ---


@dataclass
class NumberColumn:
    """A parsed number column before the range check: ``x`` (float64, nan where ``bad``), the parse problems, and
    ``shown(rows)`` giving the values as the messages print them (``str(v)``, or the stripped string)."""

    x: np.ndarray
    bad: np.ndarray
    fmt: Formatter
    shown: Callable[[np.ndarray], list[str]]


def _shown(arr: pa.Array) -> Callable[[np.ndarray], list[str]]:
    """The values of some rows as messages print them: a string stripped, anything else ``str(v)``."""
    return lambda rows: [v.strip() if isinstance(v, str) else str(v)
                         for v in arr.take(pa.array(rows, pa.int64())).to_pylist()]


def parse_numbers(arr: pa.Array | pa.ChunkedArray, role: str, label: str) -> NumberColumn:
    """Parse a number column (confidence, correct) of ``n`` rows (the range: :func:`range_check`). Numbers and booleans
    are taken as they are; strings as Python's ``float()`` parses them (``true``/``false`` too for ``correct``); null,
    NaN and blank are missing; anything else is not a number."""
    arr = _combine(arr)
    t = getattr(arr, "type", None)  # None: Python values (PyValues), parsed one by one
    if t is not None and pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t) and t != pa.float16()
                          or pa.types.is_boolean(t) or pa.types.is_null(t)):  # numbers: null and NaN are missing
        null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        x = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=True)
        x[null] = math.nan
        nan = np.isnan(x) & ~null
        bad = np.flatnonzero(null | nan)
        return NumberColumn(x, bad, lambda sel, n=nan[bad]: [f"{label} is missing ({'NaN' if n[i] else 'null'})"
                                                              for i in sel], _shown(arr))
    n = len(arr)
    x = np.full(n, math.nan)
    if t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t)) and arr.null_count == 0:
        try:  # every value a number pyarrow parses (as Python's float() would: correctly rounded)
            fast = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            fast = None
        if fast is not None and not np.isnan(fast).any():
            return NumberColumn(fast.astype(np.float64, copy=True), np.zeros(0, np.int64), lambda sel: [], _shown(arr))
    if t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        simple = np.asarray(pc.fill_null(pc.match_substring_regex(arr, _DECIMAL), False)
                            .to_numpy(zero_copy_only=False), dtype=bool)
        if simple.any():
            x[simple] = pc.cast(arr.filter(pa.array(simple)), pa.float64()).to_numpy(zero_copy_only=False)
        rest = np.flatnonzero(~simple & ~null)
        values = arr.take(pa.array(rest, pa.int64())).to_pylist() if rest.size else []
    else:
        null = np.zeros(n, bool)
        rest = np.arange(n)
        values = arr.to_pylist()
    messages: dict[int, str] = {}
    cache: dict[Any, tuple[float, str | None]] = {}
    for i, v in zip(rest, values, strict=True):
        key = (type(v), json.dumps(v, default=str)) if isinstance(v, (list, dict)) else (type(v), v)
        hit = cache.get(key)
        if hit is None:
            xv, msg, _ = _number(v, role, label)
            hit = cache[key] = (xv, msg)
        x[i] = hit[0]
        if hit[1] is not None:
            messages[int(i)] = hit[1]
    bad_parse = np.array(sorted(messages), dtype=np.int64)
    bad = np.union1d(np.flatnonzero(null), bad_parse)
    null_msg = f"{label} is missing (null)"

    def fmt(sel: np.ndarray) -> list[str]:
        return [messages.get(int(bad[i]), null_msg) for i in sel]

    return NumberColumn(x, bad, fmt, _shown(arr))


def range_check(col: NumberColumn, role: str, label: str, tol: float = CLIP_TOLERANCE
                ) -> tuple[np.ndarray, np.ndarray, Formatter, np.ndarray]:
    """Values in [0, 1]: ``(values, bad_rows, fmt, clipped_rows)``. A value within ``tol`` outside [0, 1] (float32
    round-off: 1.0000001) is clipped to the nearest bound and listed in ``clipped_rows``; a value further out is a
    problem, with the hint for ``correct`` that the per-row reader gave."""
    x = col.x.copy()
    with np.errstate(invalid="ignore"):
        outside = ~np.isnan(x) & ~((x >= 0.0) & (x <= 1.0))
        near = outside & (x >= -tol) & (x <= 1.0 + tol)
    clipped = np.flatnonzero(near)
    x[clipped] = np.clip(x[clipped], 0.0, 1.0)
    far = np.flatnonzero(outside & ~near)
    x[far] = math.nan
    hint = " (use 0/1 or a graded value in between)" if role == "correct" else ""

    def fmt(sel: np.ndarray) -> list[str]:
        return [f"{label} {s} is outside [0, 1]{hint}" for s in col.shown(far[sel])]

    return x, far, fmt, clipped


def duplicates(keys: list[np.ndarray], pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows repeating an earlier row's key (every code >= 0): ``(rows, first_rows)``, both int64, in row order."""
    ok = np.ones(pos.size, bool)
    for k in keys:
        ok &= k >= 0
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return rows, rows
    sizes = [int(k.max()) + 1 for k in keys]
    if math.prod(sizes) < 2 ** 62:  # one int64 key per row
        every = rows.size == pos.size  # no bad key: no gather
        key = np.zeros(rows.size, np.int64)
        for k, size in zip(keys, sizes, strict=True):
            key *= size
            key += k if every else k[rows]
        index = pd.Index(key)
        if index.is_unique:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        dup = index.duplicated(keep="first")
        first_of = pd.Series(rows[~dup], index=key[~dup])
        return rows[dup], first_of.reindex(key[dup]).to_numpy(np.int64)
    frame = pd.DataFrame({f"k{i}": k[rows] for i, k in enumerate(keys)})
    dup = frame.duplicated(keep="first").to_numpy()
    if not dup.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = frame.assign(row=rows).groupby(list(frame.columns), sort=False)["row"].transform("first").to_numpy()
    return rows[dup], first[dup]
