"""The capability section of a grid (study 004): validation before anything runs, the split in the plan, and
the capability tables built from hand-made method tables (pure, no Ray)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from reference.png import png_size
from scipy.stats import spearmanr

from confgrid.analysis.bootstrap import interval, resample_counts
from confgrid.analysis.capability.estimators import fit_isotonic
from confgrid.analysis.evaluation import unit_seed
from confgrid.flows.evaluate.capability import (
    capability_estimates,
    capability_mlflow_metrics,
    capability_rows,
    capability_tables,
)
from confgrid.flows.evaluate.run_evaluation import evaluate
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.runner import _load_items
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import parse_grid
from confgrid.protocols.correctness import normalize
from confgrid.protocols.methods import majority_share
from confgrid.protocols.splits import train_eval_split
from confgrid.report import FigureOptions, RunTables, write_figures

METHODS = [
    {"id": "target", "kind": "expected_accuracy", "k": 4, "seed": 0, "split": "eval"},
    {"id": "target_train", "kind": "expected_accuracy", "k": 2, "seed": 0, "split": "train"},
    {"id": "sc", "kind": "self_consistency", "k": 4, "seed": 1, "split": "eval"},
    {"id": "vb", "kind": "verbalized_before"},
]
CAP = {"target": "target", "train_target": "target_train", "estimators": ["vb", "sc"], "consistency_k": [2, 4],
       "pass_at_k": [1, 4], "budgets": [1, 2], "allocation_seeds": 3}


def grid(methods=None, capability=None, **kw):
    return {"models": [{"name": "m", "model": "confgrid-fixture"}],
            "datasets": [{"name": "tqa", "adapter": "triviaqa", "limit": 10}],
            "methods": METHODS if methods is None else methods,
            "capability": CAP if capability is None else capability,
            "bootstrap": {"resamples": 50}, **kw}


def test_a_valid_section_loads():
    spec = parse_grid(grid())
    assert spec.capability.enabled and spec.capability.estimators == ("vb", "sc")


@pytest.mark.parametrize(("change", "message"), [
    ({"target": "vb"}, "capability.target: method 'vb' is of kind 'verbalized_before'"),
    ({"target": "nope"}, "capability.target: unknown method 'nope'"),
    ({"target": "target_train"}, "has split 'train'; it must be 'eval'"),
    ({"estimators": ["target"]}, "allowed kinds"),
    ({"consistency_k": [2, 8]}, "8 samples asked of method 'sc', which draws k=4"),
    ({"train_target": None}, "capability.train_target: probes and isotonic"),
    ({"budgets": [0]}, "capability.budgets"),
    ({"train_fraction": 1.0}, "train_fraction"),
    ({"estimators": ["vb"], "leaky_consistency": True, "consistency_k": [2, 8]}, "consistency_k 8 exceeds the target's k=4"),
])
def test_bad_sections_fail_naming_the_field(change, message):
    with pytest.raises(GridSpecError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_grid(grid(capability={**CAP, **change}))


def test_consistency_with_the_targets_seed_is_the_leak_and_refused():
    methods = [dict(m, seed=0) if m["id"] == "sc" else m for m in METHODS]
    with pytest.raises(GridSpecError, match="the leak of the official code"):
        parse_grid(grid(methods=methods))


def test_a_split_without_the_section_is_an_error():
    with pytest.raises(GridSpecError, match="set a split"):
        parse_grid(grid(methods=METHODS[:1], capability={}))


def test_plan_runs_split_methods_on_their_split_only():
    spec = parse_grid(grid())
    items = {d.name: _load_items(d) for d in spec.datasets}
    plan = GridPlan(spec, items)
    split = train_eval_split([i.item_id for i in items["tqa"]], "tqa", 0.5, 0)
    assert plan.splits["tqa"] == split
    by_method: dict[str, set] = {}
    for sh in plan.generate_shards():
        if sh.method:
            by_method.setdefault(sh.method, set()).update(r.item_id for r in sh.rows)
    assert by_method["target"] == {i for i, s in split.items() if s == "eval"}
    assert by_method["target_train"] == {i for i, s in split.items() if s == "train"}
    assert by_method["vb"] == set(split)


def _frames(spec, rng):
    """Samples, signals, targets and costs of one model and dataset, made by hand."""
    ids = [f"q{i}" for i in range(20)]
    split = train_eval_split(ids, "tqa", 0.5, 0)
    ev = [i for i in ids if split[i] == "eval"]
    tr = [i for i in ids if split[i] == "train"]
    mu_true = {i: rng.random() for i in ids}
    rows = []
    for method, its, k in (("target", ev, 4), ("sc", ev, 4), ("target_train", tr, 2)):
        for i in its:
            for j in range(k):
                ok = rng.random() < mu_true[i]
                rows.append({"model": "m", "dataset": "tqa", "method": method, "item_id": i, "sample_idx": j,
                             "answer": "right" if ok else ["w1", "w2"][j % 2], "correct_containment": float(ok),
                             "n_new_tokens": 3})
    samples = pd.DataFrame(rows)
    tt = samples[samples["method"] == "target_train"].groupby("item_id")["correct_containment"].mean()
    targets = pd.DataFrame({"model": "m", "dataset": "tqa", "method": "target_train", "item_id": tt.index,
                            "expected_accuracy": tt.to_numpy()})
    signals = pd.DataFrame({"model": "m", "dataset": "tqa", "signal": "vb", "method": "vb", "item_id": ids,
                            "confidence": [min(1.0, mu_true[i] + 0.2) for i in ids]})
    costs = pd.DataFrame({"model": "m", "dataset": "tqa", "method": "vb", "item_id": ids, "generated_tokens": 5})
    return {"tqa": split}, samples, signals, targets, costs, ev


def tables_of(spec, *frames):
    """The capability tables as a run builds them: the estimators' rows through the run's one evaluator."""
    est = capability_estimates(spec, *frames)
    ev = evaluate(spec, {}, None, extra=[capability_rows(spec, est)])
    return capability_tables(spec, est, ev.metrics, ev.signals), ev


def test_capability_tables_from_hand_made_method_tables():
    spec = parse_grid(grid())
    splits, samples, signals, targets, costs, ev = _frames(spec, np.random.default_rng(0))
    t, _ = tables_of(spec, splits, samples, signals, targets, pd.DataFrame(), costs)
    m = t["capability_metrics"].set_index(["target", "estimator", "metric"])
    tgt = samples[samples["method"] == "target"].sort_values(["item_id", "sample_idx"])
    mu = tgt.groupby("item_id")["correct_containment"].mean().loc[sorted(ev)].to_numpy()
    resp = tgt.groupby("item_id")["correct_containment"].first().loc[sorted(ev)].to_numpy()
    vb = signals.set_index("item_id")["confidence"].loc[sorted(ev)].to_numpy()
    assert m.loc[("capability", "vb", "brier"), "point"] == pytest.approx(np.mean((vb - mu) ** 2))
    assert m.loc[("response", "vb", "brier"), "point"] == pytest.approx(np.mean((vb - resp) ** 2))
    assert m.loc[("capability", "vb", "spearman"), "point"] == pytest.approx(spearmanr(vb, mu).statistic)
    assert m.loc[("capability", "vb", "brier"), "cost_tokens"] == 5
    # isotonic: fitted on the train split's (estimate, k_train target) pairs, applied to the eval split
    tr_ids = sorted(i for i, s in splits["tqa"].items() if s == "train")
    fit = fit_isotonic(signals.set_index("item_id")["confidence"].loc[tr_ids].to_numpy(),
                       targets.set_index("item_id")["expected_accuracy"].loc[tr_ids].to_numpy())
    assert m.loc[("capability", "vb+isotonic", "brier"), "point"] == pytest.approx(
        np.mean((fit.predict(vb) - mu) ** 2))
    # consistency from its own pool (never the target's samples), the majority share of the first k_c
    sc = samples[samples["method"] == "sc"].sort_values(["item_id", "sample_idx"])
    k2 = np.array([majority_share(list(g["answer"].head(2)), normalize).value for _, g in sc.groupby("item_id")])
    assert m.loc[("capability", "sc_k2", "brier"), "point"] == pytest.approx(np.mean((k2 - mu) ** 2))
    assert m.loc[("capability", "sc_k2", "brier"), "cost_tokens"] == 6  # 2 samples x 3 tokens
    assert m.loc[("capability", "uniform_random", "brier"), "point"] == pytest.approx(np.mean(1 / 3 - mu + mu**2))
    # pass@k: Oracle-CC is the target itself (MSE 0 at k = 1)
    pk = t["capability_pass_at_k"].set_index(["estimator", "k"])
    assert pk.loc[("oracle_cc", 1), "mse"] == pytest.approx(0.0, abs=1e-15)
    assert pk.loc[("oracle_cc", 4), "actual"] == pytest.approx(np.mean(mu > 0))  # n = k = 4: pass@4 = any
    al = t["capability_allocation"]
    assert set(al["allocation"]) == {"uniform", "greedy"} and (al["solved"].between(0, 1)).all()
    assert set(t["capability_se_by_k"]["k"]) == {1, 2, 3, 4}
    metrics = capability_mlflow_metrics(t)
    assert metrics["capability/m/tqa/capability/vb/brier/point"] == pytest.approx(np.mean((vb - mu) ** 2))
    assert all(v == v for v in metrics.values())


def test_capability_figures_draw_the_tables_at_the_size_asked(tmp_path):
    spec = parse_grid(grid())
    splits, samples, signals, targets, costs, _ = _frames(spec, np.random.default_rng(1))
    t, _ = tables_of(spec, splits, samples, signals, targets, pd.DataFrame(), costs)
    fs = write_figures(RunTables.of(t), tmp_path, FigureOptions(width_px=600, height_px=400, dpi=50))
    names = {f.name for f in fs.files}
    assert {"capability_divergence", "capability_pass_at_k", "capability_allocation", "capability_se_by_k"} <= names
    for f in fs.files:
        assert png_size(tmp_path / f"{f.name}.png") == (600, 400)
    drawn = pd.read_csv(tmp_path / "capability_pass_at_k.csv")
    pd.testing.assert_frame_equal(drawn, t["capability_pass_at_k"].reset_index(drop=True), check_dtype=False)


def test_the_estimators_are_rows_of_the_one_signal_table_and_their_metrics_a_view_of_its_estimates():
    """Issue 20: the capability estimators are signal rows (kind capability_estimator, graded against the expected
    accuracy or the first sample's correctness) evaluated by the run's one evaluator; capability_metrics is a
    view of its metrics; the points equal the study's own reference (capability_bootstrap) and the intervals a
    brute-force loop over the unit's own resamples."""
    from reference.capability_bootstrap import capability_bootstrap

    spec = parse_grid(grid())
    splits, samples, signals, targets, costs, _ = _frames(spec, np.random.default_rng(2))
    t, ev = tables_of(spec, splits, samples, signals, targets, pd.DataFrame(), costs)
    rows = ev.signals
    assert set(rows["kind"]) == {"capability_estimator"} and set(rows["answer_set"]) == {"capability"}
    assert set(rows["target_kind"]) == {"expected_accuracy", "correct"}
    names = set(t["capability_metrics"]["estimator"]) - {"uniform_random"}
    assert set(rows["signal"]) == names == {"vb", "vb+isotonic", "sc_k2", "sc_k4"}
    assert rows.loc[rows["signal"] == "sc_k2", "k"].eq(2).all()
    view = t["capability_metrics"].set_index(["target", "estimator", "metric"])
    kind = {"capability": "expected_accuracy", "response": "correct"}
    for r in ev.metrics.itertuples(index=False):
        target = next(k for k, v in kind.items() if v == r.target_kind)
        v = view.loc[(target, r.signal, r.metric)]
        assert (v["point"], v["lo"], v["hi"], v["n"]) == (r.point, r.lo, r.hi, r.n)
    for target, tk in kind.items():
        unit = rows[rows["target_kind"] == tk]
        wide = unit.pivot(index="item_id", columns="signal", values="confidence")
        tgt = unit.drop_duplicates("item_id").set_index("item_id")["target"].reindex(wide.index).to_numpy()
        ref = capability_bootstrap({s: wide[s].to_numpy() for s in sorted(names)}, tgt, n_resamples=10, seed=0)
        for j, s in enumerate(ref.names):
            for m, metric in enumerate(("brier", "ece", "spearman")):
                assert view.loc[(target, s, metric), "point"] == pytest.approx(ref.point[j, m], abs=1e-12)
        # brute force: the unit's resamples (its items in table order), each estimator on its own drawn items
        labels = unit.iloc[0][["setting", "model", "dataset", "answer_set", "parse_policy", "refusal", "rule",
                               "target_kind"]].to_dict()
        items = list(dict.fromkeys(unit["item_id"]))
        W = resample_counts(len(items), spec.bootstrap.resamples, unit_seed(labels, spec.bootstrap.seed))
        for s in ("vb", "sc_k2"):
            p = unit[unit["signal"] == s].set_index("item_id")["confidence"].reindex(items).to_numpy()
            y = unit.drop_duplicates("item_id").set_index("item_id")["target"].reindex(items).to_numpy()
            ok = np.isfinite(p) & np.isfinite(y)
            brier = np.array([np.average((p[ok] - y[ok]) ** 2, weights=w[ok]) for w in W])
            rho = []
            for w in W:
                idx = np.repeat(np.flatnonzero(ok), w[ok].astype(int))
                a, b = p[idx], y[idx]
                rho.append(np.nan if np.all(a == a[0]) or np.all(b == b[0]) else spearmanr(a, b).statistic)
            for metric, vals in (("brier", brier), ("spearman", np.array(rho))):
                lo, hi = interval(vals[None, :], spec.bootstrap.level)
                assert (view.loc[(target, s, metric), "lo"], view.loc[(target, s, metric), "hi"]) == \
                    pytest.approx((float(lo[0]), float(hi[0])), abs=1e-12)


def test_declared_pairs_of_estimators_get_paired_gaps_and_unknown_names_fail():
    spec = parse_grid(grid(metrics={"pairs": [["vb", "sc_k2"], ["vb+isotonic", "vb"]]}))
    splits, samples, signals, targets, costs, _ = _frames(spec, np.random.default_rng(3))
    t, ev = tables_of(spec, splits, samples, signals, targets, pd.DataFrame(), costs)
    g = ev.gaps
    assert set(zip(g["signal_a"], g["signal_b"], strict=True)) == {("vb", "sc_k2"), ("vb+isotonic", "vb")}
    assert set(g["target_kind"]) == {"expected_accuracy", "correct"} and set(g["metric"]) == {"brier", "ece",
                                                                                              "spearman"}
    m = ev.metrics.set_index(["target_kind", "signal", "metric"])["point"]
    for r in g.itertuples(index=False):  # both estimators are defined on every evaluation item here
        assert r.gap == pytest.approx(m[(r.target_kind, r.signal_a, r.metric)] - m[(r.target_kind, r.signal_b,
                                                                                      r.metric)], abs=1e-12)
        assert r.lo <= r.gap <= r.hi
    with pytest.raises(GridSpecError, match=r"metrics.pairs\[0\]: unknown signal\(s\) \['sc_k3'\]; allowed: .*sc_k2"):
        parse_grid(grid(metrics={"pairs": [["vb", "sc_k3"]]}))
