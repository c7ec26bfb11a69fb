"""Evaluation: metrics, gaps and shifts with paired bootstrap intervals for every unit of a run.

For each (model, dataset, answer set) unit and each (parse policy, correctness
rule) of the grid, the signal table is built on the instance-aligned rows
(flows/stages.py ``signal_table``) and the paired bootstrap runs once for all
its signals and metrics (flows/results.py ``setting_tables``), in the driver
or on Ray Data (``execution.bootstrap_backend``). Nothing here calls a model:
changing the rule, aggregation, estimator or bins reruns only this.
"""

from __future__ import annotations

import itertools
import logging
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from confgrid.flows.assemble import Unit
from confgrid.flows.results import setting_tables
from confgrid.flows.spec import GridSpec
from confgrid.flows.stages import signal_table, token_signal

__all__ = ["Evaluation", "evaluate", "primary_group", "select", "shift_pairs", "item_clusters", "cluster_problems"]

log = logging.getLogger("confgrid")


@dataclass
class Evaluation:
    """The tidy result tables of a run and the bootstrap results behind them.

    Attributes
    ----------
    metrics, gaps, shifts, settings : DataFrame
        ``results/{metrics,gaps,shifts,settings}.csv`` (columns in README.md "Results").
    signal_frames : list of DataFrame
        The signal table of every (unit, policy, rule), labelled.
    groups : dict
        (answer set, parse policy, rule) -> {setting: (BootstrapResult, signal names)}, for the study tables.
    """

    metrics: pd.DataFrame
    gaps: pd.DataFrame
    shifts: pd.DataFrame
    settings: pd.DataFrame
    signal_frames: list[pd.DataFrame] = field(default_factory=list)
    groups: dict[tuple[str, str, str], dict[str, tuple[Any, list[str]]]] = field(default_factory=dict)


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
    """Signal pairs whose gap shift is reported: every pair of contexts under the primary aggregation,
    and each other aggregation against the primary one in the same context."""
    prim = aggregations[0]
    pairs = [(token_signal(a, prim, prim), token_signal(b, prim, prim)) for a, b in itertools.combinations(contexts, 2)]
    pairs += [(token_signal(c, prim, prim), token_signal(c, agg, prim)) for c in contexts for agg in aggregations[1:]]
    return pairs


