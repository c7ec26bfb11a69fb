"""``read_input``: the column-wise reader's checked rows as the per-row reader (analyze_rowwise.py) gave them, so
the tests compare the two: a frame of object-column ids and float64 numbers, and each row's place in the file."""

from __future__ import annotations

import pandas as pd

from confgrid.flows.analyze.input import CheckOptions, read_rows
from confgrid.flows.analyze.read import AnalyzeInputError

__all__ = ["AnalyzeInputError", "read_input"]


def read_input(path, columns=None, options: CheckOptions = CheckOptions()) -> tuple[pd.DataFrame, pd.Series]:
    """``(rows, where)``: :func:`~confgrid.flows.analyze.input.read_rows` with object columns, and each row's place
    (``"line 5"``, ``"row 3"``) on the same index."""
    rows = read_rows(path, columns, options)
    return rows.objects(), pd.Series([f"{rows.unit} {p}" for p in rows.pos.tolist()], dtype=object)
