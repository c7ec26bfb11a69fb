"""Candidate-aligned calibration (CA) and the self-preference diagnostic (study 001, section 4.3).

For each item ``i`` a shared pool ``U_i`` of candidate answers is built from every model's extracted answer
(:func:`candidate_pool`): answers are normalized with the correctness rule's normalizer, duplicates are merged keeping
the **first surface form** (rows taken in sorted (model, method) order), and the models that produced each candidate
are recorded; answers that are missing or normalize to the empty string are no candidate. Each candidate gets a label
``y_i(s)`` in ``[0, 1]`` (binary or graded) from the correctness rule. Every model then rates every candidate (a
rating method: verbalized rating of a supplied answer, P(True)); the ratings table (:data:`RATING_COLUMNS`) holds one
row per (dataset, item, candidate, rater, method).

CA of a pair ``A``, ``B`` on (dataset, method) uses the **pair's pool**: the candidates produced by ``A`` or ``B`` (so
a pair's CA does not depend on the other models of the grid), on the cell's matched items, and only the (item,
candidate) pairs rated by both models. ``CA-ECE`` (10 equal-width bins) and ``CA-Brier`` of rater ``m`` are the
metrics of ``e_i^(m)(s)`` against ``y_i(s)`` over all those pairs, every pair weighing the same; the CA gap is
``CA(A) - CA(B)``.

Self-preference: on items where ``A``'s candidate and ``B``'s candidate differ, rater ``m``'s paired difference
``e^(m)(own) - e^(m)(other's)``; its mean, with a paired bootstrap interval in :mod:`.bootstrap`. An item where a
model produced several candidates (different answers under different methods) has no single "own" candidate and is
left out (counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .frame import ACEInputError, Cell, check_labels, check_table, check_unit_interval, validate_rows
from .views import METRICS, ViewValue, metric_value

__all__ = [
    "POOL_COLUMNS",
    "RATING_COLUMNS",
    "candidate_pool",
    "validate_ratings",
    "CACell",
    "ca_cell",
    "ca_views",
    "SelfPreferenceData",
    "self_preference_data",
]

#: Columns of :func:`candidate_pool`'s output.
POOL_COLUMNS = ("dataset", "item_id", "candidate", "surface", "producers", "label")
#: Columns of the candidate-ratings table.
RATING_COLUMNS = POOL_COLUMNS + ("rater", "method", "signal")

Normalizer = Callable[[str], str]
#: ``grade(dataset, item_id, surface) -> label in [0, 1]``.
Grader = Callable[[str, str, str], float]


def candidate_pool(rows: pd.DataFrame, normalize: Normalizer, grade: Grader | None = None) -> pd.DataFrame:
    """The shared candidate pool ``U_i`` of every item (study 001, section 4.3).

    Parameters
    ----------
    rows : DataFrame
        Own-answer rows (:mod:`.frame`) with an ``answer`` column.
    normalize : callable str -> str
        The correctness rule's normalizer (e.g. ``confgrid.protocols.correctness.normalize``).
    grade : callable (dataset, item_id, surface) -> float, optional
        The candidate's label in ``[0, 1]``. Default: the ``correct`` of the first row that produced it; then every
        row producing the same normalized candidate must have the same ``correct``.

    Returns
    -------
    DataFrame
        Columns :data:`POOL_COLUMNS`: ``candidate`` (normalized text), ``surface`` (the first surface form),
        ``producers`` (sorted tuple of model names), ``label`` (float64). Sorted by dataset and item id (as strings),
        candidates in order of first appearance.

    Raises
    ------
    ACEInputError
        No ``answer`` column; ``normalize`` not returning a str; a label outside ``[0, 1]``; without ``grade``, two
        rows giving one candidate different correctness (the message names the item and candidate).

    Examples
    --------
    >>> rows = pd.DataFrame(dict(model=["a", "b"], dataset="d", method="v", item_id="1",
    ...                          signal=0.5, correct=[1.0, 1.0], answer=["Paris.", "paris"]))
    >>> candidate_pool(rows, lambda s: s.lower().strip(" .")).loc[0, ["candidate", "surface", "producers"]].tolist()
    ['paris', 'Paris.', ('a', 'b')]
    """
    if "answer" not in rows.columns:
        raise ACEInputError("candidate_pool needs an 'answer' column in rows (the extracted answers)")
    df = validate_rows(rows).sort_values(["dataset", "item_id", "model", "method"], kind="stable")
    out = []
    for (dataset, item), g in df.groupby(["dataset", "item_id"], sort=True):
        pool: dict[str, dict] = {}
        for model, answer, correct in zip(g["model"], g["answer"], g["correct"]):
            if answer is None or (isinstance(answer, float) and np.isnan(answer)):
                continue
            surface = str(answer)
            cand = normalize(surface)
            if not isinstance(cand, str):
                raise ACEInputError(f"normalize returned {type(cand).__name__} for {surface!r}; it must return str")
            if not cand:
                continue
            if cand not in pool:
                pool[cand] = dict(surface=surface, producers={model}, correct=float(correct))
                continue
            entry = pool[cand]
            entry["producers"].add(model)
            if grade is None and entry["correct"] != float(correct):
                raise ACEInputError(
                    f"candidate {cand!r} of item {item!r} ({dataset}) is correct={entry['correct']} in one row "
                    f"and correct={float(correct)} in another ({model}); pass grade= to label candidates"
                )
        for cand, entry in pool.items():
            label = grade(dataset, item, entry["surface"]) if grade is not None else entry["correct"]
            out.append(dict(dataset=dataset, item_id=item, candidate=cand, surface=entry["surface"],
                            producers=tuple(sorted(entry["producers"])), label=label))
    pool_df = pd.DataFrame(out, columns=list(POOL_COLUMNS))
    pool_df["label"] = check_unit_interval(pool_df["label"], "label", "candidate")
    return pool_df


def _producers(value, row: int) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = tuple(p for p in value.split("|") if p)
    elif isinstance(value, (tuple, list, np.ndarray)):
        parts = tuple(str(p) for p in value)
    else:
        raise ACEInputError(f"producers: row {row} holds {value!r}; give a tuple of model names or 'a|b'")
    if not parts:
        raise ACEInputError(f"producers: row {row} is empty; each candidate was produced by at least one model")
    return tuple(sorted(set(parts)))


def validate_ratings(ratings: pd.DataFrame) -> pd.DataFrame:
    """Check the candidate-ratings table and return it in canonical form.

    Parameters
    ----------
    ratings : DataFrame
        Columns :data:`RATING_COLUMNS`. ``producers`` is a tuple/list of model names or one string ``"a|b"`` (as a CSV
        file holds it).

    Returns
    -------
    DataFrame
        Labels as ``str``, ``producers`` as sorted tuples, ``label`` and ``signal`` float64, fresh 0-based index.

    Raises
    ------
    ACEInputError
        Not a DataFrame; missing columns (listed); a missing label column value; ``label`` or ``signal`` not in
        ``[0, 1]``; a duplicate (dataset, item_id, candidate, rater, method); a candidate whose ``label`` or
        ``producers`` differ between its rows.
    """
    df = check_table(ratings, "candidates", RATING_COLUMNS)
    out = pd.DataFrame({c: check_labels(df, c, "candidate row")
                        for c in ("dataset", "item_id", "candidate", "surface", "rater", "method")}, index=df.index)
    out["producers"] = [_producers(v, i) for i, v in enumerate(df["producers"])]
    out["label"] = check_unit_interval(df["label"], "label", "candidate row")
    out["signal"] = check_unit_interval(df["signal"], "signal", "candidate row")
    key = ["dataset", "item_id", "candidate", "rater", "method"]
    dup = out.duplicated(key, keep=False).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ACEInputError(f"duplicate candidate rating {tuple(out.loc[i, key])} (rows {np.flatnonzero(dup)[:5].tolist()})")
    for col in ("label", "producers"):
        n = out.groupby(["dataset", "item_id", "candidate"])[col].nunique()
        if (n > 1).any():
            k = n[n > 1].index[0]
            raise ACEInputError(f"candidate {k[2]!r} of item {k[1]!r} ({k[0]}) has different {col} in different rows")
    return out


@dataclass(frozen=True)
class CACell:
    """The (item, candidate) pairs of one cell rated by both models.

    Attributes
    ----------
    item_index : ndarray of shape (P,), int64
        Position of the pair's item in ``cell.item_ids``; ascending.
    candidate : ndarray of shape (P,), object
    label, signal_a, signal_b : ndarray of shape (P,), float64
        ``y_i(s)`` and each rater's confidence ``e_i^(m)(s)``.
    own_a, own_b : ndarray of shape (P,), bool
        Candidate produced by ``A`` / by ``B``.
    n_items : int
        ``cell.n``.
    n_unrated : int
        Pool pairs of the cell's items that lack a rating by ``A`` or ``B``.
    n_outside : int
        Rated pool pairs whose item is not among the cell's matched items.
    """

    item_index: np.ndarray
    candidate: np.ndarray
    label: np.ndarray
    signal_a: np.ndarray
    signal_b: np.ndarray
    own_a: np.ndarray
    own_b: np.ndarray
    n_items: int
    n_unrated: int = 0
    n_outside: int = 0

    @property
    def n_pairs(self) -> int:
        return int(self.label.size)


def ca_cell(cell: Cell, ratings: pd.DataFrame) -> CACell | None:
    """The CA data of ``cell`` from validated ratings (:func:`validate_ratings`); ``None`` when neither model rated a
    candidate of this dataset and method."""
    a, b = cell.pair.a, cell.pair.b
    sub = ratings[(ratings["dataset"] == cell.dataset) & (ratings["method"] == cell.method)
                  & ratings["rater"].isin((a, b))]
    sub = sub[[bool({a, b} & set(p)) for p in sub["producers"]]]
    if sub.empty:
        return None
    pos = {str(x): i for i, x in enumerate(cell.item_ids)}
    inside = sub["item_id"].map(pos)
    n_outside = int(sub.loc[inside.isna()].drop_duplicates(["item_id", "candidate"]).shape[0])
    sub = sub.assign(item_index=inside).dropna(subset=["item_index"])
    wide = sub.pivot_table(index=["item_index", "candidate"], columns="rater", values="signal", aggfunc="first")
    first = sub.drop_duplicates(["item_index", "candidate"]).set_index(["item_index", "candidate"])
    for m in (a, b):
        if m not in wide.columns:
            wide[m] = np.nan
    both = wide[[a, b]].notna().all(axis=1)
    n_unrated = int((~both).sum())
    wide = wide[both].sort_index()
    info = first.loc[wide.index]
    prod = info["producers"].tolist()
    return CACell(
        item_index=np.asarray(wide.index.get_level_values(0), dtype=np.int64),
        candidate=np.asarray(wide.index.get_level_values(1), dtype=object),
        label=info["label"].to_numpy(np.float64),
        signal_a=wide[a].to_numpy(np.float64),
        signal_b=wide[b].to_numpy(np.float64),
        own_a=np.array([a in p for p in prod], dtype=bool),
        own_b=np.array([b in p for p in prod], dtype=bool),
        n_items=cell.n, n_unrated=n_unrated, n_outside=n_outside,
    )


def ca_views(ca: CACell, metrics=METRICS, n_bins: int = 10) -> list[ViewValue]:
    """CA-ECE / CA-Brier of both raters over all (item, candidate) pairs (view ``"ca"``).

    ``value_m = metric(e^(m)(s), y(s))`` over the ``P`` pairs (study 001, section 4.3); ``nan`` with a warning when
    ``P = 0``.
    """
    note = f"{ca.n_pairs} item-candidate pairs"
    if ca.n_unrated:
        note += f"; {ca.n_unrated} pool pairs without both ratings left out"
    return [ViewValue("ca", m, metric_value(m, ca.signal_a, ca.label, n_bins=n_bins),
                      metric_value(m, ca.signal_b, ca.label, n_bins=n_bins), ca.n_pairs, ca.n_pairs, note=note)
            for m in metrics]


@dataclass(frozen=True)
class SelfPreferenceData:
    """A rater's confidence in its own and in the other model's candidate, on items where they differ.

    Attributes
    ----------
    item_index : ndarray of shape (k,), int64
        Items (positions in the cell) where the two models' candidates differ.
    own, other_signal : ndarray of shape (k,), float64
        ``e^(rater)(own candidate)`` and ``e^(rater)(other's candidate)``.
    n_ambiguous : int
        Items left out because a model produced several candidates.
    """

    rater: str
    other: str
    item_index: np.ndarray
    own: np.ndarray
    other_signal: np.ndarray
    n_ambiguous: int = 0

    @property
    def diff(self) -> np.ndarray:
        """``own - other_signal``, shape (k,)."""
        return self.own - self.other_signal

    @property
    def mean_diff(self) -> float:
        return float(np.mean(self.diff)) if self.diff.size else float("nan")


def self_preference_data(ca: CACell, cell: Cell) -> tuple[SelfPreferenceData, SelfPreferenceData]:
    """Self-preference data of both raters of a cell (``A`` first).

    An item counts when each model has exactly one candidate there and the two differ.
    """
    items, sa_own, sa_oth, sb_own, sb_oth = [], [], [], [], []
    ambiguous = 0
    for i in np.unique(ca.item_index):
        rows = np.flatnonzero(ca.item_index == i)
        ra, rb = rows[ca.own_a[rows]], rows[ca.own_b[rows]]
        if ra.size == 0 or rb.size == 0:
            continue
        if ra.size > 1 or rb.size > 1:
            ambiguous += 1
            continue
        ja, jb = int(ra[0]), int(rb[0])
        if ja == jb:
            continue
        items.append(int(i))
        sa_own.append(ca.signal_a[ja])
        sa_oth.append(ca.signal_a[jb])
        sb_own.append(ca.signal_b[jb])
        sb_oth.append(ca.signal_b[ja])
    idx = np.asarray(items, dtype=np.int64)
    f = lambda x: np.asarray(x, dtype=np.float64)
    a, b = cell.pair.a, cell.pair.b
    return (SelfPreferenceData(a, b, idx, f(sa_own), f(sa_oth), ambiguous),
            SelfPreferenceData(b, a, idx, f(sb_own), f(sb_oth), ambiguous))
