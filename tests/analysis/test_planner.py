"""The sample-size planner (issue 22 item 3): checked on constructed data with a known gap. The predicted n, run
for real on fresh data of that size, resolves the gap in about the predicted share of seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis.bootstrap import interval, paired_bootstrap
from confgrid.analysis.compare import excludes_zero
from confgrid.analysis.planner import MIN_PILOT, plan_size

SHIFT = 0.15
TRUE_GAP = -SHIFT**2  # Brier(A) - Brier(B) with A = p calibrated and B = p + SHIFT: exactly -SHIFT^2


def _draw(n: int, rng: np.random.Generator):
    p = rng.uniform(0.2, 0.8, n)
    y = (rng.random(n) < p).astype(float)
    return p, p + SHIFT, y


def _resolved_share(n: int, seeds: int, level: float = 0.95) -> float:
    hits = 0
    for s in range(seeds):
        a, b, y = _draw(n, np.random.default_rng(1000 + s))
        r = paired_bootstrap(np.vstack([a, b]), y, ["brier"], n_resamples=400, seed=s, chunk_size=400)
        lo, hi = interval(r.resamples[0, 0] - r.resamples[1, 0], level)
        hits += bool(excludes_zero(lo, hi))
    return hits / seeds


def test_the_predicted_n_resolves_the_gap_in_about_the_predicted_share_of_seeds():
    a, b, y = _draw(300, np.random.default_rng(0))
    plan = plan_size(a, b, y, "brier", TRUE_GAP, power=0.8, n_resamples=600, seed=1)
    assert plan.status == "ok" and -0.65 <= plan.slope <= -0.35  # the 1/sqrt(n) law holds for Brier
    n = plan.n_required
    # the per-item gap d = -SHIFT (2p + SHIFT - 2y) has sd SHIFT * 2 sd(p - y): the normal theory answer
    rng = np.random.default_rng(7)
    p = rng.uniform(0.2, 0.8, 200_000)
    y_big = (rng.random(p.size) < p).astype(float)
    sd_item = float(np.std(SHIFT * 2 * (p - y_big)))
    n_theory = (sd_item * 2.8016 / SHIFT**2) ** 2
    assert n == pytest.approx(n_theory, rel=0.25)
    assert plan.power_at(n, TRUE_GAP) == pytest.approx(0.8, abs=0.01)
    share = _resolved_share(n, 150)
    assert 0.68 <= share <= 0.92, (n, share)
    # half the items: the predicted power drops, and so does the realized share
    half = plan.power_at(n // 2, TRUE_GAP)
    assert half == pytest.approx(0.51, abs=0.06)
    assert abs(_resolved_share(n // 2, 150) - half) < 0.15


def test_a_pilot_too_small_to_tell():
    a, b, y = _draw(MIN_PILOT - 1, np.random.default_rng(1))
    plan = plan_size(a, b, y, "brier", 0.02)
    assert (plan.status, plan.n_required) == ("pilot_too_small", None) and "at least 30" in plan.reason
    a, _, y = _draw(100, np.random.default_rng(2))
    same = plan_size(a, a, y, "brier", 0.02)  # two identical signals: the resampled gap has no spread
    assert same.status == "pilot_too_small" and "no spread" in same.reason
    assert np.isnan(same.power_at(100, 0.02))


def test_clusters_are_the_resampled_unit():
    a, b, y = _draw(400, np.random.default_rng(3))
    groups = np.repeat(np.arange(100), 4)  # 100 clusters of 4 items
    plan = plan_size(a, b, y, "brier", TRUE_GAP, groups=groups, n_resamples=400)
    assert plan.n_pilot == 100 and plan.status == "ok"
    items = plan_size(a, b, y, "brier", TRUE_GAP, n_resamples=400)
    # independent items within a cluster: a cluster carries about 4 items' information
    assert plan.n_required == pytest.approx(items.n_required / 4, rel=0.35)


@pytest.mark.parametrize(("kw", "message"), [
    ({"gap": 0.0}, "gap=0.0: give the smallest non-zero gap"),
    ({"power": 1.0}, r"power=1.0 must lie in \(0, 1\)"),
    ({"metric": "smece"}, "metric 'smece' has no weighted kernel"),
])
def test_bad_input_names_the_value(kw, message):
    a, b, y = _draw(50, np.random.default_rng(4))
    args = {"metric": "brier", "gap": 0.02, **kw}
    with pytest.raises(ValueError, match=message):
        plan_size(a, b, y, args.pop("metric"), args.pop("gap"), **args)


def test_plan_size_command_on_an_analyze_input_and_a_run_table(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    rows = []
    for setting, seed in (("m1/d", 5), ("m2/d", 6)):
        a, b, y = _draw(200, np.random.default_rng(seed))
        for sig, c in (("verbalized", a), ("token_bare", b)):
            rows += [{"setting": setting, "item_id": f"q{i}", "signal": sig, "confidence": c[i], "correct": y[i]}
                     for i in range(len(y))]
    src = tmp_path / "pilot.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    r = CliRunner().invoke(app, ["plan-size", str(src), "--gap", "0.0225", "--metric", "brier", "--signals",
                                 "verbalized", "token_bare", "--resamples", "300"])
    assert r.exit_code == 0, r.output
    assert "items needed" in r.output and "m1/d" in r.output and "m2/d" in r.output and " ok" in r.output
    bad = CliRunner().invoke(app, ["plan-size", str(src), "--gap", "0.02", "--signals", "verbalized", "p_true"])
    assert bad.exit_code == 2 and "--signals 'verbalized' 'p_true': the pilot has no signal 'p_true'" in bad.output
    assert "its signals: token_bare, verbalized" in bad.output
    missing = CliRunner().invoke(app, ["plan-size", str(tmp_path / "nope"), "--gap", "0.02", "--signals", "a", "b"])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    pd.DataFrame(rows).assign(confidence=1.5).to_csv(tmp_path / "oor.csv", index=False)
    oor = CliRunner().invoke(app, ["plan-size", str(tmp_path / "oor.csv"), "--gap", "0.02", "--signals", "verbalized",
                                   "token_bare"])
    assert oor.exit_code == 2 and "confidence must lie in [0, 1]" in oor.output  # analyze's own reader and words
    one = CliRunner().invoke(app, ["plan-size", str(src), "--gap", "0.0225", "--metric", "brier", "--signals",
                                   "verbalized", "token_bare", "--unit", "m2/d", "--resamples", "200"])
    assert one.exit_code == 0 and "m2/d" in one.output and "m1/d" not in one.output


@pytest.mark.parametrize(("metric", "gap", "message"), [
    ("ece", 1.5, r"gap=1.5: ece\(A\) - ece\(B\) lies in \[-1, 1\]; give the smallest gap worth detecting, e.g. 0.02"),
    ("brier", -1e9, r"gap=-1000000000.0: brier\(A\) - brier\(B\) lies in \[-1, 1\]"),
    ("spearman", 2.5, r"spearman\(A\) - spearman\(B\) lies in \[-2, 2\]"),
])
def test_a_gap_no_metric_can_show_is_an_error(metric, gap, message):
    a, b, y = _draw(50, np.random.default_rng(4))
    with pytest.raises(ValueError, match=message):
        plan_size(a, b, y, metric, gap)
    assert plan_size(a, b, y, "spearman", 1.5).status in ("ok", "pilot_too_small")  # within spearman's range


@pytest.mark.parametrize("n_resamples", [0, 2, -5])
def test_too_few_resamples_name_the_value(n_resamples):
    a, b, y = _draw(50, np.random.default_rng(4))
    with pytest.raises(ValueError, match=rf"n_resamples={n_resamples}: at least 3 resamples"):
        plan_size(a, b, y, "brier", 0.02, n_resamples=n_resamples)


def _pilot_rows(extra=None):
    rows = []
    a, b, y = _draw(60, np.random.default_rng(7))
    for sig, c in (("verbalized", a), ("token_bare", b)):
        rows += [{"setting": "m/d", "item_id": f"q{i}", "signal": sig, "confidence": c[i], "correct": y[i],
                  **(extra(i) if extra else {})} for i in range(len(y))]
    return pd.DataFrame(rows)


def test_a_missing_value_in_an_analyze_input_is_reported_by_line_as_analyze_does(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    df = _pilot_rows()
    df.loc[3, "confidence"] = np.nan
    df.loc[70, "correct"] = np.nan
    df.to_csv(tmp_path / "nan.csv", index=False)
    r = CliRunner().invoke(app, ["plan-size", str(tmp_path / "nan.csv"), "--gap", "0.02", "--signals", "verbalized",
                                 "token_bare", "--resamples", "50"])
    assert r.exit_code == 2, r.output
    assert "line 5: confidence is missing" in r.output and "line 72: correct is missing" in r.output
    df.to_json(tmp_path / "nan.jsonl", orient="records", lines=True)
    j = CliRunner().invoke(app, ["plan-size", str(tmp_path / "nan.jsonl"), "--gap", "0.02", "--signals",
                                 "verbalized", "token_bare", "--resamples", "50"])
    assert j.exit_code == 2 and "line 4: confidence is missing" in j.output


def test_clustered_on_a_pilot_without_clusters_is_an_error(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    _pilot_rows().to_csv(tmp_path / "plain.csv", index=False)
    args = ["--gap", "0.02", "--metric", "brier", "--signals", "verbalized", "token_bare", "--resamples", "50",
            "--clustered"]
    r = CliRunner().invoke(app, ["plan-size", str(tmp_path / "plain.csv"), *args])
    assert r.exit_code == 2 and "--clustered: the pilot has no clusters" in r.output, r.output
    _pilot_rows(lambda i: {"cluster": f"c{i // 3}"}).to_csv(tmp_path / "clustered.csv", index=False)
    ok = CliRunner().invoke(app, ["plan-size", str(tmp_path / "clustered.csv"), *args])
    assert ok.exit_code == 0 and "clusters needed" in ok.output and "│ 20 " in ok.output, ok.output


def _plan_cli(tmp_path, *args):
    """``confgrid plan-size`` on the two-setting pilot of :func:`_pilot_rows` (brier, 50 resamples); later
    options override the defaults."""
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    src = tmp_path / "pilot.csv"
    if not src.is_file():
        pd.concat([_pilot_rows(), _pilot_rows().assign(setting="m2/d")]).to_csv(src, index=False)
    return CliRunner().invoke(app, ["plan-size", str(src), "--gap", "0.0225", "--metric", "brier", "--signals",
                                    "verbalized", "token_bare", "--resamples", "50", *args])


def test_plan_size_json_and_csv_hold_the_rows_of_the_table(tmp_path):
    import json

    from confgrid.flows.analyze.plan_size import PLAN_COLUMNS, plan_sizes, read_pilot

    r = _plan_cli(tmp_path, "--json", "--out", str(tmp_path / "plan" / "sizes.csv"))
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)  # stdout is the JSON and nothing else
    assert r.stderr.strip() == f"wrote 2 row(s) to {tmp_path / 'plan' / 'sizes.csv'}"
    want = plan_sizes(read_pilot(tmp_path / "pilot.csv"), "verbalized", "token_bare", "brier", 0.0225,
                      n_resamples=50)
    assert [list(row) for row in rows] == [PLAN_COLUMNS] * 2
    assert [row["unit"] for row in rows] == ["m/d", "m2/d"] and {row["status"] for row in rows} == {"ok"}
    for row, (_, w) in zip(rows, want.iterrows(), strict=True):
        assert row == {k: (int(v) if k in ("n_pilot", "n_required") else v) for k, v in w.items()}
    csv = pd.read_csv(tmp_path / "plan" / "sizes.csv", keep_default_na=False)
    assert list(csv.columns) == PLAN_COLUMNS
    pd.testing.assert_frame_equal(csv, pd.DataFrame(rows), check_dtype=False)
    table = _plan_cli(tmp_path)  # the table shows the same numbers
    assert table.exit_code == 0, table.output
    for row in rows:
        assert f"│ {row['unit']} " in table.stdout and f"│ {row['n_required']} " in table.stdout


def test_plan_size_json_writes_an_undefined_number_as_null(tmp_path):
    import json

    from typer.testing import CliRunner

    from confgrid.cli.main import app

    # q0, q1, q10..q19: 12 items, too few to tell
    _pilot_rows().query("item_id < 'q2'").to_csv(tmp_path / "small.csv", index=False)
    r = CliRunner().invoke(app, ["plan-size", str(tmp_path / "small.csv"), "--gap", "0.02", "--metric", "brier",
                                 "--signals", "verbalized", "token_bare", "--json", "--out",
                                 str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert row["status"] == "pilot_too_small" and row["n_pilot"] == 12 and "at least 30" in row["reason"]
    assert row["n_required"] is None and row["c"] is None and row["slope"] is None and row["pilot_power"] is None
    assert pd.read_csv(tmp_path / "s.csv")[["n_required", "c", "slope"]].isna().all().all()


@pytest.mark.parametrize(("args", "message"), [
    (["--signals", "verbalized", "verbalized"], "--signals 'verbalized' 'verbalized': the two signals are the same"),
    (["--signals", "verbalized", "p_true"], "--signals 'verbalized' 'p_true': the pilot has no signal 'p_true'; "
                                            "its signals: token_bare, verbalized"),
    (["--signals", "a", "b"], "the pilot has no signal 'a' and no 'b'"),
    (["--gap", "0"], "--gap 0.0: give the smallest non-zero gap worth detecting"),
    (["--gap", "1.5"], "--gap 1.5: brier(A) - brier(B) lies in [-1, 1]"),
    (["--power", "1"], "--power 1.0 must lie in (0, 1)"),
    (["--level", "0"], "--level 0.0 must lie in (0, 1)"),
    (["--resamples", "2"], "--resamples 2: at least 3 resamples"),
    (["--metric", "smece"], "--metric: metric 'smece' has no weighted kernel; the planner supports"),
    (["--metric", "nope"], "--metric: unknown metric 'nope'; allowed:"),
    (["--ece-bins", "0"], "--ece-bins 0: must be an integer >= 1"),
    (["--unit", "zzz"], "--unit: no unit or setting is called 'zzz'; the units with both signals 'verbalized' and "
                        "'token_bare': m/d, m2/d"),
    (["--out", "plan.txt"], "--out 'plan.txt': expected a .csv file"),
])
def test_a_bad_plan_size_option_is_one_line_naming_it(tmp_path, args, message):
    r = _plan_cli(tmp_path, "--json", *args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_the_same_signal_twice_fails_before_the_pilot_is_read(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app
    from confgrid.flows.analyze.plan_size import plan_sizes, read_pilot
    from confgrid.flows.analyze.read import AnalyzeInputError

    r = CliRunner().invoke(app, ["plan-size", str(tmp_path / "nope"), "--gap", "0.02", "--signals", "p", "p"])
    assert r.exit_code == 2 and "--signals 'p' 'p': the two signals are the same" in r.stderr, r.output
    one = CliRunner().invoke(app, ["plan-size", str(tmp_path / "nope"), "--gap", "0.02", "--signals", "p"])
    assert one.exit_code == 2 and "Option '--signals' requires 2 arguments" in one.output
    _pilot_rows().to_csv(tmp_path / "p.csv", index=False)
    with pytest.raises(AnalyzeInputError, match="signal_a and signal_b are both 'verbalized'"):
        plan_sizes(read_pilot(tmp_path / "p.csv"), "verbalized", "verbalized", "brier", 0.02)
