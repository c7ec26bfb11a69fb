"""examples/methods.yaml end to end on Ray with the fixture model, at reduced size: every method yields its
signal with metrics and intervals, the fixture answers the method templates in their formats, the sampling
parameters recorded equal the ones asked for, and changing a downstream choice reruns no model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from confgrid.analysis.metrics import ece
from confgrid.analysis.signals import analyzed
from confgrid.cli.show.tables import print_results
from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import parse_grid

ray = pytest.importorskip("ray")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "methods.yaml"


def _grid(**methods_over) -> dict:
    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    for d in raw["datasets"]:
        d["limit"] = 16
    raw["bootstrap"]["resamples"] = 50
    raw["execution"] = {"shard_size": 8}
    for m in raw["methods"]:
        if m["kind"] in ("self_consistency", "expected_accuracy"):
            m["k"] = 6
        m.update(methods_over.get(m["id"], {}))
    return raw


@pytest.fixture(scope="module")
def run(ray_local, tmp_path_factory):
    out = tmp_path_factory.mktemp("methods")
    spec = parse_grid(_grid(), base_dir=EXAMPLE.parent)
    return spec, out, run_grid(spec, out)


def test_every_method_has_its_metrics(run):
    spec, out, summary = run
    m = summary.methods
    want = {"self_consistency", "self_consistency__majority", "p_true", "p_true_capability", "rating",
            "verbalized_before"}
    assert set(m["signal"]) == want
    assert set(m["metric"]) == {"ece", "auroc", "aurc", "brier"}
    assert set(m["setting"]) == {"fixture/triviaqa", "fixture/mmlu"}
    ok = m.dropna(subset=["point"])
    assert (ok["lo"] <= ok["point"] + 1e-12).all() and (ok["point"] <= ok["hi"] + 1e-12).all()
    assert set(m.loc[m["signal"] == "self_consistency", "rated"]) == {"first_sample"}
    assert set(m.loc[m["signal"] == "p_true", "rated"]) == {"greedy_answer"}
    assert (out / "results" / "methods.csv").is_file() and (out / "results" / "expected_accuracy.csv").is_file()


def test_every_method_is_paired_with_verbalized_on_the_items_both_have(run):
    """Issue 20: each method signal has a paired gap against verbalized in results/gaps (on the items both have,
    one resample stream per unit) and its metric rows in results/metrics, as the token signals do."""
    spec, out, _ = run
    gaps = pd.read_parquet(out / "results" / "gaps.parquet")
    metrics = pd.read_parquet(out / "results" / "metrics.parquet")
    primary = {"answer_set": "main", "parse_policy": spec.parsing.policies[0], "refusal": spec.parsing.refusal[0]}
    for k, v in primary.items():
        gaps, metrics = gaps[gaps[k] == v], metrics[metrics[k] == v]
    methods = {"self_consistency", "self_consistency__majority", "p_true", "p_true_capability", "rating",
               "verbalized_before"}
    for setting in ("fixture/triviaqa", "fixture/mmlu"):
        g = gaps[(gaps["setting"] == setting) & (gaps["signal_a"] == "verbalized")]
        assert methods <= set(g["signal_b"]), set(g["signal_b"])
        assert methods <= set(metrics.loc[metrics["setting"] == setting, "signal"])
    # the P(True) gap's point by hand on the items both signals have
    sig = analyzed(pd.read_parquet(out / "tables" / "signals.parquet"))
    unit = sig[(sig["setting"] == "fixture/triviaqa") & (sig["rule"] == spec.correctness.primary)
               & (sig["parse_policy"] == primary["parse_policy"]) & (sig["refusal"] == primary["refusal"])]
    v = unit[unit["signal"] == "verbalized"].set_index("item_id")
    p = unit[unit["signal"] == "p_true"].set_index("item_id")
    both = v.index.intersection(p.index)
    assert 0 < len(both) < len(v.index.union(p.index)) or len(both) == len(v)
    row = gaps[(gaps["setting"] == "fixture/triviaqa") & (gaps["signal_b"] == "p_true") & (gaps["metric"] == "ece")
               & (gaps["rule"] == spec.correctness.primary)].iloc[0]
    want = ece(v.loc[both, "confidence"], v.loc[both, "target"]) - ece(p.loc[both, "confidence"],
                                                                      p.loc[both, "target"])
    assert row["gap"] == pytest.approx(want, abs=1e-12) and row["n"] == len(both)
    assert row["lo"] <= row["gap"] + 1e-12 <= row["hi"] + 2e-12


def test_analyze_of_the_signal_table_equals_the_run_byte_for_byte(run, tmp_path):
    """Issue 20: the run's one signal table through `confgrid analyze` gives the run's metrics, gaps and shifts,
    column for column, byte for byte (same evaluator, same units, same seeds)."""
    spec, out, _ = run
    a = tmp_path / "analyzed"
    analyze(AnalyzeSpec(input=out / "tables" / "signals.parquet", out=a, metrics=list(spec.metrics.names),
            n_resamples=spec.bootstrap.resamples, seed=spec.bootstrap.seed, n_bins=spec.metrics.ece_bins,
            ece_closure=list(spec.metrics.ece_closure), level=spec.bootstrap.level, track=False))
    for name in ("metrics", "gaps", "shifts", "edges", "closure"):  # edges, closure: issue 26
        assert (a / "results" / f"{name}.csv").read_bytes() == (out / "results" / f"{name}.csv").read_bytes(), name


def test_the_fixture_answers_the_method_templates_in_their_formats(run):
    _, out, _ = run
    sig = pd.read_parquet(out / "tables" / "method_signals.parquet")
    for method in ("p_true", "p_true_capability", "rating", "verbalized_before"):
        rows = sig[sig["signal"] == method]
        assert len(rows) and (rows["status"] == "ok").mean() >= 0.9, (method, rows["status"].value_counts())


def test_samples_vary_and_record_the_parameters_asked_for(run):
    _, out, _ = run
    s = pd.read_parquet(out / "tables" / "samples.parquet")
    assert set(zip(s["temperature"], s["top_p"], s["top_k"], s["seed"])) == {(1.0, 1.0, 0, 0)}
    sc = s[s["method"] == "self_consistency"]
    assert sc.groupby("item_id")["sample_idx"].count().eq(6).all()
    varied = sc.groupby("item_id")["raw_output"].nunique()
    assert (varied > 1).mean() > 0.3  # answers vary under temperature 1.0
    t = pd.read_parquet(out / "tables" / "targets.parquet")
    assert ((t["expected_accuracy"] > 0) & (t["expected_accuracy"] < 1)).any()
    p = t["expected_accuracy"].to_numpy()
    np.testing.assert_allclose(t["se"], np.sqrt(p * (1 - p) / (t["k"] - 1)), atol=1e-12)


def test_hidden_states_shape_and_mean(run):
    _, out, _ = run
    h = pd.read_parquet(out / "tables" / "hidden_states.parquet")
    r = h.iloc[0]
    states = np.asarray(r["states"], dtype=np.float32).reshape(len(r["layers"]), r["hidden_size"])
    assert states.shape == (5, 128)  # the fixture: 4 layers + the embeddings, hidden size 128
    np.testing.assert_allclose(np.asarray(r["mean_state"]), states.mean(axis=0), rtol=1e-6)
    assert len(h) == 32  # one row per question


def test_downstream_changes_rerun_no_model(run):
    spec, out, first = run
    again = run_grid(parse_grid(_grid(p_true={"merge": "exact", "renormalize": True},
                                      self_consistency={"rule": "exact_match"}), base_dir=EXAMPLE.parent), out)
    assert again.model_calls == 0 and again.model_loads == 0
    a = again.methods[again.methods["signal"] == "p_true"]
    b = first.methods[first.methods["signal"] == "p_true"]
    assert not np.allclose(a["point"].to_numpy(), b["point"].to_numpy(), equal_nan=True)


def test_show_prints_every_methods_metrics(run):
    from rich.console import Console


    _, out, _ = run
    console = Console(width=250, record=True)
    print_results(out, console=console)
    text = console.export_text()
    assert "Confidence methods" in text and "Expected accuracy over k samples" in text
    for signal in ("self_consistency", "p_true_capability", "rating", "verbalized_before"):
        assert signal in text
