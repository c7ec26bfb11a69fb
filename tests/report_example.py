"""A small finished-run directory built without Ray or a model, for the figure and report tests.

Two settings, three signals each (verbalized and the token score in two contexts), 40 items; the verbalized
score never falls in [0.2, 0.5), so its reliability diagram has empty bins. ``metrics`` and ``gaps`` come from
the run's own evaluator (analysis/evaluation.py), ``calibration`` from analysis/calibration_summary.py,
``hard_easy_bins`` from analysis/hard_easy.py; the study-000 and ACE tables are small hand-made frames with the
columns a run writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

PRIMARY = {"answer_set": "main", "parse_policy": "label_or_fallback", "refusal": "drop", "rule": "containment",
           "aggregation": "geometric_mean"}
#: the primary group without the aggregation (the verbalized score has aggregation "")
GROUP = {k: v for k, v in PRIMARY.items() if k != "aggregation"}
SETTINGS = (("m", "qa"), ("m", "mc"))
N = 40


def signals_table(seed: int = 0) -> pd.DataFrame:
    """The one signal table (``tables/signals.parquet``, analysis/signals.py) of the two settings, plus rows of
    another group."""
    from confgrid.analysis.signals import conform

    rng = np.random.default_rng(seed)
    frames = []
    for model, dataset in SETTINGS:
        correct = (rng.random(N) < 0.6).astype(float)
        verbal = np.where(rng.random(N) < 0.5, rng.uniform(0.0, 0.2, N), rng.uniform(0.5, 1.0, N)).round(2)
        sig = {"verbalized": ("verbalized", "", "", verbal),
               "token_bare": ("token", "bare", "geometric_mean", rng.uniform(0, 1, N)),
               "token_guess_slot": ("token", "guess_slot", "geometric_mean",
                                    np.clip(0.3 + 0.5 * correct + rng.normal(0, .1, N), 0, 1))}
        for name, (kind, ctx, agg, conf) in sig.items():
            frames.append(pd.DataFrame({"item_id": [f"{dataset}-{i}" for i in range(N)], "signal": name,
                                        "kind": kind, "context": ctx, "aggregation": agg, "confidence": conf,
                                        "target": correct, "replaced": False, "setting": f"{model}/{dataset}",
                                        "model": model, "dataset": dataset, "align": "answer",
                                        "target_rule": GROUP["rule"], **GROUP}))
    s = pd.concat(frames, ignore_index=True)
    other = s.assign(rule="exact_match", target_rule="exact_match", confidence=1.0 - s["confidence"])  # never drawn
    return conform(pd.concat([s, other], ignore_index=True))


def _results(signals: pd.DataFrame):
    from confgrid.analysis.bootstrap import paired_bootstrap
    from confgrid.analysis.evaluation import estimates, plan_units
    from confgrid.flows.evaluate.run_evaluation import RUN_COMPARISONS

    plans = plan_units(signals[signals["rule"] == "containment"], RUN_COMPARISONS, base_seed=0)
    res = [paired_bootstrap(u.confidence, u.target, ["ece", "auroc"], n_resamples=50, seed=u.seed,
                            signal_names=u.cell_names, masks=u.masks) for u in plans]
    return estimates(plans, res)


def study_tables() -> dict[str, pd.DataFrame]:
    """Hand-made ``table3_ablation``, ``table17_probe`` and ``ace_gaps`` with the columns a run writes."""
    t3 = pd.DataFrame({"step": [0, 1, 2], "context": ["token_bare", "token_answer_slot", "token_guess_slot"],
                       "change": ["start: bare context", "Answer: moves into the assistant turn", "Guess:"],
                       "g": [0.4, 0.2, 0.1], "g_lo": [0.3, 0.1, -0.05], "g_hi": [0.5, 0.3, 0.2],
                       "dg_step": [np.nan, -0.2, -0.1], "abs_dg": [np.nan, 0.2, 0.1], "abs_dg_lo": [np.nan, .1, .05],
                       "abs_dg_hi": [np.nan, .3, .15], "n_excludes_zero": [np.nan, 2, 1], "n_flips": [np.nan, 0, 1],
                       "metric": "ece"})
    t17 = pd.DataFrame({"pair": ["canonical_vs_first_alias", "own_vs_resupplied", "empty_pair"],
                        "description": ["two correct forms", "generated vs resupplied", "no pairs"],
                        "n": [12, 10, 0], "mean_diff": [0.01, -0.03, np.nan], "lo": [-0.02, -0.08, np.nan],
                        "hi": [0.04, 0.01, np.nan], "share_strings_differ": [0.0, 0.0, np.nan]})
    # raw and aligned gaps chosen so each quadrant (and one point on an axis) occurs once
    raw = [0.2, -0.1, -0.3, 0.15, 0.0]
    aligned = [0.1, 0.2, -0.1, -0.05, 0.3]
    ace = pd.DataFrame({"model_a": "large", "model_b": "small", "comparison": "size", "dataset": "qa",
                        "method": ["verbalized", "p_true", "verbalized", "p_true", "rating"], "metric": "ece",
                        "view": "da", "value_a": 0.3, "value_b": 0.2, "gap": aligned, "favours": "large",
                        "raw_gap": raw, "reversal": [False, True, False, True, False]})
    ace = pd.concat([ace, ace.assign(view="raw", gap=ace["raw_gap"])], ignore_index=True)
    return {"table3_ablation": t3, "table17_probe": t17, "ace_gaps": ace}


def calibration_and_bins(signals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``results/calibration`` (4 options: the calibrated-random baseline is 3/16) and ``hard_easy_bins``."""
    from confgrid.analysis.calibration_summary import calibration_summary
    from confgrid.analysis.hard_easy import overconfidence_by_difficulty

    by = ["setting", "model", "dataset", "answer_set", "parse_policy", "refusal", "rule", "signal"]
    rows = signals.rename(columns={"target": "correct"}).assign(n_options=4.0)
    calib = calibration_summary(rows, by, (), n_bins=10, with_smece=False)
    bins = []
    for key, g in rows[rows["rule"] == "containment"].groupby(by, sort=False):
        # difficulty from 0 to 0.6 only: the top four bins stay empty
        diff = np.linspace(0, 0.6, len(g))
        for b in overconfidence_by_difficulty(g["confidence"].to_numpy(), g["correct"].to_numpy(), diff, 10):
            bins.append({**dict(zip(by, key, strict=True)), "difficulty": "1 - MAS", **b._asdict()})
    return calib, pd.DataFrame(bins)


