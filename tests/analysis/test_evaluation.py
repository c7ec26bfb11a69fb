"""The one signal table and the one evaluator (analysis/signals.py, analysis/evaluation.py) against brute force.

A unit holds an aligned pair of answer signals (verbalized and one token score) and a method signal on other
items; every metric, gap, shift and flip must equal a loop that draws the same item indices and evaluates the
point functions of analysis/metrics.py on the drawn items of each support.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis import registry as REG
from confgrid.analysis.bootstrap import interval, paired_bootstrap
from confgrid.analysis.resampling import DEFAULT_CHUNK_SIZE, resample_indices
from confgrid.analysis.evaluation import (
    Comparisons,
    estimates,
    plan_units,
    token_shift_pairs,
    unit_name,
    unit_seed,
)
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.analysis.signals import COLUMNS, analyzed, check, conform, empty, to_arrow, usable

UNIT = {"setting": "m/d", "model": "m", "dataset": "d", "answer_set": "main", "parse_policy": "p", "refusal": "drop",
        "rule": "r"}
METRICS = ["ece", "auroc", "brier", "calibration_gap"]


def _table(seed: int = 0, n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = [f"q{i}" for i in range(n)]
    y = (rng.random(n) < 0.55).astype(float)
    rows = []
    for name, kind, ctx, agg in (("verbalized", "verbalized", "", ""), ("token_a", "token", "a", "g"),
                                 ("token_b", "token", "b", "g"), ("token_a__s", "token", "a", "s")):
        conf = np.round(np.clip(0.4 * y + 0.6 * rng.random(n), 0, 1), 1)
        status = np.where(rng.random(n) < 0.1, "missing_confidence", "ok")
        rows.append(pd.DataFrame({"item_id": ids, "signal": name, "kind": kind, "context": ctx,
                                  "aggregation": agg, "confidence": np.where(status == "ok", conf, np.nan),
                                  "target": y, "status": status, "align": "answer"}))
    keep = rng.random(n) < 0.8  # the method has rows for 80% of the items, two of them unusable
    m_conf = np.round(rng.random(n), 2)
    m_status = np.where(np.arange(n) % 13 == 0, "all_absent", "ok")
    rows.append(pd.DataFrame({"item_id": ids, "signal": "p_true", "kind": "p_true", "method": "p_true",
                              "confidence": np.where(m_status == "ok", m_conf, np.nan), "target": y,
                              "status": m_status, "rated": "greedy_answer", "align": ""})[keep])
    return conform(pd.concat(rows, ignore_index=True), **UNIT)


def _support(t: pd.DataFrame) -> dict[str, set]:
    a = analyzed(t)
    return {s: set(g["item_id"]) for s, g in a.groupby("signal")}


def test_schema_conform_and_empty_table_keep_every_column():
    t = _table()
    assert tuple(t.columns) == COLUMNS and len(t)
    e = empty()
    assert tuple(e.columns) == COLUMNS and e.empty
    arrow = to_arrow(e)
    assert arrow.num_rows == 0 and tuple(arrow.schema.names) == COLUMNS
    assert t["k"].dtype == "Int64" and t["replaced"].dtype == bool and t["cluster"].equals(t["item_id"])
    with pytest.raises(ValueError, match="unknown column"):
        conform(pd.DataFrame({"item_id": ["a"]}), colour="red")


def test_check_names_the_first_problem():
    t = _table()
    bad = t.copy()
    bad.loc[0, ["confidence", "status"]] = [1.5, "ok"]
    with pytest.raises(ValueError, match=r"confidence 1.5 outside \[0, 1\].*signal 'verbalized'"):
        check(bad)
    with pytest.raises(ValueError, match="two rows for"):
        check(pd.concat([t, t.iloc[:1]], ignore_index=True))
    with pytest.raises(ValueError, match="target_kind 'loss'"):
        check(t.assign(target_kind="loss"))
    check(t)  # an unusable row may hold anything: it enters no metric


def test_analyzed_rows_follow_the_alignment_rule():
    t = _table()
    sup = _support(t)
    ok = t[usable(t)]
    answer = set.intersection(*(set(ok.loc[ok["signal"] == s, "item_id"]) for s in
                                ("verbalized", "token_a", "token_b", "token_a__s")))
    for s in ("verbalized", "token_a", "token_b", "token_a__s"):
        assert sup[s] == answer  # fix the answer: the answer's signals on the same items
    assert sup["p_true"] == set(ok.loc[ok["signal"] == "p_true", "item_id"])  # a method on its own items
    assert sup["p_true"] != answer


def _loop(values_a, values_b, target, idx_rows, metric):
    """Per resample: metric(a) - metric(b) on the drawn items of the common support (NaN-free rows only)."""
    f = REG.get_metric(metric).func
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for rows in idx_rows:
            out.append(f(values_a[rows], target[rows]) - f(values_b[rows], target[rows]) if rows.size else np.nan)
    return np.array(out)


def test_gaps_and_metrics_equal_a_brute_force_loop_on_each_support():
    t = _table(3)
    (u,) = plan_units(t, Comparisons(against="verbalized", token_shifts=True), base_seed=7)
    assert u.seed == unit_seed(UNIT, 7) and u.name == unit_name(UNIT.values()) + "|correct"
    B = 300
    res = paired_bootstrap(u.confidence, u.target, METRICS, n_resamples=B, seed=u.seed,
                           signal_names=u.cell_names, masks=u.masks)
    est = estimates([u], [res])
    sup = _support(t)
    items = list(u.items)
    assert set(items) == set().union(*sup.values())  # the resampled items: the union of the supports
    pos = {q: i for i, q in enumerate(items)}
    draws = np.concatenate([idx for _, idx in resample_indices(len(items), B, u.seed, DEFAULT_CHUNK_SIZE)])
    wide = {s: t[t["signal"] == s].set_index("item_id") for s in u.signals}
    target = np.array([wide["verbalized"]["target"].get(q, wide["p_true"]["target"].get(q, np.nan))
                       for q in items])
    for _, r in est.gaps.iterrows():
        both = sup[r["signal_a"]] & sup[r["signal_b"]]
        m = np.array([q in both for q in items])
        a = np.array([wide[r["signal_a"]]["confidence"].get(q, np.nan) for q in items])
        b = np.array([wide[r["signal_b"]]["confidence"].get(q, np.nan) for q in items])
        rows = [d[m[d]] for d in draws]
        ref = _loop(a, b, target, rows, r["metric"])
        lo, hi = interval(ref, 0.95)
        f = REG.get_metric(r["metric"]).func
        point = f(a[m], target[m]) - f(b[m], target[m])
        assert r["n"] == len(both) and r["gap"] == pytest.approx(point, abs=1e-12)
        assert (r["lo"], r["hi"]) == pytest.approx((lo, hi), abs=1e-11), (r["signal_b"], r["metric"])
    pt = est.gaps[(est.gaps["signal_b"] == "p_true")]
    assert len(pt) == len(METRICS) and set(pt["favours"]) <= {"verbalized", "p_true", "neither"}
    m = est.metrics.set_index(["signal", "metric"])
    for s in u.signals:
        assert m.loc[(s, "ece"), "n"] == len(sup[s])
    assert m.loc[("p_true", "ece"), "kind"] == "p_true" and m.loc[("p_true", "ece"), "rated"] == "greedy_answer"


def test_shifts_and_flips_of_token_signals():
    t = _table(4)
    (u,) = plan_units(t, Comparisons(against="verbalized", token_shifts=True), base_seed=0)
    assert [(sh.from_b, sh.to_b) for sh in u.shifts] == [("token_a", "token_b"), ("token_a", "token_a__s")]
    res = paired_bootstrap(u.confidence, u.target, METRICS, n_resamples=200, seed=u.seed,
                           signal_names=u.cell_names, masks=u.masks)
    est = estimates([u], [res])
    g = est.gaps.set_index(["signal_b", "metric"])["gap"]
    for _, r in est.shifts.iterrows():
        assert r["shift"] == pytest.approx(g[(r["to_signal"], r["metric"])] - g[(r["from_signal"], r["metric"])],
                                           abs=1e-12)
        if REG.get_metric(r["metric"]).signed:
            continue
        flips = np.sign(g[(r["to_signal"], r["metric"])]) * np.sign(g[(r["from_signal"], r["metric"])]) < 0
        assert r["flip"] == flips
        assert not r["resolved_flip"] or r["flip"]


def test_token_shift_pairs_are_study_000s():
    from confgrid.flows.evaluate.run_evaluation import shift_pairs

    info = {}
    names = []
    contexts, aggs = ("bare", "answer_slot", "guess_slot"), ("geometric_mean", "min", "first")
    for c in contexts:
        for a in aggs:
            name = f"token_{c}" if a == aggs[0] else f"token_{c}__{a}"
            names.append(name)
            info[name] = {"kind": "token", "context": c, "aggregation": a}
    assert token_shift_pairs(["verbalized", *names], {"verbalized": {"kind": "verbalized"}, **info}) == \
        shift_pairs(contexts, aggs)


def test_every_ordered_pair_and_declared_pairs():
    c = Comparisons(against=None, all_pairs=True)
    assert c.pairs_of(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]
    c = Comparisons(against="v", pairs=(("x", "y"), ("x", "missing")))
    assert c.pairs_of(["v", "x", "y"]) == [("v", "x"), ("v", "y"), ("x", "y")]


def test_a_unit_without_any_usable_row_and_a_signal_with_none():
    t = _table(5)
    t.loc[t["signal"] == "p_true", "status"] = "all_absent"
    (u,) = plan_units(t, Comparisons(against="verbalized"), base_seed=0)
    res = paired_bootstrap(u.confidence, u.target, ["ece"], n_resamples=20, seed=u.seed,
                           signal_names=u.cell_names, masks=u.masks)
    est = estimates([u], [res])
    row = est.metrics.set_index("signal").loc["p_true"]
    assert row["n"] == 0 and np.isnan(row["point"]) and row["n_undefined"] == 20
    gap = est.gaps.set_index("signal_b").loc["p_true"]
    assert gap["n"] == 0 and np.isnan(gap["gap"]) and gap["favours"] == "neither"
    assert plan_units(empty(), Comparisons(), 0) == []


def test_twenty_units_are_one_ray_data_job(monkeypatch):
    """Issue 20: the evaluation of a 20-setting grid is one Ray Data job (bootstrap_settings_ray is called once
    with every unit), and its results are the in-process ones, unit by unit."""
    import confgrid.flows.evaluate.bootstrap_ray as BR

    frames = []
    for i in range(20):
        t = _table(10 + i, n=12)
        frames.append(t.assign(setting=f"m{i}/d", model=f"m{i}"))
    plans = plan_units(pd.concat(frames, ignore_index=True), Comparisons(against="verbalized"), base_seed=1)
    assert len(plans) == 20
    calls = []

    def one_job(settings, metrics, n_resamples, n_bins=10, chunk_size=DEFAULT_CHUNK_SIZE, num_workers=None):
        calls.append(len(settings))
        return {k: paired_bootstrap(v.confidence, v.correct, metrics, n_resamples=n_resamples, seed=v.seed,
                                    chunk_size=chunk_size, n_bins=n_bins, signal_names=v.signal_names,
                                    groups=v.groups, masks=v.masks) for k, v in settings.items()}

    monkeypatch.setattr(BR, "bootstrap_settings_ray", one_job)
    ray_path = BR.bootstrap_units(plans, ["ece", "auroc"], 30, use_ray=True)
    local = BR.bootstrap_units(plans, ["ece", "auroc"], 30, use_ray=False)
    assert calls == [20]
    for a, b in zip(ray_path, local, strict=True):
        np.testing.assert_array_equal(a.resamples, b.resamples)


def test_probe_rows_grade_the_supplied_answer_under_the_units_rule():
    from confgrid.flows.stages.probe import probe_rows
    from confgrid.protocols.items import Item

    items = [Item(item_id="q1", dataset="d", question="Capital of France?", gold_answers=("Paris",), canonical="Paris"),
             Item(item_id="q2", dataset="d", question="2+2?", gold_answers=("4",), canonical="4")]
    probe = pd.DataFrame({"item_id": ["q1", "q1", "q2", "q2"], "kind": ["canonical", "plausible_wrong", "own", "own"],
                          "answer": ["Paris", "Lyon", "four", "4"], "verbalized": [0.9, 0.4, None, 0.7],
                          "parse_status": ["ok", "ok", "no_probability", "ok"]})
    rows = probe_rows(probe, items, "containment")
    assert list(rows["signal"]) == ["probe_canonical", "probe_plausible_wrong", "probe_own"]  # first (item, kind)
    assert list(rows["target"]) == [1.0, 0.0, 0.0] and list(rows["status"]) == ["ok", "ok", "no_probability"]
    assert set(rows["kind"]) == {"probe"} and set(rows["rated"]) == {"supplied"} and set(rows["align"]) == {""}
    assert probe_rows(pd.DataFrame(), items, "containment").empty
