"""The one signal table: every confidence, one row per (unit, item, signal), with its protocol and target.

DESIGN.md "Confidence methods": each confidence is a value in one ``signal`` column, so every metric and comparison
works on any of them. Every producer (the verbalized score, the token score of each scoring context and token
aggregation, each confidence method, each capability estimator, study 001's compared answers and candidate ratings
(analysis/ace/units.py ``signal_rows``), the input of ``confgrid analyze``) appends rows of this one schema to
``tables/signals.parquet``; the one evaluator (:mod:`confgrid.analysis.evaluation`) reads nothing else. Nothing is
encoded in strings: the protocol of a signal is in its columns (``kind``, ``context``, ``aggregation``, ``template``,
``k`` ...), never parsed back out of its name.

Columns (:data:`SCHEMA`; :func:`conform` fills what a producer does not set):

* the unit of pairing, :data:`UNIT_COLUMNS`: ``setting`` (``model/dataset`` in a run, any label in ``analyze``),
  ``model``, ``dataset``, ``answer_set``, ``parse_policy``, ``refusal``, ``rule`` (the correctness rule of the unit),
  ``target_kind``; signals are compared only within a unit;
* ``item_id`` and ``cluster`` (the resampled unit of a clustered bootstrap; the item itself otherwise);
* ``signal`` (a label unique within the unit) and its protocol, :data:`PROTOCOL_COLUMNS`: ``kind``
  (:data:`SIGNAL_KINDS` or ``input``), ``method`` (the grid's method id), ``context``, ``aggregation``, ``template``,
  ``k``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``merge``, ``renormalize``, ``rated`` (whose answer the
  confidence is about: ``own_answer``, ``greedy_answer``, ``first_sample``, ``majority_answer``, ``favoured_letter``,
  ``supplied``: the answer the supplied-answer probe gave the model, signal ``probe_<kind>``; a pooled candidate of
  study 001: the models that gave it, ``a|b``), ``target_rule``;
* ``confidence``: probability in [0, 1] (NaN: none);
* ``target``: what the confidence is graded against, in [0, 1]: correctness 0/1 (``target_kind`` ``correct``), a
  graded score (``graded``) or the expected accuracy over k samples (``expected_accuracy``, study 004);
* ``status``: ``ok`` or why the row has no usable value (a parse status,
  ``rule_undefined``, ``token_score_missing``, a method status);
* ``replaced``: the row was answered by the ``chance`` refusal policy (study 003 section 3.2);
* ``align``: signals of a unit with the same non-empty label are evaluated on the items where every one of them is
  usable (study 000 section 3.1, "fix the answer": the verbalized and token scores of one answer); an empty label: the
  signal's own usable items.

A row is *usable* (:func:`usable`) when its status is in
:data:`USABLE_STATUSES` and its confidence and target are finite.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["UNIT_COLUMNS", "PROTOCOL_COLUMNS", "SCHEMA", "COLUMNS", "USABLE_STATUSES", "TARGET_KINDS", "SIGNAL_KINDS",
           "conform", "empty", "usable", "analyzed", "to_arrow", "check"]

#: The unit of pairing: signals are compared only with signals of the same unit.
UNIT_COLUMNS = ("setting", "model", "dataset", "answer_set", "parse_policy", "refusal", "rule", "target_kind")
#: The protocol of a signal, one column per axis.
PROTOCOL_COLUMNS = ("kind", "method", "context", "aggregation", "template", "k", "temperature", "top_p", "top_k",
                    "seed", "merge", "renormalize", "rated", "target_rule")
#: Row statuses whose value enters the metrics (``target_absent``: a P(True) whose true candidate lies below the
#: returned top k, recorded as 0 by design; docs/concepts/methods.md).
USABLE_STATUSES = ("ok", "target_absent")
#: What a confidence is graded against.
TARGET_KINDS = ("correct", "graded", "expected_accuracy")
#: The kinds of signal a run produces (``confgrid analyze`` input has kind ``input``).
SIGNAL_KINDS = ("verbalized", "token", "probe", "p_true", "p_true_capability", "self_consistency",
                "self_consistency_majority", "rating", "verbalized_before", "letter_probability", "capability_estimator",
                "comparison", "candidate", "input")

_STR = pa.string()
SCHEMA = pa.schema([
    *((c, _STR) for c in UNIT_COLUMNS),
    ("item_id", _STR), ("cluster", _STR), ("signal", _STR),
    ("kind", _STR), ("method", _STR), ("context", _STR), ("aggregation", _STR), ("template", _STR),
    ("k", pa.int64()), ("temperature", pa.float64()), ("top_p", pa.float64()), ("top_k", pa.int64()),
    ("seed", pa.int64()), ("merge", _STR), ("renormalize", pa.bool_()), ("rated", _STR), ("target_rule", _STR),
    ("confidence", pa.float64()), ("target", pa.float64()), ("status", _STR), ("replaced", pa.bool_()),
    ("align", _STR),
])
#: Column order of the table.
COLUMNS = tuple(SCHEMA.names)
_INTS = ("k", "top_k", "seed")
_FLOATS = ("temperature", "top_p", "confidence", "target")
_DEFAULTS = {"target_kind": "correct", "status": "ok", "replaced": False}


def empty() -> pd.DataFrame:
    """A signal table with no rows and every column (the header of an empty ``tables/signals.parquet``)."""
    return conform(pd.DataFrame())


def conform(df: pd.DataFrame, **fill) -> pd.DataFrame:
    """``df`` with every column of :data:`SCHEMA` in order, the types of the schema, missing columns filled.

    Parameters
    ----------
    df : DataFrame
        Rows of some producer; columns outside the schema are dropped.
    **fill
        Values for columns ``df`` lacks (e.g. ``setting="m/d"``); a column neither in ``df`` nor in ``fill`` gets its
        default (``""`` for text, NA for integers, NaN for floats, ``target_kind`` ``correct``, ``status`` ``ok``,
        ``replaced`` False, ``cluster`` the item id).

    Returns
    -------
    DataFrame
        Text columns object (str), ``k``, ``top_k``, ``seed`` Int64, ``renormalize`` boolean (nullable), ``replaced``
        bool, the rest float64.

    Raises
    ------
    ValueError
        ``fill`` names a column outside the schema.
    """
    bad = sorted(set(fill) - set(COLUMNS))
    if bad:
        raise ValueError(f"signal table: unknown column(s) {bad}; the columns are {list(COLUMNS)}")
    n = len(df)
    out = {}
    for col in COLUMNS:
        if col in df.columns:
            v = df[col]
        elif col in fill:
            v = pd.Series([fill[col]] * n, index=df.index, dtype=object)
        elif col == "cluster" and "item_id" in df.columns:
            v = df["item_id"]
        else:
            v = pd.Series([_DEFAULTS.get(col, np.nan if col in _FLOATS else pd.NA if col in _INTS + ("renormalize",)
                                         else "")] * n, index=df.index, dtype=object)
        out[col] = _cast(col, v)
    return pd.DataFrame(out).reset_index(drop=True)


def _cast(col: str, v: pd.Series) -> pd.Series:
    if col in _INTS:
        return pd.to_numeric(v, errors="coerce").astype("Int64")
    if col in _FLOATS:
        return pd.to_numeric(v, errors="coerce").astype(np.float64)
    if col == "renormalize":
        return v.astype("boolean")
    if col == "replaced":
        return v.fillna(False).astype(bool)
    # text: missing -> "", anything else -> str(x); a str stays the same object (the rows of a signal share one
    # label object, so a table of a million rows holds a few hundred strings, not millions)
    codes, uniques = pd.factorize(v, use_na_sentinel=True)
    table = np.array([u if type(u) is str else str(u) for u in uniques] + [""], dtype=object)
    return pd.Series(table[codes], index=v.index, dtype=object)  # code -1 (missing): the last entry, ""


def usable(df: pd.DataFrame) -> pd.Series:
    """Rows whose value enters the metrics: a usable status, a finite confidence and a finite target."""
    return (df["status"].isin(USABLE_STATUSES) & np.isfinite(df["confidence"].to_numpy(np.float64))
            & np.isfinite(df["target"].to_numpy(np.float64)))


def analyzed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that enter the metrics: usable, and for a signal with an ``align`` label, on an item where every
    signal of its unit with that label is usable (the support of analysis/evaluation.py).

    Returns a copy of those rows (the input's columns), in input order.
    """
    if df.empty:
        return df.copy()
    ok = usable(df)
    keys = [*UNIT_COLUMNS, "align"]
    aligned = df["align"] != ""
    members = df[aligned].groupby(keys, sort=False)["signal"].nunique()
    good = df[aligned & ok].groupby([*keys, "item_id"], sort=False).size()
    full = good[good.to_numpy() == members.reindex(good.index.droplevel("item_id")).to_numpy()]
    idx = pd.MultiIndex.from_frame(df[[*keys, "item_id"]])
    keep = ok & (~aligned | idx.isin(full.index))
    return df[keep.to_numpy()].copy()


