"""Input contract of the accuracy-controlled comparison (study 001, ACE).

The input is a long table of **own-answer rows**: one row per (model, dataset, confidence method, item), the model's
confidence in its own answer and that answer's correctness.

=========  ===================================================================
column     meaning
=========  ===================================================================
model      the model (one side of a pair), str
dataset    the dataset, str
method     the confidence method (``verbalized``, ``p_true``, ...), str
item_id    the question, str (other types are converted with ``str``)
signal     confidence in the answer, float64 in ``[0, 1]``
correct    correctness, float64 in ``[0, 1]``: 0/1 (``bool`` accepted) or graded
answer     optional: the extracted answer (for :func:`candidates.candidate_pool`)
=========  ===================================================================

Other columns are dropped. :func:`validate_rows` checks everything before any number is computed and raises
:class:`ACEInputError` naming the column, the row and the value.

A **pair** (:class:`Pair`) is two models and a comparison label (``size``, ``mode``, ...); by default every unordered
pair of models, in sorted name order, labelled ``"pair"``. A **cell** (:class:`Cell`) is one pair on one (dataset,
method): the two models' rows matched on the item ids both have (the intersection), sorted as strings so the result
does not depend on the order of the input rows; how many items each side lost is recorded. Gaps are always oriented
``A - B`` with ``A = pair.a``.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "ROW_COLUMNS",
    "KEY_COLUMNS",
    "ACEInputError",
    "ACEWarning",
    "Pair",
    "Cell",
    "Matched",
    "validate_rows",
    "resolve_pairs",
    "matched_cells",
    "check_unit_interval",
]

#: Required columns of the own-answer table, in output order.
ROW_COLUMNS = ("model", "dataset", "method", "item_id", "signal", "correct")
#: Columns that identify a row (must be unique).
KEY_COLUMNS = ("model", "dataset", "method", "item_id")
#: Label of a pair that was not declared.
DEFAULT_LABEL = "pair"


class ACEInputError(ValueError):
    """Bad input to the ACE comparison; the message names the column, row and value."""


class ACEWarning(UserWarning):
    """A diagnostic of the ACE comparison (low effective sample size, dropped items, ...)."""


def check_unit_interval(values, name: str, what: str = "row") -> np.ndarray:
    """``values`` as float64, checked finite and in ``[0, 1]``.

    Parameters
    ----------
    values : array-like of shape (n,)
        Numbers or bools.
    name : str
        The column or argument named in the error.
    what : str
        What one position is called in the error (``"row"``).

    Raises
    ------
    ACEInputError
        If a value is not a number, is missing / non-finite, or lies outside ``[0, 1]``; the message gives the first
        bad position, its value and how many values are bad.
    """
    ser = pd.Series(values)
    if ser.dtype == bool:
        ser = ser.astype(np.float64)
    num = pd.to_numeric(ser, errors="coerce").astype(np.float64)
    arr = num.to_numpy(dtype=np.float64, copy=True)
    not_num = num.isna().to_numpy() & ~ser.isna().to_numpy()
    if not_num.any():
        i = int(np.flatnonzero(not_num)[0])
        raise ACEInputError(f"{name}: {what} {i} holds {ser.iloc[i]!r}, not a number")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ACEInputError(
            f"{name}: {what} {i} is missing or not finite ({float(arr[i])!r}); "
            f"{int(bad.sum())} such value(s); drop or fill them before the comparison"
        )
    out = (arr < 0.0) | (arr > 1.0)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise ACEInputError(
            f"{name}: {what} {i} = {float(arr[i])!r} lies outside the allowed range [0, 1] "
            f"({int(out.sum())} value(s) out of range)"
        )
    return arr


def check_labels(df: pd.DataFrame, col: str, what: str = "row") -> pd.Series:
    """Column ``col`` as ``str``; :class:`ACEInputError` naming the first ``what`` (position) where it is missing."""
    missing = df[col].isna().to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise ACEInputError(f"{col}: {what} {i} is missing; every {what} needs a {col}")
    return df[col].astype(str)


def check_table(df, name: str, columns: Sequence[str]) -> pd.DataFrame:
    """``df`` on a fresh 0-based index; :class:`ACEInputError` if it is no DataFrame or lacks one of ``columns``."""
    if not isinstance(df, pd.DataFrame):
        raise ACEInputError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ACEInputError(f"{name} is missing required column(s) {missing}; it has {[str(c) for c in df.columns]}")
    return df.reset_index(drop=True)


def validate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Check the own-answer table and return it in canonical form.

    Parameters
    ----------
    rows : DataFrame
        Columns :data:`ROW_COLUMNS`, optionally ``answer``; other columns are dropped. Row positions in errors are
        0-based positions in ``rows``.

    Returns
    -------
    DataFrame
        A new frame with ``model``, ``dataset``, ``method``, ``item_id`` as ``str``, ``signal`` and ``correct`` as
        float64 (and ``answer`` as object when given), on a fresh 0-based index.

    Raises
    ------
    ACEInputError
        If ``rows`` is not a DataFrame, a required column is missing (the message lists the missing and the present
        columns), a label is missing, ``signal`` or ``correct`` is not a finite number in ``[0, 1]``, or a (model,
        dataset, method, item_id) key occurs twice (the message names the key and both rows).
    """
    df = check_table(rows, "rows", ROW_COLUMNS)
    out = pd.DataFrame({c: check_labels(df, c) for c in KEY_COLUMNS})
    out["signal"] = check_unit_interval(df["signal"], "signal")
    out["correct"] = check_unit_interval(df["correct"], "correct")
    if "answer" in df.columns:
        out["answer"] = df["answer"].astype(object)
    dup = out.duplicated(list(KEY_COLUMNS), keep=False).to_numpy()
    if dup.any():
        pos = np.flatnonzero(dup)
        first = pos[0]
        key = tuple(out.loc[first, list(KEY_COLUMNS)])
        same = [int(p) for p in pos if tuple(out.loc[p, list(KEY_COLUMNS)]) == key]
        raise ACEInputError(
            f"duplicate (model, dataset, method, item_id) = {key} in rows {same}; "
            "each model may score each item once per dataset and method"
        )
    return out


