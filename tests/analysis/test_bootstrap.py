"""Checks of the vectorized paired bootstrap against plain per-resample loops."""

from __future__ import annotations

import math
from functools import partial
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import resampling as RS
from confgrid.analysis import kernels as KN
from confgrid.analysis.fused import _aurc_table
from confgrid.analysis import metrics as M
from confgrid.analysis import registry as REG
from confgrid.analysis.metrics import UndefinedMetricWarning
from reference import summary as SM
from reference.resample_loop import bootstrap_chunk, loop_chunk
from reference.weighted_values import weighted_values

ALL = ["ece", "auroc", "aurc", "brier", "spearman"]
KERNELS = {
    "ece": KN.ece_weighted,
    "auroc": partial(weighted_values, "auroc"),
    "aurc": partial(weighted_values, "aurc"),
    "spearman": partial(weighted_values, "spearman"),
    "brier": KN.brier_weighted,
}


def make_setting(rng, S=3, n=60, tie_decimals=1):
    corr = (rng.random(n) < 0.6).astype(float)
    conf = np.empty((S, n))
    for s in range(S):
        raw = np.clip(0.4 * corr + 0.6 * rng.random(n), 0, 1)
        conf[s] = np.round(raw, tie_decimals) if s % 2 == 0 else raw
    return conf, corr


# ---------------------------------------------------------------------------
# indices, counts, seeds
# ---------------------------------------------------------------------------


def test_counts_from_indices_vs_loop():
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 7, size=(13, 7))
    w = RS.counts_from_indices(idx)
    ref = np.zeros((13, 7))
    for r in range(13):
        for i in idx[r]:
            ref[r, i] += 1
    np.testing.assert_array_equal(w, ref)
    assert w.sum(axis=1).tolist() == [7.0] * 13


def test_resample_indices_chunks_follow_the_rule():
    n, B, seed, cs = 11, 25, 123, 10
    chunks = list(RS.resample_indices(n, B, seed, cs))
    assert [c for c, _ in chunks] == [0, 1, 2]
    assert [a.shape for _, a in chunks] == [(10, 11), (10, 11), (5, 11)]
    for c, a in chunks:
        assert a.dtype == np.int64
        ref = np.random.default_rng(np.random.SeedSequence([seed, c])).integers(0, n, size=(a.shape[0], n))
        np.testing.assert_array_equal(a, ref)
        # a single chunk can be regenerated on its own (worker-independent)
        np.testing.assert_array_equal(a, RS.chunk_indices(n, B, seed, c, cs))


def test_setting_seed_stable_and_distinct():
    s = RS.setting_seed("qwen", "triviaqa", 0)
    assert s == RS.setting_seed("qwen", "triviaqa", 0)
    assert 0 <= s < 2**63
    others = {RS.setting_seed("qwen", "triviaqa", 1), RS.setting_seed("triviaqa", "qwen", 0),
              RS.setting_seed("qwe", "ntriviaqa", 0)}
    assert s not in others and len(others) == 3
    # pinned value: sha256 of the JSON list, first 8 bytes, top bit cleared
    import hashlib
    d = hashlib.sha256(b'["qwen", "triviaqa", 0]').digest()
    assert s == int.from_bytes(d[:8], "big") & (2**63 - 1)