def item_clusters(items: list, field: str) -> dict[str, str]:
    """item_id -> cluster label of ``bootstrap.cluster``: the item's metadata ``field``, or its id for ``item_id``.

    Raises
    ------
    ValueError
        An item lacks the field (the message names the first such item and the
        fields the items have).
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

    Every item of every dataset needs the field, and a dataset needs at least
    two clusters (with one, every resample is the whole data and the interval
    has zero width).

    Returns
    -------
    list of (field, message)
        Empty when the grid can run; else :class:`~confgrid.flows.spec.GridSpecError` entries.
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


def _with_group(df: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    out = df.copy()
    for i, (k, v) in enumerate(group.items()):
        out.insert(3 + i, k, v)
    return out


def _settings_row(m: str, d: str, g: pd.DataFrame, sig: pd.DataFrame, dropped: dict[str, int],
                  group: dict[str, str]) -> dict[str, Any]:
    ok = g["parse_status"] == "ok"
    corr = g[f"correct_{group['rule']}"]
    if group.get("refusal") == "chance":  # accuracy over every analyzed row, the chance letters included
        first = sig.drop_duplicates("item_id") if not sig.empty else sig
        accuracy = float(first["correct"].mean()) if len(first) else float("nan")
    else:
        accuracy = float(corr[ok].mean()) if ok.any() else float("nan")
    return {
        "setting": f"{m}/{d}", "model": m, "dataset": d, **group, "items": len(g),
        "parse_rate": float(ok.mean()) if len(g) else float("nan"),
        "accuracy": accuracy,
        "n_replaced": int(sig.loc[sig["replaced"], "item_id"].nunique()) if "replaced" in sig else 0,
        "n_analyzed": int(sig["item_id"].nunique()) if not sig.empty else 0,
        "used_fallback": int(g["used_fallback"].sum()),
        "dropped": "; ".join(f"{k}={v}" for k, v in sorted(dropped.items())),
    }


def _log_undefined(caught: list) -> None:
    """One log line per kind of undefined metric (NaN, never 0) instead of a warning per point estimate."""
    from confgrid.analysis.metrics import UndefinedMetricWarning

    kinds = Counter(re.sub(r"\s*\([^)]*\)", "", str(w.message)).split(";")[0]
                    for w in caught if issubclass(w.category, UndefinedMetricWarning))
    for msg, n in kinds.most_common():
        log.warning("%s (%d point estimate(s); reported as NaN)", msg, n)


def _refusals(spec: GridSpec, a: Any) -> tuple[str, ...]:
    """Refusal policies evaluated for an answer set: ``chance`` only where it shows options (format mc)."""
    if a.format == "mc":
        return spec.parsing.refusal
    return tuple(dict.fromkeys(r if r != "chance" else "drop" for r in spec.parsing.refusal))


def evaluate(spec: GridSpec, units: dict[tuple[str, str, str], Unit]) -> Evaluation:
    """Metrics with paired bootstrap intervals, per (setting, answer set, parse policy, correctness rule).

    Parameters
    ----------
    spec : GridSpec
    units : dict
        (model, dataset, answer set) -> :class:`~confgrid.flows.assemble.Unit` (complete units only).

    Returns
    -------
    Evaluation
    """
    from confgrid.analysis.metrics import UndefinedMetricWarning

    mets, gaps, shifts, sig_frames, settings_rows = [], [], [], [], []
    cluster = spec.bootstrap.cluster
    groups: dict[tuple[str, str, str], dict[str, tuple[Any, list[str]]]] = {}
    with warnings.catch_warnings(record=True) as undefined:
        warnings.simplefilter("always", UndefinedMetricWarning)
        for (mname, dname, aid), u in tqdm(units.items(), desc="bootstrap", unit="unit", leave=False):
            a = u.answer_set
            ctxs = a.scoring_contexts(spec.scoring.contexts)
            for policy, refusal in itertools.product(spec.parsing.policies, _refusals(spec, a)):
                for rule in a.analysis_rules(spec.correctness.rules):
                    sig, dropped = signal_table(u.graded, u.tokens, ctxs, aggregations=spec.scoring.aggregations,
                                                policy=policy, rule=rule, verbalized=a.verbalized_source() != "none",
                                                refusal=refusal, items=u.items,
                                                chance_seed=spec.parsing.chance_seed, chance_run=aid)
                    group = {"answer_set": aid, "parse_policy": policy, "refusal": refusal, "rule": rule}
                    settings_rows.append(_settings_row(mname, dname, u.graded, sig, dropped, group))
                    if sig.empty:
                        continue
                    sig_frames.append(sig.assign(setting=f"{mname}/{dname}", model=mname, dataset=dname, **group))
                    out = setting_tables(sig, model=mname, dataset=dname, metrics=spec.metrics.names,
                                         n_bins=spec.metrics.ece_bins, n_resamples=spec.bootstrap.resamples,
                                         base_seed=spec.bootstrap.seed, level=spec.bootstrap.level,
                                         use_ray=spec.execution.bootstrap_backend == "ray_data",
                                         num_workers=spec.execution.bootstrap_workers,
                                         pairs=shift_pairs(ctxs, spec.scoring.aggregations),
                                         clusters=item_clusters(u.items, cluster) if cluster else None,
                                         cluster_col=cluster)
                    for df, acc in zip(out[:3], (mets, gaps, shifts), strict=True):
                        if len(df):
                            acc.append(_with_group(df, group))
                    if refusal == spec.parsing.refusal[0]:
                        groups.setdefault((aid, policy, rule), {})[f"{mname}/{dname}"] = (out[3],
                                                                                         list(out[3].signal_names))
    _log_undefined(undefined)
    cat = lambda frames: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()  # noqa: E731
    return Evaluation(cat(mets), cat(gaps), cat(shifts), pd.DataFrame(settings_rows), sig_frames, groups)
