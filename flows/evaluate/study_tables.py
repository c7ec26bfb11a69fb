"""The study's tables and the reporting checklist of a run (study 000 Tables 2, 3, 4, 17 and Table 5).

Built from the evaluator's estimates and its means over settings (analysis/means.py), with the pure functions of
analysis/tables.py; written to ``OUT/results/table*.{csv,parquet}`` and ``OUT/results/checklist.{json,md}``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np
import pandas as pd

from confgrid.analysis.bootstrap import interval, resample_counts
from confgrid.analysis.means import Kept, mean_gap, mean_shift, sides
from confgrid.analysis.tables import (ablation_path_table, axis_table, estimators_table, three_context_table,
                                      transfer_table)
from confgrid.analysis.resampling import setting_seed
from confgrid.analysis.transfer import transfer_penalties
from confgrid.protocols.probe import PAIRS, probe_pairs
from confgrid.protocols.correctness import normalize

__all__ = ["study_tables", "probe_table", "selection_table", "transfer_tables", "ABLATION_PATH",
           "ESTIMATORS"]

log = logging.getLogger("confgrid")

#: The ablation path of study 000 Table 3: from the bare context to the Guess: slot, one edit at a time,
#: with the Answer: marker fixed, then the final switch to Guess:.
ABLATION_PATH = (
    ("bare", "start: bare context"),
    ("answer_slot", "Answer: moves into the assistant turn"),
    ("abl_instruction_answer", "answer-only instruction"),
    ("abl_noprob_answer", "output template (confidence prompt without probability request)"),
    ("abl_confidence_answer", "probability request"),
    ("abl_confidence_guess", "marker Answer: -> Guess:"),
)

def study_tables(kept: Kept, rule: str, metrics_df: pd.DataFrame, gaps_df: pd.DataFrame, contexts: tuple[str, ...],
                 aggregations: tuple[str, ...], metric_names: tuple[str, ...], level: float = 0.95
                 ) -> dict[str, pd.DataFrame]:
    """Table 2 (three contexts), Table 3 (ablation path), Table 4 (mean |shift| per axis) and Table 15 (estimators),
    by name; a table whose contexts or axes the grid did not ask for is left out.

    ``kept``: the evaluator's kept rows of the main protocol, every rule (the others than the primary ``rule`` are
    Table 4's rule axis); ``metrics_df``, ``gaps_df``: the main protocol's rows under the primary rule; ``contexts``:
    the main answer set's scoring contexts; ``aggregations``: the first is primary.
    """
    out: dict[str, pd.DataFrame] = {}
    s = sides(kept)
    if s.rows.empty:
        return out
    agg0, mets = aggregations[0], list(metric_names)

    def at(context: str, metric: str, aggregation: str = agg0, rule_: str = rule) -> pd.DataFrame:
        return s.where(rule=rule_, context=context, aggregation=aggregation, metric=metric)

    def shift(frm: pd.DataFrame, to: pd.DataFrame, **key) -> dict | None:
        summary = mean_shift(s, frm, to, level)
        return None if summary is None else {**key, **summary}

    sel = lambda df: df[df["aggregation"].isin(["", agg0])]  # noqa: E731
    three = [c for c in ("bare", "answer_slot", "guess_slot") if c in contexts]
    if len(three) >= 2:
        # the per-resample advantage of each token signal (for a signed metric |v| - |t|) decides resolved flips
        adv = s.where(rule=rule, aggregation=agg0)
        adv = adv[adv["context"].isin(three)]
        lo, hi = interval(s.advantages[adv.index.to_numpy()], level)
        adv = adv.assign(point=adv["advantage"], lo=lo, hi=hi)
        out["table2_contexts"] = pd.concat(
            [three_context_table(sel(metrics_df), sel(gaps_df), adv, met, three).assign(metric=met)
             for met in mets], ignore_index=True)
    path = [(c, change) for c, change in ABLATION_PATH if c in contexts]
    if len(path) >= 3:
        sig = {c: at(c, mets[0])["signal"].iloc[0] for c, _ in path}  # the token signal of each context
        gsum = pd.DataFrame([{"signal": sig[c], "metric": met, **mean_gap(s, at(c, met), level)}
                             for c, _ in path for met in mets])
        ssum = pd.DataFrame([shift(at(a, met), at(b, met), context_a=sig[a], context_b=sig[b], metric=met)
                             for (a, _), (b, _) in zip(path[:-1], path[1:]) for met in mets])
        out["table3_ablation"] = pd.concat(
            [ablation_path_table(gsum, ssum, [(sig[c], ch) for c, ch in path], met).assign(metric=met)
             for met in mets], ignore_index=True)
    axes: dict[str, pd.DataFrame] = {}
    if "bare" in contexts and "guess_slot" in contexts:
        axes["context (bare -> Guess: slot)"] = pd.DataFrame(
            [shift(at("bare", m), at("guess_slot", m), metric=m) for m in mets])
    ref = "guess_slot" if "guess_slot" in contexts else contexts[0]
    for agg in aggregations[1:]:
        axes[f"aggregation ({agg0} -> {agg}, {ref})"] = pd.DataFrame(
            [shift(at(ref, m), at(ref, m, agg), metric=m) for m in mets])
    for other in dict.fromkeys(s.rows["rule"]):  # units of another rule: the same items and resamples
        rows = [shift(at(ref, m), at(ref, m, rule_=other), metric=m) for m in mets] if other != rule else [None]
        if None not in rows:
            axes[f"correctness rule ({rule} -> {other}, {ref})"] = pd.DataFrame(rows)
    ests = [e for e in metric_names if e != "ece" and (e.startswith("ece") or e in ESTIMATORS)]
    if "ece" in metric_names and ests and three:
        both = {"bare", "guess_slot"} <= set(contexts)  # the estimator's own context flip, bare -> Guess: slot
        flips = {e: mean_shift(s, at("bare", e), at("guess_slot", e), level)["n_flips"] if both else float("nan")
                 for e in ests}
        est = pd.DataFrame([shift(at(c, "ece"), at(c, e), signal=at(c, e)["signal"].iloc[0], estimator=e,
                                  context=c, context_flips=flips[e]) for c in three for e in ests])
        out["table15_estimators"] = estimators_table(est)
        for e in ests:  # the estimator axis of Table 4: the gap under the estimator vs under 10-bin ECE
            sub = est[(est["estimator"] == e) & (est["context"] == ref)]
            if len(sub):
                axes[f"ECE estimator (ece -> {e}, {ref})"] = sub.assign(metric=e)
    if axes:
        out["table4_axes"] = axis_table(axes)
    return out


#: ECE estimators other than binned ECE (study 000 "Estimators"): compared against 10-bin ECE in Table 15.
ESTIMATORS = ("ece_equal_mass", "kde_ece", "ks_ece", "smoothed_ece", "smece")


def transfer_tables(signal_frames: Mapping[str, pd.DataFrame], context_a: str, context_b: str, seed: int,
                    n_folds: int = 5, n_splits: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Calibration transfer between two contexts (study 000 Appendix G): ``(penalties, table)``, every (setting,
    method, direction, split) row and the summary per method and direction.

    ``signal_frames``: setting -> long signal table (item_id, signal, confidence, correct); maps fitted on one context
    are applied to the same answers' scores in the other.
    """
    rows = []
    for setting, sig in signal_frames.items():
        a = sig[sig["signal"] == f"token_{context_a}"].set_index("item_id")
        b = sig[sig["signal"] == f"token_{context_b}"].set_index("item_id")
        ids = a.index.intersection(b.index)
        y = a.loc[ids, "correct"].to_numpy(dtype=float)
        if len(ids) < n_folds or len(np.unique(y)) < 2 or not np.isin(y, (0.0, 1.0)).all():
            log.info("transfer %s: skipped (%d answers, needs both classes and binary labels)", setting, len(ids))
            continue
        m, d = setting.split("/", 1)
        pen = transfer_penalties(a.loc[ids, "confidence"].to_numpy(float), b.loc[ids, "confidence"].to_numpy(float),
                                 y, contexts=(context_a, context_b), n_folds=n_folds, n_splits=n_splits,
                                 seed=setting_seed(m, d, seed))
        rows.append(pen.assign(setting=setting))
    if not rows:
        return pd.DataFrame(), pd.DataFrame()
    pen = pd.concat(rows, ignore_index=True)
    return pen, transfer_table(pen)


