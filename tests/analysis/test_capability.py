"""Capability calibration (study 004): metrics against a continuous target, pass@k, budget allocation,
isotonic maps, probes, the uniform baseline, targets, the split; each against an independent reference."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from confgrid.analysis import metrics as M
from confgrid.analysis.capability.allocation import greedy_allocation, solved_share, uniform_allocation
from confgrid.analysis.capability.estimators import (
    fit_isotonic,
    fit_probe,
    uniform_brier,
    uniform_expected_ece,
)
from confgrid.analysis.capability.metrics import ece_to_target
from confgrid.analysis.capability.pass_at_k import pass_at_k_row, pass_at_k_unbiased, predicted_pass_at_k
from confgrid.analysis.capability.targets import divergence, sample_matrix, se_by_k
from confgrid.protocols.splits import train_eval_split
from reference.capability_bootstrap import brier_to_target, capability_bootstrap, item_weights, spearman_to_target

RNG = np.random.default_rng(11)


# -- metrics ------------------------------------------------------------------------------------------


def test_brier_ece_spearman_against_references():
    p = RNG.random(200)
    mu = np.clip(p + RNG.normal(0, 0.2, 200), 0, 1)
    assert brier_to_target(p, mu) == pytest.approx(np.mean((p - mu) ** 2), abs=1e-15)
    assert ece_to_target(p, mu) == pytest.approx(M.ece(p, mu, n_bins=10), abs=1e-14)
    assert spearman_to_target(p, mu) == pytest.approx(spearmanr(p, mu).statistic, abs=1e-12)


def test_ece_hand_computed_with_one_in_the_last_bin_and_bin_edges():
    # bins [0, .1) [.1, .2) ... [.9, 1]: 0.0 -> bin 0, 0.1 -> bin 1, 1.0 -> bin 9 (the official code drops it)
    p = np.array([0.0, 0.1, 1.0, 1.0])
    mu = np.array([0.2, 0.1, 0.5, 0.9])
    # bin 0: |0 - .2| * 1; bin 1: 0; bin 9: |1 - .7| * 2  -> (0.2 + 0.6) / 4
    assert ece_to_target(p, mu) == pytest.approx(0.2, abs=1e-15)
    assert np.isnan(ece_to_target([], [])) and np.isnan(brier_to_target([], []))


def test_ece_bins_on_float_edges_equal_metrics_ece():
    """Issue 23 item 2: the capability ECE binned by floor(p * B); 0.3 * 3 = 0.8999999999999999 (isotonic block
    means give such values) times 10 rounds to 9.0, so it left the bin of 0.85 and the ECE was 0.525. With the
    documented edges [k/B, (k+1)/B) it lies in [0.8, 0.9) beside 0.85, by hand |0.875 - 0.5| = 0.375."""
    p, mu = np.array([0.3 * 3, 0.85]), np.array([0.0, 1.0])
    assert p[0] < 0.9
    assert ece_to_target(p, mu) == pytest.approx(0.375, abs=1e-15)
    assert ece_to_target(p, mu) == M.ece(p, mu)
    # values exactly on the edges and one ulp either side, every bin count: the same as metrics.ece
    edges = np.array([0.0, 0.1, 0.2, 0.3, 0.7, 0.9, 1.0])
    vals = np.unique(np.clip(np.r_[edges, np.nextafter(edges, 0), np.nextafter(edges, 1), 0.3 * 3, 0.1 * 3], 0, 1))
    target = RNG.random(vals.size)
    for b in (5, 10, 15, 20):
        assert ece_to_target(vals, target, n_bins=b) == pytest.approx(M.ece(vals, target, n_bins=b), abs=1e-15)
    dv = divergence(np.array([0.3 * 3, 0.9, 0.85]), np.array([0, 0, 0]))
    assert dv[dv["response_target"] == 0]["count"].tolist()[8:] == [2, 1]  # 0.8999.. and 0.85 in [0.8, 0.9)


def test_spearman_ties_constant_and_errors():
    assert spearman_to_target([0.1, 0.1, 0.5, 0.9], [0.0, 0.2, 0.2, 1.0]) == pytest.approx(
        spearmanr([0.1, 0.1, 0.5, 0.9], [0.0, 0.2, 0.2, 1.0]).statistic)
    assert np.isnan(spearman_to_target([0.5, 0.5, 0.5], [0.0, 0.5, 1.0]))
    assert np.isnan(spearman_to_target([0.5], [0.5]))
    with pytest.raises(ValueError, match="estimate must lie in"):
        brier_to_target([1.2], [0.5])
    with pytest.raises(ValueError, match="one length"):
        brier_to_target([0.1, 0.2], [0.5])


def test_paired_bootstrap_equals_a_loop_over_resampled_items():
    n, R, seed = 30, 25, 4
    mu = RNG.random(n)
    a = np.clip(mu + RNG.normal(0, 0.1, n), 0, 1)
    b = RNG.random(n)
    b[3] = np.nan  # undefined on one item: evaluated on the drawn items where it is defined
    res = capability_bootstrap({"a": a, "b": b}, mu, n_resamples=R, seed=seed)
    idx = np.random.default_rng(np.random.SeedSequence(seed)).integers(0, n, size=(R, n))
    for r in range(R):
        for e, est in enumerate((a, b)):
            j = idx[r][~np.isnan(est[idx[r]])]
            ref = [np.mean((est[j] - mu[j]) ** 2), M.ece(est[j], mu[j], n_bins=10), spearmanr(est[j], mu[j]).statistic]
            np.testing.assert_allclose(res.resamples[e, :, r], ref, atol=1e-12)
    assert res.n.tolist() == [30, 29]
    assert np.all(res.lo <= res.point + 1e-12) and np.all(res.point <= res.hi + 1e-12)
    w = item_weights(n, R, seed)
    assert w.shape == (R, n) and np.all(w.sum(axis=1) == n)


# -- pass@k ---------------------------------------------------------------------------------------------


def test_pass_at_k_unbiased_against_binomials():
    n = np.array([20, 20, 20, 5, 3, 10])
    c = np.array([0, 20, 7, 2, 1, 9])
    for k in (1, 4, 16):
        got = pass_at_k_unbiased(n, c, k)
        for i in range(len(n)):
            if k > n[i]:
                assert np.isnan(got[i])
            else:
                ref = 1 - math.comb(int(n[i] - c[i]), k) / math.comb(int(n[i]), k)
                assert got[i] == pytest.approx(ref, abs=1e-12)
    assert pass_at_k_unbiased(np.array([10]), np.array([3]), 1)[0] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pass_at_k_unbiased(n, c, 0)
    with pytest.raises(ValueError, match="c must lie"):
        pass_at_k_unbiased(np.array([3]), np.array([4]), 1)


def test_pass_at_k_row_band_and_mse_by_hand():
    p = np.array([0.5, 0.0, 1.0, np.nan])
    n = np.array([4, 4, 4, 4])
    c = np.array([2, 0, 4, 1])
    r = pass_at_k_row(p, n, c, 2)
    s = np.array([0.75, 0.0, 1.0])
    sigma = math.sqrt(0.75 * 0.25) / 3
    assert r.n_items == 3 and r.predicted == pytest.approx(s.mean())
    assert (r.band_lo, r.band_hi) == pytest.approx((s.mean() - 1.96 * sigma, s.mean() + 1.96 * sigma))
    actual = np.array([1 - math.comb(2, 2) / math.comb(4, 2), 0.0, 1.0])
    assert r.actual == pytest.approx(actual.mean()) and r.mse == pytest.approx(np.mean((s - actual) ** 2))
    assert pass_at_k_row(p, n, c, 8).status == "k_above_samples"
    assert pass_at_k_row(np.array([np.nan]), n[:1], c[:1], 1).status == "no_items"
    np.testing.assert_allclose(predicted_pass_at_k(np.array([0.2]), 3), [1 - 0.8**3])


# -- budget allocation ------------------------------------------------------------------------------------


def _greedy_by_heap(p, budget, n_max):
    """One sample at a time to the item of the largest gain p (1 - p)^k (ties: the lower index)."""
    p = np.clip(p, 1e-6, 1 - 1e-6)
    k = np.zeros(len(p), dtype=int)
    heap = [(-pi, i) for i, pi in enumerate(p)]
    heapq.heapify(heap)
    for _ in range(min(budget, len(p) * n_max)):
        g, i = heapq.heappop(heap)
        k[i] += 1
        if k[i] < n_max:
            heapq.heappush(heap, (-(p[i] * (1 - p[i]) ** k[i]), i))
    return k


@pytest.mark.parametrize("budget", [0, 1, 7, 30, 200])
def test_greedy_allocation_equals_one_sample_at_a_time(budget):
    p = np.r_[RNG.random(12), [0.0, 1.0, 0.5, 0.5]]  # clipped ends and a tie
    got = greedy_allocation(p, budget, n_max=8)
    np.testing.assert_array_equal(got, _greedy_by_heap(p, budget, 8))
    assert got.sum() == min(budget, len(p) * 8) and got.max() <= 8


def test_uniform_allocation_and_solved_share_by_hand():
    np.testing.assert_array_equal(uniform_allocation(3, 5, 4), [4, 4, 4])
    corr = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 1]], dtype=float)
    assert solved_share(corr, np.array([1, 4, 4]), 5) == (pytest.approx(2 / 3), 0.0)
    mean, _ = solved_share(corr, np.array([0, 0, 1]), 400)  # item 3 solved with probability 1/4 per seed
    assert mean == pytest.approx(1 / 12, abs=0.03)
    with pytest.raises(ValueError, match="allocation must lie"):
        solved_share(corr, np.array([5, 0, 0]), 1)


# -- estimators --------------------------------------------------------------------------------------------


def test_isotonic_fit_matches_sklearn_and_clips():
    from sklearn.isotonic import IsotonicRegression

    p = RNG.random(50)
    mu = np.clip(p**2 + RNG.normal(0, 0.05, 50), 0, 1)
    fit = fit_isotonic(np.r_[p, np.nan], np.r_[mu, 0.3])
    ref = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p, mu)
    q = np.array([-0.0, 0.0, 0.1, 0.55, 1.0, np.nan])
    got = fit.predict(q)
    np.testing.assert_allclose(got[:5], ref.predict(q[:5]))
    assert np.isnan(got[5]) and fit.n_train == 50
    assert np.isnan(fit_isotonic([0.3], [1.0]).predict([0.3])).all()


@pytest.mark.parametrize("kind", ["logistic", "ridge"])
def test_probe_recovers_a_linear_signal_chosen_by_cv(kind):
    n, d = 120, 6
    X = RNG.normal(size=(n, d))
    mu = 1 / (1 + np.exp(-(1.5 * X[:, 0] - X[:, 1])))
    fit = fit_probe(X[:80], mu[:80], kind=kind, folds=4, seed=0)
    pred = fit.predict(X[80:])
    assert np.all((pred >= 0) & (pred <= 1))
    assert np.mean((pred - mu[80:]) ** 2) < 0.5 * np.mean((mu[80:].mean() - mu[80:]) ** 2)
    assert len(fit.cv_brier) == 10 and fit.n_train == 80
    with pytest.raises(ValueError, match="probe kind"):
        fit_probe(X, mu, kind="mlp")
    const = fit_probe(X[:10], np.zeros(10), kind="logistic")
    np.testing.assert_allclose(const.predict(X[:3]), 0.0)


def test_uniform_baseline_against_monte_carlo():
    mu = np.array([0.0, 0.3, 1.0])
    np.testing.assert_allclose(uniform_brier(mu), [1 / 3, 1 / 3 - 0.3 + 0.09, 1 / 3])
    u = np.random.default_rng(0).random((200_000, 3))
    np.testing.assert_allclose(((u - mu) ** 2).mean(axis=0), uniform_brier(mu), atol=3e-3)
    assert 0 < uniform_expected_ece(np.full(50, 0.5), draws=20) < 0.5
    assert np.isnan(uniform_expected_ece(np.array([])))


# -- targets and the split ------------------------------------------------------------------------------------


def test_sample_matrix_se_by_k_and_divergence_by_hand():
    s = pd.DataFrame({"item_id": ["b", "b", "b", "a", "a", "a"], "sample_idx": [2, 0, 1, 0, 1, 2],
                      "c": [1.0, 0.0, np.nan, 1.0, 1.0, 0.0]})
    ids, mat = sample_matrix(s, "c")
    assert ids == ["a", "b"]
    np.testing.assert_array_equal(mat, [[1, 1, 0], [0, 0, 1]])  # unparsed (NaN) counts 0
    t = se_by_k(mat)
    assert t["k"].tolist() == [1, 2, 3] and np.isnan(t["mean_se"].iloc[0])
    se3 = [np.std([1, 1, 0], ddof=1) / math.sqrt(3), np.std([0, 0, 1], ddof=1) / math.sqrt(3)]
    assert t["mean_se"].iloc[2] == pytest.approx(np.mean(se3))
    assert t["mean_abs_change"].iloc[0] == pytest.approx((abs(1 - 2 / 3) + abs(0 - 1 / 3)) / 2)
    dv = divergence(np.array([0.0, 0.35, 1.0, 0.95, np.nan]), np.array([0, 0, 1, 0, 1]))
    zero = dv[dv["response_target"] == 0]
    assert zero["count"].tolist() == [1, 0, 0, 1, 0, 0, 0, 0, 0, 1] and zero["n_items"].iloc[0] == 3
    one = dv[dv["response_target"] == 1]
    assert one["count"].sum() == 1 and one["count"].iloc[-1] == 1 and one["max"].iloc[0] == 1.0


def test_split_is_exact_seeded_and_order_free():
    ids = [f"q{i}" for i in range(101)]
    s = train_eval_split(ids, "tqa", 0.3, seed=0)
    assert sum(v == "train" for v in s.values()) == round(0.3 * 101)
    assert s == train_eval_split(list(reversed(ids)), "tqa", 0.3, seed=0)
    assert s != train_eval_split(ids, "tqa", 0.3, seed=1)
    assert s != train_eval_split(ids, "other", 0.3, seed=0)
    with pytest.raises(ValueError, match="train_fraction"):
        train_eval_split(ids, "tqa", 1.0)
    with pytest.raises(ValueError, match="repeat"):
        train_eval_split(["a", "a"], "tqa", 0.5)
