"""The accuracy-controlled comparison of a run (study 001, ACE): own-answer rows, candidate ratings, the tables.

Pure (no Ray, no model): it re-reads what the run stored and hands it to analysis/ace (the definitions). What each
compared signal is:

* ``verbalized``: the stated probability of the main answer set (primary parse policy), rating the greedy answer
  graded under ``correctness.primary``;
* ``token_<context>``: the token score of the greedy answer in that context (primary aggregation);
* a method id: the method's signal from ``tables/method_signals.parquet`` (P(True) and the 0-100 rating rate the
  greedy answer; self-consistency the first sample), graded under the method's rule.

Candidate ratings (view ``ca``): every rater rates every pooled candidate (the models' greedy answers, normalized and
deduplicated by :meth:`~confgrid.flows.plan.grid_plan.GridPlan.candidate_pool`) with each compared method of kind
``p_true`` or ``rating`` (shards of part ``ca``); a self-consistency method rates a candidate by the share of the
rater's k samples whose normalized answer equals it (no model call; a choice of confgrid, stated in
docs/studies/001.md).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.store.run_store import Frames
from confgrid.flows.tracking import keyed_metrics
from confgrid.flows.evaluate.run_evaluation import primary_group, select
from confgrid.flows.evaluate.methods import ratings_of_supplied_answers
from confgrid.flows.stages.base import relabel
from confgrid.protocols.correctness import normalize

__all__ = ["ace_rows", "ca_ratings", "ace_frames", "ace_mlflow_metrics", "ACE_TABLES"]

log = logging.getLogger("confgrid")

#: The tables written to results/ (CSV, Parquet, Markdown), in the order `confgrid show` prints them.
ACE_TABLES = ("ace_gaps", "ace_reversals", "ace_patterns", "ace_pattern_shares", "ace_bootstrap",
              "ace_bootstrap_summary", "ace_retention", "ace_self_preference", "ace_correlation")


def ace_rows(spec: GridSpec, answers: pd.DataFrame, method_signals: pd.DataFrame) -> pd.DataFrame:
    """Own-answer rows of every signal the grid's comparison names (analysis/ace/frame.py contract): columns model,
    dataset, method, item_id, signal and correct (float64 in [0, 1]), answer; rows without a confidence or a
    correctness label are left out (counted in the log).

    ``answers``: the rows that entered the metrics, ``correct`` = target
    (:meth:`~confgrid.flows.evaluate.run_evaluation.Evaluation.analyzed`; its verbalized and token signals are read);
    ``method_signals``: ``tables/method_signals.parquet`` (flows/evaluate/methods.py).
    """
    wanted = spec.comparison_signals()

    primary = primary_group(spec)
    frames = []
    f = select(answers, primary) if len(answers) else answers
    if len(f):
        f = f[f["kind"].isin(["verbalized", "token"]) & f["signal"].isin(wanted)
              & f["aggregation"].isin(["", spec.scoring.aggregations[0]])]
        frames.append(pd.DataFrame({"model": f["model"], "dataset": f["dataset"], "method": f["signal"],
                                    "item_id": f["item_id"].astype(str), "signal": f["confidence"],
                                    "correct": f["correct"], "answer": None}))
    if len(method_signals):
        m = method_signals[method_signals["signal"].isin(wanted)]
        frames.append(pd.DataFrame({"model": m["model"], "dataset": m["dataset"], "method": m["signal"],
                                    "item_id": m["item_id"].astype(str), "signal": m["confidence"],
                                    "correct": m["correct"], "answer": m["rated_answer"]}))
    if not frames:
        return pd.DataFrame(columns=["model", "dataset", "method", "item_id", "signal", "correct", "answer"])
    rows = pd.concat(frames, ignore_index=True)
    usable = rows["signal"].notna() & rows["correct"].notna()
    if (~usable).any():
        log.info("comparison: %d row(s) without a confidence or a correctness label left out (%s)",
                 int((~usable).sum()), ", ".join(f"{k}={v}" for k, v in
                                                 rows.loc[~usable, "method"].value_counts().sort_index().items()))
    rows = rows[usable].astype({"signal": np.float64, "correct": np.float64})
    return rows.reset_index(drop=True)


def ca_ratings(plan: GridPlan, done: dict[str, pd.DataFrame], shards: list[ShardRequest],
               samples: pd.DataFrame) -> pd.DataFrame | None:
    """Every rater's confidence in every pooled candidate (analysis/ace/candidates.py ``RATING_COLUMNS``).

    Returns None when the comparison has no ``ca`` view; a dataset whose pool or rating shards are missing (failed,
    not run) is left out with a log line.
    """
    spec = plan.spec
    if "ca" not in spec.comparison.views:
        return None
    wanted = set(spec.comparison_signals())
    sc = [m for m in spec.methods if m.reader.pools_samples and m.id in wanted]
    out = []
    for d in spec.datasets:
        pool = plan.candidate_pool(d.name)
        if pool is None:
            log.warning("comparison view ca on %s: some model's main answers are missing; no candidate pool",
                        d.name)
            continue
        keyed = pool.assign(_norm=pool["surface"].map(normalize))
        for method in spec.ca_methods():
            for rater in spec.method_models(method):
                shs = [s for s in shards if s.part == "ca" and s.method == method.id and s.model == rater.name
                       and s.dataset == d.name]
                uniq = list({s.label: s for s in shs}.values())
                if not uniq or any(s.key not in done for s in uniq):
                    log.warning("comparison view ca on %s: %s's ratings with %s are incomplete; left out", d.name,
                                rater.name, method.id)
                    continue
                table = pd.concat([relabel(done[s.key], model=rater.name, dataset=d.name, method=method.id,
                                           chunk=s.chunk) for s in uniq], ignore_index=True)
                got = ratings_of_supplied_answers(plan, method, rater.name, table)
                r = keyed.merge(got.rename(columns={"rated_answer": "surface"}), on=["item_id", "surface"],
                                how="inner")
                out.append(r.assign(rater=rater.name, method=method.id))
        for method in sc:
            s = samples[(samples["method"] == method.id) & (samples["dataset"] == d.name)] if len(samples) else samples
            for rater, g in (s.groupby("model", sort=True) if len(s) else ()):
                norm = g.assign(_norm=g["answer"].map(lambda a: normalize(a) if isinstance(a, str) and a.strip()
                                                      else None))
                k = norm.groupby("item_id")["sample_idx"].count()
                hits = norm.groupby(["item_id", "_norm"])["sample_idx"].count()
                share = [hits.get((i, c), 0) / k[i] if i in k.index else np.nan
                         for i, c in zip(keyed["item_id"], keyed["_norm"], strict=True)]
                out.append(keyed.assign(rater=rater, method=method.id, confidence=share))
    cols = ["dataset", "item_id", "candidate", "surface", "producers", "label", "rater", "method", "signal"]
    if not out:
        return pd.DataFrame(columns=cols)
    ratings = pd.concat(out, ignore_index=True).rename(columns={"confidence": "signal"})
    ratings = ratings[ratings["signal"].notna()]
    return ratings[cols].reset_index(drop=True)


def ace_frames(tables) -> Frames:
    """Every ACE table (CSV, Parquet and Markdown) and the comparison's messages, for the one writer
    (flows/store/run_store.py :func:`~confgrid.flows.store.run_store.write_frames`)."""
    frames = tables.tables()
    return Frames(frames, markdown=tuple(frames),
                  texts={"ace_messages.txt": "\n".join(tables.messages) + "\n"} if tables.messages else {})


#: a cell of the comparison: the key of its gap and bootstrap rows
_ACE_KEY = ["model_a", "model_b", "dataset", "method", "metric", "view"]


def ace_mlflow_metrics(tables) -> dict[str, float]:
    """MLflow metrics of the comparison: per pair, dataset, method, metric and view, the gap and its interval
    (``ace/<a>_vs_<b>/<dataset>/<method>/<metric>/<view>/{point,lo,hi}``: the keys of every estimate end in
    point/lo/hi), and the retention probability of every reversal (:func:`~confgrid.flows.tracking.keyed_metrics`)."""
    g = tables.gaps[[*_ACE_KEY, "gap"]]
    if len(tables.bootstrap):
        g = g.merge(tables.bootstrap[[*_ACE_KEY, "lo", "hi", "retention_prob"]], on=_ACE_KEY, how="left")
    else:
        g = g.assign(lo=np.nan, hi=np.nan, retention_prob=np.nan)
    return keyed_metrics(g, lambda r: ("ace", f"{r.model_a}_vs_{r.model_b}", r.dataset, r.method, r.metric, r.view),
                         {"point": "gap", "lo": "lo", "hi": "hi", "retention_prob": "retention_prob"})
