"""Published ECE conventions as named estimators (issue 36): each against its project's formula re-implemented
from the source (tests/reference/ece_conventions.py), on values on and next to the edges, ties, 0 and 1.0; the
bootstrap kernel of every binned name against its point function; study 002's Table 1 by the convention's name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve

from confgrid.analysis.binning import Binning, binned_ece
from confgrid.analysis.conventions import CONVENTIONS, get_convention
from confgrid.analysis.kernels import SortedSignal, _apply, weighted_kernel
from confgrid.analysis.registry import get_metric
from reference.ece_conventions import PROJECTS, ece_spelled, linspace_edges


def _probe_values(n_bins: int) -> np.ndarray:
    """Every exact edge k/B, every np.linspace edge, one ulp either side of each, the typed 5% grid, 0 and 1."""
    exact = np.arange(n_bins + 1) / n_bins
    base = np.unique(np.r_[exact, linspace_edges(n_bins), np.round(np.arange(21) * 0.05, 2)])
    near = np.r_[base, np.nextafter(base, 2.0), np.nextafter(base, -1.0)]
    v = np.unique(near)
    return v[(v >= 0.0) & (v <= 1.0)]


def _datasets(bins: int, k: int = 40, ulp_neighbours: bool = True):
    """Edge values alone (each with a label pattern that shows its bin), with ties, and random mixes;
    ``ulp_neighbours=False`` leaves out the values one ulp off an edge (see the HELM test)."""
    rng = np.random.default_rng(bins)
    v = _probe_values(bins)
    if not ulp_neighbours:
        v = np.unique(np.r_[np.arange(bins + 1) / bins, np.round(np.arange(21) * 0.05, 2)])
    yield v, (np.arange(v.size) % 3 == 0).astype(float)
    for _ in range(k):
        n = int(rng.integers(1, 80))
        pool = np.r_[v, rng.random(20), 0.0, 1.0, 1.0]
        c = rng.choice(pool, n)
        y = (rng.random(n) < 0.6).astype(float)
        if rng.random() < 0.3:
            y = rng.random(n)  # graded targets (study 004's expected accuracy)
        yield c, y


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_convention_equals_its_projects_formula(name):
    conv = get_convention(name)
    info = get_metric(conv.metric)
    assert info.convention == name and info.binning == conv.binning
    for c, y in _datasets(conv.binning.n_bins, ulp_neighbours=name != "helm"):
        assert info.func(c, y) == pytest.approx(PROJECTS[name](c, y), abs=1e-13), (name, c, y)


def test_helm_differs_only_for_two_confidences_one_ulp_apart_at_a_cut():
    """HELM's bound between two parts is the float mean of their neighbouring confidences; for two doubles one ulp
    apart it rounds (to even) onto the upper one, which then joins the lower bin. confgrid cuts by rank (the
    upper value opens the upper bin), as the definition says (README, "ECE conventions")."""
    a = 0.3
    b = np.nextafter(a, 1.0)  # 0.30000000000000004, np.linspace's edge 3 of 10
    assert (a + b) / 2 == b  # round half to even lands on b here
    c, y = np.array([a, b]), np.array([1.0, 0.0])
    got = get_metric("ece_helm").func(c, y)  # two bins of one answer each
    assert got == pytest.approx(0.5 * abs(1 - a) + 0.5 * abs(0 - b))
    assert PROJECTS["helm"](c, y) == pytest.approx(abs(0.5 - (a + b) / 2))  # HELM: one bin of both


def test_every_convention_is_tested_and_cites_its_source():
    assert set(CONVENTIONS) == set(PROJECTS)
    for name in CONVENTIONS:
        conv = get_convention(name)
        assert conv.metric == f"ece_{name}" and conv.source and conv.description
        # the convention is its grammar name, value for value
        c = np.r_[_probe_values(conv.binning.n_bins), 0.5]
        y = (np.arange(c.size) % 2).astype(float)
        assert get_metric(conv.metric).func(c, y) == get_metric(conv.binning.name).func(c, y)


def test_sklearn_convention_is_calibration_curve():
    rng = np.random.default_rng(0)
    for c, y in _datasets(5, 10):
        y = (y > 0.5).astype(float) if len(np.unique(y)) > 2 else y
        y[:1] = 1 - y[:1] if len(np.unique(y)) < 2 else y[:1]
        if len(np.unique(y)) < 2:
            continue
        prob_true, prob_pred = calibration_curve(y, c, n_bins=5, strategy="uniform")
        ids = np.searchsorted(np.linspace(0, 1, 6)[1:-1], c)
        n_b = np.bincount(ids, minlength=5)
        ref = float(np.sum(n_b[n_b > 0] / c.size * np.abs(prob_true - prob_pred)))
        assert get_metric("ece_sklearn").func(c, y) == pytest.approx(ref, abs=1e-13)
    assert rng is not None


def test_conventions_differ_where_their_sources_say():
    # study 004's authors (left-closed on np.linspace edges): a typed 0.3 joins [0.2, 0.3); study 002 (right-closed)
    # joins it there too, LM-Polygraph's right closure on 20 bins puts 0.3 in (0.25, 0.3]; Yang's 20 left-closed
    # bins put it in [0.25, 0.3) because 0.3 < 0.30000000000000004
    assert Binning(10, closure="left_float").indices(np.array([0.3, 0.7, 1.0])).tolist() == [2, 6, 9]
    assert Binning(10, closure="left").indices(np.array([0.3, 0.7, 1.0])).tolist() == [3, 7, 9]
    assert Binning(20, closure="left_float").indices(np.array([0.3, 0.15])).tolist() == [5, 2]
    # hand-computed: one answer at 1.0 (right) and one at 0.95 (wrong); the midpoint of [0.9, 1] (10 bins) is
    # 0.95, of [14/15, 1] (15 bins) 29/30
    c, y = np.array([1.0, 0.95]), np.array([1.0, 0.0])
    assert binned_ece(c, y, Binning(10)) == pytest.approx(abs(0.5 - 0.975))
    assert binned_ece(c, y, Binning(10, bin_confidence="midpoint")) == pytest.approx(abs(0.5 - 0.95))
    assert binned_ece(c, y, Binning(15, bin_confidence="midpoint")) == pytest.approx(abs(0.5 - 29 / 30))
    # centred bins of answer consistency (11 centres k/10): 0.05 is an edge; left: the bin of 0.1, right: of 0
    b = Binning(11, "centred")
    assert b.indices(np.array([0.0, 0.05, 0.1, 0.95, 1.0])).tolist() == [0, 1, 1, 10, 10]
    assert Binning(11, "centred", "right").indices(np.array([0.0, 0.05, 0.1, 0.95, 1.0])).tolist() == [0, 0, 1, 9, 10]
    assert b.midpoints().tolist() == pytest.approx([k / 10 for k in range(11)])


@pytest.mark.parametrize("name", ["ece", "ece_midpoint", "ece_left_float", "ece_15_left_float_midpoint",
                                  "ece_20_right_float_midpoint", "ece_11_centred_midpoint", "ece_11_centred_right",
                                  "ece_12_equal_mass", "ece_equal_mass_right", "ece_helm", "ece_study002",
                                  "ece_yang2024", "ece_debiased", "ece_15_left_float_midpoint_debiased",
                                  "ece_11_centred_right_debiased"])
def test_kernel_equals_point_function_on_duplicated_rows(name):
    """The bootstrap's count-weighted kernel on resample counts equals the point function on the drawn rows."""
    rng = np.random.default_rng(5)
    info = get_metric(name)
    for c, y in list(_datasets(info.binning.bins(10), 6))[1:]:
        n = c.size
        sig = SortedSignal.from_arrays(c, y, 10)
        idx = rng.integers(0, n, size=(8, n))
        w = np.stack([np.bincount(r, minlength=n) for r in idx]).astype(float)
        got = _apply(weighted_kernel(name), sig, w, integer=True)
        ref = [info.func(c[r], y[r], n_bins=10) if info.takes_n_bins else info.func(c[r], y[r]) for r in idx]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12, err_msg=name)
        assert ece_spelled(info.binning.name, c, y) == pytest.approx(info.func(c, y, n_bins=10), abs=1e-12)