def check(df: pd.DataFrame) -> None:
    """Raise ValueError naming the first problem of a conformed signal table.

    Problems: a usable confidence or target outside [0, 1]; a ``target_kind`` outside :data:`TARGET_KINDS`; two rows
    of one (unit, item, signal).
    """
    u = usable(df)
    for col in ("confidence", "target"):
        x = df.loc[u, col].to_numpy(np.float64)
        bad = np.flatnonzero((x < 0) | (x > 1))
        if bad.size:
            r = df.loc[u].iloc[bad[0]]
            raise ValueError(f"signal table: {col} {float(x[bad[0]])!r} outside [0, 1] (setting {r['setting']!r}, signal "
                             f"{r['signal']!r}, item {r['item_id']!r})")
    kinds = set(df["target_kind"]) - set(TARGET_KINDS)
    if kinds:
        raise ValueError(f"signal table: target_kind {sorted(kinds)[0]!r}; allowed: {', '.join(TARGET_KINDS)}")
    dup = df.duplicated([*UNIT_COLUMNS, "item_id", "signal"])
    if dup.any():
        r = df[dup].iloc[0]
        raise ValueError(f"signal table: two rows for (setting {r['setting']!r}, item {r['item_id']!r}, signal "
                         f"{r['signal']!r}) in one unit")


def to_arrow(df: pd.DataFrame) -> pa.Table:
    """A conformed signal table as an Arrow table of :data:`SCHEMA` (an empty one keeps every column)."""
    return pa.Table.from_pandas(conform(df), schema=SCHEMA, preserve_index=False)