def checklist_entries() -> list[dict]:
    from confgrid.protocols.checklist import build_checklist

    return [build_checklist(model=f"{m} (fixture)", dataset=d, use_chat_template=True,
                            decoding={"method": "greedy", "max_new_tokens": 16}, rows_total=N,
                            extra={"answer_set": "main"}) for m, d in SETTINGS]


def write_run(root: Path, with_studies: bool = True) -> Path:
    """Write the run directory (results/, tables/signals.parquet, primary.json, grid.yaml); returns ``root``."""
    from confgrid.flows.evaluate.outputs import write_checklist

    res, tab = root / "results", root / "tables"
    res.mkdir(parents=True, exist_ok=True)
    tab.mkdir(parents=True, exist_ok=True)
    sig = signals_table()
    sig.to_parquet(tab / "signals.parquet", index=False)
    est = _results(sig)
    metrics, gaps = est.metrics, est.gaps
    frames = {"metrics": metrics, "gaps": gaps,
              "settings": pd.DataFrame({"setting": [f"{m}/{d}" for m, d in SETTINGS], "items": N,
                                        "parse_rate": 1.0, **GROUP})}
    if with_studies:
        from confgrid.analysis.verdicts import verdict_table

        frames["verdicts"] = verdict_table(gaps, est.shares)  # and so the specification curves
        frames.update(study_tables())
        frames["calibration"], frames["hard_easy_bins"] = calibration_and_bins(sig)
    for name, df in frames.items():
        df.to_parquet(res / f"{name}.parquet", index=False)
        df.to_csv(res / f"{name}.csv", index=False)
    (res / "primary.json").write_text(json.dumps(PRIMARY), encoding="utf-8")
    write_checklist(root, checklist_entries())
    (root / "grid.yaml").write_text(yaml.safe_dump({"name": "figtest", "metrics": {"ece_bins": 10},
                                                    "bootstrap": {"level": 0.95}}), encoding="utf-8")
    return root
