"""The sensitivity study grid (examples/sensitivity.yaml) end to end, at a reduced size.

The example file is loaded as users load it; only its sizes are reduced here
(items per dataset, resamples, metrics) so the test fits the CPU suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from confgrid.actors.calls import ScoreRequest
from confgrid.actors.model_actor import ModelConfig, ModelWorker
from confgrid.cli.show.tables import print_results
from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.stages.score import score_requests
from confgrid.protocols.datasets import BUNDLED, load_items

ray = pytest.importorskip("ray")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sensitivity.yaml"


@pytest.fixture(scope="module")
def run(ray_local, tmp_path_factory):
    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    for d in raw["datasets"]:
        d["limit"] = 6
    raw["bootstrap"]["resamples"] = 100
    raw["probe"]["resamples"] = 100
    raw["metrics"]["names"] = ["ece", "auroc", "aurc", "ks_ece"]
    spec, out = parse_grid(raw, base_dir=EXAMPLE.parent), tmp_path_factory.mktemp("sens")
    return spec, out, run_grid(spec, out)


def test_every_answer_set_and_axis_is_analyzed(run):
    spec, out, summary = run
    m = summary.metrics
    assert set(m["answer_set"]) == {"main", "answer_only", "mc", "percent"}
    assert set(m["parse_policy"]) == {"label_or_fallback", "label_only"}
    assert set(m.loc[m["answer_set"] == "mc", "rule"]) == {"mc_letter"}
    assert set(m.loc[m["answer_set"] == "main", "rule"]) == {"containment", "exact_match", "alias"}
    assert set(m.loc[m["answer_set"] == "mc", "dataset"]) == {"mmlu"}  # the only dataset with options
    main = m[(m["answer_set"] == "main") & (m["rule"] == "containment") & (m["parse_policy"] == "label_or_fallback")]
    assert set(main["aggregation"]) == {"", *spec.scoring.aggregations}
    # all eight ablation cells are signals; coinciding cells share one score shard
    for cell in ("abl_question_guess", "abl_instruction_guess", "abl_noprob_answer", "abl_noprob_guess",
                 "abl_confidence_answer", "abl_question_answer", "abl_instruction_answer", "abl_confidence_guess"):
        assert f"token_{cell}" in set(main["signal"]), cell
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    a = scores[(scores["context_id"] == "answer_slot") & (scores["answer_set"] == "main")].set_index(["model", "dataset", "item_id"])
    b = scores[(scores["context_id"] == "abl_question_answer") & (scores["answer_set"] == "main")].set_index(["model", "dataset", "item_id"])
    pd.testing.assert_series_equal(a["token_score"].sort_index(), b["token_score"].sort_index())
    manifest = json.loads((out / "manifest.json").read_text())["shards"]
    keys = [r["key"] for r in manifest if r["stage"] == "score"]
    assert len(set(keys)) < len(keys)  # twins recorded under both labels, computed once
    assert len(list((out / "shards" / "score").glob("*.parquet"))) == len(set(keys))


def test_percent_scale_and_probe_verbalized_are_probabilities(run):
    _, out, summary = run
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    pct = graded[(graded["answer_set"] == "percent") & graded["verbalized"].notna()]
    assert len(pct) and pct["verbalized"].between(0, 1).all()
    probe = pd.read_parquet(out / "tables" / "probe.parquet")
    assert set(probe["kind"]) >= {"canonical", "own"}
    assert {"plausible_wrong", "off_type"} & set(probe["kind"])
    ok = probe["verbalized"].notna()
    assert probe.loc[ok, "verbalized"].between(0, 1).all()
    # the answer-only answers get their verbalized score from the supplied-answer format
    ao = summary.metrics[(summary.metrics["answer_set"] == "answer_only") & (summary.metrics["signal"] == "verbalized")]
    assert len(ao)


def test_study_tables_and_checklist(run):
    spec, out, _ = run
    res = out / "results"
    t2 = pd.read_csv(res / "table2_contexts.csv")
    assert {"g_bare", "g_answer_slot", "g_guess_slot", "flip", "resolved_flip"} <= set(t2.columns)
    t3 = pd.read_csv(res / "table3_ablation.csv")
    assert list(t3.loc[t3["metric"] == "ece", "context"]) == [
        "token_bare", "token_answer_slot", "token_abl_instruction_answer", "token_abl_noprob_answer",
        "token_abl_confidence_answer", "token_abl_confidence_guess"]
    t4 = pd.read_csv(res / "table4_axes.csv")
    assert any(t4["axis"].str.startswith("context")) and any(t4["axis"].str.startswith("aggregation"))
    assert any(t4["axis"].str.startswith("correctness rule"))
    t17 = pd.read_csv(res / "table17_probe.csv")
    assert list(t17["pair"]) == ["canonical_vs_first_alias", "canonical_vs_plausible_wrong",
                                 "own_wrong_vs_plausible_wrong", "own_vs_resupplied"]
    sel = pd.read_csv(res / "selection_answer_only.csv")
    assert {"guess_slot", "answer_only"} <= set(sel["context"])
    checklist = json.loads((res / "checklist.json").read_text())
    assert len(checklist) == 2 * (3 + 3 + 1 + 3)  # models x (main, answer_only, mc on mmlu, percent) per dataset
    assert (res / "checklist.md").read_text().count("## ") >= len(checklist)


def test_rescoring_stored_answers_reproduces_token_scores_exactly(run):
    """Re-score one stored shard (same requests, same batches) in the Answer: and Guess: slots."""
    spec, out, _ = run
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    d = spec.datasets[1]
    items = load_items(d.adapter, str(BUNDLED[d.adapter]), limit=d.limit, seed=d.seed, dataset_name=d.name)
    g = graded[(graded["model"] == "fixture") & (graded["dataset"] == d.name) & (graded["answer_set"] == "main")]
    worker = ModelWorker(ModelConfig(name="fixture", model="confgrid-fixture", batch_size=32))
    for ctx in ("answer_slot", "guess_slot"):
        reqs = score_requests(g, items, ctx)
        ids = [r.item_id for r in reqs]
        again = worker.score([ScoreRequest(r.user_text, r.assistant_prefix, r.separator, r.answer) for r in reqs])
        stored = scores[(scores["model"] == "fixture") & (scores["dataset"] == d.name)
                        & (scores["answer_set"] == "main") & (scores["context_id"] == ctx)].set_index("item_id")
        for item_id, o in zip(ids, again, strict=True):
            assert np.array_equal(np.asarray(o.logprobs), np.asarray(stored.at[item_id, "logprobs"])), (ctx, item_id)


@pytest.mark.slow  # about 40 s (CI budget); rerunning no model on a downstream change: test_end_to_end.py
def test_another_primary_rule_reruns_no_model_the_probe_included(run):
    """Fix the answer, vary the measurement: the plausible-wrong answers are chosen under probe.rule, so a
    new primary correctness rule reruns no generate, score or probe shard."""
    spec, out, first = run
    assert spec.probe.enabled and "plausible_wrong" in spec.probe.kinds
    raw = spec.model_dump(mode="json")
    raw["correctness"]["primary"] = "exact_match"
    raw["bootstrap"]["resamples"] = 20
    raw["probe"]["resamples"] = 20
    raw["metrics"]["names"] = ["ece"]
    if ray.is_initialized():
        ray.shutdown()
    again = run_grid(parse_grid(raw), out)
    assert again.model_calls == 0 and again.computed_shards == 0 and again.model_loads == 0
    assert not ray.is_initialized()  # nothing to compute: Ray is never started
    assert set(again.metrics.loc[again.metrics["answer_set"] == "main", "rule"]) >= {"exact_match"}



def test_the_verdict_table_is_written_and_shown_first(run):
    """Issue 22: examples/sensitivity.yaml on the fixture prints the verdict table: verbalized against every token
    score, over every model, dataset, answer set, parse policy, rule, context, aggregation and ECE estimator."""
    from rich.console import Console


    spec, out, summary = run
    v = pd.read_csv(out / "results" / "verdicts.csv")
    tok = v[(v["signal_a"] == "verbalized") & (v["signal_b"] == "token")].set_index("metric")
    assert set(tok.index) == {"ece", "auroc", "aurc"}
    gaps = summary.gaps
    ece_rows = gaps[(gaps["signal_a"] == "verbalized") & (gaps["kind_b"] == "token")
                    & gaps["metric"].isin(["ece", "ks_ece"])]
    assert tok.loc["ece", "n_settings"] + tok.loc["ece", "n_undefined"] == len(ece_rows)
    assert set(v["verdict"]) <= {"robust", "fragile", "unresolved"}
    assert {"model", "rule", "context", "aggregation", "estimator"} <= set(tok.loc["ece", "axes"].split(", "))
    console = Console(width=260, record=True)
    print_results(out, console)
    text = console.export_text()
    assert text.index("Is the conclusion robust?") < text.index("Settings")


def test_every_probe_kind_is_a_signal_paired_with_verbalized(run):
    """Issue 20: the supplied-answer probe's kinds are rows of the one signal table (signal probe_<kind>, graded
    by the unit's rule against the supplied answer) with metrics and paired gaps against verbalized."""
    spec, out, summary = run
    signals = pd.read_parquet(out / "tables" / "signals.parquet")
    probe = signals[signals["kind"] == "probe"]
    assert set(probe["signal"]) == {f"probe_{k}" for k in pd.read_parquet(out / "tables" / "probe.parquet")["kind"]}
    assert set(probe["answer_set"]) == {"main"} and set(probe["rated"]) == {"supplied"}
    canon = probe[(probe["signal"] == "probe_canonical") & (probe["status"] == "ok") & (probe["rule"] == "containment")
                  & (probe["dataset"] != "mmlu")]  # MMLU's canonical is the option text; its gold is the letter
    assert len(canon) and canon["target"].mean() > 0.8  # the reference answer: graded correct nearly always
    g = summary.gaps
    pg = g[(g["signal_a"] == "verbalized") & (g["kind_b"] == "probe")]
    assert {"probe_canonical", "probe_own"} <= set(pg["signal_b"])
    m = summary.metrics
    assert {"probe_canonical", "probe_own"} <= set(m.loc[m["kind"] == "probe", "signal"])
