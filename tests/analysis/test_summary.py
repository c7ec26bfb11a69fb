"""Summaries over settings (analysis/summary.py) against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import compare as C
from reference import compare_tables as R
from reference import summary as SM

NAMES = ["verbalized", "bare", "answer", "guess"]


def make_results(n_settings=3, n=60, B=200, metrics=("ece", "auroc", "kde_ece"), seed0=0):
    out = {}
    for k in range(n_settings):
        rng = np.random.default_rng(seed0 + k)
        y = (rng.random(n) < 0.55).astype(float)
        conf = np.vstack([
            np.round(np.clip(0.5 + 0.3 * y + 0.2 * rng.standard_normal(n), 0, 1), 1),
            np.clip(0.1 + 0.2 * y * rng.random(n) + 0.1 * rng.random(n), 0, 1),
            np.clip(0.2 + 0.3 * y * rng.random(n) + 0.2 * rng.random(n), 0, 1),
            np.clip(0.6 + 0.3 * y * rng.random(n) + 0.1 * rng.random(n), 0, 1),
        ])
        out[f"s{k}"] = BS.paired_bootstrap(conf, y, list(metrics), n_resamples=B, seed=100 + k,
                                           chunk_size=64, signal_names=NAMES)
    return out


@pytest.fixture(scope="module")
def results():
    return make_results()


def test_summarize_deltas_hand_values():
    pts = {"a": 0.2, "b": -0.4, "c": 0.1}
    res = {"a": np.array([0.1, 0.3, 0.2, 0.2]), "b": np.array([-0.5, -0.1, 0.05, -0.4]),
           "c": np.array([0.0, 0.2, -0.1, 0.1])}
    g_a = {"a": (0.1, 0.05, 0.2), "b": (0.3, 0.1, 0.5), "c": (-0.1, -0.3, 0.1)}
    g_b = {"a": (0.3, 0.2, 0.4), "b": (-0.1, -0.2, -0.05), "c": (0.05, -0.1, 0.2)}
    r = SM.summarize_deltas(pts, res, None, g_a, g_b, level=0.5)
    assert r["n_settings"] == 3
    assert r["mean_abs"] == pytest.approx((0.2 + 0.4 + 0.1) / 3)
    assert r["max_abs"] == pytest.approx(0.4)
    avg = (np.abs(res["a"]) + np.abs(res["b"]) + np.abs(res["c"])) / 3  # per resample
    assert (r["lo"], r["hi"]) == pytest.approx(tuple(np.percentile(avg, [25, 75])))
    # intervals at level 0.5: a -> [0.175, 0.225] excl., b -> [-0.425, -0.0625] excl., c -> [-0.025, 0.125] not
    assert r["n_excludes_zero"] == 2
    assert r["n_flips"] == 2  # b: + -> -, c: - -> +
    assert r["n_resolved_flips"] == 1  # only b has both intervals off zero
    # without resamples: no interval, counts from the given intervals
    r2 = SM.summarize_deltas(pts, intervals={"a": (0.1, 0.3), "b": (-0.5, 0.1), "c": (0.01, 0.2)})
    assert math.isnan(r2["lo"]) and r2["n_excludes_zero"] == 2 and math.isnan(r2["n_flips"])
    with pytest.raises(ValueError, match="at least one"):
        SM.summarize_deltas({})
    with pytest.raises(ValueError, match="missing"):
        SM.summarize_deltas(pts, {"a": res["a"]})


def test_summarize_shifts_vs_compare(results):
    pairs = [("bare", "guess"), ("answer", "guess")]
    df = SM.summarize_shifts(results, pairs, metrics=["ece", "auroc"])
    assert len(df) == 4 and list(df.columns[:3]) == ["context_a", "context_b", "metric"]
    for _, row in df.iterrows():
        pts, res, fl, rf, ez = [], [], 0, 0, 0
        for s, r in results.items():
            sh = R.shifts(r, NAMES, [(row.context_a, row.context_b)])
            sh = sh[sh.metric == row.metric].iloc[0]
            pts.append(sh.point)
            ez += bool(sh.excludes_zero)
            j = list(r.metrics).index(row.metric)
            v, a, b = NAMES.index("verbalized"), NAMES.index(row.context_a), NAMES.index(row.context_b)
            res.append(np.abs((r.resamples[v, j] - r.resamples[b, j]) - (r.resamples[v, j] - r.resamples[a, j])))
            f = R.flips(r, NAMES, [(row.context_a, row.context_b)])
            f = f[f.metric == row.metric].iloc[0]
            fl += bool(f.flip)
            rf += bool(f.fully_resolved)
        assert row.mean_abs == pytest.approx(np.mean(np.abs(pts)), abs=1e-15)
        lo, hi = np.percentile(np.mean(res, axis=0), [2.5, 97.5])
        assert (row.lo, row.hi) == pytest.approx((lo, hi), abs=1e-12)
        assert (row.n_excludes_zero, row.n_flips, row.n_resolved_flips) == (ez, fl, rf)


def test_summarize_shifts_names_mapping_and_B_check(results):
    names = {s: NAMES for s in results}
    a = SM.summarize_shifts(results, [("bare", "guess")], ["ece"], signal_names=names)
    b = SM.summarize_shifts(results, [("bare", "guess")], ["ece"])
    pd.testing.assert_frame_equal(a, b)
    bad = dict(results)
    bad["x"] = BS.paired_bootstrap(np.full((4, 10), 0.5), np.ones(10), ["ece"], n_resamples=7, signal_names=NAMES)
    with pytest.raises(ValueError, match="same number of resamples"):
        SM.summarize_shifts(bad, [("bare", "guess")], ["ece"])
    with pytest.raises(ValueError, match="not among signals"):
        SM.summarize_shifts(results, [("bare", "nope")], ["ece"])


def test_summarize_gaps_and_estimators(results):
    g = SM.summarize_gaps(results, ["bare", "guess"], ["ece"])
    pts = [R.gaps(r, NAMES).set_index(["signal", "metric"]).loc[("bare", "ece")].point for r in results.values()]
    row = g[(g.signal == "bare") & (g.metric == "ece")].iloc[0]
    assert row.point == pytest.approx(np.mean(pts))
    assert row.lo <= row.point <= row.hi or row.n_settings == 3
    e = SM.summarize_estimators(results, ["bare", "guess"], ["kde_ece"], base="ece", context_pair=("bare", "guess"))
    assert len(e) == 2
    r0 = e[e.signal == "bare"].iloc[0]
    d = []
    flips = 0
    for r in results.values():
        gg = R.gaps(r, NAMES).set_index(["signal", "metric"])
        d.append(gg.loc[("bare", "kde_ece")].point - gg.loc[("bare", "ece")].point)
        flips += C.flip(gg.loc[("bare", "kde_ece")].point, gg.loc[("bare", "ece")].point)
    assert r0.mean_abs == pytest.approx(np.mean(np.abs(d)))
    assert r0.max_abs == pytest.approx(np.max(np.abs(d)))
    assert r0.n_flips == flips
    cf = sum(C.flip(R.gaps(r, NAMES).set_index(["signal", "metric"]).loc[("bare", "kde_ece")].point,
                    R.gaps(r, NAMES).set_index(["signal", "metric"]).loc[("guess", "kde_ece")].point)
             for r in results.values())
    assert r0.context_flips == cf


def test_summarize_axis_paired_and_checked(results):
    # the same run twice: every dg is exactly 0
    ax = SM.summarize_axis(results, results, "bare", ["ece", "auroc"])
    assert (ax.mean_abs == 0).all() and (ax.hi == 0).all() and (ax.n_flips == 0).all()
    other = make_results(B=200, seed0=50)
    # same seeds/B/chunks are required for pairing: results made with other seeds differ in seed
    other = {s: BS.BootstrapResult(r.point, r.resamples, r.metrics, r.signal_names, r.n_resamples, r.seed + 1,
                                   r.chunk_size) for s, r in other.items()}
    with pytest.raises(ValueError, match="not paired"):
        SM.summarize_axis(results, other, "bare", ["ece"])


def test_docstring_examples():
    import doctest

    assert doctest.testmod(SM).failed == 0