def test_edge_cases_empty_one_class_and_exact_values():
    for name in ("ece_11_centred_midpoint", "ece_helm", "ece_15_left_float_midpoint"):
        with pytest.warns(Warning, match="no rows"):
            assert np.isnan(get_metric(name).func([], []))
    # all answers right at confidence 1.0: every binning gives 0, midpoint too (1.0 is no midpoint of 10 bins:
    # the last bin's midpoint is 0.95, so the midpoint ECE is 0.05)
    c, y = np.ones(7), np.ones(7)
    assert get_metric("ece_yang2024").func(c, y) == 0.0
    assert get_metric("ece_midpoint").func(c, y) == pytest.approx(0.05)
    assert get_metric("ece_11_centred_midpoint").func(c, y) == 0.0
    # confidence exactly 0 and wrong: 0 under the mean; the midpoint of the first bin (0.05) under midpoint
    assert get_metric("ece_right_float").func([0.0, 0.0], [0, 0]) == 0.0
    assert get_metric("ece_midpoint").func([0.0, 0.0], [0, 0]) == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"confidence must lie in the closed range \[0, 1\]"):
        get_metric("ece_helm").func([1.2], [1])


def test_study002_table1_by_the_conventions_name():
    """Study 002's published Table 1 cells (tests/data/study002, MIT) by name: ece_study002 reproduces each."""
    d = Path(__file__).parents[1] / "data" / "study002"
    items = pd.read_csv(d / "items.csv")
    table = pd.read_csv(d / "table1.csv").set_index(["qset", "llm"])
    f = get_metric("ece_study002").func
    for key, g in items.groupby(["qset", "llm"]):
        c, y = g["stated_confidence"].to_numpy(float), g["correct"].to_numpy(float)
        assert f(c, y) == pytest.approx(table.at[key, "ece"], abs=1e-12), key
        assert PROJECTS["study002"](c, y) == pytest.approx(table.at[key, "ece"], abs=1e-12), key


