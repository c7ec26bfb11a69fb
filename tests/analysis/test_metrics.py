"""Independent checks of confgrid.analysis.metrics (study 000, Appendix A)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from confgrid.analysis import metrics as M
from confgrid.analysis import registry as REG
from confgrid.analysis.metrics import UndefinedMetricWarning
from metric_data import FAST, datasets

BIN_COUNTS = [5, 10, 15, 20, 30, 50]
ALL = ["ece", "auroc", "aurc", "brier"]


# ---------------------------------------------------------------------------
# brute-force reference implementations (plain Python, straight from the text)
# ---------------------------------------------------------------------------


def ece_loop(conf, corr, B):
    """Bins [k/B, (k+1)/B), last bin includes 1.0; edges are the Python floats k/B."""
    n = len(conf)
    members = [[] for _ in range(B)]
    for c, y in zip(conf, corr):
        placed = False
        for k in range(B):
            lo, hi = k / B, (k + 1) / B
            if lo <= c < hi or (k == B - 1 and c == 1.0):
                members[k].append((c, y))
                placed = True
                break
        assert placed, c
    total = 0.0
    for mem in members:
        if mem:
            acc = sum(y for _, y in mem) / len(mem)
            cb = sum(c for c, _ in mem) / len(mem)
            total += len(mem) / n * abs(acc - cb)
    return total


def aurc_fixed_order(corr_in_order):
    errs, total = 0.0, 0.0
    for k, y in enumerate(corr_in_order, start=1):
        errs += 1.0 - y
        total += errs / k
    return total / len(corr_in_order)


def aurc_all_orderings(conf, corr):
    """Average AURC over every ordering of the tied answers (uniform over orderings)."""
    groups = {}
    for c, y in zip(conf, corr):
        groups.setdefault(c, []).append(y)
    keys = sorted(groups, reverse=True)
    per_group = [list(itertools.permutations(groups[k])) for k in keys]
    vals = [aurc_fixed_order([y for perm in combo for y in perm]) for combo in itertools.product(*per_group)]
    return sum(vals) / len(vals)


def auroc_pairs(conf, corr):
    num = den = 0.0
    for ci, yi in zip(conf, corr):
        for cj, yj in zip(conf, corr):
            w = yi * (1 - yj)
            den += w
            num += w * (1.0 if ci > cj else 0.5 if ci == cj else 0.0)
    return num / den


def call(name, c, y, **kw):
    return REG.get_metric(name).func(c, y, **kw)


# ---------------------------------------------------------------------------
# ECE
# ---------------------------------------------------------------------------


def test_ece_hand_computed():
    # B = 10. confidence 0.0 -> bin 0, 0.1 -> bin 1 (left edge), 0.5 -> bin 5,
    # 1.0 -> bin 9 (last bin includes 1.0).
    conf = [0.0, 0.0, 0.1, 0.1, 0.5, 0.5, 1.0, 1.0]
    corr = [0, 1, 0, 0, 1, 1, 1, 0]
    # bin 0: n=2 acc=1/2 conf=0   |.5-0|=.5   weight 2/8 -> 0.125
    # bin 1: n=2 acc=0   conf=.1  |0-.1|=.1   weight 2/8 -> 0.025
    # bin 5: n=2 acc=1   conf=.5  |1-.5|=.5   weight 2/8 -> 0.125
    # bin 9: n=2 acc=1/2 conf=1   |.5-1|=.5   weight 2/8 -> 0.125
    # ECE = 0.125 + 0.025 + 0.125 + 0.125 = 0.4
    assert M.ece(conf, corr) == pytest.approx(0.4, abs=1e-15)
    # B = 2: bin 0 = [0, .5) holds 0,0,.1,.1 (acc 1/4, conf .05) -> 4/8*.2 = 0.1
    #        bin 1 = [.5, 1] holds .5,.5,1,1 (acc 3/4, conf .75) -> 0
    assert M.ece(conf, corr, n_bins=2) == pytest.approx(0.1, abs=1e-15)


@pytest.mark.parametrize("B", BIN_COUNTS)
def test_bin_edges_land_in_bin_starting_there(B):
    for k in range(B + 1):
        assert M.bin_indices(np.array([k / B]), B)[0] == min(k, B - 1), (B, k)
    # decimal literals that are bin edges for this B (0.1, 0.2, 0.3, ... when 10 | B)
    for d in range(11):
        c = float(f"0.{d}") if d < 10 else 1.0
        if (d * B) % 10 == 0:
            assert M.bin_indices(np.array([c]), B)[0] == min(d * B // 10, B - 1), (B, c)
    # just below an edge stays in the previous bin
    for k in range(1, B):
        assert M.bin_indices(np.array([np.nextafter(k / B, 0)]), B)[0] == k - 1


def test_known_float_traps():
    # the naive recipes fail at real edges: np.linspace(0, 1, 11)[3] is 0.30000000000000004
    # (so searchsorted on linspace edges would put 0.3 in bin 2), and floor(0.58 * 50) == 28
    assert np.linspace(0, 1, 11)[3] != 0.3 and math.floor(0.58 * 50) == 28
    got = M.bin_indices(np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]), 10)
    assert got.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    assert M.bin_indices(np.array([0.58, 0.7, 0.82, 0.94]), 50).tolist() == [29, 35, 41, 47]
    assert M.bin_indices(np.array([0.15, 0.3, 0.35, 0.6, 0.85]), 20).tolist() == [3, 6, 7, 12, 17]


@pytest.mark.parametrize("B", BIN_COUNTS)
def test_ece_matches_loop_random_with_ties_and_edges(B):
    rng = np.random.default_rng(B)
    for trial in range(5):
        n = int(rng.integers(1, 80))
        pool = np.r_[np.arange(B + 1) / B, np.round(rng.random(20), 2), [0.0, 1.0, 0.3, 0.7]]
        conf = rng.choice(pool, size=n)
        corr = rng.integers(0, 2, size=n).astype(float) if trial % 2 else rng.random(n)
        assert M.ece(conf, corr, n_bins=B) == pytest.approx(ece_loop(conf.tolist(), corr.tolist(), B), abs=1e-12)


def test_ece_bad_n_bins():
    with pytest.raises(ValueError, match="n_bins"):
        M.ece([0.5], [1], n_bins=0)


# ---------------------------------------------------------------------------
# AUROC
# ---------------------------------------------------------------------------


def test_auroc_vs_sklearn_many_ties():
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = int(rng.integers(2, 300))
        corr = rng.integers(0, 2, size=n)
        if corr.min() == corr.max():
            corr[0] = 1 - corr[0]
        conf = np.clip(np.round(0.3 * corr + 0.7 * rng.random(n), 1), 0, 1)
        assert M.auroc(conf, corr) == pytest.approx(roc_auc_score(corr, conf), abs=1e-12)


def test_auroc_graded_soft_labels_vs_pairs():
    rng = np.random.default_rng(2)
    conf = np.round(rng.random(25), 1)
    corr = rng.random(25)
    assert M.auroc(conf, corr) == pytest.approx(auroc_pairs(conf.tolist(), corr.tolist()), abs=1e-12)


# ---------------------------------------------------------------------------
# AURC
# ---------------------------------------------------------------------------


def test_aurc_hand_values():
    # no ties: risks 0, 1/2, 1/3
    assert M.aurc([0.9, 0.5, 0.1], [1, 0, 1]) == pytest.approx((0 + 1 / 2 + 1 / 3) / 3, abs=1e-15)
    # all tied, one wrong of two: expected risk 1/2 at k=1 and 1/2 at k=2
    assert M.aurc([0.5, 0.5], [1, 0]) == pytest.approx(0.5, abs=1e-15)
    # all correct -> 0, all wrong -> 1 (defined, no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert M.aurc([0.2, 0.9, 0.9], [1, 1, 1]) == 0.0
        assert M.aurc([0.2, 0.9, 0.9], [0, 0, 0]) == pytest.approx(1.0, abs=1e-15)


def test_aurc_vs_all_orderings_of_ties():
    rng = np.random.default_rng(3)
    for _ in range(25):
        n = int(rng.integers(1, 8))
        conf = rng.choice([0.0, 0.2, 0.5, 1.0], size=n)
        corr = rng.integers(0, 2, size=n).astype(float)
        if rng.random() < 0.3:
            corr = np.round(rng.random(n), 2)  # graded
        assert M.aurc(conf, corr) == pytest.approx(aurc_all_orderings(conf.tolist(), corr.tolist()), abs=1e-12)


def test_aurc_input_order_invariant_with_ties():
    rng = np.random.default_rng(4)
    conf = np.round(rng.random(200), 1)
    corr = rng.integers(0, 2, 200)
    ref = M.aurc(conf, corr)
    for _ in range(5):
        p = rng.permutation(200)
        assert M.aurc(conf[p], corr[p]) == pytest.approx(ref, abs=1e-13)


def test_aurc_large_n_precision():
    # no ties: closed form reduces to the fixed-order loop
    rng = np.random.default_rng(5)
    conf = rng.random(5000)
    corr = (rng.random(5000) < conf).astype(float)
    order = np.argsort(-conf)
    assert M.aurc(conf, corr) == pytest.approx(aurc_fixed_order(corr[order].tolist()), abs=1e-12)


# ---------------------------------------------------------------------------
# Brier
# ---------------------------------------------------------------------------


def test_brier_hand():
    # (0.9-1)^2 + (0.2-0)^2 + (0.5-1)^2 = .01 + .04 + .25 = .30 ; /3
    assert M.brier([0.9, 0.2, 0.5], [1, 0, 1]) == pytest.approx(0.1, abs=1e-15)


# ---------------------------------------------------------------------------
# edge cases
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_empty_is_nan_with_warning(name):
    with pytest.warns(UndefinedMetricWarning, match="no rows"):
        assert math.isnan(call(name, [], []))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", ["conf", "corr"])
def test_non_finite_is_nan_with_warning(name, bad):
    c, y = [0.2, 0.5, 0.9], [0.0, 1.0, 1.0]
    if bad == "conf":
        c[1] = float("nan")
    else:
        y[2] = float("inf")
    with pytest.warns(UndefinedMetricWarning, match="non-finite"):
        assert math.isnan(call(name, c, y))


@pytest.mark.parametrize("corr", [[1, 1, 1], [0, 0, 0]])
def test_auroc_one_class_nan_with_warning(corr):
    with pytest.warns(UndefinedMetricWarning, match="one class"):
        assert math.isnan(M.auroc([0.1, 0.5, 0.9], corr))


@pytest.mark.parametrize("name", ALL)
def test_out_of_range_confidence_message(name):
    with pytest.raises(ValueError) as exc:
        call(name, [0.5, 0.2, 1.5, -0.1], [1, 0, 1, 0])
    msg = str(exc.value)
    assert "confidence" in msg and "1.5" in msg and "[2]" in msg and "[0, 1]" in msg


def test_out_of_range_correct_message():
    with pytest.raises(ValueError) as exc:
        M.ece([0.5, 0.2], [1, 2])
    msg = str(exc.value)
    assert "correct" in msg and "2.0" in msg and "[1]" in msg and "[0, 1]" in msg


def test_shape_errors():
    with pytest.raises(ValueError, match="same length"):
        M.aurc([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="1-D"):
        M.aurc([[0.1, 0.2]], [[1, 0]])


def test_confidence_exactly_zero_and_one():
    conf, corr = [0.0, 1.0, 1.0, 0.0], [0, 1, 1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert M.ece(conf, corr) == pytest.approx(0.25)  # bin 0: n=2, acc .5, conf 0 -> 2/4*.5
        assert M.auroc(conf, corr) == pytest.approx(roc_auc_score(corr, conf))
        assert M.brier(conf, corr) == pytest.approx(0.25)
        assert M.aurc(conf, corr) == pytest.approx(aurc_all_orderings(conf, corr), abs=1e-12)


def test_bool_inputs_accepted():
    assert M.auroc(np.array([0.9, 0.1]), np.array([True, False])) == 1.0


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def test_registry():
    assert set(ALL) <= set(REG.METRICS)
    assert REG.get_metric("auroc").lower_is_better is False
    for n in ("ece", "aurc", "brier"):
        assert REG.get_metric(n).lower_is_better is True
    with pytest.raises(KeyError) as exc:
        REG.get_metric("nope")
    assert "nope" in str(exc.value) and "aurc" in str(exc.value)
    with pytest.raises(ValueError):
        REG.get_metric("nope")
    with pytest.raises(ValueError, match="already registered"):
        REG.register_metric(REG.MetricInfo("ece", M.ece, True, "dup"))
    with pytest.raises(Exception):
        REG.METRICS["ece"].name = "x"  # frozen


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------

@FAST
@given(data=datasets(), seed=st.integers(0, 2**32 - 1))
def test_permutation_invariance_all_metrics(data, seed):
    conf, corr = data
    p = np.random.default_rng(seed).permutation(conf.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for name in ALL:
            a, b = call(name, conf, corr), call(name, conf[p], corr[p])
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12), name


@FAST
@given(data=datasets(min_size=2))
def test_auroc_monotone_transform_and_sklearn(data):
    conf, corr = data
    if corr.min() == corr.max():
        return
    a = M.auroc(conf, corr)
    assert a == pytest.approx(roc_auc_score(corr, conf), abs=1e-12)
    # strictly monotone maps keep the order and the ties, as long as float rounding
    # does not merge distinct values (checked: same number of distinct values)
    for f, expected in ((lambda c: c**3, a), (lambda c: 0.5 * c + 0.25, a), (lambda c: 1.0 - c, 1.0 - a)):
        t = f(conf)
        if np.unique(t).size == np.unique(conf).size:
            assert M.auroc(t, corr) == pytest.approx(expected, abs=1e-12)


def test_auroc_cube_transform_fixed():
    rng = np.random.default_rng(6)
    conf = np.round(rng.random(100), 2)
    corr = rng.integers(0, 2, 100)
    assert M.auroc(conf**3, corr) == M.auroc(conf, corr)


@FAST
@given(data=datasets(max_size=7))
def test_aurc_property_vs_all_orderings(data):
    conf, corr = data
    assert M.aurc(conf, corr) == pytest.approx(aurc_all_orderings(conf.tolist(), corr.tolist()), abs=1e-12)


@FAST
@given(data=datasets())
def test_metric_ranges_and_ece_vs_loop(data):
    conf, corr = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for name in ALL:
            v = call(name, conf, corr)
            assert math.isnan(v) or -1e-12 <= v <= 1 + 1e-12
    assert M.ece(conf, corr, n_bins=15) == pytest.approx(ece_loop(conf.tolist(), corr.tolist(), 15), abs=1e-12)


@FAST
@given(data=datasets(), k=st.integers(1, 4))
def test_ties_duplicating_all_rows(data, k):
    # repeating every row k times leaves ECE, AUROC, Brier unchanged
    conf, corr = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for name in ("ece", "auroc", "brier"):
            a, b = call(name, conf, corr), call(name, np.tile(conf, k), np.tile(corr, k))
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


def test_docstring_examples():
    import doctest

    res = doctest.testmod(M, raise_on_error=False)
    assert res.attempted >= 7 and res.failed == 0
