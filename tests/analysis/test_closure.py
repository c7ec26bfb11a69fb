"""The ECE bin closure (issue 26): left (the default, unchanged), right (R ``cut``, pandas), right_float
(scikit-learn ``calibration_curve``), against independent references on values on and next to the edges."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve

from confgrid.analysis.capability.metrics import ece_to_target
from confgrid.analysis.estimators import ece_equal_mass
from confgrid.analysis.kernels import WEIGHTED_KERNELS, ece_weighted, has_weighted_kernel
from confgrid.analysis.metrics import CLOSURES, bin_edges, bin_indices, ece, edge_counts
from confgrid.analysis.registry import METRICS, binned_metrics, closure_variant, get_metric
from confgrid.analysis.reliability import reliability_diagram
from reference.resample_loop import bootstrap_chunk
from reference.weighted_values import weighted_values

BINS = (5, 10, 15, 20)
EDGE_VALUES = np.array([0.0, 0.1, 0.3, 0.7, 0.9, 1.0])


def _probe_values(n_bins: int) -> np.ndarray:
    """Every edge k/B, the issue's decimal edges, one ulp either side of each (inside [0, 1]), and a spread."""
    base = np.unique(np.r_[EDGE_VALUES, np.arange(n_bins + 1) / n_bins, np.linspace(0, 1, n_bins + 1)])
    near = np.r_[base, np.nextafter(base, 2.0), np.nextafter(base, -1.0)]
    grid = np.linspace(0.0, 1.0, 97)
    v = np.r_[near, grid]
    return np.unique(v[(v >= 0.0) & (v <= 1.0)])


@pytest.mark.parametrize("n_bins", BINS)
@pytest.mark.parametrize("closure", ["left", "right"])
def test_bins_match_pandas_cut(n_bins, closure):
    v = _probe_values(n_bins)
    ref = pd.cut(v, bin_edges(n_bins), right=closure == "right", include_lowest=True, labels=False)
    # pandas' right=False leaves 1.0 out of [(B-1)/B, 1); confgrid's left closure keeps it in the last bin
    np.testing.assert_array_equal(np.isnan(ref), (v == 1.0) if closure == "left" else np.zeros(v.size, bool))
    ref = np.where(np.isnan(ref), n_bins - 1, ref)
    np.testing.assert_array_equal(bin_indices(v, n_bins, closure), ref.astype(np.int64))


@pytest.mark.parametrize("n_bins", BINS)
def test_right_float_is_calibration_curve(n_bins):
    # each value alone with a distinct label pattern: bin membership shows in the per-bin means
    v = _probe_values(n_bins)
    rng = np.random.default_rng(n_bins)
    y = rng.integers(0, 2, v.size)
    y[:2] = [0, 1]
    prob_true, prob_pred = calibration_curve(y, v, n_bins=n_bins, strategy="uniform")
    d = reliability_diagram(v, y, n_bins=n_bins, closure="right_float")
    nz = d.counts > 0
    np.testing.assert_allclose(d.accuracy[nz], prob_true, rtol=0, atol=1e-15)
    np.testing.assert_allclose(d.mean_confidence[nz], prob_pred, rtol=0, atol=1e-15)
    # scikit-learn's bin ids, recomputed as its source does (np.searchsorted on the inner linspace edges)
    sk = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], v)
    np.testing.assert_array_equal(bin_indices(v, n_bins, "right_float"), sk)


@pytest.mark.parametrize("n_bins", BINS)
def test_right_agrees_with_calibration_curve_on_exact_edges(n_bins):
    # on the values k/B themselves the right closure and scikit-learn put every value in the same bin
    v = np.unique(np.r_[EDGE_VALUES, np.arange(n_bins + 1) / n_bins])
    sk = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], v)
    np.testing.assert_array_equal(bin_indices(v, n_bins, "right"), sk)


def test_edge_values_hand_placed():
    v = np.r_[EDGE_VALUES, np.nextafter(0.7, 1.0), np.nextafter(0.7, 0.0)]
    assert bin_indices(v, 10, "left").tolist() == [0, 1, 3, 7, 9, 9, 7, 6]
    assert bin_indices(v, 10, "right").tolist() == [0, 0, 2, 6, 8, 9, 7, 6]
    # 0.7000000000000001 is on the float edge 7 * 0.1: R and scikit-learn keep it with 0.7
    assert bin_indices(v, 10, "right_float").tolist() == [0, 0, 2, 6, 8, 9, 6, 6]


