"""Calibration transfer (analysis/transfer.py) on synthetic data with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from confgrid.analysis import transfer as T


def synth(n=400, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    y = (rng.random(n) < p).astype(int)
    return p, y, rng


def test_identical_scores_zero_penalty():
    p, y, _ = synth(n=150)
    df = T.transfer_penalties(p, p, y, n_splits=2)
    assert len(df) == 2 * 2 * 2  # methods x directions x splits
    assert set(df.direction) == {"A->B", "B->A"}
    np.testing.assert_array_equal(df.penalty.to_numpy(), 0.0)


def test_monotone_distortion():
    # Within a context, isotonic recalibration removes any monotone change of scale:
    # the native Brier score is the same in both contexts. A map fitted on one
    # scale and applied to the other scale does not carry over (positive penalty).
    p, y, _ = synth()
    q = p**3
    df = T.transfer_penalties(p, q, y, contexts=("bare", "guess"), methods=["isotonic"], n_splits=3)
    nat = df.pivot(index="split", columns="target", values="brier_native")
    np.testing.assert_allclose(nat["bare"], nat["guess"], rtol=1e-3)  # up to linear interpolation between thresholds
    assert (df.penalty > 0.01).all()
    # a monotone map applied to both contexts' scores keeps the penalty at 0
    df2 = T.transfer_penalties(q, q, y, methods=["isotonic"], n_splits=2)
    assert (df2.penalty == 0).all()


def test_scramble_positive_penalty_both_methods():
    p, y, rng = synth(n=300, seed=1)
    s = rng.permutation(p)  # scores unrelated to correctness in context B
    df = T.transfer_penalties(p, s, y, n_splits=2)
    summ = T.summarize_transfer(df)
    # B's scores carry no information: a map fitted on A and applied to B is worse than B's own
    ab = summ[summ.direction == "A->B"]
    assert (ab.mean_penalty > 0.02).all() and (ab.frac_positive == 1.0).all()
    assert list(summ.columns[:4]) == ["method", "direction", "mean_penalty", "frac_positive"]


def test_cross_fit_matches_manual_folds():
    p, y, _ = synth(n=53, seed=2)
    folds = T._folds(53, 5, seed=7, split=1)
    perm = np.random.default_rng(np.random.SeedSequence([7, 1])).permutation(53)
    for f, ref in zip(folds, np.array_split(perm, 5)):
        np.testing.assert_array_equal(f, ref)
    from sklearn.isotonic import IsotonicRegression

    pred = T.cross_fit("isotonic", p, p**2, y, folds)
    for k, test in enumerate(folds):
        train = np.setdiff1d(np.arange(53), test)
        iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[train], y[train])
        np.testing.assert_allclose(pred[test], iso.predict(p[test] ** 2), rtol=0, atol=0)


def test_platt_on_logit_with_clipping():
    p, y, _ = synth(n=200, seed=3)
    p[:3] = [0.0, 1.0, 1.0]  # clipped to eps, 1 - eps before the logit
    f = T.fit_map("platt", p, y)
    out = f(np.array([0.0, 0.5, 1.0]))
    assert np.all(np.isfinite(out)) and out[0] < out[1] < out[2]
    from sklearn.linear_model import LogisticRegression

    x = np.clip(p, T.PLATT_EPS, 1 - T.PLATT_EPS)
    lr = LogisticRegression(C=T.PLATT_C, solver="newton-cg", max_iter=1000).fit(np.log(x / (1 - x))[:, None], y)
    np.testing.assert_allclose(out[1], lr.predict_proba([[0.0]])[0, 1], rtol=1e-12)


def test_one_class_training_fold_falls_back_to_mean():
    f = T.fit_map("platt", np.array([0.2, 0.4, 0.9]), np.array([1, 1, 1]))
    np.testing.assert_array_equal(f(np.array([0.1, 0.7])), [1.0, 1.0])
    # a setting where one fold's training data has a single class
    p = np.linspace(0.05, 0.95, 10)
    y = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    df = T.transfer_penalties(p, p[::-1], y, n_folds=5, n_splits=2)
    assert np.isfinite(df.penalty).all()


def test_errors():
    with pytest.raises(ValueError, match="at least n_folds = 5"):
        T.transfer_penalties([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="binary"):
        T.transfer_penalties(np.full(6, 0.5), np.full(6, 0.5), np.full(6, 0.5))
    with pytest.raises(ValueError, match="method"):
        T.transfer_penalties(np.full(6, 0.5), np.full(6, 0.5), [0, 1] * 3, methods=["beta"])
    with pytest.raises(ValueError, match=r"confidence\[0\]"):
        T.transfer_penalties(np.full(6, 1.5), np.full(6, 0.5), [0, 1] * 3)


def test_seed_determinism():
    p, y, rng = synth(n=60, seed=4)
    s = np.clip(p + 0.2 * rng.standard_normal(60), 0, 1)
    a = T.transfer_penalties(p, s, y, n_splits=2, seed=3)
    b = T.transfer_penalties(p, s, y, n_splits=2, seed=3)
    c = T.transfer_penalties(p, s, y, n_splits=2, seed=4)
    assert a.equals(b) and not a.equals(c)