def _muller_cell(d: Path, method: str) -> tuple[np.ndarray, np.ndarray]:
    """The authors' rows of one cell and method (seq_ue_calibration/analysis_prepare_data.ipynb: the estimator files
    inner-joined on (id, iter); rows without an extracted number or a correctness label dropped, then rows without
    the method's confidence)."""
    ac = pd.read_csv(d / "AnsweredCorrectly.csv", sep=";")
    files = {"verbalized": "Verbalized2SUEExtractor.csv", "p_true": "PTrueOriginal.csv"}
    df = ac
    if method in files:
        est = pd.read_csv(d / files[method], sep=";").rename(columns={"estimations": method})
        df = ac.merge(est, on=["id", "iter"], how="inner")
    col = method if method in files else "frequency_of_answer"
    df = df[df["extracted_number"].notna() & df["is_correct"].notna()]
    df = df[df[col].notna()]
    y = df["is_correct"].map({True: 1.0, False: 0.0, "True": 1.0, "False": 0.0}).to_numpy(float)
    return df[col].to_numpy(float), y


@pytest.mark.parametrize("dataset,model,method,convention", [
    ("SVamp", "Llama-4-Scout-17B-16E-Instruct", "verbalized", "muller2026"),
    ("SVamp", "Llama-4-Scout-17B-16E-Instruct", "answer_consistency", "muller2026_consistency"),
    ("GSM8K", "Mistral-Small-3.2-24B-Instruct-2506", "p_true", "muller2026"),
    ("GSM8K", "Mistral-Small-3.2-24B-Instruct-2506", "answer_consistency", "muller2026_consistency"),
    ("GSM8K", "Llama-3.3-70B-Instruct", "answer_consistency", "muller2026_consistency"),
    ("SVamp", "Qwen3-30B-A3B-Instruct-2507", "answer_consistency", "muller2026_consistency"),
])
def test_muller2026_published_cells_by_the_conventions_name(dataset, model, method, convention):
    """Müller et al. 2026's printed ECE and AUROC (tests/data/muller2026, MIT) from their per-item outputs, by name;
    confgrid's default ECE does not reproduce the verbalized one (0.0755 against 0.0422)."""
    root = Path(__file__).parents[1] / "data" / "muller2026"
    pub = pd.read_csv(root / "published.csv").set_index(["dataset", "model", "method", "metric"])["value"]
    c, y = _muller_cell(root / dataset / model, method)
    ece = get_metric(f"ece_{convention}").func(c, y)
    assert round(ece, 4) == pub[(dataset, model, method, "ECE")]
    assert ece == pytest.approx(PROJECTS[convention](c, y), abs=1e-14)
    assert round(get_metric("auroc").func(c, y), 4) == pub[(dataset, model, method, "AUROC")]
    if method == "verbalized":
        assert round(get_metric("ece_15").func(c, y), 4) == 0.0755  # the mean bin confidence: not their number


def test_a_convention_note_names_what_sets_it_apart(tmp_path):
    """results/closure.csv on confidences mostly at 1.0: the Mueller convention's note names its bins, closure and
    midpoints, and quotes the share on an inner edge (the only values a closure moves), not every edge."""
    import warnings

    from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze

    rng = np.random.default_rng(3)
    c = np.where(rng.random(400) < 0.9, 1.0, rng.choice([0.6, 0.7, 0.8, 0.9], 400))
    y = (rng.random(400) < np.where(c == 1.0, 0.95, c)).astype(float)
    pd.DataFrame({"setting": "m/d", "item_id": range(400), "signal": "verbalized", "confidence": c,
                  "correct": y}).to_csv(tmp_path / "in.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyze(AnalyzeSpec(input=tmp_path / "in.csv", out=tmp_path / "o", metrics="ece",
                                  ece_conventions="muller2026",
                      n_resamples=200, track=False))
    note = res["closure"].set_index("other_metric").at["ece_muller2026", "note"]
    inner = np.isin(c, np.arange(1, 15) / 15).mean()  # the convention's 15 bins: 0.6 and 0.8 are inner edges
    assert note.startswith("ECE depends on the convention (15 bins, closure left_float, bin midpoints) here")
    assert note.endswith(f"{inner:.0%} of confidences lie on an inner bin edge")