def test_ece_hand_computed_both_closures():
    # stated confidences on a 5% grid; 0.9 and 0.7 lie on edges
    c = [0.7, 0.75, 0.9, 0.9, 0.95, 1.0]
    y = [0, 1, 1, 1, 0, 1]
    # left: [0.7, 0.8) = {0.7, 0.75}: |1 - 1.45|; [0.9, 1] = {0.9, 0.9, 0.95, 1.0}: |3 - 3.75|
    assert ece(c, y) == pytest.approx((0.45 + 0.75) / 6, abs=1e-15)
    # right: (0.6, 0.7] = {0.7}: 0.7; (0.7, 0.8] = {0.75}: 0.25; (0.8, 0.9] = {0.9, 0.9}: 0.2; (0.9, 1] = {0.95, 1}: 0.95
    assert ece(c, y, closure="right") == pytest.approx((0.7 + 0.25 + 0.2 + 0.95) / 6, abs=1e-15)
    assert ece(c, y, closure="right_float") == ece(c, y, closure="right")


def test_default_ece_unchanged():
    rng = np.random.default_rng(0)
    c = np.round(rng.random(500) * 20) / 20
    y = (rng.random(500) < c).astype(float)
    b = np.clip(np.searchsorted(np.arange(11) / 10, c, side="right") - 1, 0, 9)  # the rule before closures
    ref = sum(abs(y[b == k].sum() - c[b == k].sum()) for k in range(10)) / c.size
    assert ece(c, y) == ece(c, y, closure="left") == get_metric("ece").func(c, y)
    assert ece(c, y) == pytest.approx(ref, abs=1e-15)


def test_registry_names_and_closures():
    assert get_metric("ece").closure == "left" and get_metric("auroc").closure is None
    for name in binned_metrics("left"):
        right = closure_variant(name, "right")
        assert get_metric(right).closure == "right" and get_metric(right).family == name
        assert closure_variant(right, "left") == name
    assert closure_variant("ece_15", "right_float") == "ece_15_right_float"
    with pytest.raises(ValueError, match="equal-mass bins have no fixed edges, so no float closure; name "
                                         "'ece_equal_mass_right'"):
        closure_variant("ece_equal_mass", "right_float")
    with pytest.raises(ValueError, match="'auroc' has no bins"):
        closure_variant("auroc", "right")
    with pytest.raises(ValueError, match="closure must be one of left, right, right_float, left_float; got 'up'"):
        ece([0.5], [1], closure="up")
    rng = np.random.default_rng(1)
    c, y = np.round(rng.random(200) * 20) / 20, rng.integers(0, 2, 200)
    for b in BINS:
        for cl in CLOSURES[1:]:
            assert get_metric(f"ece_{b}_{cl}").func(c, y) == ece(c, y, n_bins=b, closure=cl)
    assert all(has_weighted_kernel(name) for name in METRICS if get_metric(name).closure is not None)


def _equal_mass_brute(c, y, n_bins, closure):
    """Equal-mass ECE by its definition: array_split ranks, then whole tie groups moved across each cut."""
    order = np.argsort(c, kind="stable")
    cs, ys = np.asarray(c, float)[order], np.asarray(y, float)[order]
    n = cs.size
    sizes = [len(a) for a in np.array_split(np.arange(n), n_bins)]
    cuts = np.cumsum([0] + sizes)[:-1]
    moved = []
    for r in cuts:
        if r == 0 or r >= n or cs[r - 1] != cs[r]:
            moved.append(min(r, n))
        elif closure == "left":
            moved.append(int(np.flatnonzero(cs == cs[r])[0]))
        else:
            moved.append(int(np.flatnonzero(cs == cs[r])[-1]) + 1)
    bounds = moved + [n]
    return sum(abs(ys[a:b].sum() - cs[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:])) / n


