"""Figures: each figure function on small results tables writes a PNG of the pixel size asked, and draws exactly
the numbers of its data (reliability bins equal analysis/reliability.py's; empty bins are gaps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import report_example
from reference.png import png_size
from confgrid.analysis.figure_data import (
    ace_quadrants,
    random_baselines,
    reliability_table,
    select_group,
)
from confgrid.analysis.reliability import reliability_diagram
from confgrid.flows.store.run_info import RunInfo
from confgrid.report import (
    FIGURES,
    Drawn,
    FigureOptions,
    RunTables,
    available_figures,
    draw_figures,
    new_figure,
    register_figure,
    write_figures,
)



@pytest.fixture(scope="module")
def run(report_run):
    return report_run[0]


@pytest.fixture(scope="module")
def written(report_run):
    root, rep = report_run
    return rep.figures, root / "results" / "figures"


def test_every_family_with_its_table_writes_png_and_svg_of_the_size_asked(written):
    figs, out = written
    assert figs.failures == []
    assert {f.family for f in figs.files} == {"reliability", "gaps", "ablation", "probe", "ace_quadrants",
                                              "brier_accuracy", "hard_easy", "specification_curve"}
    assert len([f for f in figs.files if f.family == "reliability"]) == 2  # one per setting
    for f in figs.files:
        assert f.png.stat().st_size > 1000 and f.svg.stat().st_size > 1000, f.name
        assert png_size(f.png) == (640, 480), f.name
        assert f.svg.read_text(encoding="utf-8").lstrip().startswith("<?xml")
        assert f.png.parent == out


def test_reliability_data_equals_the_reliability_diagram_and_ignores_other_groups(run):
    sig = pd.read_parquet(run / "tables" / "signals.parquet")
    drawn, _ = draw_figures(RunTables(run), FigureOptions(width_px=400, height_px=300), ["reliability"])
    got = pd.concat([d.data for d in drawn["reliability"]], ignore_index=True)
    prim = sig[sig["rule"] == "containment"]
    assert len(got) == 2 * 3 * 10  # settings x signals x bins: empty bins kept
    for (setting, signal), g in prim.groupby(["setting", "signal"]):
        ref = reliability_diagram(g["confidence"], g["target"], n_bins=10)
        mine = got[(got["setting"] == setting) & (got["signal"] == signal)].sort_values("bin")
        np.testing.assert_array_equal(np.r_[mine["bin_lo"], mine["bin_hi"].iloc[-1]], ref.bin_edges)
        np.testing.assert_array_equal(mine["count"], ref.counts)
        np.testing.assert_allclose(mine["accuracy"], ref.accuracy, equal_nan=True)
        np.testing.assert_allclose(mine["mean_confidence"], ref.mean_confidence, equal_nan=True)


def test_reliability_table_by_hand():
    # bins of width 0.5: [0, .5) holds 0.1 and 0.2, [.5, 1] holds 0.9 and 1.0 (the last bin is closed)
    sig = pd.DataFrame({"setting": "m/d", "model": "m", "dataset": "d", "signal": "verbalized", "context": "",
                        "aggregation": "", "confidence": [0.1, 0.2, 0.9, 1.0], "correct": [0.0, 1.0, 1.0, 1.0]})
    t = reliability_table(sig, n_bins=2)
    assert t["count"].tolist() == [2, 2]
    assert t["accuracy"].tolist() == [0.5, 1.0]
    assert t["mean_confidence"].tolist() == pytest.approx([0.15, 0.95])
    t4 = reliability_table(sig, n_bins=4)  # [.25, .5) and [.5, .75) are empty: kept as NaN rows
    assert t4["count"].tolist() == [2, 0, 0, 2] and np.isnan(t4["accuracy"][[1, 2]]).all()
    with pytest.raises(ValueError, match="lacks column"):
        reliability_table(sig.drop(columns="context"))


def test_empty_bins_are_gaps_in_the_drawing(run):
    drawn, _ = draw_figures(RunTables(run), FigureOptions(width_px=400, height_px=300), ["reliability"])
    d = drawn["reliability"][0]
    verbal = d.data[d.data["signal"] == "verbalized"]
    empty = int((verbal["count"] == 0).sum())
    assert empty >= 2  # the example's verbalized score skips [0.2, 0.5)
    top, counts = d.figure.axes[0], d.figure.axes[1]
    bars = [p for p in top.patches if p.get_gid() == "accuracy_bars"]
    assert len(bars) == 10 - empty  # no bar for an empty bin
    assert sorted(round(b.get_x(), 9) for b in bars) == sorted(round(x, 9) for x in verbal.loc[verbal["count"] > 0, "bin_lo"])
    heights = [p.get_height() for p in counts.patches if p.get_gid() == "count_bars"]
    assert heights == verbal["count"].tolist()  # every bin listed, zero where empty
    line = top.lines[1].get_ydata()  # mean confidence vs accuracy: NaN breaks the line at empty bins
    assert np.isnan(line).sum() == empty
    assert "ECE" in top.get_title() and "[" in top.get_title()


def test_gaps_and_hard_easy_data_are_the_tables_rows(run):
    t = RunTables(run)
    drawn, failures = draw_figures(t, FigureOptions(width_px=400, height_px=300), ["gaps", "hard_easy", "probe"])
    assert failures == []
    gaps = select_group(t.get("gaps"), t.primary)
    got = drawn["gaps"][0].data
    assert len(got) == len(gaps) and set(got["metric"]) == {"ece", "auroc"}
    merged = got.merge(gaps, on=["setting", "signal_b", "metric"], suffixes=("", "_t"))
    np.testing.assert_array_equal(merged["gap"], merged["gap_t"])
    he = drawn["hard_easy"][0].data
    assert (he["n"] == 0).sum() > 0 and he.loc[he["n"] == 0, "overconfidence"].isna().all()  # empty bins kept
    assert he["mid"].tolist()[:3] == pytest.approx([0.05, 0.15, 0.25])
    probe = drawn["probe"][0].data
    assert probe["pair"].tolist() == ["canonical_vs_first_alias", "own_vs_resupplied", "empty_pair"]


def test_ace_quadrants_and_random_baselines_by_hand():
    ace = report_example.study_tables()["ace_gaps"]
    q = ace_quadrants(ace, "ece")
    assert q["view"].unique().tolist() == ["da"]  # the raw view is the x axis, not a panel
    assert q["quadrant"].tolist() == [1, 2, 3, 4, 0]
    assert q["reversal"].tolist() == [False, True, False, True, False]
    b = random_baselines(5)
    assert b["k"].tolist() == [2, 3, 4, 5]
    assert b["brier"].tolist() == pytest.approx([1 / 4, 2 / 9, 3 / 16, 4 / 25])
    assert random_baselines(observed=np.array([0.1875, np.nan]))["k"].tolist() == [4]


def test_a_new_family_is_one_registration_drawn_only_when_its_table_exists(run):
    name = "test_pass_at_k"

    @register_figure(name, needs=("pass_at_k",), title="pass@k")
    def _draw(tables, opts):
        df = tables.get("pass_at_k")
        fig = new_figure(opts)
        fig.add_subplot(1, 1, 1).plot(df["k"], df["pass"])
        return [Drawn(name, fig, "pass@k", df)]

    try:
        with pytest.raises(ValueError, match="already registered"):
            register_figure(name, needs=("x",), title="again")
        assert name not in [e.family for e in available_figures(RunTables(run))]
        t = RunTables.of({"pass_at_k": pd.DataFrame({"k": [1, 2, 4], "pass": [0.2, 0.3, 0.5]})})
        drawn, failures = draw_figures(t, FigureOptions(width_px=300, height_px=200), [name])
        assert failures == [] and drawn[name][0].data["pass"].tolist() == [0.2, 0.3, 0.5]
    finally:
        FIGURES.unregister(name)


def test_a_family_that_raises_is_recorded_and_the_others_are_drawn(run, tmp_path):
    name = "test_broken"

    @register_figure(name, needs=("metrics",), title="broken")
    def _draw(tables, opts):
        raise KeyError("no such column")

    try:
        figs = write_figures(RunTables(run), tmp_path, FigureOptions(width_px=300, height_px=200),
                             families=[name, "probe"])
    finally:
        FIGURES.unregister(name)
    assert figs.failures == [(name, "KeyError: 'no such column'")]
    assert [f.family for f in figs.files] == ["probe"]


def test_a_run_without_study_tables_draws_reliability_and_gaps_only(tmp_path):
    root = report_example.write_run(tmp_path / "bare", with_studies=False)
    fams = [e.family for e in available_figures(RunTables(root))]
    assert fams == ["reliability", "gaps"]


@pytest.mark.parametrize("kw, field", [({"width_px": 50}, "width_px"), ({"height_px": 0}, "height_px"),
                                       ({"dpi": 1}, "dpi")])
def test_bad_figure_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        FigureOptions(**kw)


def test_smooth_curve_option_draws_the_smece_line(run):
    pytest.importorskip("relplot")
    from confgrid.analysis.estimators import smece

    t = RunTables(run)
    drawn, failures = draw_figures(t, FigureOptions(width_px=400, height_px=300, smooth=True), ["reliability"])
    assert failures == []
    ax = drawn["reliability"][0].figure.axes[0]
    assert len(ax.lines) == 3  # diagonal, binned line, smooth curve
    label = ax.lines[2].get_label()
    sig = t.get("signals")
    one = sig[(sig["setting"] == "m/qa") & (sig["signal"] == "verbalized") & (sig["rule"] == "containment")]
    # the curve's smECE (relplot's fast estimate) agrees with analysis/estimators.py smece to 2 decimals
    assert float(label.split("smECE ")[1].rstrip(")")) == pytest.approx(smece(one["confidence"], one["target"]),
                                                                      abs=0.01)


def test_method_reliability_from_the_signal_table():
    from confgrid.analysis.signals import conform

    ms = conform(pd.DataFrame({"item_id": list("abcd"), "signal": "p_true", "kind": "p_true", "method": "p_true",
                               "target_rule": "containment", "confidence": [0.05, 0.1, 0.95, np.nan],
                               "target": [0.0, 1.0, 1.0, 1.0], "status": ["ok", "ok", "ok", "all_absent"]}),
                 setting="m/d", model="m", dataset="d", answer_set="main", parse_policy="label_or_fallback",
                 refusal="drop", rule="containment")
    metrics = pd.DataFrame({"setting": "m/d", "signal": "p_true", "target_rule": "containment", "metric": "ece",
                            "point": [0.3], "lo": [0.1], "hi": [0.5]})
    t = RunTables.of({"signals": ms, "methods": metrics, "metrics": metrics}, RunInfo(command="run", n_bins=2))
    assert [e.family for e in available_figures(t)] == ["reliability", "method_reliability"]
    drawn, failures = draw_figures(t, FigureOptions(width_px=300, height_px=300))
    assert failures == []
    (d,) = drawn["method_reliability"]
    ref = reliability_diagram([0.05, 0.1, 0.95], [0, 1, 1], n_bins=2)  # the row without a confidence is left out
    np.testing.assert_array_equal(d.data["count"], ref.counts)
    np.testing.assert_allclose(d.data["accuracy"], ref.accuracy)
    assert d.name == "reliability_methods__m__d"
    assert d.figure.axes[0].get_title() == "p_true (rule containment)\nECE 0.300 [0.100, 0.500], n = 3"