def _resampled_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """(B,) means of ``values`` (n,) on the paired bootstrap's own resamples of its n items
    (:func:`~confgrid.analysis.bootstrap.resample_counts`: the one resampling stream)."""
    W = resample_counts(values.size, n_resamples, seed)
    return (W @ values) / values.size


def probe_table(probe: pd.DataFrame, graded: pd.DataFrame, n_resamples: int, seed: int,
                level: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 17: paired differences of stated confidence, pooled over settings, with bootstrap intervals.

    From the probe table (model, dataset, item_id, kind, answer, verbalized, ...) and the main set's graded answers;
    returns ``(table, pairs)``: one row per pair definition (n, mean difference [lo, hi], share of pairs whose strings
    differ), and the pooled pairs. The interval resamples the pooled pairs (study 000 Table 17) with the one
    resampling stream (:func:`~confgrid.analysis.bootstrap.resample_counts`, seed ``setting_seed("probe", pair,
    seed)``).
    """
    own = graded[["model", "dataset", "item_id", "correct"]].rename(columns={"correct": "own_correct"})
    gen = graded.assign(kind="generated")[["model", "dataset", "item_id", "kind", "answer", "verbalized"]]
    tbl = pd.concat([probe[["model", "dataset", "item_id", "kind", "answer", "verbalized"]], gen], ignore_index=True)
    tbl = tbl.merge(own, on=["model", "dataset", "item_id"], how="left")
    tbl["verbalized"] = tbl["verbalized"].astype(float)
    pairs = probe_pairs(tbl)
    rows = []
    for p in PAIRS:
        d = pairs[pairs["pair"] == p.id]["diff"].to_numpy(dtype=float) if len(pairs) else np.array([])
        n = len(d)
        lo = hi = mean = differ = np.nan
        if n:
            lo, hi = interval(_resampled_means(d, n_resamples, setting_seed("probe", p.id, seed)), level)
            mean = d.mean()
            differ = pairs[pairs["pair"] == p.id]["strings_differ"].mean() if "strings_differ" in pairs else np.nan
        rows.append({"pair": p.id, "description": p.description, "n": n, "mean_diff": float(mean),
                     "lo": float(lo), "hi": float(hi), "share_strings_differ": float(differ)})
    return pd.DataFrame(rows), pairs


def selection_table(units: Mapping[tuple[str, str, str], Any], other_set: str, seed: int,
                    n_resamples: int = 10_000, level: float = 0.95) -> pd.DataFrame:
    """The selection effect (study 000 section 4.2, Appendix C "Selection").

    For each (model, dataset) with both the main answers and ``other_set``'s answers, on the items where the two
    answers differ after normalization: the mean token score of each set in every context both were scored in, and the
    paired difference main - other with a bootstrap interval over items. Each answer scores higher in the context
    where it was generated.

    ``units``: (model, dataset, answer set) -> flows/tables/assemble.py ``Unit``. Columns: setting, other_set,
    context, n_both, share_differ, n_differ, mean_main, mean_other, diff, lo, hi.
    """
    rows = []
    for (m, d, aid), u in units.items():
        if aid != "main" or (m, d, other_set) not in units:
            continue
        o = units[(m, d, other_set)]
        ga = u.graded.set_index("item_id")["answer"]
        gb = o.graded.set_index("item_id")["answer"]
        both = [i for i in ga.index if i in gb.index and isinstance(ga[i], str) and isinstance(gb[i], str)
                and ga[i].strip() and gb[i].strip()]
        differ = [i for i in both if normalize(ga[i]) != normalize(gb[i])]
        ta, tb = u.tokens, o.tokens
        if ta.empty or tb.empty:
            continue
        for ctx in sorted(set(ta["context_id"]) & set(tb["context_id"])):
            sa = ta[ta["context_id"] == ctx].set_index("item_id")["token_score"]
            sb = tb[tb["context_id"] == ctx].set_index("item_id")["token_score"]
            ids = [i for i in differ if i in sa.index and i in sb.index]
            diff = (sa.reindex(ids) - sb.reindex(ids)).to_numpy(dtype=float)
            lo = hi = np.nan
            if len(ids):  # the unit's own seed on the one resampling stream, over the items where answers differ
                lo, hi = interval(_resampled_means(diff, n_resamples, setting_seed(m, d, seed)), level)
            rows.append({"setting": f"{m}/{d}", "other_set": other_set, "context": ctx, "n_both": len(both),
                         "share_differ": len(differ) / len(both) if both else np.nan, "n_differ": len(ids),
                         "mean_main": float(sa.reindex(ids).mean()) if ids else np.nan,
                         "mean_other": float(sb.reindex(ids).mean()) if ids else np.nan,
                         "diff": float(diff.mean()) if len(ids) else np.nan, "lo": float(lo), "hi": float(hi)})
    return pd.DataFrame(rows)
