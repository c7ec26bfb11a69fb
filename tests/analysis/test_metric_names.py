"""A metric name computes exactly what it names, or is refused (issue 36, "No silent substitution").

Every name ``confgrid analyze --metrics`` and the grid accept (the listed ones, the conventions, and names of
the binned-ECE grammar) is asked for alone; the output must hold that metric's rows only, equal to an
independent reference for that name (tests/reference/ece_conventions.py for the binned ones: a loop per bin,
never confgrid's code). On the main branch before this test, ``--metrics ece_right`` wrote a row labelled
``ece`` with the left-closed value.
"""

from __future__ import annotations

import doctest
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from confgrid.analysis import binning, conventions, estimators, metrics, registry
from confgrid.analysis.registry import METRICS, get_metric
from confgrid.flows.analyze.analysis import AnalyzeSpec, analyze
from confgrid.flows.analyze.spec import available_metrics
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.spec.estimation import MetricsSpec
from reference.ece_conventions import PROJECTS, ece_spelled

#: names of the grammar that are not listed: every scheme, closure and bin confidence, odd bin counts
SPELLED = ["ece_left_float", "ece_midpoint", "ece_7", "ece_12_left_float_midpoint", "ece_20_right_midpoint",
           "ece_11_centred", "ece_11_centred_midpoint", "ece_11_centred_right_midpoint", "ece_centred",
           "ece_15_equal_mass", "ece_15_equal_mass_right", "ece_1", "ece_1000_right_float", "ece_debiased",
           "ece_15_left_float_midpoint_debiased", "ece_11_centred_midpoint_debiased", "ece_20_right_debiased"]


def _data():
    """Two signals on 120 items: stated confidences on a 5% grid (many on bin edges, 0 and 1.0 included, ties)
    and a continuous score; the point estimates of each name differ from its neighbours'."""
    rng = np.random.default_rng(36)
    n = 120
    p = np.r_[[0.02] * 10, [0.06] * 5, [0.1] * 6]
    stated = rng.choice(np.round(np.arange(0, 21) * 0.05, 2), n, p=p / p.sum())
    stated[:4] = [0.0, 1.0, 0.3, 0.7000000000000001]
    correct = (rng.random(n) < np.clip(stated + rng.normal(0, 0.15, n), 0, 1)).astype(float)
    score = np.clip(stated + rng.normal(0, 0.1, n), 0, 1)
    rows = [{"setting": "m/d", "item_id": i, "signal": s, "confidence": float(v), "correct": float(y)}
            for s, conf in (("stated", stated), ("score", score)) for i, (v, y) in enumerate(zip(conf, correct))]
    return pd.DataFrame(rows)


def _reference(name: str, c: np.ndarray, y: np.ndarray, run_bins: int = 10) -> float:
    """The value ``name`` must have, computed without the metric registry."""
    info = get_metric(name)
    if info.convention:
        return PROJECTS[info.convention](c, y)
    if info.binning is not None:
        return ece_spelled(name, c, y, run_bins)
    return {
        "auroc": lambda: roc_auc_score(y, c),
        "brier": lambda: float(np.mean((c - y) ** 2)),
        "calibration_gap": lambda: float(c.mean() - y.mean()),
        "overconfidence": lambda: float(c.mean() - y.mean()),
        "spearman": lambda: spearmanr(c, y).statistic,
        # these four have their own independent tests (tests/analysis/test_estimators.py, test_metrics.py); here the
        # package's function is called directly, not through a name, which is what a substitution would break
        "aurc": lambda: metrics.aurc(c, y),
        "kde_ece": lambda: estimators.kde_ece(c, y),
        "ks_ece": lambda: estimators.ks_ece(c, y),
        "smoothed_ece": lambda: estimators.smoothed_ece(c, y),
        "smece": lambda: estimators.smece(c, y),
    }[name]()


ACCEPTED = available_metrics() + SPELLED


def test_the_accepted_names_cover_every_listed_metric_and_convention():
    assert set(available_metrics()) == set(METRICS)
    assert {f"ece_{c}" for c in conventions.CONVENTIONS} <= set(available_metrics())
    assert not set(SPELLED) & set(available_metrics())  # spelled only


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    src = tmp_path_factory.mktemp("in") / "in.csv"
    _data().to_csv(src, index=False)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ACCEPTED:
            out[name] = analyze(AnalyzeSpec(input=src, out=tmp_path_factory.mktemp(name), metrics=name,
                                            n_resamples=20, track=False))
    return out