@pytest.mark.parametrize("closure", ["left", "right"])
def test_equal_mass_ties_on_quantile_edge(closure):
    # a hand case: 10 answers, 5 bins of 2; the tie 0.5 x 3 straddles the cut at rank 4
    c = [0.1, 0.2, 0.3, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.9]
    y = [0, 0, 1, 1, 1, 0, 1, 1, 1, 1]
    expected = {  # left: {.1,.2} {.3} {.5,.5,.5} {.6,.7} {.8,.9}; right: {.1,.2} {.3,.5,.5,.5} {} {.6,.7} {.8,.9}
        "left": (0.3 + 0.7 + 0.5 + 0.7 + 0.3) / 10,
        "right": (0.3 + abs(3 - 1.8) + 0.7 + 0.3) / 10,
    }[closure]
    assert ece_equal_mass(c, y, 5, closure) == pytest.approx(expected, abs=1e-15)
    assert ece_equal_mass(c, y, 5, closure) == pytest.approx(_equal_mass_brute(c, y, 5, closure), abs=1e-15)
    rng = np.random.default_rng(3)
    for _ in range(20):
        cc = np.round(rng.random(37) * 10) / 10
        yy = rng.integers(0, 2, 37)
        for b in (3, 5, 10):
            assert ece_equal_mass(cc, yy, b, closure) == pytest.approx(_equal_mass_brute(cc, yy, b, closure),
                                                                       abs=1e-14)
    d = reliability_diagram(c, y, n_bins=5, strategy="quantile", closure=closure)
    assert d.ece == pytest.approx(expected, abs=1e-15)


def test_kernels_match_point_functions_on_duplicated_rows():
    rng = np.random.default_rng(5)
    c = np.round(rng.random(60) * 20) / 20
    y = rng.integers(0, 2, 60).astype(float)
    w = rng.multinomial(60, np.full(60, 1 / 60), size=8).astype(float)
    for closure in CLOSURES:
        got = ece_weighted(c, y, w, 10, closure)
        ref = [ece(np.repeat(c, r.astype(int)), np.repeat(y, r.astype(int)), 10, closure) for r in w]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)
    got = weighted_values("ece_equal_mass_right", c, y, w, 10)
    ref = [ece_equal_mass(np.repeat(c, r.astype(int)), np.repeat(y, r.astype(int)), 10, "right") for r in w]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)


def test_bootstrap_pairs_both_closures_on_the_same_resamples():
    rng = np.random.default_rng(7)
    n = 80
    conf = np.round(rng.random((2, n)) * 20) / 20
    y = rng.integers(0, 2, n).astype(float)
    idx = rng.integers(0, n, size=(16, n))
    names = ["ece", "ece_right", "ece_10_right_float", "ece_equal_mass_right", "ece_15_right"]
    out = bootstrap_chunk(conf, y, names, idx)
    for s in range(2):
        for r in range(idx.shape[0]):
            cs, ys = conf[s, idx[r]], y[idx[r]]
            ref = [ece(cs, ys), ece(cs, ys, closure="right"), ece(cs, ys, closure="right_float"),
                   ece_equal_mass(cs, ys, 10, "right"), ece(cs, ys, 15, "right")]
            np.testing.assert_allclose(out[s, :, r], ref, rtol=0, atol=1e-14)


def test_edge_counts_brute_force():
    rng = np.random.default_rng(9)
    c = np.r_[np.round(rng.random(300) * 20) / 20, rng.random(50), np.nextafter(0.3, 1.0)]
    for b in BINS:
        on = sum(any(x == k / b for k in range(b + 1)) for x in c)
        inner = sum(any(x == k / b for k in range(1, b)) for x in c)
        assert edge_counts(c, b) == (on, inner)


def test_capability_ece_closure_through_the_kernel():
    rng = np.random.default_rng(11)
    p = np.round(rng.random(40) * 10) / 10
    mu = rng.random(40)
    for closure in CLOSURES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ece_to_target(p, mu, 10, closure) == pytest.approx(ece(p, mu, 10, closure), abs=1e-15)


