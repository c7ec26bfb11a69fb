"""Evaluation of a run: the one signal table through the one evaluator.

The run's signal table (flows/tables/signals.py: every answer's verbalized and token scores per unit of pairing, and
every confidence method's rows) is planned unit by unit (analysis/evaluation.py: each signal on its support, each
compared pair on the items both have) and bootstrapped on one resample stream per unit, all units at once, in the
driver or in one Ray Data job (``execution.bootstrap_backend``). ``confgrid analyze`` runs the same evaluator on its
input. Nothing here calls a model: changing the rule, aggregation, estimator or bins reruns only this.
"""

from __future__ import annotations

import itertools
import logging
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from confgrid.analysis.closure import closure_notes, edge_bins
from confgrid.analysis.evaluation import Comparisons, estimates, plan_units
from confgrid.analysis.means import Kept
from confgrid.analysis.signals import UNIT_COLUMNS, analyzed, conform
from confgrid.analysis.verdicts import verdict_table
from confgrid.flows.tables.assemble import Unit
from confgrid.flows.tables.signals import ProducerRows, run_signal_table, unit_keys
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.stages.grade import ANSWER_ALIGN, token_signal
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units
from confgrid.flows.evaluate.clusters import with_cluster_columns
from confgrid.registry import Registry

__all__ = ["Evaluation", "evaluate", "UNIT_PLANNERS", "primary_group", "select", "shift_pairs", "item_clusters",
           "cluster_problems", "comparisons_of", "dropped_table"]

log = logging.getLogger("confgrid")

#: answer set -> the planner of its rows' units, where their pairing is not :func:`plan_units`' (study 001's
#: comparison, flows/studies/ace.py): ``planner(spec, rows)`` returns None or an object whose ``units`` join the
#: bootstrap job, each under its own metrics and resamples (kept in :attr:`Evaluation.planned`).
UNIT_PLANNERS: Registry[Callable[[GridSpec, pd.DataFrame], Any]] = Registry("unit planner")


@dataclass
class Evaluation:
    """The one evaluator's result for a run, and the signal table it read.

    Attributes
    ----------
    metrics, gaps, shifts : DataFrame
        ``results/{metrics,gaps,shifts}`` (columns :data:`~confgrid.analysis.evaluation.METRIC_COLUMNS`,
        ``GAP_COLUMNS``, ``SHIFT_COLUMNS``): every signal of every unit, methods included.
    settings : DataFrame
        ``results/settings``: per unit, items, parse rate, accuracy, rows replaced and analyzed.
    dropped : DataFrame
        ``results/dropped``: per unit and signal, rows by status, and usable rows the alignment left out.
    signals : DataFrame
        The one signal table (``tables/signals.parquet``, analysis/signals.py).
    units : list of UnitPlan
        The units as evaluated.
    kept : Kept
        The metric rows and resamples the means over settings read (analysis/means.py): the signals' own cells of the
        main answer set's units (target ``correct``) under the first parse and refusal policies, every rule (kept as
        the evaluation goes, so the peak memory is about one unit's resamples beyond them).
    edges, closure : DataFrame
        ``results/edges`` (each signal's share of confidences on bin edges) and ``results/closure`` (where the bin
        closure changes a result; analysis/closure.py).
    verdicts : DataFrame
        ``results/verdicts``: every conclusion of the gaps over the grid's settings (analysis/verdicts.py), the
        comparison's model-vs-model conclusions under each view included.
    planned : dict
        answer set -> what its :data:`UNIT_PLANNERS` entry returned.
    """

    metrics: pd.DataFrame
    gaps: pd.DataFrame
    shifts: pd.DataFrame
    settings: pd.DataFrame
    dropped: pd.DataFrame = field(default_factory=pd.DataFrame)
    signals: pd.DataFrame = field(default_factory=pd.DataFrame)
    units: list = field(default_factory=list)
    kept: Kept | None = None
    edges: pd.DataFrame = field(default_factory=pd.DataFrame)
    closure: pd.DataFrame = field(default_factory=pd.DataFrame)
    verdicts: pd.DataFrame = field(default_factory=pd.DataFrame)
    planned: dict = field(default_factory=dict)

    def analyzed(self) -> pd.DataFrame:
        """The signal rows that entered the metrics (each signal on its own support), with ``correct`` = target; the
        rows of the answer sets with a planner of their own are left out."""
        return analyzed(_rows(self.signals, own_planner=False)).rename(columns={"target": "correct"})


