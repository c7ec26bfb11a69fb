"""Which signal a comparison favours: one signed-aware rule (compare.better_signal) everywhere.

For a signed metric (calibration_gap, overconfidence: 0 is best) the better
signal is the one closer to 0, which the sign of the gap cannot tell:
verbalized -0.5 against token +0.1 has a negative gap, yet token is better.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import compare as C
from reference import compare_tables as R
from reference import summary as SM
from confgrid.flows.analyze import analysis as AN
from confgrid.registry import UnknownNameError

SIGNED = ["calibration_gap", "overconfidence"]


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("metric", SIGNED)
def test_signed_metric_favours_the_value_closer_to_zero(metric):
    assert C.better_signal(metric, -0.5, 0.1, "verbalized", "token") == "token"
    assert C.better_signal(metric, 0.1, -0.5, "verbalized", "token") == "verbalized"
    assert C.better_signal(metric, 0.5, 0.1, "verbalized", "token") == "token"  # same sign: smaller wins
    assert C.better_signal(metric, -0.05, -0.3, "a", "b") == "a"
    assert C.better_signal(metric, 0.2, -0.2, "a", "b") == "neither"  # equally far from 0


@pytest.mark.parametrize(
    ("metric", "va", "vb", "want"),
    [
        ("ece", 0.05, 0.12, "verbalized"),  # lower is better
        ("ece", 0.12, 0.05, "token"),
        ("aurc", 0.30, 0.20, "token"),
        ("brier", 0.10, 0.20, "verbalized"),
        ("ks_ece", 0.10, 0.20, "verbalized"),
        ("auroc", 0.61, 0.74, "token"),  # higher is better
        ("auroc", 0.80, 0.74, "verbalized"),
    ],
)
def test_unsigned_metrics_follow_their_direction(metric, va, vb, want):
    assert C.better_signal(metric, va, vb, "verbalized", "token") == want


@pytest.mark.parametrize("metric", ["ece", "auroc", *SIGNED])
@pytest.mark.parametrize(("va", "vb"), [(0.1, 0.1), (math.nan, 0.1), (0.1, math.nan), (math.nan, math.nan),
                                        (math.inf, 0.1), (0.1, -math.inf)])
def test_ties_and_non_finite_values_favour_neither(metric, va, vb):
    assert C.better_signal(metric, va, vb, "verbalized", "token") == "neither"


def test_numpy_scalars_and_errors():
    assert C.better_signal("ece", np.float64(0.1), np.float32(0.2), "a", "b") == "a"
    with pytest.raises(UnknownNameError, match="unknown metric 'f1'"):
        C.better_signal("f1", 0.1, 0.2, "a", "b")
    with pytest.raises(ValueError, match="must differ"):
        C.better_signal("ece", 0.1, 0.2, "a", "a")


# ----------------------------------------------------------------------------- its users


def one_setting(values: dict[str, tuple[float, float]], metrics=("calibration_gap", "overconfidence", "ece", "auroc")):
    """A hand-built result with signals (verbalized, token); ``values[metric] = (verbalized, token)``."""
    metrics = list(metrics)
    point = np.array([[values[m][0] for m in metrics], [values[m][1] for m in metrics]])
    noise = 0.001 * np.random.default_rng(0).standard_normal((2, len(metrics), 20))
    res = np.repeat(point[:, :, None], 20, axis=2) + noise
    return BS.BootstrapResult(point=point, resamples=res, metrics=metrics, signal_names=["verbalized", "token"],
                              n_resamples=20)


VALUES = {"calibration_gap": (-0.5, 0.1), "overconfidence": (-0.5, 0.1), "ece": (0.05, 0.12), "auroc": (0.61, 0.74)}


def test_compare_gaps_favours_is_signed_aware():
    g = R.gaps(one_setting(VALUES)).set_index("metric")
    for m in SIGNED:
        assert g.loc[m, "point"] == pytest.approx(-0.6)  # negative gap ...
        assert g.loc[m, "favours"] == "token"  # ... yet |0.1| < |-0.5|: token is better
    assert g.loc["ece", "favours"] == "verbalized" and g.loc["auroc", "favours"] == "token"


def test_summarize_gaps_counts_settings_by_the_same_rule():
    results = {
        "s1": one_setting(VALUES),
        "s2": one_setting({**VALUES, "calibration_gap": (0.02, -0.3), "overconfidence": (0.02, -0.3)}),
        "s3": one_setting({**VALUES, "calibration_gap": (0.4, 0.1), "overconfidence": (0.4, 0.1)}),
    }
    t = SM.summarize_gaps(results, ["token"]).set_index("metric")
    # token closer to 0 in s1 and s3, verbalized in s2 (the sign of the gap says s1 -> verbalized, s3 -> token)
    assert t.loc["calibration_gap", "n_favours_token"] == 2 and t.loc["overconfidence", "n_favours_token"] == 2
    assert t.loc["ece", "n_favours_token"] == 0 and t.loc["auroc", "n_favours_token"] == 3
    per_setting = [R.gaps(r).set_index("metric").loc["calibration_gap", "favours"] for r in results.values()]
    assert per_setting == ["token", "verbalized", "token"]


@pytest.mark.parametrize(
    ("tok_a", "tok_b", "want", "gap_sign_flip"),
    [
        (0.1, -0.7, 1, True),  # token better under tok_a, verbalized under tok_b; the gaps flip sign too
        (0.45, 0.6, 1, False),  # token, then verbalized: a flip the gap signs (-0.95, -1.1) do not show
        (0.7, -0.7, 0, True),  # verbalized better under both, though the gaps (-1.2, +0.2) flip sign
        (0.1, -0.3, 0, False),  # token under both
        (0.5, -0.7, 0, True),  # a tie (|0.5| = |-0.5|) under tok_a is no flip
    ],
)
def test_summarize_estimators_context_flips_use_the_rule(tok_a, tok_b, want, gap_sign_flip):
    # verbalized calibration gap -0.5 in every case
    point = np.array([[0.1, -0.5], [0.2, tok_a], [0.2, tok_b]])
    r = BS.BootstrapResult(point, np.repeat(point[:, :, None], 10, axis=2), ["ece", "calibration_gap"],
                           ["verbalized", "tok_a", "tok_b"], 10)
    t = SM.summarize_estimators({"s": r}, ["tok_a"], ["calibration_gap"], context_pair=("tok_a", "tok_b"))
    assert t.context_flips.iloc[0] == want
    assert C.flip(-0.5 - tok_a, -0.5 - tok_b) is gap_sign_flip


def test_analyze_and_compare_agree_on_the_same_data(tmp_path):
    # one setting, 10 items, accuracy 0.8: verbalized mean confidence 0.3 (gap -0.5), token 0.9 (gap +0.1)
    correct = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    verbalized = [0.5, 0.4, 0.3, 0.3, 0.3, 0.3, 0.2, 0.2, 0.3, 0.2]
    token = [0.95, 0.95, 0.9, 0.9, 0.9, 0.9, 0.95, 0.95, 0.8, 0.8]
    rows = [dict(setting="m/d", item_id=f"q{i}", signal=s, confidence=c[i], correct=correct[i])
            for s, c in (("verbalized", verbalized), ("token", token)) for i in range(10)]
    path = tmp_path / "in.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    metrics = ["calibration_gap", "overconfidence", "ece", "auroc", "brier"]
    out = AN.analyze(AN.AnalyzeSpec(input=path, out=tmp_path / "out", metrics=metrics, n_resamples=50, track=False))
    ag = out["gaps"].set_index(["signal_a", "signal_b", "metric"])

    r = BS.paired_bootstrap(np.array([verbalized, token]), np.array(correct, dtype=float), metrics, n_resamples=50,
                            signal_names=["verbalized", "token"])
    cg = R.gaps(r).set_index("metric")
    for m in metrics:
        assert ag.loc[("verbalized", "token", m), "favours"] == cg.loc[m, "favours"], m
        # the reversed pair names the same signal
        assert ag.loc[("token", "verbalized", m), "favours"] == cg.loc[m, "favours"], m
    assert cg.loc["calibration_gap", "point"] == pytest.approx(-0.6)
    assert cg.loc["calibration_gap", "favours"] == cg.loc["overconfidence", "favours"] == "token"
    assert C.better_signal("calibration_gap", -0.5, 0.1, "verbalized", "token") == "token"


def test_docstring_examples():
    import doctest

    res = doctest.testmod(C, raise_on_error=False)
    assert res.failed == 0 and res.attempted >= 5
