"""Robustness verdicts (issue 22 item 1): constructed signal tables whose verdict and flipping axis are known,
the shares' intervals against a brute-force loop over resamples, the rule's thresholds, and the verdicts of a
run's and an analysis's tables."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from reference.png import png_size

from confgrid.analysis.bootstrap import interval
from confgrid.analysis.evaluation import Comparisons, estimates, plan_units
from confgrid.analysis.metrics import UndefinedMetricWarning, ece
from confgrid.analysis.resampling import resample_indices
from confgrid.analysis.signals import conform
from confgrid.analysis.verdicts import (
    Conclusion,
    VerdictRule,
    conclusion_of,
    flip_axis,
    metric_family,
    verdict_table,
)
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units

R = 200


def _table(models: int, n: int, token_offsets: dict[str, float], verbalized_offset: float, seed: int = 0):
    """A signal table of ``models`` units (one dataset), each with a verbalized score and one token score per
    aggregation, all on the same ``n`` answers: correctness ~ Bernoulli(p), a signal's confidence p + its offset
    (clipped), so its ECE is about |offset|."""
    rng = np.random.default_rng(seed)
    frames = []
    for m in range(models):
        p = rng.uniform(0.2, 0.8, n)
        y = (rng.random(n) < p).astype(float)
        ids = [f"q{i}" for i in range(n)]
        unit = dict(setting=f"m{m}/d", model=f"m{m}", dataset="d", answer_set="main", parse_policy="label",
                    refusal="drop", rule="containment")
        frames.append(conform(pd.DataFrame({"item_id": ids, "signal": "verbalized", "kind": "verbalized",
                                            "confidence": np.clip(p + verbalized_offset, 0, 1), "target": y,
                                            "align": "answer"}), **unit))
        for agg, off in token_offsets.items():
            frames.append(conform(pd.DataFrame({"item_id": ids, "signal": f"token_bare__{agg}", "kind": "token",
                                                "context": "bare", "aggregation": agg,
                                                "confidence": np.clip(p + off, 0, 1), "target": y, "align": "answer"}),
                                  **unit))
    return conform(pd.concat(frames, ignore_index=True))


def _evaluate(table, metrics=("ece", "brier")):
    plans = plan_units(table, Comparisons(against="verbalized"), base_seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        results = bootstrap_units(plans, list(metrics), R)
    return plans, results, estimates(plans, results)


def test_better_under_one_aggregation_worse_under_another_is_fragile_and_the_aggregation_flips_it():
    # token under 'geometric_mean' is far off (+0.3), under 'mean' exact; verbalized is off by 0.12
    table = _table(4, 600, {"geometric_mean": 0.35, "mean": 0.0}, 0.15)
    _, _, est = _evaluate(table)
    v = verdict_table(est.gaps, est.shares).set_index(["signal_a", "signal_b", "metric"])
    row = v.loc[("verbalized", "token", "ece")]
    assert row["n_settings"] == 8 and row["share_a_better"] == 0.5  # A wins under one aggregation in each unit
    assert row["share_resolved_a"] == 0.5 and row["share_resolved_b"] == 0.5
    assert row["verdict"] == "fragile"
    assert (row["flip_axis"], row["flip_count"], row["single_changes"]) == ("aggregation", 4, 4)
    assert row["axes"] == "model, dataset, aggregation" or row["axes"] == "model, aggregation"


def test_better_everywhere_and_resolved_is_robust_and_no_axis_flips_it():
    table = _table(4, 300, {"geometric_mean": 0.3, "mean": 0.25}, 0.0)
    _, _, est = _evaluate(table)
    v = verdict_table(est.gaps, est.shares).set_index(["signal_a", "signal_b", "metric"])
    for metric in ("ece", "brier"):
        row = v.loc[("verbalized", "token", metric)]
        assert (row["verdict"], row["holds_for"], row["share_a_better"]) == ("robust", "verbalized", 1.0)
        assert (row["flip_axis"], row["flip_count"]) == ("", 0)
        assert row["lo"] == row["hi"] == 1.0  # every resample of every setting favours verbalized


def _gaps(favours: list[str], resolved: list[bool], models: list[str] | None = None) -> pd.DataFrame:
    """A hand-made gap table of 'verbalized vs token' under ECE, one row per setting."""
    n = len(favours)
    gap = [-0.1 if f == "verbalized" else 0.1 if f == "token_bare" else 0.0 for f in favours]
    return pd.DataFrame({"setting": [f"{m}/d" for m in (models or [f"m{i}" for i in range(n)])],
                         "model": models or [f"m{i}" for i in range(n)], "dataset": "d", "answer_set": "main",
                         "parse_policy": "p", "refusal": "drop", "rule": "containment", "target_kind": "correct",
                         "signal_a": "verbalized", "signal_b": "token_bare", "kind_a": "verbalized", "kind_b": "token",
                         "context": "bare", "aggregation": "", "metric": "ece", "gap": gap, "lo": np.nan,
                         "hi": np.nan, "excludes_zero": resolved, "favours": favours, "n": 50, "n_undefined": 0})


def test_one_direction_rarely_resolved_is_unresolved_and_the_thresholds_move_it():
    g = _gaps(["verbalized"] * 10, [True, True] + [False] * 8)
    v = verdict_table(g).iloc[0]
    assert (v["share_a_better"], v["share_resolved_a"], v["share_resolved_b"]) == (1.0, 0.2, 0.0)
    assert v["verdict"] == "unresolved" and np.isnan(v["lo"])  # no resamples given: no interval
    assert verdict_table(g, rule=VerdictRule(0.9, 0.2, 0.75)).iloc[0]["verdict"] == "robust"
    # a tie and an undefined gap: neither side; the undefined one is not a setting of the shares
    g2 = _gaps(["verbalized"] * 8 + ["neither", "token_bare"], [False] * 10)
    g2.loc[8, "gap"] = np.nan
    v2 = verdict_table(g2).iloc[0]
    assert (v2["n_settings"], v2["n_undefined"], v2["share_a_better"]) == (9, 1, pytest.approx(8 / 9))
    assert v2["verdict"] == "unresolved" and v2["holds_for"] == "verbalized"
    # B leads: the verdict speaks of B
    v3 = verdict_table(_gaps(["token_bare"] * 9 + ["verbalized"], [True] * 10)).iloc[0]
    assert (v3["holds_for"], v3["verdict"]) == ("token", "fragile")  # resolved both ways


def test_share_intervals_equal_a_brute_force_loop_over_resamples():
    """The interval of share_a_better: in each resample, the share of settings (unit x token aggregation x metric
    variant) whose resampled metric favours verbalized, each metric recomputed from the resampled rows."""
    table = _table(3, 40, {"geometric_mean": 0.05, "mean": -0.04}, 0.02, seed=9)
    metrics = ("ece", "ece_right", "brier")
    plans, _, est = _evaluate(table, metrics)
    v = verdict_table(est.gaps, est.shares).set_index(["signal_a", "signal_b", "metric"])
    for family, names in (("ece", ("ece", "ece_right")), ("brier", ("brier",))):
        votes = []
        for u in plans:
            conf = {s: u.confidence[i] for i, s in enumerate(u.signals)}
            y = u.target[0]
            n = len(y)
            idx = np.concatenate([c for _, c in resample_indices(n, R, u.seed)])
            for tok in [s for s in u.signals if s != "verbalized"]:
                for name in names:
                    def value(c, rows, name=name):
                        if name == "brier":
                            return float(np.mean((c[rows] - y[rows]) ** 2))
                        return ece(c[rows], y[rows], closure="right" if name.endswith("right") else "left")
                    votes.append([value(conf["verbalized"], r) < value(conf[tok], r) for r in idx])
        shares = np.mean(np.array(votes, dtype=float), axis=0)
        lo, hi = interval(shares, 0.95)
        row = v.loc[("verbalized", "token", family)]
        assert (row["lo"], row["hi"]) == pytest.approx((float(lo), float(hi)), abs=1e-12)
        assert row["n_settings"] == len(votes)


def test_flip_axis_by_hand():
    rows = pd.DataFrame({"model": ["a", "a", "b", "b", "a"], "rule": ["r1", "r2", "r1", "r2", "r1"],
                         "estimator": ["ece", "ece", "ece", "ece", "kde_ece"]})
    # directions: (a,r1,ece)+ (a,r2,ece)- (b,r1,ece)+ (b,r2,ece)+ (a,r1,kde)-
    d = np.array([1, -1, 1, 1, -1])
    # single changes: rule {a,ece}: +/- flip; {b,ece}: +/+ ; model {r1,ece}: +/+ ; {r2,ece}: -/+ flip;
    # estimator {a,r1}: +/- flip. Ties (1 flip each) go to the first axis of AXES: model.
    assert flip_axis(rows, d) == ("model", 1, 2)
    assert flip_axis(rows, np.array([1, 1, 1, 1, 1])) == ("", 0, 0)
    assert flip_axis(rows.iloc[:1], d[:1]) == ("", 0, 0)


def test_conclusions_and_families():
    assert metric_family("ece_15_right") == metric_family("ks_ece") == "ece"
    assert metric_family("overconfidence") is None and metric_family("spearman") is None
    assert conclusion_of("verbalized", "token", "verbalized", "token_bare__mean", "ece_right") == Conclusion(
        "verbalized", "token", "ece")
    assert conclusion_of("token", "token", "token_bare", "token_slot", "ece") is None  # a shift, not a conclusion
    assert conclusion_of("verbalized", "p_true", "verbalized", "pt", "auroc") == Conclusion("verbalized", "pt",
                                                                                            "auroc")


@pytest.mark.parametrize(("args", "message"), [
    ((1.2, 0.5, 0.75), r"verdicts.robust_point_share: 1.2 is not a share in \[0, 1\]"),
    ((0.9, -0.1, 0.75), r"verdicts.robust_resolved_share: -0.1"),
    ((0.7, 0.5, 0.8), r"fragile_point_share \(0.8\) must not exceed robust_point_share \(0.7\)"),
])
def test_bad_thresholds_name_the_field(args, message):
    with pytest.raises(ValueError, match=message):
        VerdictRule(*args)


def test_rule_by_hand():
    r = VerdictRule()
    assert r.verdict(1.0, 0.5, 0.0) == "robust"
    assert r.verdict(0.95, 0.4, 0.0) == "unresolved"
    assert r.verdict(0.95, 0.9, 0.05) == "fragile"  # resolved the other way somewhere
    assert r.verdict(0.6, 0.0, 0.0) == "fragile"
    assert r.verdict(float("nan"), 0, 0) == "unresolved"


def test_empty_gaps_and_mirrored_pairs():
    assert list(verdict_table(pd.DataFrame()).columns)[:3] == ["signal_a", "signal_b", "metric"]
    table = _table(2, 50, {"geometric_mean": 0.2}, 0.0)
    plans = plan_units(table, Comparisons(against=None, all_pairs=True), base_seed=0)
    est = estimates(plans, bootstrap_units(plans, ["ece"], 50))
    v = verdict_table(est.gaps, est.shares)
    assert len(v) == 1 and (v["signal_a"].iloc[0], v["signal_b"].iloc[0]) == ("verbalized", "token")


def test_analyze_writes_the_verdicts_and_show_prints_them_first(tmp_path):
    from rich.console import Console
    from typer.testing import CliRunner

    from confgrid.cli.main import app
    from confgrid.cli.show.tables import print_results

    src = tmp_path / "signals.parquet"
    _table(3, 80, {"geometric_mean": 0.3, "mean": 0.0}, 0.1).to_parquet(src)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["analyze", str(src), "--out", str(out), "--bootstrap", "100", "--no-tracking",
                                 "--metrics", "ece,auroc"])
    assert r.exit_code == 0, r.output
    v = pd.read_csv(out / "results" / "verdicts.csv")
    assert set(v["metric"]) == {"ece", "auroc"} and "verdicts.csv" in r.output
    ece_row = v[v["metric"] == "ece"].iloc[0]
    assert (ece_row["verdict"], ece_row["flip_axis"]) == ("fragile", "aggregation")
    console = Console(width=240, record=True)
    print_results(out, console)
    text = console.export_text()
    assert text.index("Is the conclusion robust?") < text.index("Metrics per setting")
    assert "A=verbalized vs B=token" in text and "aggregation (3 of 3)" in text
    tracked = CliRunner().invoke(app, ["analyze", str(src), "--out", str(tmp_path / "tracked"), "--bootstrap", "100",
                                       "--metrics", "ece"])
    assert tracked.exit_code == 0, tracked.output
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'tracked' / 'mlflow.db'}")
    parent = [r for r in client.search_runs([client.get_experiment_by_name("confgrid/analyze").experiment_id])
              if "mlflow.parentRunId" not in r.data.tags][0]
    assert parent.data.tags["confgrid.verdict.verbalized-token.ece"].startswith("fragile")
    assert 0 <= parent.data.metrics["verdict/verbalized-token/ece/share_a_better"] <= 1
    bad = CliRunner().invoke(app, ["analyze", str(src), "--out", str(tmp_path / "o2"), "--no-tracking",
                                   "--fragile-point-share", "0.95"])
    assert bad.exit_code == 2 and "--fragile-point-share (0.95) must not exceed --robust-point-share" in bad.output


def test_specification_curves_sort_the_gaps_and_mark_the_axis_values(tmp_path):

    from confgrid.analysis.verdicts import specification_curve
    from confgrid.report import FigureOptions, RunTables, write_figures

    table = _table(3, 300, {"geometric_mean": 0.35, "mean": 0.0}, 0.15)
    _, _, est = _evaluate(table)
    v = verdict_table(est.gaps, est.shares)
    d = specification_curve(est.gaps, Conclusion("verbalized", "token", "ece"))
    assert len(d) == 6 and d["gap"].is_monotonic_increasing and list(d["rank"]) == list(range(6))
    assert set(d.columns) >= {"model", "aggregation"} and "context" not in d.columns  # only the axes that vary
    # verbalized (off by 0.15) beats the token score off by 0.35 and loses to the exact one: the three settings
    # favouring verbalized (negative ECE gaps) sort first
    assert list(d["direction"]) == [1, 1, 1, -1, -1, -1]
    assert set(d["aggregation"][:3]) == {"geometric_mean"} and set(d["aggregation"][3:]) == {"mean"}
    fs = write_figures(RunTables.of({"verdicts": v, "gaps": est.gaps}), tmp_path,
                       FigureOptions(width_px=700, height_px=500, dpi=50))
    names = {f.name for f in fs.files}
    assert {"spec_curve_verbalized_vs_token_ece", "spec_curve_verbalized_vs_token_brier"} <= names
    assert png_size(tmp_path / "spec_curve_verbalized_vs_token_ece.png") == (700, 500)
    drawn = pd.read_csv(tmp_path / "spec_curve_verbalized_vs_token_ece.csv")
    assert list(drawn["gap"]) == pytest.approx(list(d["gap"]))


def test_every_setting_a_tie_is_unresolved_for_neither_side():
    v = verdict_table(_gaps(["neither"] * 4, [False] * 4)).iloc[0]
    assert (v["holds_for"], v["verdict"], v["share_a_better"], v["share_resolved_b"]) == ("neither", "unresolved",
                                                                                          0.0, 0.0)


def test_as_many_settings_for_b_as_for_a_is_for_neither_side_and_judged_by_the_less_favourable_side():
    # two settings favour A (one resolved), two favour B (none resolved): no majority side
    g = _gaps(["verbalized", "verbalized", "token_bare", "token_bare"], [True, False, False, False])
    v = verdict_table(g).iloc[0]
    assert (v["holds_for"], v["verdict"], v["share_a_better"]) == ("neither", "fragile", 0.5)
    # thresholds under which A's side alone would be 'robust' (p 0.5, r 0.25, nothing resolved for B): B's side is
    # only 'unresolved', and a tie is not a conclusion for A
    loose = VerdictRule(0.5, 0.25, 0.5)
    assert loose.verdict(0.5, 0.25, 0.0) == "robust" and loose.verdict(0.5, 0.0, 0.25) == "fragile"
    v2 = verdict_table(g, rule=VerdictRule(0.5, 0.0, 0.5)).iloc[0]
    assert (v2["holds_for"], v2["verdict"]) == ("neither", "fragile")  # resolved for A = against B
    g3 = _gaps(["verbalized", "verbalized", "token_bare", "token_bare"], [False] * 4)
    v3 = verdict_table(g3, rule=VerdictRule(0.5, 0.0, 0.5)).iloc[0]
    assert (v3["holds_for"], v3["verdict"]) == ("neither", "unresolved")  # each side alone 'robust': never for a tie


def test_too_few_settings_are_never_robust():
    g = _gaps(["verbalized"] * 2, [True, True])
    assert verdict_table(g).iloc[0]["verdict"] == "unresolved"  # 2 settings < robust_min_settings = 3
    assert verdict_table(g, rule=VerdictRule(robust_min_settings=2)).iloc[0]["verdict"] == "robust"
    assert VerdictRule().verdict(1.0, 1.0, 0.0, 2) == "unresolved" and VerdictRule().verdict(1.0, 1.0, 0.0, 3) == "robust"
    with pytest.raises(ValueError, match=r"verdicts.robust_min_settings: 0 is not a whole number of settings >= 1"):
        VerdictRule(robust_min_settings=0)


def test_figure_stems_of_two_conclusions_never_collide():
    from confgrid.report.figures_verdicts import _stem

    taken: set[str] = set()
    a = _stem(Conclusion("verbalized", "p_true+isotonic", "ece"), taken)
    b = _stem(Conclusion("verbalized", "p_true_isotonic", "ece"), taken)
    assert a == "spec_curve_verbalized_vs_p_true_isotonic_ece" and b == a + "_2"


def test_a_conclusion_of_each_view_has_its_own_named_curve_and_none_is_left_out_silently(tmp_path, monkeypatch):
    # the same gaps under two views ("raw", "da") are two conclusions: each curve names its view in its file, title,
    # caption and data; past MAX_CURVES the last caption names the conclusions without a figure
    import confgrid.report.figures_verdicts as fv
    from confgrid.report import FigureOptions, RunTables, write_figures

    taken: set[str] = set()
    assert fv._stem(Conclusion("large", "small", "ece", "da"), taken) == "spec_curve_large_vs_small_ece_da"
    assert fv._stem(Conclusion("large", "small", "ece"), taken) == "spec_curve_large_vs_small_ece"
    _, _, est = _evaluate(_table(3, 200, {"geometric_mean": 0.35, "mean": 0.0}, 0.15))
    gaps = pd.concat([est.gaps.assign(view=view) for view in ("raw", "da")], ignore_index=True)
    v = verdict_table(gaps)
    assert sorted(v["view"]) == ["da", "da", "raw", "raw"]  # ece and brier under each view
    monkeypatch.setattr(fv, "MAX_CURVES", 3)
    fs = write_figures(RunTables.of({"verdicts": v, "gaps": gaps}), tmp_path,
                       FigureOptions(width_px=500, height_px=400, dpi=40))
    curves = [f for f in fs.files if f.family == "specification_curve"]
    drawn = [f"spec_curve_verbalized_vs_token_{r.metric}_{r.view}" for r in v.head(3).itertuples()]
    assert [f.name for f in curves] == drawn
    data = pd.read_csv(tmp_path / f"{drawn[0]}.csv")
    assert set(data["view"]) == {v["view"].iloc[0]}
    assert all(f"({r.view} view)" in f.caption for f, r in zip(curves, v.head(3).itertuples(), strict=True))
    last = v.iloc[3]
    assert (f"Only the first 3 of the 4 conclusions of results/verdicts.csv are drawn; without a figure: "
            f"verbalized vs token on {last['metric']} ({last['view']} view).") in curves[-1].caption
