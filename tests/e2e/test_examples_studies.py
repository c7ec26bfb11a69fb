"""examples/confidencebench.yaml (study 003) and examples/hard_easy.yaml (study 002) end to end on Ray with the
bundled JSON fixture model, at reduced size: the example files are loaded as users load them and only their
sizes are reduced (items, runs, resamples)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import parse_grid

ray = pytest.importorskip("ray")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _reduced(name: str, limits: dict[str, int]) -> dict:
    raw = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    for d in raw["datasets"]:
        d["limit"] = limits[d["name"]]
    raw["bootstrap"]["resamples"] = 100
    for a in raw.get("answer_sets", []):
        if a.get("runs", 1) > 1:
            a["runs"] = 2
    raw["execution"] = {"shard_size": 64}
    return raw


@pytest.fixture(scope="module")
def runs(ray_local, tmp_path_factory):
    raw_cb = _reduced("confidencebench.yaml", {"mmlu": 16, "mmlu_pro": 8})
    # 8 MMLU-Pro questions the JSON fixture was taught the format on (tools/fixture_json.py: the 50 short ones of a
    # seeded 80; on the others it writes JSON far less often): the draw of seed 1979
    next(d for d in raw_cb["datasets"] if d["name"] == "mmlu_pro")["seed"] = 1979
    cb = parse_grid(raw_cb, base_dir=EXAMPLES)
    he = parse_grid(_reduced("hard_easy.yaml", {"lifeeval": 60, "mmlu": 12, "mmlu_pro": 8}), base_dir=EXAMPLES)
    out_cb, out_he = tmp_path_factory.mktemp("cb"), tmp_path_factory.mktemp("he")
    return {"cb": (cb, out_cb, run_grid(cb, out_cb)), "he": (he, out_he, run_grid(he, out_he))}


def _csv(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / "results" / f"{name}.csv")


def test_confidencebench_runs_policies_and_categories(runs):
    spec, out, summary = runs["cb"]
    settings = _csv(out, "settings")
    cb = settings[settings["answer_set"].isin(["cb.run1", "cb.run2"]) & (settings["refusal"] == "drop")]
    # the JSON fixture answers {"answer": <letter>, "probability": <0-100>} on most items, at temperature 1.0 too
    # (about 95% on MMLU, 70-80% on MMLU-Pro's up to ten options)
    rate = cb.set_index(["dataset", "answer_set"])["parse_rate"]
    assert (rate.loc["mmlu"] >= 0.75).all() and (rate.loc["mmlu_pro"] >= 0.5).all(), rate
    metrics = summary.metrics
    assert {"chance", "drop"} <= set(metrics["refusal"])
    runs_t = _csv(out, "runs")
    allrows = runs_t[(runs_t["group"] == "all") & (runs_t["refusal"] == "chance")]
    assert set(allrows["setting"]) == {"fixture/mmlu", "fixture/mmlu_pro"} and (allrows["runs"] == 2).all()
    calib = _csv(out, "calibration")
    mmlu = calib[(calib["setting"] == "fixture/mmlu") & (calib["answer_set"] == "cb.run1")
                 & (calib["refusal"] == "chance") & (calib["group"] == "category")]
    assert mmlu["group_value"].nunique() >= 2  # MMLU subjects as categories
    assert (calib.loc[calib["answer_set"] == "cb.run1", "baseline_brier"].dropna().between(0.09, 0.25)).all()
    pro = calib[(calib["setting"] == "fixture/mmlu_pro") & (calib["answer_set"] == "cb.run1")
                & (calib["group"] == "all")]
    assert (pro["baseline_brier"] < 0.1875).all()  # up to 10 options: (k - 1)/k^2 < 0.1875
    # the two runs sample with their own seeds
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    r1, r2 = (graded[graded["answer_set"] == f"cb.run{r}"].set_index(["dataset", "item_id"])["raw_output"]
              .sort_index() for r in (1, 2))
    assert (r1 != r2).any()
    # chance: an unusable reply is kept at 1/k (k = the item's options) with a seeded letter
    items = pd.read_parquet(out / "tables" / "items.parquet").set_index(["dataset", "item_id"])
    sig = pd.read_parquet(out / "tables" / "signals.parquet")
    rep = sig[(sig["refusal"] == "chance") & sig["replaced"]]
    k = [len(items.loc[(d, i), "options"]) for d, i in zip(rep["dataset"], rep["item_id"], strict=True)]
    assert np.allclose(rep["confidence"], 1 / np.asarray(k))
    refused = graded[graded["answer_set"].str.startswith("cb.") & (graded["parse_status"] != "ok")]
    assert len(rep[rep["signal"] == "verbalized"]) == len(refused)
    # the run's checklist writes down the sampling of each run and the conventions
    checklist = {(e["dataset"], e["extra"]["answer_set"]): e
                 for e in json.loads((out / "results" / "checklist.json").read_text())}
    run2 = checklist[("mmlu", "cb.run2")]
    assert run2["decoding"]["method"] == "sampling" and run2["decoding"]["seed"] == 1
    assert any("refusal policies ['chance', 'drop']" in c for c in run2["extra"]["conventions"])


def test_hard_easy_effect_on_lifeeval_and_multiple_choice(runs):
    spec, out, summary = runs["he"]
    settings = _csv(out, "settings")
    life = settings[(settings["dataset"] == "lifeeval") & (settings["answer_set"] == "main")
                    & (settings["rule"] == "lifeeval")]
    assert life["parse_rate"].iloc[0] >= 0.75  # an integer age and a probability
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    scores = graded.loc[(graded["dataset"] == "lifeeval") & (graded["answer_set"] == "main"), "correct_lifeeval"]
    assert scores.dropna().between(0, 1).all() and ((scores > 0) & (scores < 1)).mean() > 0.5  # graded scores
    he = _csv(out, "hard_easy")
    lv = he[(he["dataset"] == "lifeeval") & (he["signal"] == "verbalized") & (he["rule"] == "lifeeval")].iloc[0]
    assert lv["difficulty"] == "1 - MAS"
    # the fixture states 0.45 + 0.5 MAS: overconfidence grows with difficulty, and the interval says so
    assert lv["slope"] > 0 and lv["lo"] > 0
    assert lv["share_multiple_of_5"] > 0.5
    opts = settings[(settings["answer_set"] == "options") & (settings["refusal"] == "drop")]
    assert set(opts["dataset"]) == {"mmlu", "mmlu_pro"} and set(opts["rule"]) == {"mc_favoured"}
    rate = opts.set_index("dataset")["parse_rate"]
    assert rate["mmlu"] >= 0.75 and rate["mmlu_pro"] > 0  # 10 options are harder for the tiny model (39%)
    methods = pd.read_parquet(out / "tables" / "method_signals.parquet")
    letters = methods[methods["signal"] == "letters"]
    assert set(letters["dataset"]) == {"mmlu", "mmlu_pro"}  # LifeEval has no options
    assert set(letters["rated"]) == {"favoured_letter"} and set(letters["rule"]) == {"mc_favoured"}
    ok = letters[letters["status"] == "ok"]
    assert len(ok) >= len(letters) // 2 and ok["confidence"].between(0.1, 1.0).all()
    checklist = {(e["dataset"], e["extra"]["answer_set"]): e
                 for e in json.loads((out / "results" / "checklist.json").read_text())}
    assert any("tie of m options" in c for c in checklist[("mmlu", "options")]["extra"]["conventions"])
    assert any("LifeEval window 'inclusive'" in c for c in checklist[("lifeeval", "main")]["extra"]["conventions"])
    bins = _csv(out, "hard_easy_bins")
    assert bins.groupby(["dataset", "answer_set", "signal", "rule"])["n"].sum().max() <= 60