# ---------------------------------------------------------------------------
# weighted kernels
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_kernel_with_unit_weights_equals_point(name):
    rng = np.random.default_rng(1)
    for decimals in (1, 2, 8):
        conf, corr = make_setting(rng, S=1, n=97, tie_decimals=decimals)
        c = conf[0] if decimals < 8 else np.round(conf[0], 8)
        for y in (corr, rng.random(97)):  # binary and graded
            got = KERNELS[name](c, y, np.ones((2, 97)))
            assert got.shape == (2,)
            np.testing.assert_allclose(got, REG.get_metric(name).func(c, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_bins", [5, 15, 50])
def test_ece_kernel_bins(n_bins):
    rng = np.random.default_rng(n_bins)
    c = rng.choice(np.arange(n_bins + 1) / n_bins, 40)
    y = rng.integers(0, 2, 40).astype(float)
    w = RS.counts_from_indices(rng.integers(0, 40, (5, 40)))
    ref = [M.ece(np.repeat(c, w[r].astype(int)), np.repeat(y, w[r].astype(int)), n_bins=n_bins) for r in range(5)]
    np.testing.assert_allclose(KN.ece_weighted(c, y, w, n_bins=n_bins), ref, rtol=1e-12, atol=1e-12)
    sig = KN.SortedSignal.from_arrays(c, y, n_bins=10)  # re-binned on request
    np.testing.assert_allclose(KN.ece_weighted(sig, None, w, n_bins=n_bins), ref, rtol=1e-12, atol=1e-12)


def test_spearman_kernel_equals_scipy_on_the_drawn_rows_and_its_edge_cases():
    """Spearman's rho of a resample = scipy's spearmanr of the rows it draws (ties: average ranks), for binary,
    graded and tied targets; NaN where the drawn rows have a constant confidence or target, or fewer than 2."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(5)
    for y in (rng.integers(0, 2, 30).astype(float), np.round(rng.random(30) * 4) / 4, rng.random(30)):
        c = np.round(rng.random(30), 1)
        w = RS.counts_from_indices(rng.integers(0, 30, (20, 30)))
        ref = [spearmanr(np.repeat(c, w[r].astype(int)), np.repeat(y, w[r].astype(int))).statistic
               for r in range(20)]
        np.testing.assert_allclose(weighted_values("spearman", c, y, w), ref, rtol=1e-12, atol=1e-12)
    c, y = np.array([0.0, 0.1, 1.0]), np.array([0.0, 1.0, 1.0])
    w = np.array([[3.0, 0.0, 0.0], [0.0, 2.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    out = weighted_values("spearman", c, y, w)
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isnan(out[3])  # one value; constant target; one row
    assert out[2] == pytest.approx(spearmanr(c, y).statistic, abs=1e-15)
    with pytest.warns(M.UndefinedMetricWarning, match="Spearman is undefined: confidence is constant"):
        assert math.isnan(M.spearman([0.5, 0.5], [0, 1]))
    with pytest.warns(M.UndefinedMetricWarning, match="no rows"):
        assert math.isnan(M.spearman([], []))


def test_kernels_zero_weight_rows_are_nan():
    c, y = np.array([0.2, 0.8]), np.array([0.0, 1.0])
    w = np.array([[0.0, 0.0], [1.0, 0.0]])
    for name, f in KERNELS.items():
        out = f(c, y, w)
        assert math.isnan(out[0]), name
    assert math.isnan(weighted_values("auroc", c, y, w)[1])  # one class only
    assert weighted_values("aurc", c, y, w)[1] == 1.0


# ---------------------------------------------------------------------------
# chunk vs per-resample loop
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,decimals", [(5, 1), (40, 1), (150, 2), (90, 8)])
def test_chunk_equals_per_resample_loop(n, decimals):
    rng = np.random.default_rng(n)
    conf, corr = make_setting(rng, S=3, n=n, tie_decimals=decimals)
    idx = RS.chunk_indices(n, 120, seed=7, chunk_index=0, chunk_size=120)
    got = bootstrap_chunk(conf, corr, ALL, idx)
    ref = loop_chunk(conf, corr, ALL, idx)
    assert got.shape == (3, len(ALL), 120)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)  # NaN where the loop has NaN
    if n == 5:
        assert np.isnan(ref[:, ALL.index("auroc")]).any()  # one-class resamples exercised


def test_chunk_per_signal_correctness_and_graded():
    rng = np.random.default_rng(11)
    n = 50
    conf = np.round(rng.random((2, n)), 1)
    corr = np.stack([rng.integers(0, 2, n).astype(float), np.round(rng.random(n), 2)])
    idx = rng.integers(0, n, (60, n))
    np.testing.assert_allclose(
        bootstrap_chunk(conf, corr, ALL, idx, n_bins=15),
        loop_chunk(conf, corr, ALL, idx, n_bins=15),
        rtol=1e-12, atol=1e-12,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 2**31),
    vals=st.lists(st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7, 1.0]), min_size=12, max_size=12),
)
def test_chunk_equals_loop_property(n, seed, vals):
    rng = np.random.default_rng(seed)
    conf = np.array(vals[:n])[None, :]
    corr = rng.integers(0, 2, n).astype(float)
    idx = rng.integers(0, n, (8, n))
    np.testing.assert_allclose(
        bootstrap_chunk(conf, corr, ALL, idx), loop_chunk(conf, corr, ALL, idx), rtol=1e-12, atol=1e-12
    )


# ---------------------------------------------------------------------------
# the full bootstrap
# ---------------------------------------------------------------------------


def test_paired_bootstrap_is_concatenation_of_chunks_and_deterministic():
    rng = np.random.default_rng(2)
    conf, corr = make_setting(rng, S=2, n=30)
    r1 = BS.paired_bootstrap(conf, corr, ALL, n_resamples=250, seed=5, chunk_size=100)
    r2 = BS.paired_bootstrap(conf, corr, ALL, n_resamples=250, seed=5, chunk_size=100)
    np.testing.assert_array_equal(r1.resamples, r2.resamples)
    np.testing.assert_array_equal(r1.point, r2.point)
    assert r1.resamples.shape == (2, len(ALL), 250) and r1.resamples.dtype == np.float64
    # chunks processed in any order (as separate workers would) and placed by index
    chunks = dict(RS.resample_indices(30, 250, 5, 100))
    out = {c: bootstrap_chunk(conf, corr, ALL, chunks[c]) for c in [2, 0, 1]}
    np.testing.assert_array_equal(np.concatenate([out[c] for c in range(3)], axis=-1), r1.resamples)
    # a different seed gives different resamples
    r3 = BS.paired_bootstrap(conf, corr, ALL, n_resamples=250, seed=6, chunk_size=100)
    assert not np.array_equal(r1.resamples, r3.resamples)
    # point estimates are metrics.py on the full data
    for s in range(2):
        for j, name in enumerate(ALL):
            assert r1.point[s, j] == REG.get_metric(name).func(conf[s], corr)


def test_paired_differences_are_paired():
    # identical signals -> every per-resample difference is exactly 0
    rng = np.random.default_rng(3)
    conf, corr = make_setting(rng, S=1, n=40)
    r = BS.paired_bootstrap(np.vstack([conf, conf]), corr, ALL, n_resamples=200, seed=1, chunk_size=64)
    d = r.resamples[0] - r.resamples[1]
    assert np.all((d == 0) | np.isnan(d))


def test_interval_and_undefined_counts():
    v = np.arange(1, 101, dtype=float)
    lo, hi = BS.interval(v)
    assert lo == pytest.approx(np.percentile(v, 2.5)) and hi == pytest.approx(np.percentile(v, 97.5))
    assert lo == pytest.approx(1 + 0.025 * 99) and hi == pytest.approx(1 + 0.975 * 99)
    v2 = np.r_[v, [np.nan] * 7]
    assert BS.interval(v2) == BS.interval(v)
    assert BS.n_undefined(v2) == 7
    lo, hi = BS.interval(np.full((2, 5), np.nan))
    assert np.isnan(lo).all() and np.isnan(hi).all()
    with pytest.raises(ValueError):
        BS.interval(v, level=1.5)


def test_interval_equals_nanpercentile_on_mixed_rows():
    """Rows without nan go through one vectorized np.percentile, rows with nan through np.nanpercentile: the
    result equals np.nanpercentile over everything (to rounding), all-nan rows and empty resamples give nan."""
    rng = np.random.default_rng(3)
    v = rng.normal(size=(3, 4, 501))
    v[0, 1, [5, 9]] = np.nan
    v[2, 3, :] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = np.nanpercentile(v, [5.0, 95.0], axis=-1, method="linear")
    lo, hi = BS.interval(v, level=0.9)
    assert lo.shape == hi.shape == (3, 4)
    np.testing.assert_allclose(lo, ref[0], rtol=1e-14)
    np.testing.assert_allclose(hi, ref[1], rtol=1e-14)
    assert np.isnan(lo[2, 3]) and np.isnan(hi[2, 3])
    lo, hi = BS.interval(np.empty((2, 0)))
    assert lo.shape == (2,) and np.isnan(lo).all() and np.isnan(hi).all()
    assert all(np.isnan(x) for x in BS.interval(np.empty(0)))


def test_interval_coverage_sanity_mean_of_bernoulli():
    # Brier with confidence 0 is the mean correctness: a bootstrap of a sample mean.
    # Over 40 samples from Bernoulli(0.3), the 95% interval should cover 0.3 most of the time,
    # and the interval width should match the normal approximation.
    rng = np.random.default_rng(4)
    n, hits, widths = 200, 0, []
    for rep in range(40):
        y = (rng.random(n) < 0.3).astype(float)
        r = BS.paired_bootstrap(np.zeros((1, n)), y, ["brier"], n_resamples=400, seed=rep, chunk_size=400)
        lo, hi = r.interval()
        hits += lo[0, 0] <= 0.3 <= hi[0, 0]
        widths.append(hi[0, 0] - lo[0, 0])
    assert hits >= 33  # expected ~38; P(hits < 33) is tiny
    assert np.mean(widths) == pytest.approx(2 * 1.96 * math.sqrt(0.3 * 0.7 / n), rel=0.15)


def test_one_class_resamples_counted():
    conf = np.array([[0.1, 0.9, 0.5, 0.4]])
    corr = np.array([1.0, 0.0, 0.0, 0.0])
    r = BS.paired_bootstrap(conf, corr, ["auroc", "ece"], n_resamples=300, seed=0, chunk_size=128)
    und = r.n_undefined
    # P(item 0 absent) = (3/4)^4 ~ 0.32 -> many NaN AUROC, never NaN ECE
    assert 40 < und[0, 0] < 160 and und[0, 1] == 0
    lo, hi = r.interval()
    assert np.isfinite(lo).all()


def test_empty_and_nonfinite_inputs():
    with pytest.warns(UndefinedMetricWarning):
        r = BS.paired_bootstrap(np.zeros((2, 0)), np.zeros(0), ["aurc"], n_resamples=10, seed=0)
    assert r.resamples.shape == (2, 1, 10) and np.isnan(r.resamples).all() and np.isnan(r.point).all()
    conf = np.array([[0.1, 0.5, 0.9], [0.2, np.nan, 0.3]])
    with pytest.warns(UndefinedMetricWarning, match="non-finite"):
        r = BS.paired_bootstrap(conf, [1, 0, 1], ["brier"], n_resamples=20, seed=0)
    assert np.isfinite(r.resamples[0]).all() and np.isnan(r.resamples[1]).all()


def test_input_errors():
    with pytest.raises(ValueError) as exc:
        BS.paired_bootstrap([[0.1, 1.2]], [1, 0], ["ece"], n_resamples=5)
    msg = str(exc.value)
    assert "signal 0" in msg and "confidence[1] = 1.2" in msg and "[0, 1]" in msg
    with pytest.raises(KeyError, match="aurc"):
        BS.paired_bootstrap([[0.1, 0.2]], [1, 0], ["nope"], n_resamples=5)


def test_mean_over_settings():
    a = np.array([[1.0, 2.0, 3.0]])
    b = np.array([[3.0, 2.0, np.nan]])
    m = SM.mean_over_settings([a, b])
    np.testing.assert_array_equal(m[:, :2], [[2.0, 2.0]])
    assert np.isnan(m[0, 2])
    with pytest.raises(ValueError):
        SM.mean_over_settings([a, np.zeros((1, 4))])


def test_memory_bounded_chunks():
    # chunks never exceed chunk_size rows, whatever n_resamples is
    sizes = [a.shape[0] for _, a in RS.resample_indices(50, 2345, 1, chunk_size=1000)]
    assert sizes == [1000, 1000, 345]


def test_row_blocks_do_not_change_results(monkeypatch):
    # force tiny row blocks so one chunk is evaluated in several blocks
    rng = np.random.default_rng(12)
    n = 30
    conf, corr = make_setting(rng, S=2, n=n, tie_decimals=1)
    idx = rng.integers(0, n, (23, n))
    ref = loop_chunk(conf, corr, ALL, idx)
    import confgrid.analysis.kernels as K

    monkeypatch.setattr(K, "_BLOCK_ELEMS", 4 * n)  # the row blocks of analysis/kernels.py, used by the bootstrap
    np.testing.assert_allclose(bootstrap_chunk(conf, corr, ALL, idx), ref, rtol=1e-12, atol=1e-12)
    w = RS.counts_from_indices(idx)
    np.testing.assert_allclose(weighted_values("aurc", conf[0], corr, w), ref[0, ALL.index("aurc")], rtol=1e-12, atol=1e-12)


def test_docstring_examples():
    import doctest

    assert doctest.testmod(BS, raise_on_error=False).failed == 0


def test_kernels_reject_non_count_weights():
    with pytest.raises(ValueError, match="integer counts"):
        weighted_values("aurc", [0.2, 0.4], [1, 0], [[0.5, 1.5]])
    with pytest.raises(ValueError, match="integer counts"):
        weighted_values("auroc", [0.2, 0.4], [1, 0], [[-1, 3]])


# ---------------------------------------------------------------------------
# the fused count-space path (segment counts, AURC table, chunk groups)
# ---------------------------------------------------------------------------


def _graded_mixed_setting(rng, n):
    """Binary and graded correctness, continuous scores, 0.05-grid scores (mixed tie groups), exact 0 / 1."""
    corr = np.stack([(rng.random(n) < 0.55).astype(float), np.round(rng.random(n), 1),
                     (rng.random(n) < 0.3).astype(float)])
    conf = np.stack([
        np.clip(0.3 * corr[0] + 0.7 * rng.random(n), 0, 1),
        np.round(rng.random(n) * 20) / 20,
        np.where(rng.random(n) < 0.2, 1.0, np.where(rng.random(n) < 0.2, 0.0, rng.random(n))),
    ])
    return conf, corr


@pytest.mark.parametrize("n", [60, 400])
def test_fused_path_equals_loop_graded_ties_many_segments(n):
    # n = 400: continuous signals have hundreds of segments (bincount path)
    rng = np.random.default_rng(100 + n)
    conf, corr = _graded_mixed_setting(rng, n)
    idx = rng.integers(0, n, (40, n))
    names = ["ece", "auroc", "aurc", "brier", "calibration_gap", "overconfidence"]
    got = bootstrap_chunk(conf, corr, names, idx, n_bins=15)
    ref = loop_chunk(conf, corr, names[:4], idx, n_bins=15)
    np.testing.assert_allclose(got[:, :4], ref, rtol=1e-12, atol=1e-12)
    gap = np.array([[np.mean(conf[s][r] - corr[s][r]) for r in idx] for s in range(3)])
    np.testing.assert_allclose(got[:, 4], gap, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got[:, 4], got[:, 5])


def test_signal_values_do_not_depend_on_the_other_signals():
    rng = np.random.default_rng(21)
    n = 300
    conf, corr = _graded_mixed_setting(rng, n)
    idx = rng.integers(0, n, (150, n))
    together = bootstrap_chunk(conf, corr, ALL, idx)
    for s in range(3):
        alone = bootstrap_chunk(conf[s], corr[s], ALL, idx)
        np.testing.assert_array_equal(alone[0], together[s])
    # nor on which other metrics are asked for
    np.testing.assert_array_equal(bootstrap_chunk(conf, corr, ["aurc", "ece"], idx),
                                  together[:, [ALL.index("aurc"), ALL.index("ece")]])


def test_aurc_table_is_exact_to_rounding():
    from fractions import Fraction

    n = 40
    hi, lo = _aurc_table(n)
    H = [Fraction(0)]
    for i in range(1, n + 1):
        H.append(H[-1] + Fraction(1, i))
    V = [sum((H[n] - H[q] for q in range(n - a, n)), Fraction(0)) for a in range(n + 1)]
    for a1, a2 in [(0, 1), (3, 4), (39, 40), (0, 40), (10, 25)]:
        exact = V[a2] - V[a1]
        got = (hi[a2] - hi[a1]) + (lo[a2] - lo[a1])
        assert abs(Fraction(got) - exact) <= abs(exact) * Fraction(1, 2**50)


def test_bootstrap_chunks_equal_paired_bootstrap_slices():
    rng = np.random.default_rng(8)
    conf, corr = make_setting(rng, S=3, n=70)
    full = BS.paired_bootstrap(conf, corr, ALL, n_resamples=230, seed=9, chunk_size=50)
    got = BS.bootstrap_chunks(conf, corr, ALL, 230, 9, [4, 0, 2], chunk_size=50)
    for c, v in zip([4, 0, 2], got):
        np.testing.assert_array_equal(v, full.resamples[:, :, c * 50 : c * 50 + v.shape[-1]])
    assert got[0].shape == (3, len(ALL), 30)
    with pytest.raises(ValueError, match="chunk_index"):
        BS.bootstrap_chunks(conf, corr, ALL, 230, 9, [5], chunk_size=50)
