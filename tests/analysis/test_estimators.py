"""Independent checks of the alternative estimators (analysis/estimators.py),
the reliability data (analysis/reliability.py) and their bootstrap kernels."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import kernels as KN
from confgrid.analysis import estimators as E
from confgrid.analysis import metrics as M
from confgrid.analysis import registry as REG
from confgrid.analysis import reliability as R
from confgrid.analysis.metrics import UndefinedMetricWarning
from metric_data import FAST, datasets
from reference.resample_loop import bootstrap_chunk, loop_chunk
from reference.weighted_values import weighted_values

NEW = ["ece_equal_mass", "kde_ece", "ks_ece", "smoothed_ece", "calibration_gap", "overconfidence"] + [
    f"ece_{b}" for b in E.ECE_BIN_COUNTS
]
KERNEL_METRICS = [m for m in NEW if KN.has_weighted_kernel(m)]
FALLBACK = [m for m in NEW if not KN.has_weighted_kernel(m)]
try:
    import relplot  # noqa: F401

    HAVE_RELPLOT = True
except ImportError:  # pragma: no cover
    HAVE_RELPLOT = False


# ---------------------------------------------------------------------------
# brute-force references (plain Python loops, straight from the definitions)
# ---------------------------------------------------------------------------


def equal_mass_loop(conf, corr, B):
    """np.array_split of the sorted answers; a boundary inside a tie group moves to its start."""
    pairs = sorted(zip(conf, corr), key=lambda p: p[0])
    n = len(pairs)
    sizes = [len(a) for a in np.array_split(np.arange(n), B)]
    bounds, pos = [], 0
    for s in sizes[:-1]:
        pos += s
        p = pos
        if p < n:
            while p > 0 and pairs[p - 1][0] == pairs[p][0]:
                p -= 1
        bounds.append(p)
    edges = [0] + bounds + [n]
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            total += abs(sum(y for _, y in pairs[a:b]) - sum(c for c, _ in pairs[a:b]))
    return total / n


def kde_loop(conf, corr, h=0.05):
    n = len(conf)
    tot = 0.0
    for i in range(n):
        num = den = 0.0
        for j in range(n):
            k = math.exp(-0.5 * ((conf[i] - conf[j]) / h) ** 2)
            num += k * corr[j]
            den += k
        tot += abs(num / den - conf[i])
    return tot / n


def ks_quadratic(conf, corr):
    """O(n^2): for every answer, the sum over all answers with confidence <= its confidence."""
    n = len(conf)
    best = 0.0
    for i in range(n):
        s = sum(corr[j] - conf[j] for j in range(n) if conf[j] <= conf[i])
        best = max(best, abs(s))
    return best / n


def smoothed_quad(conf, corr):
    c, y = np.asarray(conf, float), np.asarray(corr, float)
    h = E.silverman_bandwidth(c)
    n = c.size

    def f(t):
        return abs(np.sum(np.exp(-0.5 * ((t - c) / h) ** 2) * (y - c))) / (n * h * math.sqrt(2 * math.pi))

    pts = sorted(set(c.tolist()))
    val, _ = integrate.quad(f, c.min() - 12 * h, c.max() + 12 * h, points=pts, limit=500)
    return val


def reliability_loop(conf, corr, B):
    counts = [0] * B
    sc = [0.0] * B
    sy = [0.0] * B
    for c, y in zip(conf, corr):
        k = next(k for k in range(B) if k / B <= c < (k + 1) / B or (k == B - 1 and c == 1.0))
        counts[k] += 1
        sc[k] += c
        sy[k] += y
    return counts, [s / m if m else float("nan") for s, m in zip(sc, counts)], [
        s / m if m else float("nan") for s, m in zip(sy, counts)
    ]


def data(seed, n=60, decimals=1, graded=False):
    rng = np.random.default_rng(seed)
    y = rng.random(n) if graded else (rng.random(n) < 0.6).astype(float)
    c = np.clip(0.4 * y + 0.6 * rng.random(n), 0, 1)
    if decimals is not None:
        c = np.round(c, decimals)
    return c, y


# ---------------------------------------------------------------------------
# hand-computed values
# ---------------------------------------------------------------------------


def test_hand_values():
    conf, corr = [0.0, 0.1, 0.5, 1.0], [0, 0, 1, 1]
    # equal mass, B = 2: {0, 0.1} -> |0 - 0.1|, {0.5, 1} -> |2 - 1.5|
    assert E.ece_equal_mass(conf, corr, n_bins=2) == pytest.approx((0.1 + 0.5) / 4, abs=1e-15)
    # B = 4: every answer its own bin: |y - c| averaged
    assert E.ece_equal_mass(conf, corr, n_bins=4) == pytest.approx((0 + 0.1 + 0.5 + 0) / 4, abs=1e-15)
    # KS: cumulative y - c = 0, -0.1, 0.4, 0.4 -> 0.4 / 4
    assert E.ks_ece(conf, corr) == pytest.approx(0.1, abs=1e-15)
    assert E.calibration_gap(conf, corr) == pytest.approx(0.4 - 0.5, abs=1e-15)
    assert E.overconfidence(conf, corr) == E.calibration_gap(conf, corr)
    # 002's example: 88% stated confidence, 79% accuracy -> 9% overconfidence
    c = np.full(100, 0.88)
    y = np.r_[np.ones(79), np.zeros(21)]
    assert E.overconfidence(c, y) == pytest.approx(0.09, abs=1e-12)
    for B in E.ECE_BIN_COUNTS:
        assert REG.get_metric(f"ece_{B}").func(conf, corr) == M.ece(conf, corr, n_bins=B)
    assert REG.get_metric("ece_10").func(conf, corr) == pytest.approx(0.15)


def test_kde_far_apart_and_symmetric():
    # two clusters 1.0 apart (20 bandwidths): each its own neighbourhood
    c = [0.0, 0.0, 1.0, 1.0]
    y = [1, 0, 1, 1]
    assert E.kde_ece(c, y) == pytest.approx((0.5 + 0.5 + 0 + 0) / 4, abs=1e-12)
    assert E.kde_ece([0.3, 0.3], [1, 1]) == pytest.approx(0.7)


def test_smoothed_limits():
    assert E.smoothed_ece([0.7], [1]) == pytest.approx(0.3)
    assert E.smoothed_ece([0.4, 0.4, 0.4], [1, 0, 0]) == pytest.approx(abs(1 / 3 - 0.4))
    # two well-separated clusters with the same residual sign: integral = |sum residual| / n
    c = np.r_[np.full(50, 0.1), np.full(50, 0.9)]
    y = np.r_[np.ones(50), np.zeros(50)]
    # residuals +0.9 at 0.1 and -0.9 at 0.9; kernels barely overlap (h ~ 0.45 * 100^-0.2 ...)
    assert E.smoothed_ece(c, y) == pytest.approx(smoothed_quad(c, y), rel=1e-6, abs=1e-9)


# ---------------------------------------------------------------------------
# brute force on random data with ties, graded correctness, edges
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed,decimals", [(0, 1), (1, 2), (2, None), (3, 0)])
@pytest.mark.parametrize("B", [1, 3, 7, 10, 50, 80])
def test_equal_mass_vs_loop(seed, decimals, B):
    c, y = data(seed, n=47, decimals=decimals)
    assert E.ece_equal_mass(c, y, n_bins=B) == pytest.approx(equal_mass_loop(c.tolist(), y.tolist(), B), abs=1e-12)


@pytest.mark.parametrize("seed,decimals,graded", [(0, 1, False), (1, 2, True), (2, None, False)])
def test_kde_ks_vs_loops(seed, decimals, graded):
    c, y = data(seed, n=40, decimals=decimals, graded=graded)
    assert E.kde_ece(c, y) == pytest.approx(kde_loop(c.tolist(), y.tolist()), abs=1e-12)
    assert E.ks_ece(c, y) == pytest.approx(ks_quadratic(c.tolist(), y.tolist()), abs=1e-12)


@pytest.mark.parametrize("seed,decimals", [(0, 1), (1, 2), (2, None)])
def test_smoothed_vs_quadrature(seed, decimals):
    c, y = data(seed, n=80, decimals=decimals)
    assert E.smoothed_ece(c, y) == pytest.approx(smoothed_quad(c, y), rel=1e-7, abs=1e-10)


def test_smoothed_bandwidth_far_below_the_spread():
    # Silverman's h reads the IQR: confidences of 1e-300 beside 0.58 give h ~ 1e-157, and a uniform grid of
    # step h / 20 over [0, 0.58] cannot be allocated (hypothesis found it). The kernels do not overlap across the
    # two clusters, so the value is the sum over clusters of |sum of residuals| / n (hand-computed).
    c = np.array([2.2e-157, 1e-300, 5e-324, 5e-324, 0.580318587380508, 2.2e-157])
    y = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert E.silverman_bandwidth(c) < 1e-150
    assert E.smoothed_ece(c, y) == pytest.approx((2 + 0.580318587380508) / 6, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_smoothed_window_grid_agrees_with_the_uniform_grid(seed, monkeypatch):
    c, y = data(seed, n=80, decimals=None)
    uniform = E.smoothed_ece(c, y)
    monkeypatch.setattr(E, "_GRID_MAX", 10)  # force the windows around the answers
    assert E.smoothed_ece(c, y) == pytest.approx(uniform, rel=1e-9, abs=1e-12)


def test_silverman_matches_formula_and_iqr_fallback():
    c = np.array([0.1, 0.2, 0.4, 0.8, 0.9])
    sd = np.std(c, ddof=1)
    iqr = np.percentile(c, 75) - np.percentile(c, 25)
    assert E.silverman_bandwidth(c) == pytest.approx(0.9 * min(sd, iqr / 1.34) * 5 ** -0.2)
    c2 = np.array([0.5] * 9 + [0.9])  # IQR 0, sd > 0 -> sd
    assert E.silverman_bandwidth(c2) == pytest.approx(0.9 * np.std(c2, ddof=1) * 10 ** -0.2)


def test_ks_tie_rule_is_order_free():
    # tied group at 0.5 with y = (1, 0): per-answer partial sums would give 0.5 or -0.5
    c = [0.5, 0.5, 0.8]
    assert E.ks_ece(c, [1, 0, 1]) == E.ks_ece(c, [0, 1, 1]) == pytest.approx(0.2 / 3)


def test_equal_mass_ties_share_a_bin_and_order_free():
    c = np.array([0.2, 0.2, 0.2, 0.2, 0.6, 0.6, 0.9, 0.9])
    y = np.array([1, 0, 0, 0, 1, 1, 0, 1.0])
    d = R.reliability_diagram(c, y, n_bins=3, strategy="quantile")
    # blocks of 3, 3, 2 -> boundary 3 moves to 0 and boundary 6 stays
    assert d.counts.tolist() == [0, 6, 2]
    assert np.isnan(d.accuracy[0]) and np.isnan(d.mean_confidence[0])
    assert d.bin_edges.tolist() == [0.0, 0.2, 0.9, 1.0]
    assert d.accuracy[1] == pytest.approx(3 / 6) and d.accuracy[2] == pytest.approx(0.5)
    for p in np.random.default_rng(0).permutation(np.tile(np.arange(8), (5, 1)), axis=1):
        assert E.ece_equal_mass(c[p], y[p], 3) == pytest.approx(E.ece_equal_mass(c, y, 3), abs=1e-15)


# ---------------------------------------------------------------------------
# edge cases
# ---------------------------------------------------------------------------


SIMPLE = ["ece_equal_mass", "kde_ece", "ks_ece", "smoothed_ece", "calibration_gap", "overconfidence", "ece_5"]


@pytest.mark.parametrize("name", SIMPLE)
def test_empty_and_nonfinite_nan_with_warning(name):
    f = REG.get_metric(name).func
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(f([], []))
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(f([0.2, np.nan], [1, 0]))


@pytest.mark.parametrize("name", SIMPLE)
def test_out_of_range_raises(name):
    f = REG.get_metric(name).func
    with pytest.raises(ValueError, match=r"confidence\[1\] = 1.5"):
        f([0.2, 1.5], [1, 0])
    with pytest.raises(ValueError, match="correct"):
        f([0.2, 0.5], [1, 2])


@pytest.mark.parametrize("name", SIMPLE)
def test_one_class_defined_and_edges(name):
    f = REG.get_metric(name).func
    with warnings.catch_warnings():
        warnings.simplefilter("error", UndefinedMetricWarning)  # one class is defined for calibration
        for y in ([1, 1, 1, 1], [0, 0, 0, 0]):
            v = f([0.0, 0.1, 0.5, 1.0], y)
            assert np.isfinite(v)
    # perfectly calibrated extremes
    assert f([0.0, 1.0, 1.0, 0.0], [0, 1, 1, 0]) == pytest.approx(0.0, abs=1e-12)


def test_bandwidth_and_bins_errors():
    with pytest.raises(ValueError, match="bandwidth"):
        E.kde_ece([0.1], [1], bandwidth=0)
    with pytest.raises(ValueError, match="n_bins"):
        E.ece_equal_mass([0.1], [1], n_bins=0)
    with pytest.raises(ValueError, match="strategy"):
        R.reliability_diagram([0.1], [1], strategy="kmeans")


def test_registry_entries():
    for name in NEW + ["smece"]:
        info = REG.get_metric(name)
        assert info.lower_is_better is True
    assert REG.get_metric("calibration_gap").signed and REG.get_metric("overconfidence").signed
    assert not REG.get_metric("ece").signed
    assert REG.get_metric("ece_equal_mass").takes_n_bins and not REG.get_metric("ece_20").takes_n_bins


@pytest.mark.skipif(not HAVE_RELPLOT, reason="relplot not installed")
def test_smece_calls_relplot():
    import relplot

    c, y = data(4, n=100, decimals=None)
    assert E.smece(c, y) == pytest.approx(float(relplot.smECE(c, y)), abs=1e-15)
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(E.smece([], []))


def test_smece_import_error_names_package(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "relplot":
            raise ImportError("no relplot")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match="relplot"):
        E.smece([0.5], [1])


# ---------------------------------------------------------------------------
# reliability data
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("B", [5, 10, 15])
def test_reliability_uniform_vs_loop_and_ece(B):
    c, y = data(7, n=90, decimals=1)
    c[:3] = [0.0, 0.1, 1.0]
    d = R.reliability_diagram(c, y, n_bins=B)
    counts, mc, acc = reliability_loop(c.tolist(), y.tolist(), B)
    assert d.counts.tolist() == counts
    np.testing.assert_allclose(d.mean_confidence, mc, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(d.accuracy, acc, rtol=1e-12, equal_nan=True)
    assert d.bin_edges.shape == (B + 1,) and d.counts.shape == (B,)
    assert d.ece == pytest.approx(M.ece(c, y, n_bins=B), abs=1e-12)


def test_reliability_uniform_vs_sklearn_calibration_curve():
    # sklearn drops empty bins and puts values on interior edges by its own
    # (np.searchsorted on linspace) rule; with confidences strictly inside
    # bins and no exact edges both agree on the non-empty bins.
    from sklearn.calibration import calibration_curve

    rng = np.random.default_rng(3)
    c = (np.floor(rng.random(200) * 10) + 0.5) / 10  # bin centres only
    c[c > 0.75] = 0.85  # leave bin [0.9, 1] empty
    y = (rng.random(200) < c).astype(int)
    d = R.reliability_diagram(c, y, n_bins=10)
    prob_true, prob_pred = calibration_curve(y, c, n_bins=10, strategy="uniform")
    nz = d.counts > 0
    np.testing.assert_allclose(d.accuracy[nz], prob_true, rtol=1e-12)
    np.testing.assert_allclose(d.mean_confidence[nz], prob_pred, rtol=1e-12)
    assert np.isnan(d.accuracy[~nz]).all() and (~nz).sum() >= 1


@pytest.mark.parametrize("B", [2, 5, 10, 60])
def test_reliability_quantile_matches_equal_mass(B):
    c, y = data(8, n=53, decimals=1)
    d = R.reliability_diagram(c, y, n_bins=B, strategy="quantile")
    assert d.counts.sum() == 53 and d.counts.shape == (B,)
    assert d.ece == pytest.approx(E.ece_equal_mass(c, y, n_bins=B), abs=1e-12)
    assert np.all(np.diff(d.bin_edges) >= 0)
    assert np.isnan(d.accuracy[d.counts == 0]).all()


def test_reliability_empty_warns():
    with pytest.warns(UndefinedMetricWarning):
        d = R.reliability_diagram([], [], n_bins=4)
    assert d.counts.tolist() == [0] * 4 and np.isnan(d.accuracy).all()
    with pytest.raises(Exception):
        d.counts = None  # frozen


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------

@settings(FAST, max_examples=30)
@given(d=datasets(max_size=30), seed=st.integers(0, 2**32 - 1))
def test_permutation_invariance_new_metrics(d, seed):
    conf, corr = d
    p = np.random.default_rng(seed).permutation(conf.size)
    for name in NEW:
        f = REG.get_metric(name).func
        a, b = f(conf, corr), f(conf[p], corr[p])
        assert a == pytest.approx(b, abs=1e-12), name
        if not REG.get_metric(name).signed:
            assert -1e-12 <= a <= 1 + 1e-12, name


@settings(FAST, max_examples=30)
@given(d=datasets(max_size=15))
def test_property_vs_brute_force(d):
    conf, corr = d
    cl, yl = conf.tolist(), corr.tolist()
    assert E.ks_ece(conf, corr) == pytest.approx(ks_quadratic(cl, yl), abs=1e-12)
    assert E.kde_ece(conf, corr) == pytest.approx(kde_loop(cl, yl), abs=1e-12)
    for B in (1, 3, 10):
        assert E.ece_equal_mass(conf, corr, B) == pytest.approx(equal_mass_loop(cl, yl, B), abs=1e-12)


# ---------------------------------------------------------------------------
# bootstrap: kernels and fallback vs a per-resample loop on the same indices
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,decimals,n_bins", [(37, 1, 10), (50, 2, 7), (23, None, 3)])
def test_kernels_equal_per_resample_loop(n, decimals, n_bins):
    rng = np.random.default_rng(n)
    corr = (rng.random(n) < 0.6).astype(float)
    conf = np.vstack([np.round(rng.random(n), 1), rng.random(n) if decimals is None else np.round(rng.random(n), decimals)])
    idx = rng.integers(0, n, size=(40, n))
    got = bootstrap_chunk(conf, corr, KERNEL_METRICS, idx, n_bins=n_bins)
    ref = loop_chunk(conf, corr, KERNEL_METRICS, idx, n_bins=n_bins)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_kernels_graded_and_unit_weights():
    import confgrid.analysis.kernels as K

    c, y = data(11, n=45, decimals=2, graded=True)
    for name in KERNEL_METRICS:
        info = REG.get_metric(name)
        got = K._apply(KN.weighted_kernel(name), KN.SortedSignal.from_arrays(c, y, 10), np.ones((2, 45)))
        np.testing.assert_allclose(got, info.func(c, y), rtol=1e-10, atol=1e-12, err_msg=name)


def test_kernel_zero_weight_row_is_nan():
    c, y = np.array([0.2, 0.8]), np.array([0.0, 1.0])
    w = np.array([[0.0, 0.0], [1.0, 1.0]])
    for name in ("calibration_gap", "ks_ece", "kde_ece", "ece_equal_mass"):
        out = weighted_values(name, c, y, w)
        assert math.isnan(out[0]) and np.isfinite(out[1])


def test_fallback_metrics_equal_loop_and_paired_bootstrap_runs():
    assert FALLBACK == ["smoothed_ece"]
    rng = np.random.default_rng(5)
    n = 30
    corr = (rng.random(n) < 0.5).astype(float)
    conf = np.vstack([np.round(rng.random(n), 1), rng.random(n)])
    idx = rng.integers(0, n, size=(12, n))
    mets = ["ece", "smoothed_ece", "ks_ece"]
    np.testing.assert_allclose(
        bootstrap_chunk(conf, corr, mets, idx), loop_chunk(conf, corr, mets, idx), rtol=1e-12, atol=1e-12
    )
    r = BS.paired_bootstrap(conf, corr, ["ece_equal_mass", "smoothed_ece", "calibration_gap"],
                            n_resamples=30, seed=3, chunk_size=16, n_bins=5)
    assert r.resamples.shape == (2, 3, 30)
    assert r.point[0, 0] == E.ece_equal_mass(conf[0], corr, n_bins=5)  # n_bins reaches equal-mass
    assert r.point[1, 2] == E.calibration_gap(conf[1], corr)


def test_docstring_examples():
    import doctest

    for mod in (E, R):
        res = doctest.testmod(mod, raise_on_error=False)
        assert res.failed == 0 and res.attempted >= 3