def test_study002_published_ece_needs_the_right_closure_on_float_edges():
    """Study 002's Table 1 (the authors' export) from their per-item outputs: a sample of five cells shipped in
    tests/data/study002 (MIT). The right closure on np.linspace / R seq edges reproduces every cell; the right
    closure on exact edges k/B misses the cells holding 0.7000000000000001; the default left closure misses
    SciQ Llama-70B by 0.035 (issue 26)."""
    from pathlib import Path

    d = Path(__file__).parents[1] / "data" / "study002"
    items = pd.read_csv(d / "items.csv")
    table = pd.read_csv(d / "table1.csv").set_index(["qset", "llm"])
    got = {}
    for key, g in items.groupby(["qset", "llm"]):
        c, y = g["stated_confidence"].to_numpy(float), g["correct"].to_numpy(float)
        assert len(g) == table.at[key, "num_tot"]
        assert y.mean() == pytest.approx(table.at[key, "accuracy"], abs=1e-12)
        got[key] = {cl: ece(c, y, 10, cl) for cl in CLOSURES}
        assert got[key]["right_float"] == pytest.approx(table.at[key, "ece"], abs=1e-12), key
    float_edge = {("SciQ", "Gemini-2.5-Flash"), ("SciQ", "Llama-8B"), ("SAT", "DeepSeek-R1")}
    for key, v in got.items():
        assert (abs(v["right"] - table.at[key, "ece"]) > 1e-4) == (key in float_edge), key
    sciq = got[("SciQ", "Llama-70B")]
    assert round(sciq["left"], 4) == 0.0077 and round(sciq["right"], 4) == 0.0422


def test_grid_axis_expands_every_binned_metric():
    from confgrid.flows.spec.estimation import MetricsSpec

    m = MetricsSpec(names=("ece", "auroc", "ece_15", "ece_equal_mass"), ece_closure=("left", "right"))
    assert m.evaluated == ["ece", "ece_right", "auroc", "ece_15", "ece_15_right", "ece_equal_mass",
                           "ece_equal_mass_right"]
    assert MetricsSpec().evaluated == ["ece", "auroc", "aurc"]  # the default grid computes what it always did


def test_closure_notes_and_edge_table_by_hand():
    from confgrid.analysis.closure import closure_notes
    from confgrid.analysis.signals import UNIT_COLUMNS
    from confgrid.flows.evaluate.outputs import render_markdown

    unit = {c: "" for c in UNIT_COLUMNS} | {"setting": "m/SciQ"}
    met = pd.DataFrame([
        {**unit, "signal": "verbalized", "metric": "ece", "point": 0.008, "lo": 0.004, "hi": 0.016},
        {**unit, "signal": "verbalized", "metric": "ece_right", "point": 0.042, "lo": 0.03, "hi": 0.05},
        {**unit, "signal": "token", "metric": "ece", "point": 0.05, "lo": 0.02, "hi": 0.08},
        {**unit, "signal": "token", "metric": "ece_right", "point": 0.06, "lo": 0.03, "hi": 0.09},  # within 0.03
    ])
    gaps = pd.DataFrame([
        {**unit, "signal_a": "verbalized", "signal_b": "token", "metric": "ece", "gap": -0.042},
        {**unit, "signal_a": "verbalized", "signal_b": "token", "metric": "ece_right", "gap": -0.018},  # same sign
    ])
    edges = pd.DataFrame([{**unit, "signal": "verbalized", "n_bins": 10, "n": 996, "on_edge": 0.8755,
                           "on_inner_edge": 0.33}])
    notes = closure_notes(met, gaps, edges, 10)
    assert notes["what"].tolist() == ["metric"] and notes["signal"].tolist() == ["verbalized"]
    assert notes["note"].iloc[0] == ("ECE depends on the bin closure here: 0.008 (left) vs 0.042 (right); "
                                     "33% of confidences lie on an inner bin edge")
    flipped = gaps.assign(gap=[-0.042, 0.01])
    g = closure_notes(met, flipped, edges, 10)
    assert g["what"].tolist() == ["metric", "gap"]
    assert "changes sign with the bin closure: -0.042 (left) vs +0.010 (right)" in g["note"].iloc[1]
    md = render_markdown(met, gaps.iloc[:0], pd.DataFrame(), pd.DataFrame(), notes)
    assert "- m/SciQ / verbalized: ECE depends on the bin closure here: 0.008 (left) vs 0.042 (right)" in md
    assert closure_notes(met[met["metric"] == "ece"], gaps, edges).empty  # one closure: nothing to compare


