"""Checks of confgrid.analysis.compare (gaps, shifts, flips)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import compare as C
from reference import compare_tables as R

NAMES = ["verbalized", "tok_a", "tok_b"]


def fake_result():
    """Hand-built result: S=3 signals, metrics (ece, auroc), B=200 resamples."""
    rng = np.random.default_rng(0)
    B = 200
    res = np.empty((3, 2, B))
    # ECE: verbalized ~0.10, tok_a ~0.20 (gap ~ -0.10), tok_b ~0.05 (gap ~ +0.05)
    res[0, 0] = 0.10 + 0.005 * rng.standard_normal(B)
    res[1, 0] = 0.20 + 0.005 * rng.standard_normal(B)
    res[2, 0] = 0.05 + 0.005 * rng.standard_normal(B)
    # AUROC: all ~0.7, noisy: gaps straddle zero
    res[:, 1] = 0.7 + 0.05 * rng.standard_normal((3, B))
    res[2, 1, :5] = np.nan
    point = np.array([[0.10, 0.70], [0.20, 0.71], [0.05, 0.69]])
    return BS.BootstrapResult(point=point, resamples=res, metrics=["ece", "auroc"], signal_names=NAMES)


def test_gaps_values_and_columns():
    r = fake_result()
    g = R.gaps(r, NAMES)
    assert list(g.columns[:6]) == ["signal", "metric", "point", "lo", "hi", "excludes_zero"]
    assert set(g.signal) == {"tok_a", "tok_b"} and len(g) == 4
    row = g[(g.signal == "tok_a") & (g.metric == "ece")].iloc[0]
    assert row.point == pytest.approx(0.10 - 0.20)
    d = r.resamples[0, 0] - r.resamples[1, 0]
    assert (row.lo, row.hi) == pytest.approx((np.percentile(d, 2.5), np.percentile(d, 97.5)))
    assert row.excludes_zero and row.hi < 0
    assert row.favours == "verbalized"  # lower ECE for verbalized
    row_b = g[(g.signal == "tok_b") & (g.metric == "ece")].iloc[0]
    assert row_b.point == pytest.approx(0.05) and row_b.excludes_zero and row_b.favours == "token"
    # AUROC: higher is better -> positive gap favours verbalized
    ra = g[(g.signal == "tok_a") & (g.metric == "auroc")].iloc[0]
    assert ra.point == pytest.approx(-0.01) and ra.favours == "token" and not ra.excludes_zero
    rb = g[(g.signal == "tok_b") & (g.metric == "auroc")].iloc[0]
    assert rb.favours == "verbalized" and rb.n_undefined == 5


def test_gaps_uses_stored_names_and_checks_them():
    r = fake_result()
    pd.testing.assert_frame_equal(R.gaps(r), R.gaps(r, NAMES))
    with pytest.raises(ValueError, match="verbalized"):
        R.gaps(r, ["a", "b", "c"])
    with pytest.raises(ValueError, match="names"):
        R.gaps(r, ["verbalized", "b"])


def test_shifts():
    r = fake_result()
    s = R.shifts(r, NAMES, [("tok_a", "tok_b")])
    assert list(s.columns[:7]) == ["context_a", "context_b", "metric", "point", "lo", "hi", "excludes_zero"]
    row = s[s.metric == "ece"].iloc[0]
    # dg = g(b) - g(a) = (v - b) - (v - a) = a - b = 0.20 - 0.05
    assert row.point == pytest.approx(0.15)
    d = r.resamples[1, 0] - r.resamples[2, 0]
    assert (row.lo, row.hi) == pytest.approx(BS.interval(d))
    assert row.excludes_zero
    with pytest.raises(ValueError, match="tok_c"):
        R.shifts(r, NAMES, [("tok_a", "tok_c")])


def test_flip_and_fully_resolved():
    assert C.flip(-0.1, 0.05) and C.flip(0.2, -0.01)
    assert not C.flip(0.1, 0.2) and not C.flip(0.0, 0.1) and not C.flip(np.nan, 0.1)
    assert C.fully_resolved((-0.1, -0.12, -0.08), (0.05, 0.04, 0.06))
    assert not C.fully_resolved((-0.1, -0.12, 0.01), (0.05, 0.04, 0.06))  # a straddles 0
    assert not C.fully_resolved((0.1, 0.08, 0.12), (0.05, 0.04, 0.06))  # no flip
    f = R.flips(fake_result(), NAMES, [("tok_a", "tok_b")]).set_index("metric")
    assert f.loc["ece", "flip"] and f.loc["ece", "fully_resolved"]
    assert f.loc["auroc", "flip"] and not f.loc["auroc", "fully_resolved"]


def test_gaps_end_to_end_paired_bootstrap():
    # verbalized well calibrated, token score overconfident -> ECE gap < 0, resolved
    rng = np.random.default_rng(1)
    n = 400
    p = rng.random(n)
    y = (rng.random(n) < p).astype(float)
    conf = np.vstack([p, np.clip(p + 0.3, 0, 1)])
    r = BS.paired_bootstrap(conf, y, ["ece", "auroc"], n_resamples=300, seed=2, chunk_size=128,
                            signal_names=["verbalized", "token"])
    g = R.gaps(r).set_index("metric")
    assert g.loc["ece", "point"] < 0 and g.loc["ece", "excludes_zero"]
    assert g.loc["ece", "favours"] == "verbalized"
