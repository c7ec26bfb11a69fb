"""Distribution-aligned cells of the one evaluator (analysis/reweighting.py): the compositions re-estimated on
every resample, against a brute-force loop and study 001's reference bootstrap."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from confgrid.analysis.ace.da import Strata, da_weights
from confgrid.analysis.ace.weighted import weighted_brier, weighted_ece
from confgrid.analysis.bootstrap import paired_bootstrap, resample_counts
from confgrid.analysis.reweighting import Reweight, compositions, omega
from reference import ace_cell_bootstrap as REF


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    za, zb = (rng.random(n) < 0.8).astype(float), (rng.random(n) < 0.5).astype(float)
    return np.round(rng.random(n), 1), za, np.round(rng.random(n), 2), zb


def test_reweight_rejects_bad_strata_and_targets():
    k = np.array([0, 1, 1])
    with pytest.raises(ValueError, match="strata must lie in -1 .. 1"):
        Reweight(np.array([0, 2, 1]), 2, targets=(k,))
    with pytest.raises(ValueError, match="either target strata"):
        Reweight(k, 2)
    with pytest.raises(ValueError, match="either target strata"):
        Reweight(k, 2, targets=(k,), fixed=np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        Reweight(k, 2, targets=(np.array([0, 1]),))
    with pytest.raises(ValueError, match=r"fixed must have shape \(2,\)"):
        Reweight(k, 2, fixed=np.array([1.0]))
    with pytest.raises(ValueError, match="n_strata must be >= 1"):
        Reweight(k, 0, targets=(k,))


def test_omega_is_q_over_p_by_hand_and_nan_without_support():
    rw = Reweight(np.array([1, 1, 1, 0]), 2, targets=(np.array([1, 0, 1, 0]),))
    # A: 3 right of 4 (p = 1/4, 3/4), B: 2 of 4 (q = 1/2, 1/2): wrong rows weigh 2, right rows 2/3
    np.testing.assert_allclose(omega(np.ones((1, 4)), rw), [[2.0, 2 / 3]], rtol=0, atol=1e-15)
    # a resample without A's wrong row: q_0 = 1/2 > 0 = p_0: undefined
    assert np.isnan(omega(np.array([[1.0, 1.0, 2.0, 0.0]]), rw)).all()
    # a stratum with neither mass nor rows weighs 0, no nan
    rw2 = Reweight(np.array([1, 1, 0, 0]), 3, fixed=np.array([0.5, 0.5, 0.0]))
    np.testing.assert_allclose(omega(np.ones((1, 4)), rw2), [[1.0, 1.0, 0.0]])
    # items outside the cell (-1) do not count
    np.testing.assert_allclose(compositions(np.ones((1, 3)), np.array([0, -1, 1]), 2), [[0.5, 0.5]])


def test_omega_equals_study_001_reference():
    ca, za, cb, zb = _data(60, 1)
    st = Strata((0.0, 1.0))
    ka, kb = st.assign(za), st.assign(zb)
    W = resample_counts(60, 50, 3)
    ref = REF._omega(W @ np.eye(2)[ka] / 60, W @ np.eye(2)[kb] / 60)
    got = omega(W, Reweight(ka, 2, targets=(kb,)))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)


def _brute(conf, z_self, z_target, W, metric, mean_with=None, fixed=None):
    """Per resample: repeat the rows, recompute the DA weights from the resample's own compositions (study 001's
    da_weights), then the weighted metric (analysis/ace/weighted.py)."""
    st = Strata((0.0, 1.0))
    out = np.empty(W.shape[0])
    for r in range(W.shape[0]):
        rep = np.repeat(np.arange(conf.size), W[r].astype(int))
        zs = z_self[rep]
        if fixed is not None:
            q = fixed
        else:
            q = np.bincount(st.assign(z_target[rep]), minlength=2) / rep.size
            if mean_with is not None:
                q = 0.5 * (q + np.bincount(st.assign(mean_with[rep]), minlength=2) / rep.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = da_weights(zs, q, st).weights
            if not np.isfinite(w).all():
                out[r] = np.nan
                continue
            f = weighted_ece if metric == "ece" else weighted_brier
            out[r] = f(conf[rep], zs, w)
    return out


@pytest.mark.parametrize("kind", ["other", "mean", "fixed"])
def test_reweighted_cell_equals_a_brute_force_loop(kind):
    ca, za, cb, zb = _data(30, 2)
    st = Strata((0.0, 1.0))
    ka, kb = st.assign(za), st.assign(zb)
    rw = {"other": Reweight(ka, 2, targets=(kb,)), "mean": Reweight(ka, 2, targets=(ka, kb)),
          "fixed": Reweight(ka, 2, fixed=np.array([0.4, 0.6]))}[kind]
    res = paired_bootstrap(np.vstack([ca, ca]), np.vstack([za, za]), ["ece", "brier", "auroc"], n_resamples=60,
                           seed=5, reweight=[rw, None])
    W = resample_counts(30, 60, 5)
    for j, m in enumerate(["ece", "brier"]):
        # "mean": q = (p_B + p_A) / 2 (z_target B, mean_with A)
        ref = _brute(ca, za, zb, W, m, mean_with=za if kind == "mean" else None,
                     fixed=np.array([0.4, 0.6]) if kind == "fixed" else None)
        np.testing.assert_allclose(res.resamples[0, j], ref, rtol=1e-12, atol=1e-12)
        point = _brute(ca, za, zb, np.ones((1, 30)), m, mean_with=za if kind == "mean" else None,
                       fixed=np.array([0.4, 0.6]) if kind == "fixed" else None)[0]
        assert res.point[0, j] == pytest.approx(point, abs=1e-13)
    # AUROC takes no real weights: undefined on the reweighted cell, untouched on the plain one
    assert np.isnan(res.resamples[0, 2]).all() and np.isnan(res.point[0, 2])
    assert np.isfinite(res.resamples[1, 2]).sum() > 50


def test_unsupported_resamples_are_nan_and_counted():
    za = np.r_[np.ones(7), 0.0]  # one wrong row: resamples without it cannot be reweighted to a 50% target
    conf = np.linspace(0.2, 0.9, 8)
    rw = Reweight(za.astype(np.int64), 2, fixed=np.array([0.5, 0.5]))
    res = paired_bootstrap(conf[None, :], za[None, :], ["ece"], n_resamples=200, seed=1, reweight=[rw])
    missing = resample_counts(8, 200, 1)[:, 7] == 0
    assert missing.any() and (np.isnan(res.resamples[0, 0]) == missing).all()


def test_reweight_needs_one_entry_per_signal():
    with pytest.raises(ValueError, match="one entry"):
        paired_bootstrap(np.full((2, 4), 0.5), np.ones((2, 4)), ["ece"], n_resamples=5, reweight=[None])


def test_identical_cells_are_evaluated_once():
    """A unit may hold the same cell twice (an ACE view's unweighted side is the raw cell): it is computed once
    and copied; the same values under another reweighting, or on another support, are not the same cell."""
    from confgrid.analysis.fused import prepare

    ca, za, cb, zb = _data(20, 4)
    ka, kb = za.astype(np.int64), zb.astype(np.int64)
    rw = Reweight(ka, 2, targets=(kb,))
    conf, corr = np.vstack([ca, ca, ca, ca, ca]), np.vstack([za, za, za, za, za])
    masks = np.ones((5, 20), dtype=bool)
    masks[4, :5] = False
    reweight = [None, None, rw, rw, None]
    prep = prepare(conf, corr, 10, masks, reweight)
    assert prep.same_as == [None, 0, None, 2, None]
    res = paired_bootstrap(conf, corr, ["ece", "brier", "auroc"], n_resamples=40, seed=2, masks=masks,
                           reweight=reweight)
    assert np.array_equal(res.resamples[1], res.resamples[0], equal_nan=True)
    assert np.array_equal(res.resamples[3], res.resamples[2], equal_nan=True)
    alone = paired_bootstrap(conf[4:], corr[4:], ["ece", "brier", "auroc"], n_resamples=40, seed=2,
                             masks=masks[4:])
    assert np.array_equal(res.resamples[4], alone.resamples[0], equal_nan=True)
    assert not np.allclose(res.resamples[4, 0], res.resamples[0, 0])
