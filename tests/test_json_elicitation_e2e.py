"""JSON elicitation end to end on Ray with the fixture model (studies 002/003 machinery): an answer set asked for
a JSON answer and probability in two runs at temperature 1.0, option probabilities, letter token probabilities,
both refusal policies, and the calibration, refusal and runs tables; plus the grid checks that fail before Ray."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from confgrid.flows.spec import GridSpecError, parse_grid

ray = pytest.importorskip("ray")

GRID = {
    "name": "json_e2e",
    "models": [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 32}],
    "datasets": [{"name": "mmlu", "adapter": "mmlu", "limit": 8, "seed": 0}],
    "scoring": {"contexts": ["guess_slot"]},
    "metrics": {"names": ["ece", "brier", "calibration_gap"]},
    "bootstrap": {"resamples": 30},
    "parsing": {"refusal": ["drop", "chance"], "chance_seed": 1},
    "answer_sets": [
        {"id": "cb", "prompt": "json_answer_probability", "format": "mc", "temperature": 1.0, "runs": 2,
         "max_new_tokens": 16},
        {"id": "opts", "prompt": "json_option_probabilities", "format": "mc", "max_new_tokens": 16},
    ],
    "methods": [{"id": "letters", "kind": "letter_probability"}],
    "execution": {"shard_size": 8},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from confgrid.flows.runner import run_grid

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    out = tmp_path_factory.mktemp("json")
    spec = parse_grid(GRID)
    try:
        yield spec, out, run_grid(spec, out)
    finally:
        ray.shutdown()


def test_runs_policies_and_tables(run):
    spec, out, summary = run
    assert [a.id for a in spec.all_answer_sets()] == ["main", "cb.run1", "cb.run2", "opts"]
    settings = pd.read_csv(out / "results" / "settings.csv")
    cb = settings[settings["answer_set"].str.startswith("cb.")]
    assert set(cb["refusal"]) == {"drop", "chance"} and set(cb["rule"]) == {"mc_letter"}
    assert set(settings.loc[settings["answer_set"] == "opts", "rule"]) == {"mc_favoured"}
    assert set(settings.loc[settings["answer_set"] == "main", "refusal"]) == {"drop"}  # no options shown
    chance = cb[cb["refusal"] == "chance"]
    assert (chance["n_analyzed"] == 8).all()  # every reply is scored: parsed, or a seeded letter at 1/4
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    g = graded[graded["answer_set"].str.startswith("cb.")]
    # the two runs are sampled with their own seeds: their replies differ somewhere
    r1 = g[g["answer_set"] == "cb.run1"].set_index("item_id")["raw_output"]
    r2 = g[g["answer_set"] == "cb.run2"].set_index("item_id")["raw_output"]
    assert (r1.sort_index() != r2.sort_index()).any()
    assert set(g["parse_status"]) <= {"ok", "refusal", "unparseable", "missing_confidence", "out_of_range",
                                      "unparsed_number", "empty"}
    sig = pd.read_parquet(out / "tables" / "signals.parquet")
    rep = sig[(sig["refusal"] == "chance") & sig["replaced"]]
    assert len(rep) and (rep["confidence"] == 0.25).all()
    calib = pd.read_csv(out / "results" / "calibration.csv")
    mc = calib[calib["answer_set"].isin(["cb.run1", "opts"]) & (calib["group"] == "all")]
    assert (mc["baseline_brier"] == 0.1875).all()
    assert calib.loc[calib["answer_set"] == "main", "baseline_brier"].isna().all()  # options not shown
    assert "letters" in set(calib.loc[calib["answer_set"] == "method", "signal"])
    runs = pd.read_csv(out / "results" / "runs.csv")
    assert set(runs["answer_set"]) == {"cb"} and (runs["runs"] <= 2).all()
    refusals = pd.read_csv(out / "results" / "refusals.csv")
    assert set(refusals["answer_set"]) == {"main", "cb.run1", "cb.run2", "opts"}
    assert refusals["unusable_rate"].between(0, 1).all()
    letters = pd.read_parquet(out / "tables" / "method_signals.parquet")
    letters = letters[letters["signal"] == "letters"]
    assert len(letters) == 8 and set(letters["rated"]) == {"favoured_letter"}
    ok = letters[letters["status"] == "ok"]
    assert ok["confidence"].between(0.25, 1.0).all()  # the favoured of 4 renormalized letters
    # the run's checklist writes down the conventions and the sampling of each run
    checklist = {e["extra"]["answer_set"]: e for e in json.loads((out / "results" / "checklist.json").read_text())}
    run2 = checklist["cb.run2"]
    assert run2["decoding"]["method"] == "sampling" and run2["decoding"]["seed"] == 1
    assert any("refusal policies ['drop', 'chance']" in c for c in run2["extra"]["conventions"])
    assert any("tie of m options" in c for c in checklist["opts"]["extra"]["conventions"])


def test_grid_checks_fail_before_ray(monkeypatch, tmp_path):
    from confgrid.flows.runner import run_grid

    def never(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", never)
    bad = {**GRID, "answer_sets": [{"id": "o", "prompt": "json_option_probabilities", "format": "open"}],
           "methods": []}
    with pytest.raises(GridSpecError, match="json_options"):
        run_grid(parse_grid(bad), tmp_path / "a")
    given = {**GRID, "answer_sets": [{"id": "h", "prompt": "json_confidence_given"}], "methods": []}
    with pytest.raises(GridSpecError, match="given_answer"):
        run_grid(parse_grid(given), tmp_path / "b")
    with pytest.raises(GridSpecError, match="temperature 0"):
        parse_grid({**GRID, "answer_sets": [{"id": "cb", "prompt": "json_answer_probability", "runs": 3}]})
    with pytest.raises(GridSpecError, match="refusal"):
        parse_grid({**GRID, "parsing": {"refusal": ["drop", "drop"]}})
    with pytest.raises(GridSpecError, match="letter_probability"):
        parse_grid({**GRID, "methods": [{"id": "l", "kind": "letter_probability", "renormalize": False}]})
