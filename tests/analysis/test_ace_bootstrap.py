"""Paired bootstrap of the ACE gaps: the vectorized path against a per-resample loop, seeds, retention, strict."""

from __future__ import annotations

import time
import warnings

import ace_example as EX
import numpy as np
import pandas as pd
import pytest
from confgrid.analysis.ace import ace_tables
from confgrid.analysis.ace import bootstrap as AB
from confgrid.analysis.ace import weighted as ACW
from confgrid.analysis.ace import candidates as CA
from confgrid.analysis.ace import frame as F
from confgrid.analysis.ace import views as V
from confgrid.analysis.ace.units import ace_unit
from confgrid.analysis.bootstrap import resample_counts
from confgrid.analysis.compare import retention_probability
from confgrid.analysis.evaluation import bootstrap_unit
from reference import ace_cell_bootstrap as REF


def _cell(conf_a, z_a, conf_b, z_b):
    n = len(conf_a)
    return F.Cell(F.Pair("A", "B"), "d", "m", np.array([f"{i:03d}" for i in range(n)], dtype=object),
                  *(np.asarray(x, dtype=float) for x in (conf_a, z_a, conf_b, z_b)))


def _resampled(cell: F.Cell, rep: np.ndarray) -> F.Cell:
    return F.Cell(cell.pair, cell.dataset, cell.method, cell.item_ids[rep], cell.conf_a[rep], cell.correct_a[rep],
                  cell.conf_b[rep], cell.correct_b[rep])


def _resampled_ca(ca: CA.CACell, rep: np.ndarray) -> CA.CACell:
    rows = [(j, r) for j, i in enumerate(rep) for r in np.flatnonzero(ca.item_index == i)]
    take = np.array([r for _, r in rows], dtype=np.int64)
    return CA.CACell(np.array([j for j, _ in rows], dtype=np.int64), ca.candidate[take], ca.label[take],
                     ca.signal_a[take], ca.signal_b[take], ca.own_a[take], ca.own_b[take], rep.size)


def loop_bootstrap(cell, point, opts, ca, sp, n_resamples, seed, metrics=ACW.METRICS):
    """Brute force: rebuild every resample's rows and call the point-estimate functions on them."""
    W = resample_counts(cell.n, n_resamples, seed)
    gaps, pref = {}, {d.rater: np.empty(n_resamples) for d in sp}
    for r in range(n_resamples):
        rep = np.repeat(np.arange(cell.n), W[r].astype(int))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pv = V.cell_views(_resampled(cell, rep), metrics, ("ia", "da"), opts,
                              strata=point.strata, direction=point.direction)
            values = list(pv.values) + (CA.ca_views(_resampled_ca(ca, rep), metrics, opts.n_bins) if ca else [])
        for v in values:
            gaps.setdefault((v.view, v.metric), np.empty(n_resamples))[r] = v.gap
        for d in sp:
            w = W[r, d.item_index]
            pref[d.rater][r] = np.sum(w * d.diff) / w.sum() if w.sum() else np.nan
    return gaps, pref


