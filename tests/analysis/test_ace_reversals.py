"""Reversals, patterns, rates and the accuracy-gap correlation of study 001 (ACE)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from confgrid.analysis.ace import reversals as R
from confgrid.analysis.bootstrap import interval
from confgrid.analysis.resampling import resample_indices, setting_seed
from scipy import stats


def gaps_frame(cells) -> pd.DataFrame:
    """``cells``: (method, dataset, acc_a, acc_b, raw_gap, {view: gap}) -> ``ace_gaps``-like rows (metric ece)."""
    rows = []
    for k, (method, dataset, acc_a, acc_b, raw, aligned) in enumerate(cells):
        key = dict(model_a=f"a{k}", model_b=f"b{k}", comparison="size" if k % 2 else "mode", dataset=dataset,
                   method=method, metric="ece", acc_a=acc_a, acc_b=acc_b, acc_gap=acc_a - acc_b)
        rows.append(dict(key, view="raw", gap=raw, reversal=pd.NA))
        for view, g in aligned.items():
            rows.append(dict(key, view=view, gap=g, reversal=R.is_reversal(raw, g)))
    df = pd.DataFrame(rows)
    df["reversal"] = df["reversal"].astype("boolean")
    return df


#: one cell per pattern (raw gap -0.1: an aligned gap > 0 reverses it), plus an undefined one
CELLS = [
    ("v", "qa", 0.80, 0.78, -0.1, dict(ia=-0.1, da=-0.2, ca=-0.05)),  # none
    ("v", "qa", 0.80, 0.60, -0.1, dict(ia=0.1, da=-0.2, ca=-0.05)),  # ia_only
    ("v", "mc", 0.80, 0.55, -0.1, dict(ia=-0.1, da=0.2, ca=-0.05)),  # da_only
    ("p", "mc", 0.60, 0.80, -0.1, dict(ia=-0.1, da=-0.2, ca=0.05)),  # ca_only
    ("p", "qa", 0.70, 0.40, -0.1, dict(ia=0.1, da=0.2, ca=-0.05)),  # da_ia
    ("p", "qa", 0.90, 0.40, -0.1, dict(ia=0.1, da=0.2, ca=0.05)),  # all_three
    ("p", "mc", 0.50, 0.45, -0.1, dict(ia=0.1, da=-0.2, ca=0.05)),  # other (IA + CA)
    ("v", "mc", 0.50, 0.45, -0.1, dict(ia=0.0, da=float("nan"), ca=0.05)),  # undefined (DA nan); IA tie
]


def test_reversal_zero_and_nan_rules():
    assert R.is_reversal(-0.1, 0.2) is True and R.is_reversal(0.1, 0.2) is False
    assert R.is_reversal(0.0, 0.2) is False and R.is_reversal(0.1, 0.0) is False  # a tie is no reversal
    assert R.is_reversal(np.nan, 0.2) is pd.NA and R.is_reversal(0.1, np.inf) is pd.NA


def test_accuracy_gap_bins_and_threshold():
    assert R.acc_gap_bin([0.0499, 0.05, 0.1 - 1e-13, 0.3, 1.0, np.nan]).tolist() == [
        "[0.00, 0.05)", "[0.05, 0.10)", "[0.10, 0.15)", "[0.30, 1.00]", "[0.30, 1.00]", None]
    rates = R.reversal_rates(gaps_frame(CELLS), by=("acc_gap_bin",))
    b = rates[rates["by"] == "acc_gap_bin"]
    below = b[b["key"].isin(["[0.00, 0.05)", "[0.05, 0.10)"])]
    assert not below["above_threshold"].any() and b[~b.index.isin(below.index)]["above_threshold"].all()
    assert rates[rates["by"] == "all"]["above_threshold"].isna().all()


def test_patterns_and_shares_by_hand():
    p = R.patterns(gaps_frame(CELLS))
    assert p["pattern"].tolist() == ["none", "ia_only", "da_only", "ca_only", "da_ia", "all_three", "other", "undefined"]
    assert p["da_ia_agree"].tolist()[:7] == [True, False, False, True, True, True, False]
    assert p["da_ia_agree"].isna().iloc[7] and p["ia_reversal"].iloc[7] is np.False_
    s = R.pattern_shares(p).set_index(["by", "key"])
    allrow = s.loc[("all", "all")]
    assert allrow["n_cells"] == 7 and allrow["n_undefined"] == 1
    for name in R.PATTERNS:
        assert allrow[name] == pytest.approx(1 / 7)
    assert allrow["da_ia_agree"] == pytest.approx(4 / 7)
    # method p: ca_only, da_ia, all_three, other
    assert s.loc[("method", "p"), "n_cells"] == 4 and s.loc[("method", "p"), "ca_only"] == 0.25


def test_patterns_without_ca():
    p = R.patterns(gaps_frame(CELLS), views_used=("ia", "da"))
    assert p["pattern"].tolist()[:7] == ["none", "ia_only", "da_only", "none", "da_ia", "da_ia", "ia_only"]
    assert p["ca_reversal"].isna().all() and (p["views_used"] == "ia+da").all()
    g = gaps_frame(CELLS)
    g = g[~((g["model_a"] == "a5") & (g["view"] == "ca"))]  # no CA ratings for cell 6 (all three otherwise)
    q = R.patterns(g)
    assert q["pattern"].iloc[5] == "da_ia" and q["views_used"].iloc[5] == "ia+da"
    assert q["views_used"].iloc[4] == "ia+da+ca" and q["ca_reversal"].isna().iloc[5]


def test_reversal_rates_by_hand():
    r = R.reversal_rates(gaps_frame(CELLS)).set_index(["by", "key", "view"])
    # IA reverses in cells 2, 5, 6, 7 (cell 8 is a tie): 4 of 8
    assert tuple(r.loc[("all", "all", "ia"), ["n_cells", "n_reversals", "rate"]]) == (8, 4, 0.5)
    # DA reverses in cells 3, 5, 6 of the 7 defined
    assert tuple(r.loc[("all", "all", "da"), ["n_cells", "n_reversals", "n_undefined"]]) == (7, 3, 1)
    assert r.loc[("method", "v", "ca"), "rate"] == 0.25  # cells 1, 2, 3, 8 -> only 8
    assert r.loc[("method+dataset", "p / mc", "ca"), "n_reversals"] == 2
    assert set(r.loc["comparison+dataset"].index.get_level_values(0)) == {"mode / qa", "size / qa", "mode / mc",
                                                                           "size / mc"}


def _oriented(df):
    raw = df[df["view"] == "raw"]
    s = np.where(raw["acc_gap"] < 0, -1.0, 1.0)
    return np.abs(raw["acc_gap"].to_numpy()), s * raw["gap"].to_numpy()


def test_spearman_against_scipy_and_a_loop_bootstrap():
    rng = np.random.default_rng(0)
    acc = rng.uniform(-0.4, 0.4, 15)
    raw = -0.5 * acc + 0.05 * rng.standard_normal(15)  # the more accurate model has the lower ECE
    df = gaps_frame([("v", "qa", 0.5 + a / 2, 0.5 - a / 2, g, {}) for a, g in zip(acc, raw)])
    c = R.accuracy_correlation(df, n_bootstrap=200, seed=3).set_index("by").loc["all"]
    x, y = _oriented(df)
    ref = stats.spearmanr(x, y)
    assert c["rho"] == pytest.approx(ref.statistic, abs=1e-12) and c["p_value"] == pytest.approx(ref.pvalue)
    assert c["rho"] < 0 and c["n_cells"] == 15
    seed = setting_seed("spearman", "ece|all|all", 3)
    loop = [stats.spearmanr(x[i], y[i]).statistic for _, idx in resample_indices(15, 200, seed) for i in idx]
    lo, hi = interval(np.array(loop))
    assert (c["lo"], c["hi"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    assert c["seed"] == seed


def test_spearman_is_invariant_to_pair_order_and_undefined_for_few_cells():
    cells = [("v", "qa", 0.9, 0.5, -0.3, {}), ("v", "qa", 0.6, 0.8, 0.1, {}), ("v", "qa", 0.7, 0.6, -0.05, {}),
             ("v", "qa", 0.5, 0.52, 0.0, {})]
    swapped = [(m, d, b, a, -g, v) for m, d, a, b, g, v in cells]  # the same cells with A and B exchanged
    r1 = R.accuracy_correlation(gaps_frame(cells), n_bootstrap=0)
    r2 = R.accuracy_correlation(gaps_frame(swapped), n_bootstrap=0)
    assert r1["rho"].iloc[0] == pytest.approx(r2["rho"].iloc[0]) == pytest.approx(-1.0)
    few = R.accuracy_correlation(gaps_frame(cells[:2]), n_bootstrap=50)
    assert few["rho"].isna().all() and few["n_cells"].iloc[0] == 2
