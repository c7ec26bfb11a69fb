"""The calibration tables of studies 002 and 003 for a run: per category, refusals, and across runs.

Pure (no Ray, no model): a view of the one signal table (the rows that entered the evaluator's metrics), joined with
the items' metadata. Written to ``results/``:

* ``calibration.{csv,parquet}``: per (model, dataset, answer set, parse policy, refusal policy, rule, signal) and per
  value of every ``metrics.group_by`` metadata field (``category`` by default): n, accuracy, mean confidence, Brier,
  calibration gap, ECE, smECE (when ``metrics.calibration_extras`` asks for it), the calibrated-random baseline (k
  - 1)/k^2 and the Brier skill score (analysis/calibration_summary.py). Method signals (``letter_probability`` and the
  rest) appear with answer set ``method`` and their own rule.
* ``refusals.{csv,parquet}``: per (model, dataset, answer set) and category: replies, ``refusal`` (declined or no
  valid letter), ``unparseable``, other unusable statuses, and their rates (study 003 section 5.3).
* ``runs.{csv,parquet}``: for answer sets with ``runs > 1``, the mean and standard deviation across runs of every
  metric, and the pooled n (study 003 Appendix A, Table 2).
* ``hard_easy.{csv,parquet}`` and ``hard_easy_bins.{csv,parquet}`` (with ``metrics.hard_easy``, or a LifeEval dataset
  in the grid): the hard-easy effect (study 002 Table 2): per cell, the OLS slope of overconfidence (confidence
  - score) on difficulty with its paired bootstrap interval (on the very resamples of the unit's metrics: the
  evaluator's draws of the unit's items, restricted to the signal's answers), the share of confidences at multiples of
  5%, and the Pearson and Spearman correlation of confidence with the score (for LifeEval the score is the true
  probability of the guess); and overconfidence per difficulty bin (10 equal-width bins). Difficulty is ``1 - MAS``
  for LifeEval items (metadata ``mas``) and otherwise ``1 -`` the accuracy of the item's ``category`` within the cell
  (analysis/hard_easy.py ``group_difficulty``); a cell with neither has no row.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Sequence

import pandas as pd

from confgrid.analysis.calibration_summary import calibration_summary, runs_summary
from confgrid.analysis.hard_easy import (confidence_truth_correlation, group_difficulty, hard_easy_slope,
                                         overconfidence_by_difficulty, rounded_share)
from confgrid.flows.tables.assemble import Unit
from confgrid.flows.spec.grid import GridSpec
from confgrid.analysis.bootstrap import resample_counts
from confgrid.analysis.metrics import UndefinedMetricWarning

__all__ = ["calibration_tables", "item_columns", "CALIBRATION_TABLES"]

#: the tables of studies 002 and 003 (results/<name>.{csv,parquet}), in the order `confgrid show` prints them
CALIBRATION_TABLES = ("calibration", "refusals", "runs", "hard_easy", "hard_easy_bins")

log = logging.getLogger("confgrid")

_BY = ["setting", "model", "dataset", "answer_set", "parse_policy", "refusal", "rule", "signal"]


def item_columns(units: dict[tuple[str, str, str], Unit], group_by: tuple[str, ...]) -> pd.DataFrame:
    """(dataset, item_id) -> n_options and the group_by metadata fields."""
    rows = []
    for (_m, d, _a), u in units.items():
        for it in u.items:
            mas = it.metadata.get("mas")
            rows.append({"dataset": d, "item_id": it.item_id, "n_options": len(it.options),
                         "mas": float(mas) if mas not in (None, "") else float("nan"),
                         "category": str(it.metadata.get("category", "")),
                         **{g: str(it.metadata.get(g, "")) for g in group_by}})
    cols = list(dict.fromkeys(["dataset", "item_id", "n_options", "mas", "category", *group_by]))
    return pd.DataFrame(rows, columns=cols).drop_duplicates(["dataset", "item_id"], ignore_index=True)


#: Signal kinds of the answer (verbalized and token scores); every other kind but the capability estimators and
#: the probe is a confidence method.
_ANSWER_KINDS = ("verbalized", "token")


def _signal_rows(analyzed: pd.DataFrame) -> pd.DataFrame:
    """The rows of the one signal table these tables read: the answer's signals as they are, and each method signal
    once (answer set ``method``, its own rule ``target_rule``, no parse or refusal policy: its rows are the same in
    every unit of the main answer set, so the first unit's are kept).

    ``analyzed``: the rows that entered the metrics, ``target`` renamed ``correct``
    (:meth:`~confgrid.flows.evaluate.run_evaluation.Evaluation.analyzed`).
    """
    cols = [*_BY, "item_id", "confidence", "correct"]
    if analyzed.empty:
        return pd.DataFrame(columns=cols)
    answers = analyzed.loc[analyzed["kind"].isin(_ANSWER_KINDS), cols]
    # the probe's kinds are in table17 and results/metrics; the capability estimators in capability_metrics
    m = analyzed[~analyzed["kind"].isin([*_ANSWER_KINDS, "capability_estimator", "probe"])]
    m = m.drop_duplicates(["model", "dataset", "signal", "item_id"])
    methods = m.assign(answer_set="method", parse_policy="", refusal="", rule=m["target_rule"])[cols]
    return pd.concat([answers, methods], ignore_index=True)


def _refusal_rows(units: dict[tuple[str, str, str], Unit], items: pd.DataFrame,
                  group_by: tuple[str, ...]) -> pd.DataFrame:
    out: list[dict[str, Any]] = []
    for (m, d, a), u in units.items():
        g = u.graded[["item_id", "parse_status"]].merge(items[items["dataset"] == d], on="item_id", how="left")
        parts = [("all", "", g)]
        for col in group_by:
            parts += [(col, str(v), sub) for v, sub in g.groupby(col, sort=True) if str(v) != ""]
        for group, value, sub in parts:
            n = len(sub)
            st = sub["parse_status"]
            refusal, unparseable = int((st == "refusal").sum()), int((st == "unparseable").sum())
            other = int((st != "ok").sum()) - refusal - unparseable
            out.append({"setting": f"{m}/{d}", "model": m, "dataset": d, "answer_set": a, "group": group,
                        "group_value": value, "replies": n, "refusal": refusal, "unparseable": unparseable,
                        "other_unusable": other,
                        "refusal_rate": refusal / n if n else float("nan"),
                        "unusable_rate": (refusal + unparseable + other) / n if n else float("nan")})
    return pd.DataFrame(out)


def calibration_tables(spec: GridSpec, units: dict[tuple[str, str, str], Unit],
                       analyzed: pd.DataFrame, plans: Sequence[Any] = ()) -> dict[str, pd.DataFrame]:
    """The tables of the module docstring for one run, by name (:data:`CALIBRATION_TABLES`; an empty frame where there
    is nothing), from the analyzed rows of the one signal table (:func:`_signal_rows`) and the units' items.
    ``plans``: the evaluator's units (:attr:`~confgrid.flows.evaluate.run_evaluation.Evaluation.units`), whose own
    draws the hard-easy slopes resample (paired with the unit's metrics)."""
    group_by = tuple(spec.metrics.group_by)
    items = item_columns(units, group_by)
    rows = _signal_rows(analyzed).merge(items, on=["dataset", "item_id"], how="left")
    rows["n_options"] = rows["n_options"].fillna(0)
    # the random baseline needs the options shown: mc answer sets and letter probabilities only
    shown = {a.id for a in spec.all_answer_sets() if a.item_format.options}
    letters = {m.id for m in spec.methods if m.reader.options}
    asked = rows["answer_set"].isin(shown) | ((rows["answer_set"] == "method") & rows["signal"].isin(letters))
    rows.loc[~asked, "n_options"] = 0
    calib = calibration_summary(rows, _BY, group_by, n_bins=spec.metrics.ece_bins,
                                with_smece="smece" in spec.metrics.calibration_extras)
    out = dict.fromkeys(CALIBRATION_TABLES, pd.DataFrame())
    out.update(calibration=calib, refusals=_refusal_rows(units, items, group_by))
    if any(spec.run_groups().values()) and len(calib):
        by = [c for c in _BY if c not in ("answer_set",)] + ["group", "group_value"]
        out["runs"] = runs_summary(calib, spec.run_groups(), by)
    if spec.metrics.hard_easy or any(d.adapter == "lifeeval" for d in spec.datasets):
        out["hard_easy"], out["hard_easy_bins"] = _hard_easy(rows, spec, plans)
    return out


def _unit_draws(plans: Sequence[Any], B: int) -> Callable[[dict, pd.DataFrame], Any]:
    """``counts(ident, rows)``: the (B, len(rows)) multiplicities of the rows' items in the resamples of their
    evaluator's unit, or None (no such unit, or an item it lacks); for statistics that are not metrics of a signal but
    must be paired with them. The last unit's draws are kept (rows come unit by unit)."""
    plan_of = {tuple(u.labels[c] for c in _BY[:-1]): u for u in plans
               if u.labels.get("target_kind") == "correct" and u.n_resamples is None and len(u.items)}
    last: dict[int, tuple[pd.Index, Any]] = {}

    def counts(ident: dict, rows: pd.DataFrame) -> Any:
        u = plan_of.get(tuple(ident[c] for c in _BY[:-1]))
        if u is None or not B:
            return None
        if id(u) not in last:
            last.clear()
            last[id(u)] = (pd.Index(u.items), resample_counts(len(u.items), B, u.seed, groups=u.groups))
        index, W = last[id(u)]
        pos = index.get_indexer(pd.Index(rows["item_id"]))
        return None if (pos < 0).any() else W[:, pos]

    return counts


def _hard_easy(rows: pd.DataFrame, spec: GridSpec, plans: Sequence[Any] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """results/hard_easy and hard_easy_bins (see the module docstring)."""
    slopes, bins = [], []
    B = min(spec.bootstrap.resamples, 10_000)
    counts_of = _unit_draws(plans, B)
    for key, g in rows.groupby(_BY, sort=False, dropna=False):
        ident = dict(zip(_BY, key, strict=True))
        conf, score = g["confidence"].to_numpy(float), g["correct"].to_numpy(float)
        if g["mas"].notna().all():
            difficulty, source = 1.0 - g["mas"].to_numpy(float), "1 - MAS"
        elif (g["category"] != "").all() and g["category"].nunique() > 1:
            difficulty, source = group_difficulty(score, g["category"].to_numpy()), "1 - accuracy of the category"
        else:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            sl = hard_easy_slope(conf, score, difficulty, resamples=B, seed=spec.bootstrap.seed,
                                 level=spec.bootstrap.level, counts=counts_of(ident, g))
            rs = rounded_share(conf)
            cor = confidence_truth_correlation(conf, score)
        slopes.append({**ident, "difficulty": source, "n": sl.n, "slope": sl.slope, "intercept": sl.intercept,
                       "lo": sl.lo, "hi": sl.hi, "status": sl.status, "share_multiple_of_5": rs.share,
                       "pearson": cor.pearson, "spearman": cor.spearman,
                       "overconfidence": float(conf.mean() - score.mean()) if len(g) else float("nan")})
        for b in overconfidence_by_difficulty(conf, score, difficulty, 10):
            bins.append({**ident, "difficulty": source, **b._asdict()})
    return pd.DataFrame(slopes), pd.DataFrame(bins)
