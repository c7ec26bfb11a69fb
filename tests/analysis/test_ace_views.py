"""Raw, IA and DA views of study 001 (ACE): the checks of the theory, hand-computed values, edge cases."""

from __future__ import annotations

import ast
import sys
import warnings
from pathlib import Path

import ace_example as EX
import numpy as np
import pandas as pd
import pytest
from confgrid.analysis.ace import weighted as W
from confgrid.analysis.ace import da as DA
from confgrid.analysis import kernels as KN
from confgrid.analysis.ace import ACEInputError, ACEWarning, ace_tables
from confgrid.analysis.ace import frame as F
from confgrid.analysis.ace import views as V
from confgrid.analysis.metrics import UndefinedMetricWarning, bin_indices, brier, ece


def cell_of(conf_a, z_a, conf_b, z_b, a="A", b="B"):
    n = len(conf_a)
    return F.Cell(F.Pair(a, b), "d", "m", np.array([str(i) for i in range(n)], dtype=object),
                  np.asarray(conf_a, float), np.asarray(z_a, float), np.asarray(conf_b, float), np.asarray(z_b, float))


def long_rows(**models) -> pd.DataFrame:
    """``model=(conf, correct)`` -> own-answer rows on items 0..n-1."""
    return pd.concat([pd.DataFrame(dict(model=m, dataset="d", method="m", item_id=[str(i) for i in range(len(c))],
                                        signal=c, correct=np.asarray(z, float)))
                      for m, (c, z) in models.items()], ignore_index=True)


# ---------------------------------------------------------------------------
# checks of the theory (study 001 section 3, Appendix A.1)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0.0, 0.1, 0.35, 0.9, 1.0])
@pytest.mark.parametrize("k", [0, 3, 7, 10])
def test_constant_confidence(q, k):
    z = np.r_[np.ones(k), np.zeros(10 - k)]
    a = k / 10
    c = np.full(10, q)
    assert W.weighted_ece(c, z) == pytest.approx(abs(a - q), abs=1e-12)
    assert W.weighted_brier(c, z) == pytest.approx(q * q + a * (1 - 2 * q), abs=1e-12)


