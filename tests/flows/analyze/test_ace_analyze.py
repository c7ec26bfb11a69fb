"""`confgrid analyze` on outputs of several models: the accuracy-controlled comparison (study 001) from a file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from confgrid.analysis.metrics import brier, ece
from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.cli.main import app


def _rows(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """Two models on one dataset: 'big' right on 30 of 40 items, 'small' on 15 (a subset), both always 0.8."""
    rng = np.random.default_rng(seed)
    items = [f"q{i}" for i in range(n)]
    out = []
    for model, n_right in (("big", 30), ("small", 15)):
        for sig in ("verbalized", "p_true"):
            conf = np.full(n, 0.8) if sig == "verbalized" else rng.uniform(0.2, 0.9, n).round(3)
            for i, it in enumerate(items):
                out.append({"model": model, "setting": "trivia", "item_id": it, "signal": sig,
                            "confidence": conf[i], "correct": float(i < n_right)})
    return pd.DataFrame(out)


def test_a_model_column_runs_the_comparison_and_keeps_each_models_metrics(tmp_path):
    df = _rows()
    path = tmp_path / "outputs.csv"
    df.to_csv(path, index=False)
    with pytest.warns(UserWarning, match="CA skipped|ca"):
        res = analyze(AnalyzeSpec(input=path, out=tmp_path / "out", n_resamples=50, comparison_resamples=200,
                                  track=False,
                      views=["raw", "ia", "da", "ca"]))
    m = res["metrics"]
    assert set(m.loc[m["kind"] != "model", "setting"]) == {"big/trivia", "small/trivia"}
    # the comparison's cells are rows of the same table: each model under each view (setting = its label)
    ace = m[m["kind"] == "model"]
    assert set(ace["setting"]) == {"pair"} and set(ace["signal"]) == {"big", "small"} and "ia" in set(ace["view"])
    g = res["ace_gaps"].set_index(["method", "metric", "view"])
    v = df[df["signal"] == "verbalized"]
    a, b = v[v["model"] == "big"], v[v["model"] == "small"]
    # raw: constant confidence 0.8 -> ECE = |a - 0.8| (study 001 A.1): |0.75 - 0.8| - |0.375 - 0.8|
    assert g.loc[("verbalized", "ece", "raw"), "gap"] == pytest.approx(
        ece(a["confidence"], a["correct"]) - ece(b["confidence"], b["correct"]), abs=1e-12)
    assert g.loc[("verbalized", "ece", "raw"), "gap"] == pytest.approx(0.05 - 0.425, abs=1e-12)
    assert g.loc[("verbalized", "brier", "raw"), "gap"] == pytest.approx(
        brier(a["confidence"], a["correct"]) - brier(b["confidence"], b["correct"]), abs=1e-12)
    # IA: both right on 15 items, both wrong on 10: the same rows for both models -> gap 0, retention 25/40
    assert g.loc[("verbalized", "ece", "ia"), "gap"] == pytest.approx(0.0, abs=1e-12)
    assert g.loc[("verbalized", "ece", "ia"), "retention"] == pytest.approx(25 / 40)
    assert {"ace_bootstrap", "ace_reversals", "ace_patterns"} <= set(res.tables)
    assert (tmp_path / "out" / "results" / "ace_gaps.csv").is_file() and (tmp_path / "out" / "results" / "ace_gaps.md").is_file()


def test_candidate_ratings_from_a_file_give_the_ca_view(tmp_path):
    df = _rows()
    path = tmp_path / "outputs.parquet"
    df.to_parquet(path, index=False)
    items = sorted(set(df["item_id"]))
    cand = []
    for it in items:
        for surface, label, producers in (("gold", 1.0, "big|small"), ("wrong", 0.0, "small")):
            for rater, base in (("big", 0.7), ("small", 0.6)):
                cand.append({"dataset": "trivia", "item_id": it, "candidate": surface, "surface": surface,
                             "producers": producers, "label": label, "rater": rater, "method": "p_true",
                             "signal": base if label else 1 - base})
    cpath = tmp_path / "cands.csv"
    pd.DataFrame(cand).to_csv(cpath, index=False)
    res = analyze(AnalyzeSpec(input=path, out=tmp_path / "out", n_resamples=20, comparison_resamples=100, track=False,
                  candidates=cpath))
    ca = res["ace_gaps"].query("view == 'ca' and method == 'p_true' and metric == 'brier'").iloc[0]
    # every candidate rated 0.7 / 0.3 (big) and 0.6 / 0.4 (small): Brier 0.09 vs 0.16
    assert ca["value_a"] == pytest.approx(0.09) and ca["value_b"] == pytest.approx(0.16)


def test_cli_prints_the_comparison_and_bad_options_are_one_line(tmp_path):
    path = tmp_path / "outputs.csv"
    _rows().to_csv(path, index=False)
    r = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "o"), "--bootstrap", "20",
                                 "--comparison-bootstrap", "50", "--no-tracking", "--pairs", "big:small:size"])
    assert r.exit_code == 0, r.output
    assert "ACE: calibration gap" in r.output and "size" in r.output
    bad = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "o2"), "--no-tracking",
                                   "--views", "raw,nope"])
    assert bad.exit_code == 2 and "--views: unknown view(s) ['nope']" in bad.output
    bad = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "o3"), "--no-tracking",
                                   "--pairs", "big:tiny"])
    assert bad.exit_code == 2 and "tiny" in bad.output
    assert not (tmp_path / "o3").exists()  # a refused option leaves no empty output folder


def test_views_without_a_model_column_are_an_error(tmp_path):
    path = tmp_path / "one.csv"
    _rows().drop(columns="model").drop_duplicates(["setting", "item_id", "signal"]).to_csv(path, index=False)
    with pytest.raises(AnalyzeInputError, match="needs a model column"):
        analyze(AnalyzeSpec(input=path, out=tmp_path / "o", n_resamples=10, track=False, views=["raw"]))
    with pytest.raises(AnalyzeInputError, match="--views/--pairs/--candidates compare models"):
        analyze(AnalyzeSpec(input=path, out=tmp_path / "o", n_resamples=10, track=False, pairs="big:small"))


def test_a_model_paired_with_itself_is_refused_for_that_reason(tmp_path):
    with pytest.raises(AnalyzeInputError, match="--pairs: 'big:big' pairs 'big' with itself; give two different mod"):
        AnalyzeSpec(input=tmp_path / "x.csv", out=tmp_path / "o", pairs="big:big")
    with pytest.raises(AnalyzeInputError, match="--signal-pairs: 'a:a' pairs 'a' with itself; give two different sig"):
        AnalyzeSpec(input=tmp_path / "x.csv", out=tmp_path / "o", signal_pairs="a:a")
    with pytest.raises(AnalyzeInputError, match="--pairs: 'a:b:c:d' is not MODEL_A:MODEL_B or MODEL_A:MODEL_B:LABEL"):
        AnalyzeSpec(input=tmp_path / "x.csv", out=tmp_path / "o", pairs="a:b:c:d")


def test_graded_correctness_from_a_file_with_ia_strata(tmp_path):
    """Appendix E.7: scores in [0, 1]; IA by declared strata pairs items whose scores share a stratum."""
    n = 30
    rows = []
    for model, shift in (("big", 0.1), ("small", 0.0)):
        for i in range(n):
            score = min(1.0, (i % 10) / 10 + shift)  # graded correctness
            rows.append({"model": model, "setting": "gsm", "item_id": f"q{i}", "signal": "verbalized",
                         "confidence": 0.6, "correct": score})
    path = tmp_path / "graded.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    exact = analyze(AnalyzeSpec(input=path, out=tmp_path / "e", n_resamples=10, comparison_resamples=20, track=False))
    strata = analyze(AnalyzeSpec(input=path, out=tmp_path / "s", n_resamples=10, comparison_resamples=20,
                                 track=False, ia_strata=2))
    ret = lambda r: r["ace_gaps"].query("view == 'ia' and metric == 'brier'")["retention"].iloc[0]  # noqa: E731
    assert ret(exact) == 0.0  # big's score is always small's + 0.1 (0.9 -> 1.0): never an exact match
    # two strata [0, 0.5), [0.5, 1]: the pairs (x + 0.1, x) differ in stratum only at x = 0.4
    assert ret(strata) == pytest.approx(27 / 30)


def test_model_vs_model_conclusions_join_the_verdicts(tmp_path):
    """Issue 22: "big vs small" under each view is a conclusion of results/verdicts, settings = the cells."""
    path = tmp_path / "outputs.csv"
    _rows().to_csv(path, index=False)
    res = analyze(AnalyzeSpec(input=path, out=tmp_path / "out", n_resamples=50, comparison_resamples=200, track=False,
                  views=["raw", "ia", "da"]))
    v = pd.read_csv(tmp_path / "out" / "results" / "verdicts.csv", keep_default_na=False)
    ace = v[v["view"] != ""]
    assert set(ace["view"]) == {"raw", "ia", "ia_both_right", "ia_both_wrong", "da", "da_a_to_b", "da_b_to_a",
                                "da_target"}
    raw = ace[(ace["view"] == "raw") & (ace["metric"] == "ece")].iloc[0]
    assert (raw["signal_a"], raw["signal_b"]) == ("big", "small")
    # one setting per compared method (verbalized, p_true); the shares are counts over those cells
    boot = res["ace_bootstrap"]
    cells = boot[(boot["view"] == "raw") & (boot["metric"] == "ece")]
    assert raw["n_settings"] == len(cells) == 2
    assert raw["share_a_better"] == pytest.approx(float((cells["gap"] < 0).mean()))
    assert raw["share_resolved_a"] == pytest.approx(float(((cells["hi"] < 0)).mean()))
    # the signal-vs-signal conclusions are still there, without a view
    assert (v["view"] == "").any()