@pytest.mark.parametrize("name", ACCEPTED)
def test_each_name_alone_in_analyze_gives_exactly_its_rows(analyzed, name):
    res = analyzed[name]
    met = res["metrics"]
    assert met["metric"].tolist() == [name, name], met[["signal", "metric"]]
    df = _data()
    for r in met.itertuples():
        g = df[df["signal"] == r.signal]
        ref = _reference(name, g["confidence"].to_numpy(), g["correct"].to_numpy())
        assert r.point == pytest.approx(ref, abs=1e-12, rel=1e-12), (name, r.signal)
    assert set(res["gaps"]["metric"]) <= {name}


@pytest.mark.parametrize("name", ACCEPTED)
def test_each_name_alone_in_a_grid_is_evaluated_as_named(name):
    assert MetricsSpec(names=(name,)).evaluated == [name]


def test_names_that_spell_nothing_are_refused_with_the_spelling_that_works(tmp_path):
    src = tmp_path / "in.csv"
    _data().to_csv(src, index=False)
    bad = {"ece_equal_mass_midpoint": "use 'ece_equal_mass'", "ece_equal_mass_right_float": "use 'ece_equal_mass_right'",
           "ece_11_centred_left_float": "use 'ece_11_centred'", "ece_0": "allowed: an integer in 1..1000",
           "ece_010": "without leading zeros", "ece_1_centred": "allowed: 2..1000", "ece_1001": "1..1000",
           "ece_equal_mass_debiased": "use 'ece_debiased'",
           "ece_debiased_midpoint": "did you mean 'ece_midpoint_debiased'", "ece_debiased_15": "did you mean 'ece_15_debiased'",
           "ece_foo": "unknown metric 'ece_foo'"}
    for name, says in bad.items():
        with pytest.raises(AnalyzeInputError, match=says):
            analyze(AnalyzeSpec(input=src, out=tmp_path / "x", metrics=name, track=False))
        with pytest.raises(ValueError, match=says):
            MetricsSpec(names=(name,))
        assert name not in METRICS
    assert not (tmp_path / "x").exists()  # nothing written


def test_axes_expand_the_unsuffixed_names_only():
    e = registry.expand_binned
    assert e(["ece", "ece_right", "ece_study002"], ["left", "right"], ["mean", "midpoint"]) == [
        "ece", "ece_midpoint", "ece_right", "ece_right_midpoint", "ece_study002"]
    assert e(["ece_15_midpoint"], ["right"], ["mean"]) == ["ece_15_midpoint"]
    with pytest.raises(ValueError, match="no float closure; name 'ece_equal_mass_right'"):
        e(["ece_equal_mass"], ["left", "right_float"])
    with pytest.raises(ValueError, match="equal-mass bins have no fixed midpoints"):
        e(["ece_equal_mass"], ["left"], ["midpoint"])
    spec = MetricsSpec(names=("ece", "auroc"), ece_bin_confidence=("mean", "midpoint"),
                       ece_conventions=("helm", "study002"))
    assert spec.evaluated == ["ece", "ece_midpoint", "auroc", "ece_helm", "ece_study002"]
    with pytest.raises(ValueError, match="unknown ECE convention 'muller'"):
        MetricsSpec(ece_conventions=("muller",))


def test_analyze_flags_for_bin_confidence_and_conventions(tmp_path):
    src = tmp_path / "in.csv"
    _data().to_csv(src, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyze(AnalyzeSpec(input=src, out=tmp_path / "o", metrics="ece,ece_right",
                                  ece_bin_confidence="mean,midpoint",
                      ece_conventions="yang2024,helm", n_resamples=20, track=False))
    assert list(dict.fromkeys(res["metrics"]["metric"])) == ["ece", "ece_midpoint", "ece_right", "ece_yang2024",
                                                             "ece_helm"]
    for flag, kw in (("--ece-bin-confidence", {"ece_bin_confidence": "centre"}),
                     ("--ece-convention", {"ece_conventions": "guo"})):
        with pytest.raises(AnalyzeInputError, match=flag):
            analyze(AnalyzeSpec(input=src, out=tmp_path / "bad", **kw))


@pytest.mark.parametrize("mod", [binning, conventions, registry])
def test_docstring_examples(mod):
    assert doctest.testmod(mod, raise_on_error=False).failed == 0