def _rows(signals: pd.DataFrame, own_planner: bool) -> pd.DataFrame:
    """The rows whose answer set has a planner of its own (:data:`UNIT_PLANNERS`), or the others."""
    if signals.empty:
        return signals
    keep = signals["answer_set"].isin(UNIT_PLANNERS.names()).to_numpy() == own_planner
    return signals if keep.all() else signals[keep]


def primary_group(spec: GridSpec) -> dict[str, str]:
    """The main protocol: the main answer set, the first parse policy and refusal policy, the primary rule."""
    return {"answer_set": "main", "parse_policy": spec.parsing.policies[0], "refusal": spec.parsing.refusal[0],
            "rule": spec.correctness.primary}


def select(df: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    """Rows of ``df`` in ``group`` (columns it lacks are not filtered)."""
    if df.empty:
        return df
    mask = pd.Series(True, index=df.index)
    for k, v in group.items():
        if k in df.columns:
            mask &= df[k] == v
    return df[mask].reset_index(drop=True)


def shift_pairs(contexts: tuple[str, ...], aggregations: tuple[str, ...]) -> list[tuple[str, str]]:
    """Signal pairs whose gap shift is reported: every pair of contexts under the primary aggregation, and each other
    aggregation against the primary one in the same context."""
    prim = aggregations[0]
    pairs = [(token_signal(a, prim, prim), token_signal(b, prim, prim)) for a, b in itertools.combinations(contexts, 2)]
    pairs += [(token_signal(c, prim, prim), token_signal(c, agg, prim)) for c in contexts for agg in aggregations[1:]]
    return pairs


def item_clusters(items: list, field: str) -> dict[str, str]:
    """item_id -> cluster label of ``bootstrap.cluster``: the item's metadata ``field``, or its id for ``item_id``.

    Raises
    ------
    ValueError
        An item lacks the field (the message names the first such item and the fields the items have).
    """
    if field == "item_id":
        return {it.item_id: it.item_id for it in items}
    lack = [it for it in items if not str(it.metadata.get(field, "")).strip()]
    if lack:
        have = sorted({k for it in items for k in it.metadata})
        raise ValueError(f"{len(lack)} of {len(items)} items have no metadata field {field!r} (e.g. "
                         f"{lack[0].item_id!r}); their fields: {', '.join(have) or 'none'}; or use 'item_id'")
    return {it.item_id: str(it.metadata[field]) for it in items}


def cluster_problems(spec: GridSpec, items: dict[str, list]) -> list[tuple[str, str]]:
    """``bootstrap.cluster`` against the loaded items, before any model runs (flows/runner.py).

    Every item of every dataset needs the field, and a dataset needs at least two clusters (with one, every resample
    is the whole data and the interval has zero width). Returns :class:`~confgrid.flows.spec.grid.GridSpecError`
    entries ``(field, message)``; empty when the grid can run.
    """
    field = spec.bootstrap.cluster
    if field is None:
        return []
    problems = []
    for d in spec.datasets:
        its = items.get(d.name, [])
        try:
            labels = item_clusters(its, field)
        except ValueError as exc:
            problems.append(("bootstrap.cluster", f"dataset {d.name!r} ({d.adapter}): {exc}"))
            continue
        if its and len(set(labels.values())) < 2:
            problems.append(("bootstrap.cluster", f"dataset {d.name!r} ({d.adapter}): every item is in one cluster "
                             f"of {field!r} ({next(iter(labels.values()))!r}); a cluster bootstrap needs two or more"))
    return problems


#: What a run compares: every signal against verbalized, and the gap shifts between scoring contexts and token
#: aggregations (study 000); ``confgrid analyze`` of a signal table compares the same by default.
RUN_COMPARISONS = Comparisons(against="verbalized", token_shifts=True)


def comparisons_of(spec: GridSpec) -> Comparisons:
    """The pairs a run compares: :data:`RUN_COMPARISONS` and the grid's ``metrics.pairs``."""
    return Comparisons(against=RUN_COMPARISONS.against, pairs=tuple(tuple(p) for p in spec.metrics.pairs),
                       token_shifts=RUN_COMPARISONS.token_shifts)


#: ``results/settings`` columns.
SETTINGS_COLUMNS = ["setting", "model", "dataset", "answer_set", "parse_policy", "refusal", "rule", "items",
                    "parse_rate", "accuracy", "n_replaced", "n_analyzed", "used_fallback"]


def _settings_rows(spec: GridSpec, units: dict[tuple[str, str, str], Unit], signals: pd.DataFrame) -> pd.DataFrame:
    """Per unit: items, parse rate, accuracy (of the analyzed rows under the chance policy), rows replaced and
    analyzed (the answers every signal of the answer was evaluated on)."""
    done = analyzed(signals)
    done = done[(done["align"] == ANSWER_ALIGN) & (done["target_kind"] == "correct")] if len(done) else done
    answers = ({k: g.drop_duplicates("item_id") for k, g in done.groupby(list(UNIT_COLUMNS), sort=False)}
               if len(done) else {})
    empty = done.iloc[:0] if len(done) else pd.DataFrame(columns=["target", "replaced"])
    rows = []
    for key in unit_keys(spec, units):
        u = units[(key["model"], key["dataset"], key["answer_set"])]
        g = u.graded
        ok = g["parse_status"] == "ok"
        ans = answers.get(tuple({**key, "target_kind": "correct"}[c] for c in UNIT_COLUMNS), empty)
        if key["refusal"] == "chance":  # accuracy over every analyzed row, the chance letters included
            accuracy = float(ans["target"].mean()) if len(ans) else float("nan")
        else:
            corr = g[f"correct_{key['rule']}"]
            accuracy = float(corr[ok].mean()) if ok.any() else float("nan")
        rows.append({**key, "items": len(g), "parse_rate": float(ok.mean()) if len(g) else float("nan"),
                     "accuracy": accuracy, "n_replaced": int(ans["replaced"].sum()), "n_analyzed": len(ans),
                     "used_fallback": int(g["used_fallback"].sum())})
    return pd.DataFrame(rows, columns=SETTINGS_COLUMNS)


def _log_undefined(caught: list) -> None:
    """One log line per kind of undefined metric (NaN, never 0) instead of a warning per point estimate."""
    kinds = Counter(re.sub(r"\s*\([^)]*\)", "", str(w.message)).split(";")[0]
                    for w in caught if issubclass(w.category, UndefinedMetricWarning))
    for msg, n in kinds.most_common():
        log.warning("%s (%d point estimate(s); reported as NaN)", msg, n)


def evaluate(spec: GridSpec, units: dict[tuple[str, str, str], Unit],
             method_signals: pd.DataFrame | None = None, extra: Sequence[ProducerRows] = (), *,
             table: pd.DataFrame | None = None) -> Evaluation:
    """The one evaluator of a run: metrics, gaps, shifts and flips of every signal, methods included.

    Builds the run's one signal table (flows/tables/signals.py), plans every unit's cells (analysis/evaluation.py),
    runs every unit's paired bootstrap at once (in process, or in one Ray Data job with ``execution.bootstrap_backend:
    ray_data``) and turns the resamples into the tables.

    Parameters
    ----------
    units : dict
        (model, dataset, answer set) -> :class:`~confgrid.flows.tables.assemble.Unit` (complete units only).
    method_signals : DataFrame, optional
        ``tables/method_signals`` rows (flows/evaluate/methods.py).
    extra : sequence of ProducerRows
        Rows of producers with units of their own (the capability estimators, study 001's comparison), appended to
        the table and evaluated in the same bootstrap job, each unit under its producer's metrics; an answer set in
        :data:`UNIT_PLANNERS` is planned by its entry.
    table : DataFrame, optional
        The run's signal table when the caller built it already
        (:func:`~confgrid.flows.tables.signals.run_signal_table` of ``units`` and ``method_signals``; the studies'
        producers read it).

    Raises
    ------
    ValueError
        ``bootstrap.cluster`` names a field some analyzed item lacks.
    """
    signals = run_signal_table(spec, units, method_signals) if table is None else table
    own_metrics: dict[tuple, tuple[str, ...]] = {}
    if any(len(p.rows) for p in extra):
        signals = conform(pd.concat([signals, *(p.rows for p in extra if len(p.rows))], ignore_index=True))
        for p in extra:
            if p.metrics and len(p.rows):
                for key in p.rows[list(UNIT_COLUMNS)].drop_duplicates().itertuples(index=False, name=None):
                    own_metrics[key] = tuple(p.metrics)
    cluster = spec.bootstrap.cluster
    if cluster:
        labels: dict[str, str] = {}
        for u in units.values():
            labels.update(item_clusters(u.items, cluster))
        signals["cluster"] = signals["item_id"].map(labels).fillna(signals["item_id"]).astype(object)
    metrics = spec.metrics.evaluated
    rest = _rows(signals, own_planner=False)  # the rows plan_units pairs
    plans = plan_units(rest, comparisons_of(spec), spec.bootstrap.seed, clustered=bool(cluster),
                       edge_bins=edge_bins(metrics, spec.metrics.ece_bins))
    for u in plans:
        u.metrics = own_metrics.get(tuple(u.labels[c] for c in UNIT_COLUMNS), ())
    planned = {a: UNIT_PLANNERS[a](spec, g) for a, g in _rows(signals, True).groupby("answer_set", sort=False)}
    own_units = [u for p in planned.values() if p is not None for u in p.units]
    plans += own_units
    # the means over settings' resamples (analysis/means.py): the signals' own cells of the units of the main
    # answer set under the first parse and refusal policies (every rule: the correctness-rule axis); no other unit's
    primary = primary_group(spec)

    def keep(u, r):
        lab = u.labels
        if any(lab[k] != primary[k] for k in ("answer_set", "parse_policy", "refusal")) \
                or lab["target_kind"] != "correct":
            return None
        return Kept.of(lab, list(u.signals), u.info, r)

    kept: list = []

    def in_process():  # one unit at a time: its resamples are freed once its rows are made (peak: one unit)
        for u in plans:
            r = bootstrap_units([u], metrics, spec.bootstrap.resamples, n_bins=spec.metrics.ece_bins)[0]
            kept.append(keep(u, r))
            yield r

    with warnings.catch_warnings(record=True) as undefined:
        warnings.simplefilter("always", UndefinedMetricWarning)
        if spec.execution.bootstrap_backend == "ray_data" and plans:  # every unit in one Ray Data job
            results = bootstrap_units(plans, metrics, spec.bootstrap.resamples, n_bins=spec.metrics.ece_bins,
                                      use_ray=True, num_workers=spec.execution.bootstrap_workers)
            kept = [keep(u, r) for u, r in zip(plans, results, strict=True)]
            est = estimates(plans, results, spec.bootstrap.level, spec.bootstrap.interval)
            del results
        else:
            est = estimates(plans, in_process(), spec.bootstrap.level, spec.bootstrap.interval)
    _log_undefined(undefined)
    if cluster:  # the tables say the intervals are clustered, on which field, over how many clusters
        mine = {id(u) for u in own_units}
        n_cl = {u.name: int(pd.unique(u.groups).size) for u in plans if u.groups is not None and id(u) not in mine}
        est.metrics, est.gaps, est.shifts = (with_cluster_columns(df, cluster, n_cl)
                                             for df in (est.metrics, est.gaps, est.shifts))
    verdicts = verdict_table(est.gaps, est.shares, spec.verdicts.rule(), spec.bootstrap.level)
    return Evaluation(est.metrics, est.gaps, est.shifts, _settings_rows(spec, units, signals),
                      dropped_table(plans, rest), signals, plans, Kept.concat(kept), est.edges,
                      closure_notes(est.metrics, est.gaps, est.edges, spec.metrics.ece_bins), verdicts, planned)


def dropped_table(plans: list, signals: pd.DataFrame) -> pd.DataFrame:
    """``results/dropped``: per unit and signal, rows by status (``ok`` included), and ``left_out_by_alignment``:
    usable rows left out because an aligned signal of the same answer had no usable value there."""
    cols = [*UNIT_COLUMNS, "signal", "status", "n"]
    if signals.empty:
        return pd.DataFrame(columns=cols)
    counts = signals.groupby([*UNIT_COLUMNS, "signal", "status"], sort=False).size().rename("n").reset_index()
    extra = [{**u.labels, "signal": s, "status": "left_out_by_alignment", "n": n}
             for u in plans for s, n in u.left_out.items() if n]
    return pd.concat([counts, pd.DataFrame(extra, columns=cols)], ignore_index=True)[cols]