def _compare(cell, opts=V.DEFAULT_OPTIONS, ca=None, n_resamples=40, seed=11):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        point = V.cell_views(cell, opts=opts)
    sp = CA.self_preference_data(ca, cell) if ca is not None else ()
    fast = REF.cell_bootstrap(cell, point, opts=opts, ca=ca, self_pref=sp, n_resamples=n_resamples, seed=seed)
    gaps, pref = loop_bootstrap(cell, point, opts, ca, sp, n_resamples, seed)
    assert set(fast.gaps) == set(gaps)
    for key, ref in gaps.items():
        np.testing.assert_allclose(fast.gaps[key], ref, rtol=1e-12, atol=1e-12, err_msg=str(key))
    for rater, ref in pref.items():
        np.testing.assert_allclose(fast.self_preference[rater], ref, rtol=1e-12, atol=1e-12)
    # the one evaluator (analysis/ace/units.py -> analysis/evaluation.py): the same gaps, resample by resample
    unit = ace_unit(cell, point, ACW.METRICS, ("ia", "da"), opts, ca, n_resamples, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap_unit(unit, ACW.METRICS, n_resamples)
    cell_of = {(unit.names[a], unit.info[b]["view"]): (ca_, cb_) for a, b, ca_, cb_ in unit.pairs}
    assert {v for _, v in cell_of} == {v for v, _ in gaps}
    for (view, metric), ref in gaps.items():
        ca_, cb_ = cell_of[(cell.pair.a, view)]
        j = list(res.metrics).index(metric)
        np.testing.assert_allclose(res.resamples[ca_, j] - res.resamples[cb_, j], ref, rtol=1e-12, atol=1e-12,
                                   err_msg=f"one evaluator {view} {metric}")
    return fast


def test_vectorized_equals_loop_on_the_example_with_candidates():
    rows = EX.rows()
    cell = F.matched_cells(rows).cells[0]
    ca = CA.ca_cell(cell, CA.validate_ratings(EX.ratings(CA.candidate_pool(rows, EX.normalize))))
    fast = _compare(cell, ca=ca, n_resamples=30)
    assert ("ca", "ece") in fast.gaps and set(fast.self_preference) == {"A", "B"}


def test_vectorized_equals_loop_with_graded_levels_and_a_declared_target():
    rng = np.random.default_rng(2)
    n = 25
    za, zb = rng.choice([0.0, 0.5, 1.0], n, p=[0.2, 0.3, 0.5]), rng.choice([0.0, 0.5, 1.0], n, p=[0.5, 0.3, 0.2])
    cell = _cell(np.round(rng.random(n), 1), za, np.round(rng.random(n), 1), zb)
    fast = _compare(cell)
    assert ("ia_partial", "ece") in fast.gaps
    zb2 = (rng.random(n) < 0.4).astype(float)
    _compare(_cell(rng.random(n), (rng.random(n) < 0.7).astype(float), rng.random(n), zb2),
             opts=V.ViewOptions(target=0.55, ia_strata=None))


def test_vectorized_equals_loop_with_equal_width_strata():
    rng = np.random.default_rng(3)
    n = 30
    cell = _cell(rng.random(n), rng.random(n) ** 0.5, rng.random(n), rng.random(n) ** 2)  # > 10 levels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert V.cell_views(cell).strata.levels is None
    _compare(cell, opts=V.ViewOptions(ia_strata=4))


def test_resamples_without_support_are_nan_in_both_paths():
    # A is wrong on one item of 8: resamples that miss it have a_A = 1 and no DA weights A -> B
    za, zb = np.r_[np.ones(7), 0.0], np.r_[np.ones(4), np.zeros(4)]
    fast = _compare(_cell(np.full(8, 0.9), za, np.linspace(0.3, 0.9, 8), zb), n_resamples=80)
    undefined = np.isnan(fast.gaps[("da_a_to_b", "ece")])
    assert 0 < undefined.sum() < 80 and np.isnan(fast.gaps[("da", "ece")]).sum() == undefined.sum()


def test_same_seed_same_draws_and_different_seed_different_draws():
    rows = EX.rows()
    t1 = ace_tables(rows, n_bootstrap=100, seed=7)
    t2 = ace_tables(rows.sample(frac=1.0, random_state=1), n_bootstrap=100, seed=7)
    pd.testing.assert_frame_equal(t1.bootstrap, t2.bootstrap)
    t3 = ace_tables(rows, n_bootstrap=100, seed=8)
    assert not np.allclose(t1.bootstrap["lo"], t3.bootstrap["lo"])
    cell = F.matched_cells(rows).cells[0]
    assert t1.bootstrap["seed"].iloc[0] == AB.cell_seed(cell, 7)


def test_fast_enough_for_2000_resamples_of_300_items():
    rng = np.random.default_rng(4)
    n = 300
    cell = _cell(rng.random(n), (rng.random(n) < 0.8).astype(float), rng.random(n), (rng.random(n) < 0.5).astype(float))
    point = V.cell_views(cell)
    REF.cell_bootstrap(cell, point, n_resamples=50, seed=1)  # warm up
    t = time.perf_counter()
    b = REF.cell_bootstrap(cell, point, n_resamples=2000, seed=1)
    assert time.perf_counter() - t < 1.0
    assert b.gaps[("raw", "ece")].shape == (2000,)


@pytest.mark.filterwarnings("ignore::UserWarning")  # empty IA parts, low ESS: incidental here
def test_retention_probability_and_strict_criterion_by_construction():
    # 400 items: A right on 360 with constant confidence 0.95 (raw ECE 0.05); B right on 200, confidence
    # 0.9 when right and 0.6 when wrong (raw ECE 0.35). DA puts A at B's accuracy: ECE_A = |0.5 - 0.95| = 0.45
    # in every resample, so the DA gap ~ +0.10 against a raw gap ~ -0.30: a reversal both intervals resolve.
    n = 400
    za, zb = (np.arange(n) < 360).astype(float), (np.arange(n) < 200).astype(float)
    rows = pd.concat([
        pd.DataFrame(dict(model="A", dataset="d", method="m", item_id=range(n), signal=0.95, correct=za)),
        pd.DataFrame(dict(model="B", dataset="d", method="m", item_id=range(n), signal=np.where(zb == 1, 0.9, 0.6),
                          correct=zb)),
    ])
    t = ace_tables(rows, views=("raw", "da"), n_bootstrap=500, seed=0)
    row = t.bootstrap.query("view == 'da' and metric == 'ece'").iloc[0]
    assert row["gap"] == pytest.approx(0.45 - 0.35, abs=1e-12) and row["raw_gap"] == pytest.approx(-0.3, abs=1e-12)
    assert row["reversal"] and row["strict"] and row["retention_prob"] == 1.0
    assert row["lo"] > 0 and row["raw_hi"] < 0
    ret = t.retention.query("view == 'da' and metric == 'ece'").iloc[0]
    assert ret["retention_prob"] == 1.0 and ret["n_defined"] == 500 and ret["strict"]
    # the 12-item example: reversals by point estimate, but 12 items resolve nothing
    ex = ace_tables(EX.rows(), n_bootstrap=500, seed=0)
    assert len(ex.retention) > 0 and not ex.retention["strict"].any()
    p = ex.retention["retention_prob"]
    assert ((p >= 0) & (p <= 1)).all() and (p < 1).any()
    assert ex.bootstrap_summary.set_index("metric").loc["ece", "n_strict"] == 0


def test_strict_reversal_and_retention_helpers():
    assert AB.strict_reversal((0.1, 0.05, 0.15), (-0.1, -0.2, -0.01))
    assert not AB.strict_reversal((0.1, 0.05, 0.15), (-0.1, -0.2, 0.01))  # aligned interval holds 0
    assert not AB.strict_reversal((0.1, 0.05, 0.15), (0.1, 0.02, 0.2))  # no reversal
    assert not AB.strict_reversal((0.1, 0.05, 0.15), (0.0, -0.2, -0.01))  # a zero gap is no reversal
    assert not AB.strict_reversal((0.1, np.nan, np.nan), (-0.1, -0.2, -0.01))
    assert retention_probability([1.0, -1.0, 0.0, 2.0], [-1.0, -1.0, -1.0, 3.0]) == (0.25, 4)
    assert np.isnan(retention_probability([np.nan], [1.0])[0])
