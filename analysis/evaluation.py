"""The one evaluator: metrics, paired gaps, shifts and flips of every signal of a unit, on one resample stream.

Pure (numpy and pandas; the resampling runs in analysis/bootstrap.py or, spread over a cluster, in
flows/evaluate/bootstrap_ray.py, with the same numbers). ``confgrid run`` and ``confgrid analyze`` both build
:class:`UnitPlan` objects (from the signal table of analysis/signals.py, or from the aligned arrays of an input file)
and turn bootstrap results into tables with :func:`estimates`.

Within a unit (the unit of pairing: a model on a dataset under one answer set, parse policy, refusal policy and
correctness rule; a setting of ``analyze``) every signal is evaluated on its *support*:

* a signal with an empty ``align`` label: the items where it is usable;
* signals sharing an ``align`` label: the items where every one of them is usable (study 000 section 3.1: the
  verbalized and token scores of one answer are evaluated on the same answers);
* a gap between signals ``a`` and ``b``: the items both have (their two
  supports intersected), so the comparison is instance-aligned.

Each distinct (signal, support) is one *cell*; all cells of a unit are evaluated on the same resamples of the unit's
items (the union of the supports), so every metric, gap, shift and flip comes from one paired bootstrap
(:func:`confgrid.analysis.bootstrap.paired_bootstrap` with ``masks``). A unit whose signals all share one support is
the aligned bootstrap of study 000 Appendix A, value for value.

Gap ``= metric(signal_a) - metric(signal_b)``; shift ``= gap(a, to) - gap(a, from)`` on the same resamples
(:class:`ShiftPlan`; study 001's reversals shift both sides from the raw to an aligned view); flip and resolved flip
follow :mod:`confgrid.analysis.compare` (a signed metric compares distances from 0), and ``flip_share`` is the share
of resamples in which the better signal differs.

Units of study 001's comparison (analysis/ace/units.py) are evaluated here too: their cells are models under a view,
some of them distribution-aligned (:attr:`UnitPlan.reweight`, analysis/reweighting.py), with their own metrics and
resample count.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .bootstrap import BootstrapResult, n_undefined, paired_bootstrap
from .closure import EDGE_COLUMNS, edge_rows, edge_table
from .compare import advantage, better_signal, excludes_zero, flip, retention_probability
from .intervals import (DEGENERATE, bootstrap_interval, check_interval, degenerate, interval_methods,
                        jeffreys_resamples)
from .registry import get_metric
from .resampling import DEFAULT_CHUNK_SIZE, setting_seed
from .signals import UNIT_COLUMNS, usable
from .verdicts import Conclusion, ShareCounts, conclusion_of, favours_a

__all__ = ["Comparisons", "ShiftPlan", "UnitPlan", "plan_unit", "plan_units", "unit_seed", "unit_name",
           "unit_names", "token_shift_pairs", "estimates", "bootstrap_unit",
           "Estimates",
           "METRIC_COLUMNS", "GAP_COLUMNS", "SHIFT_COLUMNS", "SIGNAL_INFO"]

#: Per-signal protocol columns carried into the metrics table (the gap table carries kind, context and
#: aggregation of both signals).
SIGNAL_INFO = ("kind", "method", "context", "aggregation", "rated", "target_rule", "view")
#: ``interval``: the interval method of the row's ``lo``/``hi`` (analysis/intervals.py), or ``degenerate`` when its
#: resamples have no spread (then ``excludes_zero`` is False: nothing is resolved by a point)
METRIC_COLUMNS = [*UNIT_COLUMNS, "signal", *SIGNAL_INFO, "metric", "point", "lo", "hi", "n", "n_undefined",
                  "interval"]
GAP_COLUMNS = [*UNIT_COLUMNS, "signal_a", "signal_b", "kind_a", "kind_b", "context", "aggregation", "method", "view",
               "metric", "gap", "lo", "hi", "excludes_zero", "favours", "n", "n_undefined", "interval"]
SHIFT_COLUMNS = [*UNIT_COLUMNS, "signal_a", "from_signal", "to_signal", "from_context", "to_context",
                 "from_aggregation", "to_aggregation", "method", "from_view", "to_view", "metric", "shift", "lo", "hi",
                 "excludes_zero", "flip", "resolved_flip", "flip_share", "n_flip_defined", "n", "n_undefined",
                 "interval"]


@dataclass(frozen=True)
class ShiftPlan:
    """A shift of a unit: the change of one paired gap into another on the same resamples.

    ``gap(to_a, to_b) - gap(from_a, from_b)``. Study 000's shifts keep side A (``from_a == to_a``, the
    verbalized signal) and change B's scoring context or aggregation; study 001's reversals change the view of
    both models' cells (raw -> instance- or distribution-aligned, analysis/ace/units.py).

    Attributes
    ----------
    from_a, from_b, to_a, to_b : str
        Signal keys of the unit (:attr:`UnitPlan.signals`); ``(from_a, from_b)`` and ``(to_a, to_b)`` are among
        its compared pairs.
    n : int
        Items both gaps have.
    """

    from_a: str
    from_b: str
    to_a: str
    to_b: str
    n: int


@dataclass(frozen=True)
class Comparisons:
    """Which pairs of signals a unit compares.

    Attributes
    ----------
    against : str or None
        Every signal against this one (``gap = metric(against) - metric(other)``),
        when the unit has it; ``"verbalized"`` in a run.
    pairs : tuple of (str, str)
        Declared pairs ``(signal_a, signal_b)`` (a grid's ``comparisons.pairs``);
        a pair whose signals the unit lacks is skipped.
    all_pairs : bool
        Every ordered pair of the unit's signals (``confgrid analyze``'s default).
    shifts : tuple of (str, str)
        ``(from_signal, to_signal)``: the shift of the gap against ``against`` from one signal to the other.
    token_shifts : bool
        Also the shifts of study 000 among the unit's token signals (:func:`token_shift_pairs`): every pair of scoring
        contexts under the primary token aggregation, and each other aggregation against the primary one in the same
        context.
    """

    against: str | None = "verbalized"
    pairs: tuple[tuple[str, str], ...] = ()
    all_pairs: bool = False
    shifts: tuple[tuple[str, str], ...] = ()
    token_shifts: bool = False

    def pairs_of(self, signals: Sequence[str]) -> list[tuple[str, str]]:
        """The ordered pairs ``(a, b)`` compared among ``signals`` (in signal order, without duplicates)."""
        have = set(signals)
        out: list[tuple[str, str]] = []
        if self.all_pairs:
            out += [(a, b) for a, b in itertools.permutations(signals, 2)]
        if self.against is not None and self.against in have:
            out += [(self.against, s) for s in signals if s != self.against]
        out += [(a, b) for a, b in self.pairs if a in have and b in have and a != b]
        return list(dict.fromkeys(out))


@dataclass
class UnitPlan:
    """One unit, ready for the paired bootstrap: cells (signal x support) over the unit's items.

    Attributes
    ----------
    labels : dict
        The unit's values of :data:`~confgrid.analysis.signals.UNIT_COLUMNS`.
    seed : int
        Bootstrap seed (:func:`unit_seed`).
    items : ndarray of shape (n,)
        Item ids of the resampled items (the union of the cells' supports).
    groups : ndarray of shape (n,) or None
        Cluster label of each item (a clustered bootstrap), else None.
    signals : list of str
        The unit's signals; signal ``i`` is evaluated on its own support in cell ``i``.
    info : dict
        signal -> its protocol (:data:`SIGNAL_INFO`).
    confidence, target : ndarray of shape (C, n), float64
        Each cell's values (NaN outside its support).
    masks : ndarray of shape (C, n), bool
        Each cell's support.
    cell_names : list of str
        ``C`` labels (``signal`` for own cells, ``signal|a&b`` for a pair's).
    pairs : list of (a, b, cell_a, cell_b)
        Each compared pair with the cells holding its two signals on their common items.
    shifts : list of ShiftPlan
        Shifts of one compared gap into another, with the items both gaps have.
    cell_n : list of int
        Items in each cell's support (kept when the arrays are dropped to save memory).
    n_rows : dict
        signal -> rows the unit has for it (usable or not).
    left_out : dict
        signal -> usable rows left out by the alignment rule (an aligned partner lacks the item).
    edges : dict
        ``{B: [(on_edge, on_inner_edge) per signal]}``: the signal's confidences exactly on an edge ``k/B``
        of the equal-width bins in use (analysis/closure.py), counted at planning time so that they survive
        :meth:`drop_arrays`.
    metrics : tuple of str
        The metrics this unit is evaluated under (e.g. study 004's estimators: Brier, ECE and Spearman against the
        expected accuracy); empty: the evaluator's list.
    reweight : list of Reweight or None, or None
        Per cell, distribution-aligned reweighting (analysis/reweighting.py; study 001's DA views,
        analysis/ace/units.py); None: counts only.
    n_resamples : int or None
        This unit's resamples (a comparison's own ``bootstrap``); None: the evaluator's.
    names : dict
        signal key -> the signal name the tables show, where they differ (an ACE unit: the model's name, the view in
        ``info[key]["view"]``); empty: the key is the name.
    """

    labels: dict[str, str]
    seed: int
    items: np.ndarray
    groups: np.ndarray | None
    signals: list[str]
    info: dict[str, dict[str, Any]]
    confidence: np.ndarray
    target: np.ndarray
    masks: np.ndarray
    cell_names: list[str]
    pairs: list[tuple[str, str, int, int]] = field(default_factory=list)
    shifts: list[ShiftPlan] = field(default_factory=list)
    cell_n: list[int] = field(default_factory=list)
    n_rows: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    edges: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    metrics: tuple[str, ...] = ()
    reweight: list | None = None
    n_resamples: int | None = None
    names: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """A label of the unit: its non-empty unit values joined by ``|`` (:func:`unit_names` of its rows)."""
        return unit_name(self.labels[c] for c in UNIT_COLUMNS)

    def n_of(self, cell: int) -> int:
        """Items in a cell's support."""
        return int(self.cell_n[cell])

    def drop_arrays(self) -> None:
        """Free the (C, n) arrays once bootstrapped (the tables need only the counts); keeps the item count."""
        self.confidence = self.target = np.zeros((len(self.cell_names), 0))
        self.masks = np.zeros((len(self.cell_names), 0), dtype=bool)
        self.items, self.groups = np.empty(0, dtype=object), None
        self.reweight = None


def unit_name(values) -> str:
    """The label of a unit from its values of :data:`~confgrid.analysis.signals.UNIT_COLUMNS` (non-empty ones joined
    by ``|``): ``"m/d|main|label_or_fallback|drop|containment|correct"``; for a setting of ``analyze`` input, the
    setting itself."""
    return "|".join(str(v) for v in values if v is not None and str(v) != "")


def unit_names(df: pd.DataFrame) -> pd.Series:
    """:func:`unit_name` of every row of a table with the unit columns (missing ones count as empty)."""
    cols = [c for c in UNIT_COLUMNS if c in df.columns]
    return pd.Series([unit_name(v) for v in df[cols].itertuples(index=False, name=None)], index=df.index,
                     dtype=object)


def token_shift_pairs(signals: Sequence[str], info: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Study 000's shift pairs among token signals (``kind`` ``token``), read from their protocol columns.

    Contexts and aggregations keep the order in which the signals list them; the first aggregation is the
    primary one. Returns every pair of contexts under the primary aggregation, then, per context, each other
    aggregation against the primary one (the pairs of flows/evaluate/run_evaluation.py ``shift_pairs``).
    """
    tok = {(info[s].get("context", ""), info[s].get("aggregation", "")): s for s in signals
           if info.get(s, {}).get("kind") == "token"}
    if not tok:
        return []
    contexts = list(dict.fromkeys(c for c, _ in tok))
    aggs = list(dict.fromkeys(a for _, a in tok))
    prim = aggs[0]
    pairs = [(tok[(a, prim)], tok[(b, prim)]) for a, b in itertools.combinations(contexts, 2)
             if (a, prim) in tok and (b, prim) in tok]
    pairs += [(tok[(c, prim)], tok[(c, agg)]) for c in contexts for agg in aggs[1:]
              if (c, prim) in tok and (c, agg) in tok]
    return pairs


def unit_seed(labels: Mapping[str, str], base_seed: int) -> int:
    """The bootstrap seed of a unit: ``setting_seed(model, dataset, base)`` when both are named, else
    ``setting_seed(setting, "", base)`` (an ``analyze`` input without a model column): the same derivation in ``run``
    and ``analyze``, so the same signal table gives the same draws."""
    if labels.get("model") and labels.get("dataset"):
        return setting_seed(labels["model"], labels["dataset"], base_seed)
    return setting_seed(labels["setting"], "", base_seed)


def plan_unit(labels: Mapping[str, str], items: np.ndarray, signals: Sequence[str], confidence: np.ndarray,
              target: np.ndarray, ok: np.ndarray, align: Sequence[str], info: Mapping[str, Mapping[str, Any]],
              comparisons: Comparisons, seed: int, groups: np.ndarray | None = None,
              n_rows: Mapping[str, int] | None = None, edge_bins: Sequence[int] = ()) -> UnitPlan:
    """The cells of one unit from its dense signal arrays (pure).

    Parameters
    ----------
    labels : mapping
        The unit's values of :data:`~confgrid.analysis.signals.UNIT_COLUMNS` (missing ones are ``""``).
    items : ndarray of shape (N,)
        Every item id the unit has rows for.
    signals : sequence of str
        ``S`` signal names (unique).
    confidence, target : ndarray of shape (S, N), float64
        Each signal's value per item (NaN where it has none).
    ok : ndarray of shape (S, N), bool
        Whether the value is usable (:func:`confgrid.analysis.signals.usable`).
    align : sequence of str
        Each signal's ``align`` label (see the module docstring).
    info : mapping
        signal -> protocol values (:data:`SIGNAL_INFO`; missing ones ``""``).
    seed : int
        The unit's bootstrap seed (:func:`unit_seed`).
    groups : ndarray of shape (N,), optional
        Each item's cluster (a clustered bootstrap).
    n_rows : mapping, optional
        signal -> rows the unit has for it (default: non-NaN confidences).
    edge_bins : sequence of int, optional
        Bin counts whose edges each signal's confidences are counted on (:attr:`UnitPlan.edges`;
        :func:`confgrid.analysis.closure.edge_bins`).

    Raises
    ------
    ValueError
        Shapes that disagree, or duplicate signal names.
    """
    signals = list(signals)
    S, N = len(signals), len(items)
    conf = np.asarray(confidence, dtype=np.float64).reshape(S, N)
    tgt = np.asarray(target, dtype=np.float64).reshape(S, N)
    ok = np.asarray(ok, dtype=bool).reshape(S, N)
    if len(set(signals)) != S or len(align) != S:
        raise ValueError(f"unit {dict(labels)}: signals must be unique with one align label each, got {signals}")
    own = ok.copy()
    for label in {a for a in align if a}:
        members = [i for i, a in enumerate(align) if a == label]
        own[members] = ok[members].all(axis=0)
    left = {s: int((ok[i] & ~own[i]).sum()) for i, s in enumerate(signals)}
    index = {s: i for i, s in enumerate(signals)}
    pairs = comparisons.pairs_of(signals)
    cells: list[tuple[int, np.ndarray, str]] = [(i, own[i], signals[i]) for i in range(S)]
    seen: dict[tuple[int, bytes], int] = {(i, own[i].tobytes()): i for i in range(S)}
    pair_cells = []
    for a, b in pairs:
        ia, ib = index[a], index[b]
        both = own[ia] & own[ib]
        cab = []
        for i in (ia, ib):
            key = (i, both.tobytes())
            if key not in seen:
                seen[key] = len(cells)
                cells.append((i, both, f"{signals[i]}|{a}&{b}"))
            cab.append(seen[key])
        pair_cells.append((a, b, cab[0], cab[1]))
    used = np.zeros(N, dtype=bool)
    for _, m, _ in cells:
        used |= m
    keep = np.flatnonzero(used)
    C = len(cells)
    c_conf = np.full((C, keep.size), np.nan)
    c_tgt = np.full((C, keep.size), np.nan)
    c_mask = np.zeros((C, keep.size), dtype=bool)
    for c, (i, m, _) in enumerate(cells):
        mk = m[keep]
        c_mask[c] = mk
        c_conf[c, mk] = conf[i, keep[mk]]
        c_tgt[c, mk] = tgt[i, keep[mk]]
    ag = comparisons.against
    cell_of = {(a, b): (ca, cb) for a, b, ca, cb in pair_cells}
    wanted = list(comparisons.shifts) + (token_shift_pairs(signals, info) if comparisons.token_shifts else [])
    shifts = [ShiftPlan(ag, f, ag, t, int((c_mask[cell_of[(ag, f)][0]] & c_mask[cell_of[(ag, t)][0]]).sum()))
              for f, t in dict.fromkeys(wanted) if ag is not None and (ag, f) in cell_of and (ag, t) in cell_of]
    return UnitPlan(
        labels={c: str(labels.get(c, "") or "") for c in UNIT_COLUMNS}, seed=int(seed),
        items=np.asarray(items, dtype=object)[keep],
        groups=None if groups is None else np.asarray(groups, dtype=object)[keep],
        signals=signals, info={s: {k: info.get(s, {}).get(k, "") for k in SIGNAL_INFO} for s in signals},
        confidence=c_conf, target=c_tgt, masks=c_mask, cell_names=[name for *_, name in cells], pairs=pair_cells,
        shifts=shifts, n_rows=dict(n_rows) if n_rows is not None else {s: int(np.isfinite(conf[i]).sum())
                                                                        for i, s in enumerate(signals)},
        left_out=left, cell_n=[int(m.sum()) for m in c_mask], edges=edge_rows(c_conf[:S], c_mask[:S], edge_bins),
    )


def plan_units(signals: pd.DataFrame, comparisons: Comparisons, base_seed: int, clustered: bool = False,
               edge_bins: Sequence[int] = ()) -> list[UnitPlan]:
    """Every unit of a conformed signal table (analysis/signals.py), in the order units first appear.

    Within a unit, signals keep the order of their first row; items are ordered by first appearance. ``clustered``:
    resample the ``cluster`` column's clusters (an item must have one cluster). ``edge_bins``: see :func:`plan_unit`.

    Raises
    ------
    ValueError
        An item with two clusters in one unit (naming both).
    """
    if signals.empty:
        return []
    df = signals.assign(_ok=usable(signals).to_numpy())
    out = []
    for key, g in df.groupby(list(UNIT_COLUMNS), sort=False):
        labels = dict(zip(UNIT_COLUMNS, key, strict=True))
        names = list(dict.fromkeys(g["signal"]))
        items = pd.Index(pd.unique(g["item_id"]))
        S, N = len(names), len(items)
        si = pd.Index(names).get_indexer(g["signal"])
        ii = items.get_indexer(g["item_id"])
        conf = np.full((S, N), np.nan)
        tgt = np.full((S, N), np.nan)
        ok = np.zeros((S, N), dtype=bool)
        conf[si, ii] = g["confidence"].to_numpy(np.float64)
        tgt[si, ii] = g["target"].to_numpy(np.float64)
        ok[si, ii] = g["_ok"].to_numpy(bool)
        first = g.drop_duplicates("signal").set_index("signal")
        info = {s: {k: _plain(first.at[s, k]) if k in first.columns else "" for k in SIGNAL_INFO} for s in names}
        align = [str(first.at[s, "align"]) for s in names]
        groups = None
        if clustered:
            per_item = g.drop_duplicates(["item_id", "cluster"])
            twice = per_item["item_id"].duplicated(keep=False)
            if twice.any():
                bad = per_item[twice].iloc[:2]
                raise ValueError(f"unit {labels['setting']!r}: item {bad['item_id'].iloc[0]!r} is in clusters "
                                 f"{bad['cluster'].iloc[0]!r} and {bad['cluster'].iloc[1]!r}; an item needs one")
            groups = per_item.set_index("item_id")["cluster"].reindex(items).to_numpy(dtype=object)
        n_rows = g.groupby("signal", sort=False).size().to_dict()
        out.append(plan_unit(labels, items.to_numpy(dtype=object), names, conf, tgt, ok, align, info, comparisons,
                             unit_seed(labels, base_seed), groups, n_rows, edge_bins))
    return out


def bootstrap_unit(u: UnitPlan, metrics: Sequence[str], n_resamples: int, n_bins: int = 10,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> BootstrapResult:
    """The paired bootstrap of one unit's cells in process (:func:`~confgrid.analysis.bootstrap.paired_bootstrap` with
    the unit's supports, clusters and reweighted cells), under the unit's own metrics and resample count when it has
    them (else ``metrics``, ``n_resamples``). flows/evaluate/bootstrap_ray.py ``bootstrap_units`` spreads the same
    computation over a Ray Data job, bit for bit."""
    return paired_bootstrap(u.confidence, u.target, list(u.metrics) or list(metrics),
                            n_resamples=u.n_resamples or n_resamples, seed=u.seed, chunk_size=chunk_size,
                            n_bins=n_bins, signal_names=u.cell_names, groups=u.groups, masks=u.masks,
                            reweight=u.reweight)


def _plain(v: Any) -> Any:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA else v


@dataclass
class Estimates:
    """The estimates of a set of units: ``metrics``, ``gaps``, ``shifts`` (columns :data:`METRIC_COLUMNS`,
    :data:`GAP_COLUMNS`, :data:`SHIFT_COLUMNS`), ``edges`` (the share of each signal's confidences on bin edges,
    :data:`~confgrid.analysis.closure.EDGE_COLUMNS`) and ``shares``: per conclusion of the gaps
    (analysis/verdicts.py), how many of its settings favour side A in each resample (the intervals of
    :func:`~confgrid.analysis.verdicts.verdict_table`)."""

    metrics: pd.DataFrame
    gaps: pd.DataFrame
    shifts: pd.DataFrame
    edges: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EDGE_COLUMNS))
    shares: dict[Conclusion, ShareCounts] = field(default_factory=dict)


def _label(how, flat: np.ndarray) -> list[str]:
    """The ``interval`` column: the method of each row (``how``: one name, or one per row), or ``degenerate`` where
    the resamples have no spread."""
    flat = np.atleast_1d(flat)
    how = [how] * flat.size if isinstance(how, str) else list(np.ravel(how))
    return [DEGENERATE if d else h for d, h in zip(flat, how, strict=True)]


def _intervals(points: np.ndarray, values: np.ndarray, level: float, how) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``bootstrap_interval`` of rows that may differ in method (``how``: one name, or an array shaped like
    ``points``); returns ``(lo, hi, how)`` with the method each row really used (``bc`` may fall back, see
    :func:`~confgrid.analysis.intervals.interval_methods`). A degenerate row's ``lo`` and ``hi`` are its point
    estimate (its resamples differ from it by rounding only)."""
    points = np.asarray(points, dtype=np.float64)
    how = np.full(points.shape, how, dtype=object) if isinstance(how, str) else np.asarray(how, dtype=object).copy()
    for h in set(np.ravel(how).tolist()):  # the method each row really uses (bc may fall back)
        sel = how == h
        how[sel] = interval_methods(points[sel], values[sel], h, level)
    lo, hi = np.full(points.shape, np.nan), np.full(points.shape, np.nan)
    for u in set(np.ravel(how).tolist()):
        m = how == u
        lo[m], hi[m] = bootstrap_interval(points[m], values[m], level, u)
    flat = degenerate(values)
    lo = np.where(flat & np.isfinite(points), points, lo)
    hi = np.where(flat & np.isfinite(points), points, hi)
    return lo, hi, how


def _add_intervals(rows: list[dict], points, values: np.ndarray, level: float, how) -> None:
    """Each row's ``lo``, ``hi``, ``excludes_zero`` (never for a degenerate row), ``n_undefined`` and ``interval``
    from its point estimate and resamples (a row of ``values``), ``how`` the method of each row."""
    lo, hi, how = _intervals(np.asarray(points, dtype=np.float64), values, level, np.asarray(how, dtype=object))
    for r, v, w, k, lab in zip(rows, np.atleast_1d(lo), np.atleast_1d(hi), np.atleast_1d(n_undefined(values)),
                               _label(how, degenerate(values)), strict=True):
        r.update(lo=float(v), hi=float(w), excludes_zero=bool(excludes_zero(v, w)) and lab != DEGENERATE,
                 n_undefined=int(k), interval=lab)


def _resamples_for(u: "UnitPlan", res: BootstrapResult, method: str) -> tuple[np.ndarray, Any]:
    """The resamples the intervals use and the method per (cell, metric): the bootstrap's, or for ``jeffreys`` the
    Jeffreys resamples of the eligible binned metrics (analysis/intervals.py) and the percentile interval of the
    bootstrap's for the others. A unit whose arrays were dropped (or a reweighted one) cannot draw them:
    ValueError."""
    if method != "jeffreys":
        return res.resamples, method
    if u.confidence.shape[1] == 0 and len(u.items):
        raise ValueError(f"interval 'jeffreys' needs the items of unit {u.name!r}, which were freed (analyze "
                         "--in-turn): use --whole-file, or another interval")
    jr = jeffreys_resamples(u.confidence, u.target, u.masks, list(res.metrics), res.n_resamples, res.seed,
                            res.n_bins, u.groups, res.chunk_size)
    if u.reweight is not None:  # distribution-aligned cells are not outcome-resampled: the bootstrap's
        for c, rw in enumerate(u.reweight):
            if rw is not None:
                jr[c] = np.nan
    use = ~np.isnan(jr).all(axis=-1)
    how = np.where(use, "jeffreys", "percentile")
    return np.where(use[..., None], jr, res.resamples), how


def estimates(units: Sequence[UnitPlan], results: Iterable[BootstrapResult], level: float = 0.95,
              method: str = "percentile") -> Estimates:
    """Metrics, gaps and shifts (with flips) of every unit from its paired bootstrap (pure).

    Parameters
    ----------
    results : iterable of BootstrapResult
        ``results[u]`` is the bootstrap of ``units[u]``'s cells (``masks`` =
        ``units[u].masks``) under the unit's metrics (:attr:`UnitPlan.metrics`, or the evaluator's list). A
        generator may compute each one on demand: a result is not kept once its unit's rows are made.
    level : float in (0, 1)
        Interval level.
    method : {"percentile", "basic", "bc", "jeffreys"}, default "percentile"
        The interval method (analysis/intervals.py) of every metric, gap, shift and advantage (``jeffreys``: of the
        binned ECEs; the others keep the percentile interval, and say so in ``interval``).

    Returns
    -------
    Estimates
        ``n`` is the items of the signal's support (metrics) or the items both signals have (gaps, shifts);
        ``n_undefined`` the resamples where the value is undefined; ``favours`` the better signal by point estimate
        (:func:`~confgrid.analysis.compare.better_signal`); a shift's ``flip``: the better signal differs between the
        two gaps, by point; ``resolved_flip``: a flip where both advantages' intervals exclude 0; ``interval`` the
        method, or ``degenerate`` for a value whose resamples have no spread (its ``excludes_zero`` is False).
    """
    check_interval(method)
    frames: dict[str, list[pd.DataFrame]] = {"metrics": [], "gaps": [], "shifts": []}
    shares: dict[Conclusion, ShareCounts] = {}
    for u, res in zip(units, results, strict=True):  # one unit's rows become a frame at once (bounded memory)
        mrows = []
        lab = u.labels
        metrics = list(res.metrics)
        resamples, how = _resamples_for(u, res, method)
        lo, hi, how = _intervals(res.point, resamples, level, how)
        labels = np.array(_label(how, degenerate(resamples).ravel()), dtype=object).reshape(res.point.shape)
        und = res.n_undefined
        name = u.names.get
        for s, sig in enumerate(u.signals):
            n = u.n_of(s)
            for j, met in enumerate(metrics):
                mrows.append({**lab, "signal": name(sig, sig), **u.info[sig], "metric": met,
                              "point": float(res.point[s, j]),
                              "lo": float(lo[s, j]), "hi": float(hi[s, j]), "n": n, "n_undefined": int(und[s, j]),
                              "interval": labels[s, j]})
        gap_vals, gap_pts, gap_how, gap_rows, adv = [], [], [], [], {}
        for a, b, ca, cb in u.pairs:
            n = u.n_of(ca)
            for j, met in enumerate(metrics):
                pa_, pb = res.point[ca, j], res.point[cb, j]
                gap_vals.append(resamples[ca, j] - resamples[cb, j])
                gap_pts.append(pa_ - pb)
                gap_how.append(how if isinstance(how, str) else
                               ("jeffreys" if how[ca, j] == how[cb, j] == "jeffreys" else "percentile"))
                na, nb, ib = name(a, a), name(b, b), u.info[b]
                gap_rows.append({**lab, "signal_a": na, "signal_b": nb, "kind_a": u.info[a]["kind"],
                                 "kind_b": ib["kind"], "context": ib["context"], "aggregation": ib["aggregation"],
                                 "method": ib["method"], "view": ib["view"], "metric": met, "gap": float(pa_ - pb),
                                 "favours": better_signal(met, pa_, pb, na, nb), "n": n})
                adv[(a, b, j)] = advantage(get_metric(met).signed, pa_, pb, resamples[ca, j],
                                           resamples[cb, j]) + (gap_how[-1],)
                key = conclusion_of(u.info[a]["kind"], ib["kind"], na, nb, met, ib["view"])
                if key is not None:  # this setting's vote, resample by resample (analysis/verdicts.py)
                    shares.setdefault(key, ShareCounts.empty(res.n_resamples)).add(*favours_a(met, gap_vals[-1]))
        if gap_rows:  # one interval call over every (pair, metric) row
            _add_intervals(gap_rows, gap_pts, np.vstack(gap_vals), level, gap_how)
        srows = _shift_rows(u, res, resamples, metrics, adv, level)
        for name, rows, cols in (("metrics", mrows, METRIC_COLUMNS), ("gaps", gap_rows, GAP_COLUMNS),
                                 ("shifts", srows, SHIFT_COLUMNS)):
            if rows:
                frames[name].append(pd.DataFrame(rows, columns=cols))

    def cat(name: str, cols: list[str]) -> pd.DataFrame:
        f = frames[name]
        return pd.concat(f, ignore_index=True) if f else pd.DataFrame(columns=cols)

    return Estimates(cat("metrics", METRIC_COLUMNS), cat("gaps", GAP_COLUMNS), cat("shifts", SHIFT_COLUMNS),
                     edge_table(units), shares)


def _shift_rows(u: UnitPlan, res: BootstrapResult, resamples: np.ndarray, metrics: list[str], adv: dict,
                level: float) -> list[dict]:
    """The shift rows of a unit; ``resamples`` are those its intervals use and ``adv[(a, b, j)]`` each compared pair's
    (point advantage, resampled advantages, interval method)."""
    if not u.shifts:
        return []
    cell = {(a, b): (ca, cb) for a, b, ca, cb in u.pairs}
    name = u.names.get
    rows, diffs, points, advs, adv_points, hows, adv_hows = [], [], [], [], [], [], []
    for sh in u.shifts:
        (fa, fb), (ta, tb) = cell[(sh.from_a, sh.from_b)], cell[(sh.to_a, sh.to_b)]
        fi, ti = u.info[sh.from_b], u.info[sh.to_b]
        for j, met in enumerate(metrics):
            g_from = resamples[fa, j] - resamples[fb, j]
            g_to = resamples[ta, j] - resamples[tb, j]
            diffs.append(g_to - g_from)
            p_from = res.point[fa, j] - res.point[fb, j]
            p_to = res.point[ta, j] - res.point[tb, j]
            points.append(p_to - p_from)
            (af, rf, hf), (at, rt, ht) = adv[(sh.from_a, sh.from_b, j)], adv[(sh.to_a, sh.to_b, j)]
            advs += [rf, rt]
            adv_points += [af, at]
            adv_hows += [hf, ht]
            hows.append(hf if hf == ht else "percentile")
            share, k = retention_probability(rf, rt)  # flip share (study 001, Appendix E.6)
            rows.append({**u.labels, "signal_a": name(sh.from_a, sh.from_a), "from_signal": name(sh.from_b, sh.from_b),
                         "to_signal": name(sh.to_b, sh.to_b), "from_context": fi["context"],
                         "to_context": ti["context"], "from_aggregation": fi["aggregation"],
                         "to_aggregation": ti["aggregation"], "method": ti["method"], "from_view": fi["view"],
                         "to_view": ti["view"],
                         "metric": met, "shift": float(p_to - p_from), "flip": flip(af, at), "flip_share": share,
                         "n_flip_defined": k, "n": sh.n})
    _add_intervals(rows, points, np.vstack(diffs), level, hows)
    a = np.vstack(advs)
    alo, ahi, _ = _intervals(np.asarray(adv_points, dtype=np.float64), a, level, np.asarray(adv_hows, dtype=object))
    alo, ahi = np.atleast_1d(alo), np.atleast_1d(ahi)
    aflat = np.atleast_1d(degenerate(a))
    resolves = [excludes_zero(alo[i], ahi[i]) and not aflat[i] for i in range(alo.size)]
    for i, r in enumerate(rows):
        r["resolved_flip"] = bool(r["flip"] and resolves[2 * i] and resolves[2 * i + 1])
    return rows
