"""Report tables (analysis/tables.py): structure, numbers against their inputs, writers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reference import compare_tables as R
from reference import summary as SM
from confgrid.analysis import tables as TB
from confgrid.analysis import transfer as T

from test_summary import NAMES, make_results

CTX = ["bare", "answer", "guess"]


@pytest.fixture(scope="module")
def results():
    return make_results(n_settings=3, B=100, metrics=("ece", "auroc", "kde_ece", "ks_ece"))


def test_format_helpers():
    assert TB.format_estimate(0.1234, 0.1, 0.2) == "0.123 [0.100, 0.200]"
    assert TB.format_estimate(0.05, signed=True) == "+0.050"
    df = pd.DataFrame({"g": [0.1, -0.2], "g_lo": [0.0, -0.3], "g_hi": [0.2, np.nan], "n_flips": [1.0, np.nan],
                       "name": ["a", "b"]})
    f = TB.format_table(df, signed=["g"])
    assert list(f.columns) == ["g", "n_flips", "name"]
    assert f.g.tolist() == ["+0.100 [+0.000, +0.200]", "-0.200 [-0.300, -]"]
    assert f.n_flips.tolist() == ["1", "-"]
    md = TB.to_markdown(f)
    assert md.splitlines()[0] == "| g | n_flips | name |" and md.splitlines()[1] == "| --- | --- | --- |"


def test_three_context_table(results):
    metrics, gaps, adv = R.tidy(results)
    t = TB.three_context_table(metrics, gaps, adv, "ece", CTX)
    assert t.setting.tolist() == list(results)
    for s, r in results.items():
        row = t[t.setting == s].iloc[0]
        j = list(r.metrics).index("ece")
        assert row.verbalized == r.point[0, j]
        for i, ctx in enumerate(CTX, start=1):
            assert row[f"token_{ctx}"] == r.point[i, j]
            assert row[f"g_{ctx}"] == pytest.approx(r.point[0, j] - r.point[i, j])
        f = R.flips(r, NAMES, [("bare", "guess")])
        f = f[f.metric == "ece"].iloc[0]
        assert (row.flip, row.resolved_flip) == (f.flip, f.fully_resolved)
    with pytest.raises(ValueError, match="missing columns"):
        TB.three_context_table(metrics.drop(columns="lo"), gaps, adv, "ece", CTX)


def test_ablation_path_table(results):
    path = [("bare", "start"), ("answer", "instruction"), ("guess", "Guess: slot")]
    gs = SM.summarize_gaps(results, CTX, ["auroc"])
    ss = SM.summarize_shifts(results, [("bare", "answer"), ("answer", "guess")], ["auroc"])
    t = TB.ablation_path_table(gs, ss, path, "auroc")
    assert t.context.tolist() == CTX and t.step.tolist() == [0, 1, 2]
    assert np.isnan(t.dg_step[0])
    assert t.dg_step[1] == pytest.approx(t.g[1] - t.g[0])
    assert t.abs_dg[2] == ss[(ss.context_a == "answer")].mean_abs.iloc[0]
    with pytest.raises(ValueError, match="no pair"):
        TB.ablation_path_table(gs, ss, [("bare", "start"), ("guess", "x")], "auroc")


def test_axis_and_estimators_tables(results):
    ctx = SM.summarize_shifts(results, [("bare", "guess")], ["ece", "auroc"])
    est = SM.summarize_estimators(results, ["bare"], ["kde_ece", "ks_ece"], context_pair=("bare", "guess"))
    long = TB.axis_table({"context": ctx, "estimator": est})
    assert long.axis.tolist() == ["context", "context", "estimator", "estimator"]
    assert long.metric.tolist() == ["ece", "auroc", "kde_ece", "ks_ece"]
    assert long.mean_abs.iloc[0] == ctx.mean_abs.iloc[0]
    e = TB.estimators_table(est)
    assert e.max_abs.tolist() == est.max_abs.tolist()
    assert e.better_signal_changes.tolist() == est.n_flips.tolist()


def test_transfer_table_and_writer(tmp_path):
    rng = np.random.default_rng(0)
    parts = []
    for s in ("s0", "s1"):
        p = rng.random(60)
        y = (rng.random(60) < p).astype(int)
        parts.append(T.transfer_penalties(p, rng.permutation(p), y, n_splits=2, methods=["isotonic"]).assign(setting=s))
    pen = pd.concat(parts, ignore_index=True)
    t = TB.transfer_table(pen)
    assert set(t.columns) >= {"method", "direction", "mean_penalty", "frac_positive", "n_settings_all_positive"}
    r = t[t.direction == "A->B"].iloc[0]
    sub = pen[pen.direction == "A->B"]
    assert r.mean_penalty == pytest.approx(sub.penalty.mean())
    assert r.n_settings_all_positive == sum(g.penalty.gt(0).all() for _, g in sub.groupby("setting"))
    assert TB.to_markdown(t).startswith("| method | direction |")