def test_analyze_both_closures_keeps_the_left_numbers(tmp_path):
    """analyze --ece-closure left,right: ece is byte-for-byte the left-only run's (same resamples), ece_right
    comes beside it, results/edges and results/closure are written and show prints the note."""
    import io

    from rich.console import Console

    from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
    from confgrid.flows.analyze.read import AnalyzeInputError
    from confgrid.cli.show.tables import print_results

    rng = np.random.default_rng(0)
    rows = []
    for i in range(300):
        c = rng.choice([0.7, 0.8, 0.9, 0.95, 1.0], p=[0.1, 0.2, 0.4, 0.2, 0.1])
        y = int(rng.random() < {0.7: 0.6, 0.8: 0.9, 0.9: 0.97, 0.95: 0.8, 1.0: 1.0}[c])
        rows += [{"setting": "a/q", "item_id": i, "signal": "verbalized", "confidence": c, "correct": y},
                 {"setting": "a/q", "item_id": i, "signal": "token",
                  "confidence": float(np.clip(c + rng.normal(0, 0.07), 0, 1)), "correct": y}]
    src = tmp_path / "in.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    kw = dict(metrics="ece,auroc", n_resamples=300, track=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = analyze(AnalyzeSpec(input=src, out=tmp_path / "left", **kw))
        both = analyze(AnalyzeSpec(input=src, out=tmp_path / "both", ece_closure="left,right", **kw))
    m1, m2 = one["metrics"], both["metrics"]
    assert m2["metric"].drop_duplicates().tolist() == ["ece", "ece_right", "auroc"]
    pd.testing.assert_frame_equal(m1.reset_index(drop=True), m2[m2["metric"] != "ece_right"].reset_index(drop=True))
    e = both["edges"].set_index("signal")
    c = pd.DataFrame(rows).query("signal == 'verbalized'")["confidence"]
    assert e.at["verbalized", "on_edge"] == pytest.approx(np.isin(c, np.arange(11) / 10).mean())
    assert (tmp_path / "both" / "results" / "closure.csv").is_file()
    assert both["closure"]["note"].str.contains("ECE depends on the bin closure here").any()
    out = io.StringIO()
    print_results(tmp_path / "both", Console(file=out, width=250))
    assert "ECE depends on the bin closure here" in out.getvalue()
    with pytest.raises(AnalyzeInputError, match="--ece-closure: 'centre'; give one or more of left, right"):
        analyze(AnalyzeSpec(input=src, out=tmp_path / "bad", ece_closure="centre", **kw))


def test_checklist_records_closure_and_edge_shares():
    from confgrid.analysis.signals import UNIT_COLUMNS
    from confgrid.flows.evaluate.outputs import _edge_shares
    from confgrid.protocols.checklist import build_checklist, render_checklist_markdown

    group = {"setting": "m/d", "answer_set": "main", "parse_policy": "p", "refusal": "drop", "rule": "containment"}
    unit = {c: "" for c in UNIT_COLUMNS} | group
    edges = pd.DataFrame([{**unit, "signal": "verbalized", "n_bins": 10, "n": 5, "on_edge": 0.8, "on_inner_edge": 0.4},
                          {**unit, "signal": "verbalized", "n_bins": 15, "n": 5, "on_edge": 0.2, "on_inner_edge": 0.0},
                          {**unit, "setting": "m/e", "signal": "verbalized", "n_bins": 10, "n": 5, "on_edge": 0.1,
                           "on_inner_edge": 0.0}])
    shares = _edge_shares(edges, group, 10)
    assert shares == {"verbalized": 0.8}
    c = build_checklist(model="m", dataset="d", use_chat_template=False, decoding={}, ece_closure=["left", "right"],
                        on_edge=shares)
    assert c["ece"]["closure"] == ["left", "right"] and c["ece"]["on_edge"] == {"verbalized": 0.8}
    md = render_checklist_markdown(c)
    assert "| ECE estimator | ece, bins: 10, closure: left, right, bin confidence: mean |" in md
    assert "| confidences on bin edges | verbalized 80% |" in md