@dataclass(frozen=True)
class Pair:
    """Two models compared, ``A = a`` and ``B = b``; every gap is ``metric(A) - metric(B)``.

    Attributes
    ----------
    a, b : str
        Model names, different.
    label : str
        Comparison type (``"size"``, ``"mode"``, ...; ``"pair"`` when not declared).
    """

    a: str
    b: str
    label: str = DEFAULT_LABEL

    def __post_init__(self) -> None:
        for name in ("a", "b", "label"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ACEInputError(f"pair.{name} must be a non-empty string, got {v!r}")
        if self.a == self.b:
            raise ACEInputError(f"a pair compares two different models; got a = b = {self.a!r}")

    @property
    def name(self) -> str:
        """``"a vs b"`` (used to seed the cell's random draws)."""
        return f"{self.a} vs {self.b}"


def resolve_pairs(models: Sequence[str], pairs=None) -> tuple[Pair, ...]:
    """The pairs to compare.

    Parameters
    ----------
    models : sequence of str
        The models present in the rows.
    pairs : None or sequence of Pair / (a, b) / (a, b, label)
        ``None``: every unordered pair of ``models`` in sorted order, ``A`` the name that sorts first, label
        ``"pair"``.

    Raises
    ------
    ACEInputError
        If a declared pair is not a 2- or 3-tuple or a :class:`Pair`, names a model not in ``models`` (the message
        lists them), or occurs twice (in either order); or if ``pairs`` is ``None`` and there are fewer than two
        models.
    """
    names = sorted({str(m) for m in models})
    if pairs is None:
        if len(names) < 2:
            raise ACEInputError(f"the comparison needs at least two models; rows have {names}")
        return tuple(Pair(a, b) for a, b in itertools.combinations(names, 2))
    out: list[Pair] = []
    seen: set[frozenset] = set()
    for k, p in enumerate(pairs):
        if not isinstance(p, Pair):
            if not isinstance(p, (tuple, list)) or len(p) not in (2, 3):
                raise ACEInputError(f"pairs[{k}] must be a Pair, (a, b) or (a, b, label); got {p!r}")
            p = Pair(*(str(x) for x in p))
        for m in (p.a, p.b):
            if m not in names:
                raise ACEInputError(f"pairs[{k}] names model {m!r}, which has no rows; models: {names}")
        key = frozenset((p.a, p.b))
        if key in seen:
            raise ACEInputError(f"pairs[{k}] = ({p.a!r}, {p.b!r}) is declared twice")
        seen.add(key)
        out.append(p)
    if not out:
        raise ACEInputError("pairs is empty; give at least one pair or None for every pair")
    return tuple(out)


@dataclass(frozen=True)
class Cell:
    """One pair on one (dataset, method), on the items both models scored.

    Attributes
    ----------
    item_ids : ndarray of shape (n,), object (str)
        Matched items, sorted as strings.
    conf_a, correct_a, conf_b, correct_b : ndarray of shape (n,), float64
        Signal and correctness of each model, in ``[0, 1]``, aligned on ``item_ids``.
    n_only_a, n_only_b : int
        Items of that model left out because the other model lacks them.
    """

    pair: Pair
    dataset: str
    method: str
    item_ids: np.ndarray
    conf_a: np.ndarray
    correct_a: np.ndarray
    conf_b: np.ndarray
    correct_b: np.ndarray
    n_only_a: int = 0
    n_only_b: int = 0

    @property
    def n(self) -> int:
        return int(self.item_ids.size)

    @property
    def key(self) -> dict:
        """The identifying columns of every table row of this cell."""
        return dict(model_a=self.pair.a, model_b=self.pair.b, comparison=self.pair.label,
                    dataset=self.dataset, method=self.method)

    @property
    def seed_names(self) -> tuple[str, str]:
        """The two strings given to :func:`confgrid.analysis.bootstrap.setting_seed` for this cell."""
        return self.pair.name, f"{self.dataset}|{self.method}"


@dataclass(frozen=True)
class Matched:
    """Output of :func:`matched_cells`: the cells and what was skipped or dropped."""

    cells: tuple[Cell, ...]
    messages: tuple[str, ...] = field(default_factory=tuple)


def matched_cells(rows: pd.DataFrame, pairs=None) -> Matched:
    """Match each pair's rows per (dataset, method) on the shared item ids.

    Raises :class:`ACEInputError` as :func:`validate_rows` and :func:`resolve_pairs`.

    Parameters
    ----------
    rows : DataFrame
        Own-answer rows (validated here with :func:`validate_rows`).
    pairs : see :func:`resolve_pairs`

    Returns
    -------
    Matched
        One :class:`Cell` per (pair, dataset, method) in which both models have at least one shared item, in pair
        order then sorted dataset and method. ``messages`` says which (pair, dataset, method) had no shared item and
        how many items were dropped; items dropped also raise an :class:`ACEWarning`.
    """
    df = validate_rows(rows)
    pairs = resolve_pairs(df["model"].unique(), pairs)
    groups = {k: g for k, g in df.groupby(["model", "dataset", "method"], sort=True)}
    dm = sorted({(d, m) for _, d, m in groups})
    cells: list[Cell] = []
    msgs: list[str] = []
    for p in pairs:
        for d, m in dm:
            ga, gb = groups.get((p.a, d, m)), groups.get((p.b, d, m))
            if ga is None or gb is None:
                if ga is not None or gb is not None:
                    who = p.b if gb is None else p.a
                    msgs.append(f"{p.name} / {d} / {m}: skipped, {who} has no rows")
                continue
            sa = ga.set_index("item_id").sort_index()
            sb = gb.set_index("item_id").sort_index()
            shared = sa.index.intersection(sb.index).sort_values()
            only_a, only_b = len(sa) - len(shared), len(sb) - len(shared)
            if len(shared) == 0:
                msgs.append(f"{p.name} / {d} / {m}: skipped, no item scored by both models")
                continue
            if only_a or only_b:
                msg = (f"{p.name} / {d} / {m}: {len(shared)} shared items; dropped {only_a} item(s) "
                       f"only {p.a} scored and {only_b} only {p.b} scored")
                msgs.append(msg)
                warnings.warn(msg, ACEWarning, stacklevel=2)
            a, b = sa.loc[shared], sb.loc[shared]
            cells.append(Cell(
                pair=p, dataset=d, method=m, item_ids=np.asarray(shared, dtype=object),
                conf_a=a["signal"].to_numpy(np.float64), correct_a=a["correct"].to_numpy(np.float64),
                conf_b=b["signal"].to_numpy(np.float64), correct_b=b["correct"].to_numpy(np.float64),
                n_only_a=int(only_a), n_only_b=int(only_b),
            ))
    return Matched(tuple(cells), tuple(msgs))