def _conditional(n_right: int, n_wrong: int, right=(0.62, 0.92), wrong=(0.68, 0.98)):
    """Confidences drawn in equal halves from the same two values given right / given wrong."""
    c = np.r_[np.repeat(right, n_right // 2), np.repeat(wrong, n_wrong // 2)]
    z = np.r_[np.ones(n_right), np.zeros(n_wrong)]
    return c, z


def test_brier_is_linear_in_accuracy_under_shared_conditionals():
    # L1 = E[(c-1)^2 | z=1] = (0.38^2 + 0.08^2)/2 = 0.0754; L0 = E[c^2 | z=0] = (0.68^2 + 0.98^2)/2 = 0.7114
    L1, L0 = 0.0754, 0.7114
    for n_right, n_wrong in [(16, 4), (10, 10), (4, 16), (20, 0)]:
        c, z = _conditional(n_right, n_wrong)
        a = n_right / (n_right + n_wrong)
        assert W.weighted_brier(c, z) == pytest.approx(L0 + a * (L1 - L0), abs=1e-12)


def test_ece_gap_under_common_overconfidence():
    # Appendix A.1: every bin overconfident for both models -> ECE = E[c] - a, and
    # ECE_A - ECE_B = (a_B - a_A)(1 - mu1 + mu0) with mu1 = 0.77, mu0 = 0.83.
    ca, za = _conditional(8, 8)  # a_A = 0.5
    cb, zb = _conditional(4, 12)  # a_B = 0.25
    for c, z in ((ca, za), (cb, zb)):  # the regime's assumption holds in every non-empty bin
        b = bin_indices(c)
        for k in np.unique(b):
            assert c[b == k].mean() > z[b == k].mean()
    gap = W.weighted_ece(ca, za) - W.weighted_ece(cb, zb)
    assert gap == pytest.approx((0.25 - 0.5) * (1 - 0.77 + 0.83), abs=1e-12)  # = -0.265


def test_da_with_equal_accuracy_gives_weights_one_and_the_raw_metric():
    rng = np.random.default_rng(3)
    za = np.r_[np.ones(7), np.zeros(5)]
    zb = rng.permutation(za)
    cell = cell_of(rng.random(12), za, rng.random(12), zb)
    pv = V.cell_views(cell)
    d = DA.da_weights(za, DA.outcome_distribution(zb, pv.strata), pv.strata)
    assert np.array_equal(d.weights, np.ones(12)) and d.ess == 12.0
    for m in W.METRICS:
        raw = pv.get("raw", m)
        for view in V.DA_VIEWS:
            v = pv.get(view, m)
            assert (v.value_a, v.value_b) == (raw.value_a, raw.value_b)


def test_ia_on_identical_correctness_keeps_everything():
    rng = np.random.default_rng(4)
    z = (rng.random(30) < 0.6).astype(float)
    cell = cell_of(rng.random(30), z, rng.random(30), z)
    pv = V.cell_views(cell)
    for m in W.METRICS:
        ia, raw = pv.get("ia", m), pv.get("raw", m)
        assert ia.retention == 1.0 and ia.n_a == 30
        assert (ia.value_a, ia.value_b) == (raw.value_a, raw.value_b)


# ---------------------------------------------------------------------------
# the hand-computed 12-item example (tests/ace_example.py)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_views():
    cell = F.matched_cells(EX.rows()).cells[0]
    return V.cell_views(cell)


@pytest.mark.parametrize("view, metric, a, b", [
    ("raw", "ece", 1 / 6, 0.2),
    ("raw", "brier", 0.2175, 0.2625),
    ("ia", "ece", 0.25, 0.15),
    ("ia", "brier", 2.2425 / 9, 1.4025 / 9),
    ("ia_both_right", "ece", 0.05, 0.25),
    ("ia_both_wrong", "ece", 0.85, 0.55),
    ("da", "ece", 0.35, 0.2),
    ("da", "brier", 0.3925, 0.2625),
    ("da_a_to_b", "ece", 0.35, 0.2),
    ("da_b_to_a", "ece", 1 / 6, 0.025),
    ("da_target", "ece", 0.225, 0.0875),
])
def test_example_values(example_views, view, metric, a, b):
    v = example_views.get(view, metric)
    assert (v.value_a, v.value_b) == (pytest.approx(a, abs=1e-12), pytest.approx(b, abs=1e-12))


def test_example_diagnostics(example_views):
    pv = example_views
    assert (pv.acc_a, pv.acc_b, pv.direction) == (0.75, 0.5, "a_to_b")
    ia = pv.get("ia", "ece")
    assert (ia.n_a, ia.retention) == (9, 0.75)
    assert pv.get("ia_both_right", "ece").n_a == 6 and pv.get("ia_both_wrong", "ece").n_a == 3
    da = pv.get("da", "ece")
    assert da.ess_a == pytest.approx(9.0, abs=1e-12) and da.ess_b == 12
    assert [v.view for v in pv.values if v.metric == "ece"] == [
        "raw", "ia", "ia_both_right", "ia_both_wrong", "da", "da_a_to_b", "da_b_to_a", "da_target"]


# ---------------------------------------------------------------------------
# weighted metrics
# ---------------------------------------------------------------------------


def _reference_weighted_ece(c, y, w, n_bins=10):
    """The per-study formula ACE used before the one kernel (study 001 E.5), kept as an independent reference."""
    b = bin_indices(c, n_bins)
    n_b = np.bincount(b, weights=w, minlength=n_bins)
    s_c = np.bincount(b, weights=w * c, minlength=n_bins)
    s_y = np.bincount(b, weights=w * y, minlength=n_bins)
    nz = n_b > 0
    return float(np.sum(n_b[nz] / w.sum() * np.abs(s_y[nz] / n_b[nz] - s_c[nz] / n_b[nz])))


def test_weights_one_reproduce_the_existing_metrics():
    # ACE's weighted ECE and Brier are the bootstrap's weighted kernels (analysis/kernels.py): weights all 1 give the
    # point metrics to float round-off, and real weights give the per-study formula
    rng = np.random.default_rng(5)
    c = np.round(rng.random(200), 2)  # many ties and values on bin edges
    z = (rng.random(200) < c).astype(float)
    assert W.weighted_ece(c, z, np.ones(200)) == pytest.approx(ece(c, z), rel=1e-13, abs=1e-15)
    assert W.weighted_brier(c, z, np.ones(200)) == pytest.approx(brier(c, z), rel=1e-13, abs=1e-15)
    g = rng.random(200)  # graded correctness
    assert W.weighted_ece(c, g) == pytest.approx(ece(c, g), rel=1e-13, abs=1e-15)
    w = rng.random(200) * 3  # real DA-style weights, some near 0
    w[:5] = 0.0
    assert W.weighted_ece(c, z, w) == pytest.approx(_reference_weighted_ece(c, z, w), rel=1e-12, abs=1e-15)
    assert W.weighted_brier(c, z, w) == pytest.approx(float(np.sum(w * (c - z) ** 2) / w.sum()), rel=1e-12)
    with pytest.raises(ValueError, match="finite"):
        W.weighted_ece(c, z, np.r_[np.nan, w[1:]])


def test_integer_weights_equal_duplicated_rows_and_the_repo_kernel():
    rng = np.random.default_rng(6)
    c = np.round(rng.random(40), 1)
    z = (rng.random(40) < 0.5).astype(float)
    w = rng.integers(0, 4, 40).astype(float)
    rep = np.repeat(np.arange(40), w.astype(int))
    assert W.weighted_ece(c, z, w) == pytest.approx(ece(c[rep], z[rep]), abs=1e-12)
    assert W.weighted_brier(c, z, w) == pytest.approx(brier(c[rep], z[rep]), abs=1e-12)
    assert W.weighted_ece(c, z, w) == pytest.approx(KN.ece_weighted(c, z, w[None, :])[0], abs=1e-12)


def test_bin_edges_and_extreme_confidences():
    c, z = [0.0, 0.1, 1.0, 0.3], [0, 1, 1, 0]
    # bins 0, 1, 9, 3 hold one row each: (0 + 0.9 + 0 + 0.3) / 4; weights (1, 2, 1, 1): (0 + 1.8 + 0 + 0.3) / 5
    assert W.weighted_ece(c, z) == pytest.approx(0.3, abs=1e-12)
    assert W.weighted_ece(c, z, [1, 2, 1, 1]) == pytest.approx(0.42, abs=1e-12)
    # 0.3 and 0.7 - 0.4 (= 0.29999999999999993) fall in different bins, as in metrics.ece
    assert W.weighted_ece([0.3, 0.7 - 0.4], [1, 0]) == ece([0.3, 0.7 - 0.4], [1, 0])
    # the bin [0.9, 1.0] holds 0.9 and 1.0 together: |1 - 1.9| / 2
    assert W.weighted_ece([0.9, 1.0], [1, 0]) == pytest.approx(0.45, abs=1e-12)


def test_kish_ess_by_hand():
    assert W.kish_ess([1, 1, 1, 1]) == 4.0
    assert W.kish_ess([3, 1]) == pytest.approx(16 / 10)  # (3+1)^2 / (9+1)
    assert W.kish_ess([2, 0, 0]) == 1.0
    assert np.isnan(W.kish_ess([])) and np.isnan(W.kish_ess([0.0, 0.0]))


def test_empty_and_zero_weight_inputs_are_nan_with_a_warning():
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(W.weighted_ece([], []))
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(W.weighted_brier([0.5, 0.5], [1, 0], [0.0, 0.0]))
    with pytest.raises(ValueError, match="weights"):
        W.weighted_ece([0.5], [1], [-1.0])
    with pytest.raises(ValueError, match="metric"):
        W.metric_value("auroc", [0.5], [1])


# ---------------------------------------------------------------------------
# DA: support, ESS, strata, resampling
# ---------------------------------------------------------------------------


def test_support_failure_is_nan_with_a_warning_not_a_crash():
    za, zb = np.ones(10), np.r_[np.ones(6), np.zeros(4)]  # a_A = 1: no wrong row to up-weight
    cell = cell_of(np.full(10, 0.9), za, np.full(10, 0.8), zb)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pv = V.cell_views(cell)
    assert any("support condition fails" in str(w.message) for w in caught)
    assert np.isnan(pv.get("da", "ece").value_a) and np.isnan(pv.get("da", "brier").gap)
    assert np.isfinite(pv.get("da_b_to_a", "ece").gap)  # B -> A: wrong rows get weight 0, defined
    assert pv.get("da_b_to_a", "ece").value_b == pytest.approx(0.2, abs=1e-12)  # B's right rows only


def test_both_perfect_models_are_supported():
    cell = cell_of(np.full(5, 0.9), np.ones(5), np.full(5, 0.8), np.ones(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pv = V.cell_views(cell, views=("da",))
    assert pv.get("da", "ece").gap == pytest.approx(0.1 - 0.2, abs=1e-12)


def test_low_ess_warns():
    z = np.r_[np.ones(19), 0.0]  # a = 0.95 -> 0.5: w = 0.5/0.95 (right), 10 (wrong); ESS = 400 / (19 w^2 + 100)
    with pytest.warns(ACEWarning, match="ESS/N"):
        d = DA.da_weights(z, [0.5, 0.5], DA.Strata((0.0, 1.0)))
    assert d.ess == pytest.approx(400 / (19 * (0.5 / 0.95) ** 2 + 100), rel=1e-12)
    assert d.ess_frac < DA.ESS_WARNING


def test_graded_strata_and_weights_by_hand():
    za = [1, 1, 0.5, 0.5, 0.5, 0]  # p_A over levels (0, 0.5, 1) = (1, 3, 2) / 6
    zb = [1, 0.5, 0, 0, 0, 0.5]  # p_B = (3, 2, 1) / 6
    s = DA.outcome_strata(za, zb)
    assert s.levels == (0.0, 0.5, 1.0)
    d = DA.da_weights(za, DA.outcome_distribution(zb, s), s)
    # w = q/p: level 1 -> (1/6)/(2/6) = 0.5, level 0.5 -> (2/6)/(3/6) = 2/3, level 0 -> 3
    np.testing.assert_allclose(d.weights, [0.5, 0.5, 2 / 3, 2 / 3, 2 / 3, 3.0], rtol=1e-12)
    assert np.sum(d.weights * np.asarray(za)) / np.sum(d.weights) == pytest.approx(np.mean(zb))
    many = np.linspace(0, 1, 12)  # 12 distinct levels -> 10 equal-width strata, bin-edge rule of bin_indices
    s2 = DA.outcome_strata(many)
    assert s2.levels is None and s2.assign([0.0, 0.1, 0.95, 1.0]).tolist() == [0, 1, 9, 9]
    with pytest.raises(ValueError, match="not one of"):
        s.assign([0.25])


@pytest.mark.filterwarnings("ignore::UserWarning")  # empty IA parts, low ESS: incidental here
def test_graded_ia_exact_and_declared_strata():
    za, zb = [1, 1, 0.5, 0.5, 0.5, 0], [1, 0.5, 0, 0, 0, 0.5]
    s = V.ia_split(za, zb)
    assert s.aligned.tolist() == [True, False, False, False, False, False] and s.retention == 1 / 6
    s2 = V.ia_split(za, zb, ia_strata=2)  # strata [0, 0.5), [0.5, 1]: h_A = 1,1,1,1,1,0; h_B = 1,1,0,0,0,1
    assert s2.aligned.tolist() == [True, True, False, False, False, False]
    assert s2.both_right.tolist() == s2.aligned.tolist() and not s2.partial.any()
    for bad in (1, 0, True):
        with pytest.raises((ValueError, ACEInputError), match="ia_strata"):
            V.ia_split(za, zb, ia_strata=bad)
        with pytest.raises(ACEInputError, match="ia_strata"):
            V.ViewOptions(ia_strata=bad)
    s3 = V.ia_split([0.5, 0.5, 1], [0.5, 0, 1])
    assert s3.partial.tolist() == [True, False, False]
    cell = cell_of([0.5] * 6, za, [0.6] * 6, zb)
    assert "ia_partial" in [v.view for v in V.cell_views(cell).values]


@pytest.mark.filterwarnings("ignore::UserWarning")  # empty IA parts, low ESS: incidental here
def test_numeric_target_needs_binary_correctness():
    cell = cell_of([0.5] * 6, [1, 1, 0.5, 0.5, 0.5, 0], [0.6] * 6, [1, 0.5, 0, 0, 0, 0.5])
    with pytest.raises(ACEInputError, match="binary"):
        V.cell_views(cell, opts=V.ViewOptions(target=0.6))
    binary = cell_of([0.9] * 4, [1, 1, 1, 0], [0.9] * 4, [1, 0, 0, 0])
    pv = V.cell_views(binary, views=("da",), opts=V.ViewOptions(target=0.5))
    # both reweighted to accuracy 0.5 with constant confidence 0.9: ECE = |0.5 - 0.9| for both
    v = pv.get("da_target", "ece")
    assert (v.value_a, v.value_b) == (pytest.approx(0.4), pytest.approx(0.4))
    for bad in ("median", 1.5, True):
        with pytest.raises(ACEInputError, match="target"):
            V.ViewOptions(target=bad)


def test_resampling_alternative_keeps_the_target_composition():
    z = np.r_[np.ones(9), np.zeros(3)]  # a = 0.75 -> 0.5: N' = min(9/0.5, 3/0.5) = 6 -> 3 right, 3 wrong
    s = DA.Strata((0.0, 1.0))
    k1 = DA.resample_rows(z, [0.5, 0.5], s, np.random.default_rng(1))
    k2 = DA.resample_rows(z, [0.5, 0.5], s, np.random.default_rng(1))
    assert k1.tolist() == k2.tolist() and k1.size == 6 and z[k1].sum() == 3
    assert set(k1) >= {9, 10, 11}  # every wrong row kept: only rows of the surplus stratum are discarded
    assert DA.resample_rows(np.ones(4), [0.5, 0.5], s, np.random.default_rng(0)) is None
    cell = F.matched_cells(EX.rows()).cells[0]
    pv = V.cell_views(cell, views=("da_resample",), rng=np.random.default_rng(0))
    v = pv.get("da_resample", "ece")
    assert v.n_a == 6 and v.value_b == pytest.approx(0.2) and "20 draws" in v.note
    with pytest.raises(ValueError, match="rng"):
        V.cell_views(cell, views=("da_resample",))


# ---------------------------------------------------------------------------
# the input contract (frame.py)
# ---------------------------------------------------------------------------


def test_validation_errors_name_the_column_row_and_value():
    good = EX.rows()
    with pytest.raises(ACEInputError, match=r"missing required column\(s\) \['signal'\]"):
        F.validate_rows(good.drop(columns="signal"))
    bad = good.copy()
    bad.loc[3, "signal"] = 1.5
    with pytest.raises(ACEInputError, match=r"signal: row 3 = 1.5 lies outside the allowed range \[0, 1\]"):
        F.validate_rows(bad)
    bad = good.copy()
    bad.loc[4, "correct"] = np.nan
    with pytest.raises(ACEInputError, match="correct: row 4 is missing"):
        F.validate_rows(bad)
    bad = good.astype({"signal": object})
    bad.loc[2, "signal"] = "high"
    with pytest.raises(ACEInputError, match="signal: row 2 holds 'high'"):
        F.validate_rows(bad)
    with pytest.raises(ACEInputError, match=r"duplicate .* \('A', 'qa', 'verbalized', '1'\) in rows \[0, 24\]"):
        F.validate_rows(pd.concat([good, good.iloc[[0]]], ignore_index=True))
    with pytest.raises(ACEInputError, match="DataFrame"):
        F.validate_rows(good.to_dict())
    out = F.validate_rows(good.assign(correct=good["correct"] == 1.0, extra=1))
    assert out["correct"].dtype == np.float64 and "extra" not in out.columns


def test_pairs_all_declared_and_bad():
    assert F.resolve_pairs(["c", "a", "b"]) == (F.Pair("a", "b"), F.Pair("a", "c"), F.Pair("b", "c"))
    assert F.resolve_pairs(["a", "b"], [("b", "a", "size")]) == (F.Pair("b", "a", "size"),)
    with pytest.raises(ACEInputError, match="names model 'z'"):
        F.resolve_pairs(["a", "b"], [("a", "z")])
    with pytest.raises(ACEInputError, match="declared twice"):
        F.resolve_pairs(["a", "b"], [("a", "b"), ("b", "a")])
    with pytest.raises(ACEInputError, match="two different models"):
        F.Pair("a", "a")
    with pytest.raises(ACEInputError, match="at least two models"):
        F.resolve_pairs(["a"])


def test_matching_keeps_the_intersection_and_reports_the_rest():
    r = EX.rows()
    r = r[~((r["model"] == "A") & (r["item_id"] == "3")) & ~((r["model"] == "B") & r["item_id"].isin(["4", "5"]))]
    with pytest.warns(ACEWarning, match="dropped 2 item"):
        m = F.matched_cells(r.sample(frac=1.0, random_state=0))  # input order does not matter
    c = m.cells[0]
    assert (c.n, c.n_only_a, c.n_only_b) == (9, 2, 1)
    assert c.item_ids.tolist() == ["1", "10", "11", "12", "2", "6", "7", "8", "9"]  # sorted as strings
    assert c.conf_a.tolist() == [0.95, 0.95, 0.95, 0.65, 0.95, 0.95, 0.65, 0.65, 0.65]
    only_a = pd.concat([EX.rows(), EX.rows(method="p_true").query("model == 'A'")])
    assert "B has no rows" in F.matched_cells(only_a).messages[0]


def test_empty_input_is_a_clear_error():
    with pytest.raises(ACEInputError, match="at least two models"):
        ace_tables(pd.DataFrame(columns=list(F.ROW_COLUMNS)))


def test_docstring_examples():
    import doctest

    from confgrid.analysis.ace import (
        bootstrap,
        candidates,
        da,
        reversals,
        tables,
        weighted,
    )

    for mod in (F, V, weighted, da, bootstrap, candidates, reversals, tables):
        res = doctest.testmod(mod, raise_on_error=False)
        assert res.failed == 0 and (res.attempted > 0 or mod in (F, V)), mod.__name__


def test_ace_imports_only_the_pure_analysis_layer():
    # Ray-free by construction: the package imports numpy, pandas, scipy, threadpoolctl, the standard
    # library and confgrid.analysis (whose own layering, without Ray or protocols/, test_import_graph checks).
    allowed = {"numpy", "pandas", "scipy", "threadpoolctl", "__future__"} | set(sys.stdlib_module_names)
    found = set()
    for path in Path(V.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module)
    bad = {m for m in found if m.split(".")[0] not in allowed and not m.startswith("confgrid.analysis.")}
    assert bad == set() and any(m.startswith("confgrid.analysis.") for m in found)


def test_tables_have_the_documented_schemas_and_the_example_values():
    from confgrid.analysis.ace import candidates as CA
    from confgrid.analysis.ace import reversals as R
    from confgrid.analysis.ace import tables as T

    rows = EX.rows()
    t = ace_tables(rows, EX.ratings(CA.candidate_pool(rows, EX.normalize)), n_bootstrap=50)
    schema = dict(ace_gaps=T.GAP_COLUMNS, ace_reversals=R.RATE_COLUMNS, ace_patterns=R.PATTERN_COLUMNS,
                  ace_pattern_shares=R.SHARE_COLUMNS, ace_bootstrap=T.BOOTSTRAP_COLUMNS,
                  ace_retention=T.RETENTION_COLUMNS, ace_bootstrap_summary=T.SUMMARY_COLUMNS,
                  ace_self_preference=T.SELF_PREFERENCE_COLUMNS, ace_correlation=R.CORRELATION_COLUMNS)
    assert {k: list(v.columns) for k, v in t.tables().items()} == {k: list(v) for k, v in schema.items()}
    g = t.gaps.set_index(["view", "metric"])
    assert g.loc[("ia", "ece"), "gap"] == pytest.approx(0.1, abs=1e-12)
    assert g.loc[("da", "brier"), "gap"] == pytest.approx(0.13, abs=1e-12)
    assert g.loc[("da", "ece"), "ess_frac_a"] == pytest.approx(0.75, abs=1e-12)
    assert g.loc[("raw", "ece"), "favours"] == "A" and g.loc[("da", "ece"), "favours"] == "B"
    assert g.loc[("ia", "ece"), "retention"] == 0.75 and g.loc[("raw", "ece"), "acc_gap"] == 0.25
    # ECE: IA, DA and CA all reverse; Brier: IA and DA (by hand in ace_example.py)
    assert len(t.retention) == 5 and set(t.retention["view"]) == {"ia", "da", "ca"}
    for name, df in t.tables().items():
        assert not df.empty, name


def test_readme_example_runs():
    # the study's page of the documentation site (README's section until issue 40 moved it)
    section = (Path(__file__).parents[2] / "docs" / "studies" / "001.md").read_text()
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "docs/studies/001.md", "exec"), scope)
    t = scope["t"]
    assert set(t.gaps["view"]) >= {"raw", "ia", "da", "da_target"} and len(t.bootstrap) > 0
    # what the README says of it: raw favours "large", IA and DA reverse, only DA-Brier meets the strict criterion
    assert set(t.retention["view"]) == {"ia", "da"} and len(t.retention) == 4
    assert t.retention.query("strict")[["metric", "view"]].values.tolist() == [["brier", "da"]]
