"""Flips of the better signal, signed-aware (compare.advantage): one rule in compare, summary and tables.

A flip means the better signal (compare.better_signal) differs between two
contexts, by point estimate. For an unsigned metric that is the gap
g = m(verbalized) - m(token) changing sign (unchanged); for a signed metric
(calibration_gap, overconfidence: 0 is best) it is the sign of the advantage
a = |m(verbalized)| - |m(token)|. A resolved flip needs both advantage
intervals (of the paired per-resample advantage) to exclude zero.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import compare as C
from reference import compare_tables as R
from reference import summary as SM
from confgrid.analysis import tables as TB

NAMES = ["verbalized", "tok_a", "tok_b"]
SIGNED = ["calibration_gap", "overconfidence"]
UNSIGNED = ["ece", "auroc", "aurc"]


def hand(point, sd=0.01, B=200, seed=0, metrics=("calibration_gap",), names=NAMES) -> BS.BootstrapResult:
    """A hand-built result: ``point`` (S, M), resamples = point + ``sd`` * N(0, 1) (``sd`` scalar or (S, M))."""
    point = np.asarray(point, dtype=np.float64).reshape(len(names), len(metrics))
    sd = np.broadcast_to(np.asarray(sd, dtype=np.float64), point.shape)
    noise = np.random.default_rng(seed).standard_normal((*point.shape, B))
    return BS.BootstrapResult(point=point, resamples=point[:, :, None] + sd[:, :, None] * noise,
                              metrics=list(metrics), signal_names=list(names), n_resamples=B)


def one_flip(r, metric="calibration_gap", pair=("tok_a", "tok_b")):
    f = R.flips(r, None, [pair])
    return f[f.metric == metric].iloc[0]


def old_rule(r, pair, level=0.95):
    """The rule before this change (signs of the gaps, gap intervals): reference for unsigned metrics."""
    g = R.gaps(r, None, level=level).set_index(["signal", "metric"])
    out = {}
    for m in r.metrics:
        ga, gb = g.loc[(pair[0], m)], g.loc[(pair[1], m)]
        sa, sb = np.sign(ga.point), np.sign(gb.point)
        fl = bool(sa != 0 and sb != 0 and np.isfinite(sa) and np.isfinite(sb) and sa != sb)
        out[m] = (fl, fl and C.excludes_zero(ga.lo, ga.hi) and C.excludes_zero(gb.lo, gb.hi))
    return out


# ----------------------------------------------------------------------------- the rule in compare


def test_gap_sign_flips_but_the_better_signal_does_not():
    # verbalized -0.5; tok_a +0.7 (gap -1.2), tok_b -0.7 (gap +0.2): verbalized is closer to 0 under both
    r = hand([-0.5, 0.7, -0.7])
    f = one_flip(r)
    assert f.g_a == pytest.approx(-1.2) and f.g_b == pytest.approx(0.2)  # g_a, g_b stay the gaps
    assert C.flip(f.g_a, f.g_b)  # the old sign rule would have counted a flip
    assert not f.flip and not f.fully_resolved
    assert C.better_signal("calibration_gap", -0.5, 0.7, "v", "t") == C.better_signal(
        "calibration_gap", -0.5, -0.7, "v", "t") == "v"


def test_better_signal_flips_while_the_gap_sign_does_not():
    # verbalized -0.5; tok_a +0.1 (gap -0.6, token better), tok_b +0.7 (gap -1.2, verbalized better)
    r = hand([-0.5, 0.1, 0.7])
    f = one_flip(r)
    assert f.g_a < 0 and f.g_b < 0 and not C.flip(f.g_a, f.g_b)
    assert f.flip and f.fully_resolved  # sd 0.01: both advantages (+0.4, -0.2) far from 0
    for m in SIGNED:  # overconfidence follows the same rule
        assert one_flip(hand([-0.5, 0.1, 0.7], metrics=(m,)), m).flip


def test_advantage_values_and_interval():
    r = hand([[-0.5, 0.1], [0.1, 0.2], [0.7, 0.3]], sd=0.05, metrics=("calibration_gap", "ece"))
    p, a = R.advantage(r, NAMES, "verbalized", "tok_a", 0)
    assert p == pytest.approx(0.5 - 0.1)
    np.testing.assert_array_equal(a, np.abs(r.resamples[0, 0]) - np.abs(r.resamples[1, 0]))
    p, a = R.advantage(r, NAMES, "verbalized", "tok_a", 1)  # unsigned: the gap, exactly
    assert p == r.point[0, 1] - r.point[1, 1]
    np.testing.assert_array_equal(a, r.resamples[0, 1] - r.resamples[1, 1])
    adv = R.advantages(r).set_index(["signal", "metric"])
    lo, hi = BS.interval(np.abs(r.resamples[0, 0]) - np.abs(r.resamples[2, 0]))
    assert (adv.loc[("tok_b", "calibration_gap"), "lo"], adv.loc[("tok_b", "calibration_gap"), "hi"]) == (lo, hi)
    g = R.gaps(r).set_index(["signal", "metric"])
    for sig in ("tok_a", "tok_b"):
        for col in ("point", "lo", "hi", "excludes_zero", "n_undefined"):
            assert adv.loc[(sig, "ece"), col] == g.loc[(sig, "ece"), col]
    with pytest.raises(ValueError, match="not among signals"):
        R.advantage(r, NAMES, "verbalized", "tok_c", 0)


def test_resolved_flip_uses_the_advantage_intervals():
    # tok_a: |v| - |t| = 0.5 - 0.45 = +0.05 with sd 0.05 on both -> interval straddles 0, yet the gap
    # (-0.95) interval excludes 0; tok_b: advantage -0.3, resolved. A flip, not resolved.
    sd = [[0.05], [0.05], [0.01]]
    r = hand([-0.5, 0.45, 0.8], sd=sd, B=400, seed=3)
    adv = R.advantages(r).set_index("signal")
    gap = R.gaps(r).set_index("signal")
    assert not adv.loc["tok_a", "excludes_zero"] and adv.loc["tok_b", "excludes_zero"]
    assert gap.loc["tok_a", "excludes_zero"] and gap.loc["tok_b", "excludes_zero"]
    f = one_flip(r)
    assert f.flip and not f.fully_resolved
    # hand computation of the same decision
    a_a = np.abs(r.resamples[0, 0]) - np.abs(r.resamples[1, 0])
    a_b = np.abs(r.resamples[0, 0]) - np.abs(r.resamples[2, 0])
    assert C.fully_resolved((0.05, *BS.interval(a_a)), (-0.3, *BS.interval(a_b))) is bool(f.fully_resolved)
    # the same numbers with a tight tok_a: resolved
    assert one_flip(hand([-0.5, 0.3, 0.8], sd=0.01)).fully_resolved


def test_per_resample_absolute_values_not_the_absolute_gap():
    # the verbalized value straddles 0 across resamples: |v| is folded per resample, not |mean|
    r = hand([0.0, 0.2, -0.01], sd=[[0.1], [0.001], [0.001]], B=300, seed=5)
    p, a = R.advantage(r, NAMES, "verbalized", "tok_a", 0)
    assert p == pytest.approx(-0.2)
    assert np.all(a >= -0.2 - 0.01) and np.mean(a) > -0.2 + 0.05  # |v[r]| >= 0 pulls it up


def test_nan_point_never_flips():
    r = hand([-0.5, np.nan, 0.7])
    f = one_flip(r)
    assert not f.flip and not f.fully_resolved
    r = hand([[np.nan, 0.1], [0.1, 0.2], [0.7, 0.05]], metrics=("calibration_gap", "ece"))
    f = R.flips(r, None, [("tok_a", "tok_b")]).set_index("metric")
    assert not f.loc["calibration_gap", "flip"] and not f.loc["calibration_gap", "fully_resolved"]
    assert f.loc["ece", "flip"]  # the nan of one metric does not reach another (ece gaps -0.1, +0.05)
    assert math.isnan(R.advantage(r, NAMES, "verbalized", "tok_a", 0)[0])
    # a few undefined resamples are ignored by the interval, as for the gaps
    r = hand([-0.5, 0.1, 0.7])
    r.resamples[1, 0, :7] = np.nan
    adv = R.advantages(r).set_index("signal")
    assert adv.loc["tok_a", "n_undefined"] == 7 and adv.loc["tok_a", "excludes_zero"]
    assert one_flip(r).fully_resolved
    # a tie (|v| = |t|) is no flip either
    assert not one_flip(hand([-0.5, 0.5, 0.7], sd=0.0)).flip


def random_unsigned(seed, B=120):
    """Random hand-built results for ece/auroc/aurc whose gaps sit near 0, so flips and non-flips both occur."""
    rng = np.random.default_rng(seed)
    point = rng.uniform(0.1, 0.4, size=(3, 3))
    point[1:] = point[0] + rng.normal(0, 0.02, size=(2, 3))
    sd = rng.uniform(0.002, 0.03, size=(3, 3))
    return hand(point, sd=sd, B=B, seed=seed + 1000, metrics=tuple(UNSIGNED))


def test_unsigned_flips_identical_to_the_old_sign_rule():
    n_flip = n_res = 0
    for seed in range(60):
        r = random_unsigned(seed)
        got = R.flips(r, None, [("tok_a", "tok_b"), ("tok_b", "tok_a")]).set_index(["context_a", "metric"])
        ref = old_rule(r, ("tok_a", "tok_b"))
        for m in UNSIGNED:
            row = got.loc[("tok_a", m)]
            assert (bool(row.flip), bool(row.fully_resolved)) == ref[m], (seed, m)
            assert (row.flip, row.fully_resolved) == tuple(got.loc[("tok_b", m), ["flip", "fully_resolved"]])
            n_flip += ref[m][0]
            n_res += ref[m][1]
    assert 0 < n_res < n_flip < 60 * 3  # the data exercise every branch


def test_flip_agrees_with_better_signal_on_random_points():
    rng = np.random.default_rng(7)
    metrics = (*SIGNED, *UNSIGNED)
    for _ in range(200):
        point = rng.uniform(-1, 1, size=(3, len(metrics)))
        point[:, 2:] = np.abs(point[:, 2:])  # unsigned metrics are non-negative
        r = hand(point, sd=0.0, B=2, metrics=metrics)
        f = R.flips(r, None, [("tok_a", "tok_b")]).set_index("metric")
        for j, m in enumerate(metrics):
            ba = C.better_signal(m, point[0, j], point[1, j], "verbalized", "token")
            bb = C.better_signal(m, point[0, j], point[2, j], "verbalized", "token")
            assert bool(f.loc[m, "flip"]) == ("neither" not in (ba, bb) and ba != bb), (m, point[:, j])


# ----------------------------------------------------------------------------- summaries agree with compare


SUMMARY_METRICS = ("calibration_gap", "ece", "auroc")
# per setting (verbalized, tok_a, tok_b) calibration gaps; ece and auroc random near each other
# and the noise sd of every calibration-gap resample
CG = {
    "s1": ([-0.5, 0.7, -0.7], 0.01),   # gap sign flips, better signal does not
    "s2": ([-0.5, 0.1, 0.7], 0.01),    # better signal flips, gap sign does not (resolved)
    "s3": ([-0.5, 0.47, 0.8], 0.03),   # flip, not resolved: tok_a's advantage +0.03 +- 0.04 straddles 0
    "s4": ([np.nan, 0.1, 0.7], 0.01),  # undefined: no flip
    "s5": ([0.2, 0.05, 0.5], 0.01),    # better signal flips and the gap sign (+0.15, -0.3) flips too
}


def settings():
    out = {}
    for k, (s, (cg, sd_cg)) in enumerate(CG.items()):
        rng = np.random.default_rng(k)
        point = np.empty((3, 3))
        point[:, 0] = cg
        point[:, 1] = rng.uniform(0.05, 0.2) + rng.normal(0, 0.02, 3)
        point[:, 2] = rng.uniform(0.6, 0.8) + rng.normal(0, 0.02, 3)
        sd = np.array([[sd_cg, 0.01, 0.02]] * 3)
        out[s] = hand(point, sd=sd, B=300, seed=10 + k, metrics=SUMMARY_METRICS)
    return out


def compare_counts(results, pair, metric):
    fl = rf = 0
    for r in results.values():
        row = one_flip(r, metric, pair)
        fl += bool(row.flip)
        rf += bool(row.fully_resolved)
    return fl, rf


def test_summarize_shifts_counts_as_compare():
    results = settings()
    pair = ("tok_a", "tok_b")
    df = SM.summarize_shifts(results, [pair], list(SUMMARY_METRICS)).set_index("metric")
    for m in SUMMARY_METRICS:
        assert (df.loc[m, "n_flips"], df.loc[m, "n_resolved_flips"]) == compare_counts(results, pair, m), m
    # calibration_gap: s2, s3, s5 flip; s2 and s5 resolved (s3's tok_a advantage straddles 0)
    assert (df.loc["calibration_gap", "n_flips"], df.loc["calibration_gap", "n_resolved_flips"]) == (3, 2)
    # unsigned metrics: the old sign rule
    for m in ("ece", "auroc"):
        old = [old_rule(r, pair)[m] for r in results.values()]
        assert (df.loc[m, "n_flips"], df.loc[m, "n_resolved_flips"]) == tuple(np.sum(old, axis=0))
    # the shift itself is still the gap's
    s2 = results["s2"]
    assert SM.summarize_shifts({"s2": s2}, [pair], ["calibration_gap"]).mean_abs.iloc[0] == pytest.approx(0.6)


def test_summarize_estimators_flips_as_compare():
    results = settings()
    t = SM.summarize_estimators(results, ["tok_a"], ["calibration_gap", "auroc"], base="ece",
                                context_pair=("tok_a", "tok_b")).set_index("estimator")
    assert t.loc["calibration_gap", "context_flips"] == compare_counts(results, ("tok_a", "tok_b"),
                                                                       "calibration_gap")[0] == 3
    assert t.loc["auroc", "context_flips"] == compare_counts(results, ("tok_a", "tok_b"), "auroc")[0]
    # n_flips: the better signal under the estimator differs from that under ece (better_signal on both)
    for est in ("calibration_gap", "auroc"):
        want = 0
        for r in results.values():
            b0 = C.better_signal("ece", r.point[0, 1], r.point[1, 1], "v", "t")
            j = list(r.metrics).index(est)
            b1 = C.better_signal(est, r.point[0, j], r.point[1, j], "v", "t")
            want += "neither" not in (b0, b1) and b0 != b1
        assert t.loc[est, "n_flips"] == want, est


def test_summarize_axis_flips_as_the_rule():
    a, b = settings(), settings()
    for s in b:  # the other run: tok_a moves across verbalized's |value| in s1 only
        b[s] = BS.BootstrapResult(a[s].point.copy(), a[s].resamples.copy(), a[s].metrics, a[s].signal_names,
                                  a[s].n_resamples)
    b["s1"].point[1, 0], b["s1"].resamples[1, 0] = 0.1, a["s1"].resamples[1, 0] - 0.6
    ax = SM.summarize_axis(a, b, "tok_a", ["calibration_gap"]).iloc[0]
    # s1: tok_a 0.7 -> 0.1 under verbalized -0.5: verbalized better, then token; both gaps negative
    assert ax.n_flips == 1 and ax.n_resolved_flips == 1
    assert C.flip(a["s1"].point[0, 0] - 0.7, a["s1"].point[0, 0] - 0.1) is False


# ----------------------------------------------------------------------------- Table 2 agrees with compare


def test_three_context_table_flips_as_compare():
    results = settings()
    metrics, gaps, adv = R.tidy(results)
    ctx = ["tok_a", "tok_b"]
    for m in SUMMARY_METRICS:
        full = TB.three_context_table(metrics, gaps, adv, m, ctx).set_index("setting")
        for s, r in results.items():
            f = one_flip(r, m)
            assert (full.loc[s, "flip"], full.loc[s, "resolved_flip"]) == (f.flip, f.fully_resolved), (m, s)
            if m != "calibration_gap":  # unsigned: the old rule from the gap table itself
                ga, gb = (full.loc[s, f"g_{c}"] for c in ctx)
                assert full.loc[s, "flip"] == C.flip(ga, gb)
        if m == "calibration_gap":
            assert full.flip.tolist() == [False, True, True, False, True]
            assert full.resolved_flip.tolist() == [False, True, False, False, True]
    with pytest.raises(ValueError, match="advantages row"):
        TB.three_context_table(metrics, gaps, adv[adv.setting != "s3"], "calibration_gap", ctx)


def test_ablation_path_flips_come_from_the_signed_aware_summary():
    results = settings()
    path = [("tok_a", "start"), ("tok_b", "change")]
    gs = SM.summarize_gaps(results, ["tok_a", "tok_b"], ["calibration_gap"])
    ss = SM.summarize_shifts(results, [("tok_a", "tok_b")], ["calibration_gap"])
    t = TB.ablation_path_table(gs, ss, path, "calibration_gap")
    assert t.n_flips.iloc[1] == compare_counts(results, ("tok_a", "tok_b"), "calibration_gap")[0] == 3
