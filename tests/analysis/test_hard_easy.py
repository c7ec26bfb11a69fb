"""The hard-easy analysis (study 002): tables by hand, the slope against scipy and a brute-force bootstrap loop."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.stats

from confgrid.analysis import hard_easy as H
from confgrid.analysis.metrics import UndefinedMetricWarning


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    d = rng.uniform(0, 1, n)
    s = np.clip(1 - d + rng.normal(0, 0.1, n), 0, 1)
    c = np.clip(0.7 + rng.normal(0, 0.1, n), 0, 1)
    return c, s, d


# ----------------------------------------------------------------------------- tables


def test_overconfidence_by_group_by_hand():
    c = [0.9, 0.7, 0.5, 0.5, 0.8]
    s = [1.0, 0.0, 0.25, 0.75, 0.2]
    g = [20, 1, 5, 5, 1]
    rows = H.overconfidence_by_group(c, s, g)
    assert [r.group for r in rows] == ["1", "5", "20"]  # numeric labels sort as numbers
    one = rows[0]
    assert one.n == 2 and one.mean_confidence == pytest.approx(0.75) and one.mean_score == pytest.approx(0.1)
    assert one.overconfidence == pytest.approx(0.65)
    assert rows[1] == ("5", 2, 0.5, 0.5, 0.0)
    assert rows[2].overconfidence == pytest.approx(-0.1)
    assert [r.group for r in H.overconfidence_by_group([0.1, 0.2], [0, 1], ["b", "a"])] == ["a", "b"]
    assert H.overconfidence_by_group([], [], []) == ()


def test_overconfidence_by_difficulty_bins_by_hand():
    c = [0.8, 0.8, 0.6, 0.9, 0.7]
    s = [0.9, 0.7, 0.2, 0.1, 0.0]
    d = [0.1, 0.3, 0.5, 1.0, 0.75]  # 0.5 opens the upper bin; 1.0 falls in the last bin
    lo, hi = H.overconfidence_by_difficulty(c, s, d, bins=2)
    assert (lo.lo, lo.hi, lo.n) == (0.0, 0.5, 2)
    assert lo.mean_difficulty == pytest.approx(0.2) and lo.overconfidence == pytest.approx(0.0)
    assert (hi.n, hi.mean_confidence, hi.mean_score) == (3, pytest.approx(2.2 / 3), pytest.approx(0.1))
    assert hi.overconfidence == pytest.approx(2.2 / 3 - 0.1)
    rows = H.overconfidence_by_difficulty(c, s, d, bins=4)
    assert [r.n for r in rows] == [1, 1, 1, 2]
    edges = H.overconfidence_by_difficulty(c, s, d, bins=[0.0, 0.2, 0.4, 0.6, 1.0])
    assert [r.n for r in edges] == [1, 1, 1, 2] and edges[3].lo == 0.6
    empty = H.overconfidence_by_difficulty(c, s, d, bins=10)[6]  # [0.6, 0.7): nobody
    assert empty.n == 0 and math.isnan(empty.overconfidence) and math.isnan(empty.mean_difficulty)


def test_difficulty_bins_bad_edges():
    with pytest.raises(ValueError, match="strictly increasing"):
        H.overconfidence_by_difficulty([0.5], [0.5], [0.5], bins=[0.5, 0.5])
    with pytest.raises(ValueError, match="outside the bin edges"):
        H.overconfidence_by_difficulty([0.5], [0.5], [0.9], bins=[0.0, 0.5])
    with pytest.raises(ValueError, match="n_bins"):
        H.overconfidence_by_difficulty([0.5], [0.5], [0.5], bins=0)
    with pytest.raises(ValueError, match=r"difficulty must lie in \[0, 1\]; got difficulty\[1\] = 1.5"):
        H.overconfidence_by_difficulty([0.5, 0.5], [0.5, 0.5], [0.5, 1.5])
    with pytest.raises(ValueError, match="same length"):
        H.overconfidence_by_difficulty([0.5, 0.5], [0.5], [0.5, 0.5])


def test_group_difficulty_by_hand():
    d = H.group_difficulty([1.0, 0.0, 1.0, 1.0, 0.5], ["a", "a", "b", "b", "c"])
    np.testing.assert_allclose(d, [0.5, 0.5, 0.0, 0.0, 0.5])
    assert H.group_difficulty([], []).shape == (0,)


# ----------------------------------------------------------------------------- the slope


def test_slope_by_hand():
    r = H.hard_easy_slope([0.5, 0.5, 0.5], [0.5, 0.25, 0.0], [0.0, 0.5, 1.0], resamples=0)
    assert (r.slope, r.intercept, r.n, r.status) == (pytest.approx(0.5), pytest.approx(0.0), 3, "ok")
    assert math.isnan(r.lo) and math.isnan(r.hi)


def test_slope_equals_scipy_linregress():
    c, s, d = _data(500, seed=4)
    r = H.hard_easy_slope(c, s, d, resamples=0)
    ref = scipy.stats.linregress(d, c - s)
    assert r.slope == pytest.approx(ref.slope, rel=1e-12) and r.intercept == pytest.approx(ref.intercept, rel=1e-12)


def _brute_bootstrap(c, s, d, resamples, seed, chunk, level):
    """Independent reference: the documented draws, one scipy fit per resample, np.percentile."""
    n = len(c)
    o = np.asarray(c) - np.asarray(s)
    slopes = []
    for k in range(-(-resamples // chunk)):
        rows = min(chunk, resamples - k * chunk)
        idx = np.random.default_rng(np.random.SeedSequence([seed, k])).integers(0, n, size=(rows, n))
        for row in idx:
            x = np.asarray(d)[row]
            slopes.append(np.nan if np.all(x == x[0]) else scipy.stats.linregress(x, o[row]).slope)
    slopes = np.array(slopes)
    fin = slopes[~np.isnan(slopes)]
    q = [50 * (1 - level), 50 * (1 + level)]
    return np.percentile(fin, q), int(np.isnan(slopes).sum())


def test_bootstrap_interval_equals_a_brute_force_loop():
    c, s, d = _data(60, seed=1)
    r = H.hard_easy_slope(c, s, d, resamples=700, seed=11, chunk_size=300, level=0.9)
    (lo, hi), undefined = _brute_bootstrap(c, s, d, 700, 11, 300, 0.9)
    assert (r.lo, r.hi) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))
    assert r.n_undefined == undefined == 0 and r.resamples == 700 and r.level == 0.9
    assert r.lo < r.slope < r.hi


def test_bootstrap_counts_resamples_with_constant_difficulty():
    c, s, d = [0.9, 0.8, 0.7], [0.1, 0.5, 0.9], [0.0, 0.0, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a degenerate resample is counted, not warned about
        r = H.hard_easy_slope(c, s, d, resamples=400, seed=2)
    (lo, hi), undefined = _brute_bootstrap(c, s, d, 400, 2, 1000, 0.95)
    assert r.n_undefined == undefined and undefined > 0
    assert (r.lo, r.hi) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))


def test_bootstrap_is_seeded():
    c, s, d = _data(40, seed=3)
    a = H.hard_easy_slope(c, s, d, resamples=200, seed=5)
    assert a == H.hard_easy_slope(c, s, d, resamples=200, seed=5)
    assert a.lo != H.hard_easy_slope(c, s, d, resamples=200, seed=6).lo


@pytest.mark.parametrize("c,s,d,status", [
    ([], [], [], "no_rows"),
    ([0.5], [0.5], [0.5], "one_row"),
    ([0.9, 0.5, 0.7], [0.1, 0.2, 0.3], [0.4, 0.4, 0.4], "constant_difficulty"),
    ([0.9, np.nan], [0.1, 0.2], [0.1, 0.4], "non_finite"),
])
def test_undefined_slope_is_nan_with_status_and_warning(c, s, d, status):
    with pytest.warns(UndefinedMetricWarning, match="hard-easy slope is undefined"):
        r = H.hard_easy_slope(c, s, d, resamples=50)
    assert r.status == status and r.n == len(c)
    assert all(math.isnan(v) for v in (r.slope, r.intercept, r.lo, r.hi))


def test_slope_argument_errors():
    with pytest.raises(ValueError, match="resamples"):
        H.hard_easy_slope([0.5, 0.6], [0.5, 0.6], [0.1, 0.2], resamples=-1)
    with pytest.raises(ValueError, match="level"):
        H.hard_easy_slope([0.5, 0.6], [0.5, 0.6], [0.1, 0.2], level=1.0)
    with pytest.raises(ValueError, match=r"score must lie in \[0, 1\]"):
        H.hard_easy_slope([0.5, 0.6], [0.5, 1.6], [0.1, 0.2])


# ----------------------------------------------------------------------------- stated confidence


def test_rounded_share_by_hand():
    r = H.rounded_share([0.35, 0.351, 0.07, 1.0, 0.0, 0.95, 0.349999, 0.8])
    assert (r.n_multiples, r.n, r.share, r.status) == (5, 8, 5 / 8, "ok")
    # float noise: 0.05 * k and k / 20 are all multiples (0.35 is 35.00000000000001 percent)
    grid = [0.05 * k for k in range(21)] + [k / 20 for k in range(21)] + [0.1 * k for k in range(11)]
    assert H.rounded_share(grid).share == 1.0
    assert H.rounded_share([0.3, 0.35, 0.4], step_percent=10).n_multiples == 2
    with pytest.warns(UndefinedMetricWarning):
        empty = H.rounded_share([])
    assert math.isnan(empty.share) and empty.status == "no_rows"
    with pytest.raises(ValueError, match="step_percent"):
        H.rounded_share([0.5], step_percent=0)


def test_correlation_equals_scipy():
    c, s, _ = _data(200, seed=7)
    c = np.round(c, 1)  # ties, as stated confidences have
    r = H.confidence_truth_correlation(c, s)
    p, sp = scipy.stats.pearsonr(c, s), scipy.stats.spearmanr(c, s)
    assert r.status == "ok" and r.n == 200
    assert (r.pearson, r.pearson_p) == (pytest.approx(p.statistic, rel=1e-12), pytest.approx(p.pvalue, rel=1e-9))
    assert (r.spearman, r.spearman_p) == (pytest.approx(sp.statistic, rel=1e-12), pytest.approx(sp.pvalue, rel=1e-9))
    assert H.confidence_truth_correlation([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]).spearman == pytest.approx(-1.0)


@pytest.mark.parametrize("c,t,status", [
    ([0.5, 0.5, 0.5], [0.1, 0.2, 0.3], "constant_confidence"),
    ([0.1, 0.2, 0.3], [0.4, 0.4, 0.4], "constant_truth"),
    ([0.5], [0.5], "fewer_than_2_rows"),
    ([], [], "fewer_than_2_rows"),
    ([0.5, np.nan], [0.1, 0.2], "non_finite"),
])
def test_undefined_correlation(c, t, status):
    with pytest.warns(UndefinedMetricWarning):
        r = H.confidence_truth_correlation(c, t)
    assert r.status == status and all(math.isnan(v) for v in r[:4])


def test_given_counts_give_the_slope_of_the_repeated_rows():
    """A run passes its unit's own resamples (counts over the answers, some 0, some resamples with one distinct
    difficulty): each slope is scipy's on the rows repeated that many times."""
    c, s, d = _data(25, seed=4)
    rng = np.random.default_rng(0)
    W = rng.poisson(1.0, size=(60, 25)).astype(float)
    W[0] = 0.0
    W[1] = 0.0
    W[1, 3] = 4.0  # one distinct difficulty: undefined
    r = H.hard_easy_slope(c, s, d, counts=W, level=0.9)
    o = np.asarray(c) - np.asarray(s)
    ref = []
    for w in W:
        rep = np.repeat(np.arange(25), w.astype(int))
        x = np.asarray(d)[rep]
        ref.append(np.nan if rep.size == 0 or np.all(x == x[0]) else scipy.stats.linregress(x, o[rep]).slope)
    ref = np.array(ref)
    lo, hi = np.percentile(ref[~np.isnan(ref)], [5, 95])
    assert r.n_undefined == 2 and r.resamples == 60
    assert (r.lo, r.hi) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))
    with pytest.raises(ValueError, match="counts must be"):
        H.hard_easy_slope(c, s, d, counts=W[:, :3])
