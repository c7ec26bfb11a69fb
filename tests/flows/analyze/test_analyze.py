"""``confgrid analyze``: hand-checked numbers, bad rows by line, column mapping, determinism, MLflow, Ray."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from confgrid.analysis import metrics as M
from confgrid.analysis import registry as REG
from confgrid.analysis.signals import conform
from confgrid.flows.analyze.roads import ROADS, evaluate_input
from confgrid.flows.analyze.analysis import EXPERIMENT, AnalyzeSpec, analyze
from confgrid.flows.analyze.spec import available_metrics
from confgrid.flows.analyze.input import AnalyzeWarning, MAX_PROBLEMS
from reference.analyze_frame import read_input
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.cli.main import app

FIX = Path(__file__).parents[2] / "fixtures"
SMALL = FIX / "analyze_small.csv"
B = "200"  # resamples: enough for intervals, fast on 2 cores
FAST = ["--bootstrap", B, "--no-tracking"]

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["analyze", *map(str, args)])


def wide(setting):
    """The fixture as (signal -> confidence, correct) arrays, straight from the file."""
    df = pd.read_csv(SMALL)
    sub = df[df.setting == setting]
    return {s: (g.confidence.to_numpy(), g.correct.to_numpy().astype(float)) for s, g in sub.groupby("signal")}


# ---------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------


def test_hand_checked_metrics_and_gaps(tmp_path):
    out = tmp_path / "out"
    r = invoke(SMALL, "--out", out, *FAST)
    assert r.exit_code == 0, r.output
    m = pd.read_csv(out / "results" / "metrics.csv", keep_default_na=False, na_values=[""])
    from confgrid.analysis.evaluation import METRIC_COLUMNS

    assert list(m.columns) == METRIC_COLUMNS  # the one results schema, the same as a run's
    assert len(m) == 2 * 2 * 4 and set(m.n) == {8}
    pt = m.set_index(["setting", "signal", "metric"]).point

    # by hand, setting m1/d1: verbalized = 0.9 on q1-q4 (3 of 4 right), 0.8 on q5-q8 (2 of 4 right)
    assert pt["m1/d1", "verbalized", "ece"] == pytest.approx(0.5 * 0.15 + 0.5 * 0.3)
    assert pt["m1/d1", "verbalized", "auroc"] == pytest.approx(9.5 / 15)  # 3*2 + ties (3*1 + 2*2)/2
    # token ranks all 5 correct answers above the 3 wrong ones
    assert pt["m1/d1", "token", "auroc"] == 1.0
    assert pt["m1/d1", "token", "aurc"] == pytest.approx((1 / 6 + 2 / 7 + 3 / 8) / 8)

    # every number against analysis.metrics on the raw arrays
    for setting in ("m1/d1", "m2/d1"):
        for signal, (c, y) in wide(setting).items():
            assert pt[setting, signal, "ece"] == pytest.approx(M.ece(c, y, n_bins=10), abs=1e-15)
            assert pt[setting, signal, "auroc"] == pytest.approx(M.auroc(c, y), abs=1e-15)
            assert pt[setting, signal, "aurc"] == pytest.approx(M.aurc(c, y), abs=1e-15)
            assert pt[setting, signal, "brier"] == pytest.approx(M.brier(c, y), abs=1e-15)
    assert (m.lo <= m.point + 1e-12).all() and (m.point <= m.hi + 1e-12).all()

    g = pd.read_csv(out / "results" / "gaps.csv")
    from confgrid.analysis.evaluation import GAP_COLUMNS

    assert list(g.columns) == GAP_COLUMNS
    assert len(g) == 2 * 2 * 4  # ordered pairs (2 per setting) x metrics
    gi = g.set_index(["setting", "signal_a", "signal_b", "metric"])
    row = gi.loc["m1/d1", "verbalized", "token", "auroc"]
    assert row.gap == pytest.approx(9.5 / 15 - 1.0)
    assert row.favours == "token"
    back = gi.loc["m1/d1", "token", "verbalized", "auroc"]
    assert back.gap == -row.gap and back.lo == pytest.approx(-row.hi) and back.hi == pytest.approx(-row.lo)
    assert bool(row.excludes_zero) == bool(row.lo > 0 or row.hi < 0)

    al = pd.read_csv(out / "results" / "alignment.csv")
    assert set(al.n_left_out) == {0} and set(al.n_used) == {8}
    for name in ("metrics", "gaps", "alignment"):
        assert pd.read_parquet(out / "results" / f"{name}.parquet").shape[0] == pd.read_csv(out / "results" / f"{name}.csv").shape[0]


def test_fixed_seed_gives_identical_files_and_row_order_does_not_matter(tmp_path):
    shuffled = tmp_path / "shuffled.csv"
    pd.read_csv(SMALL).sample(frac=1.0, random_state=3).to_csv(shuffled, index=False)
    outs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for src, out in zip([SMALL, SMALL, shuffled], outs, strict=True):
        assert invoke(src, "--out", out, *FAST, "--seed", 5).exit_code == 0
    for name in ("metrics.csv", "gaps.csv", "alignment.csv"):
        ref = (outs[0] / "results" / name).read_bytes()
        assert (outs[1] / "results" / name).read_bytes() == ref
        assert (outs[2] / "results" / name).read_bytes() == ref
    assert invoke(SMALL, "--out", tmp_path / "d", *FAST, "--seed", 6).exit_code == 0
    assert (tmp_path / "d" / "results" / "metrics.csv").read_bytes() != (outs[0] / "results" / "metrics.csv").read_bytes()


def test_formats_and_column_mapping_give_the_same_numbers(tmp_path):
    ref_out = tmp_path / "ref"
    assert invoke(SMALL, "--out", ref_out, *FAST).exit_code == 0
    names = {"setting": "run", "item_id": "qid", "signal": "method", "confidence": "p", "correct": "is_right"}
    df = pd.read_csv(SMALL).rename(columns=names).assign(extra="ignored")
    flags = ["--setting-col", "run", "--item-col", "qid", "--signal-col", "method",
             "--confidence-col", "p", "--correct-col", "is_right"]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict(orient="records")))
    parquet = tmp_path / "in.parquet"
    df.to_parquet(parquet, index=False)
    for src in (jsonl, parquet):
        out = tmp_path / src.suffix[1:]
        r = invoke(src, "--out", out, *FAST, *flags)
        assert r.exit_code == 0, r.output
        assert (out / "results" / "metrics.csv").read_bytes() == (ref_out / "results" / "metrics.csv").read_bytes()
    # without the flags: the missing columns are named with the flag to map them and the columns found
    r = invoke(jsonl, "--out", tmp_path / "x", *FAST)
    assert r.exit_code == 2
    assert "--confidence-col" in r.output and "--item-col" in r.output and "'is_right'" in r.output
    assert not (tmp_path / "x").exists()


def test_metric_choice_and_ece_bins(tmp_path):
    out = tmp_path / "out"
    r = invoke(SMALL, "--out", out, *FAST, "--metrics", "auroc,ece", "--ece-bins", 5)
    assert r.exit_code == 0, r.output
    m = pd.read_csv(out / "results" / "metrics.csv")
    assert list(m.metric.unique()) == ["auroc", "ece"]
    c, y = wide("m2/d1")["verbalized"]
    got = m[(m.setting == "m2/d1") & (m.signal == "verbalized") & (m.metric == "ece")].point.item()
    assert got == pytest.approx(M.ece(c, y, n_bins=5))

    r = invoke(SMALL, "--out", tmp_path / "bad", *FAST, "--metrics", "ece,acc")
    assert r.exit_code == 2
    assert "unknown metric 'acc'" in r.output
    assert all(name in r.output for name in available_metrics())
    assert not (tmp_path / "bad").exists()


def test_signed_and_fallback_metrics(tmp_path):
    t = analyze(AnalyzeSpec(input=SMALL, out=tmp_path / "o", metrics="calibration_gap,smoothed_ece", n_resamples=40,
                            track=False))
    m = t["metrics"].set_index(["setting", "signal", "metric"]).point
    for setting in ("m1/d1", "m2/d1"):
        arrays = wide(setting)
        for signal, (c, y) in arrays.items():
            assert m[setting, signal, "smoothed_ece"] == pytest.approx(REG.get_metric("smoothed_ece").func(c, y))
        g = t["gaps"].set_index(["setting", "signal_a", "signal_b", "metric"])
        # a signed gap is better near 0: the signal with the smaller |mean confidence - accuracy| is favoured
        cg = {s: abs(m[setting, s, "calibration_gap"]) for s in arrays}
        assert g.loc[(setting, "token", "verbalized", "calibration_gap"), "favours"] == min(cg, key=cg.get)


# ---------------------------------------------------------------------------
# bad input, by line
# ---------------------------------------------------------------------------


def _problems(path, **kw):
    with pytest.raises(AnalyzeInputError) as info:
        read_input(path, **kw)
    return info.value.problems


def test_bad_csv_rows_by_line():
    assert _problems(FIX / "analyze_bad.csv") == [
        # line 2-3 is one record (a quoted note spans two lines); line 10 is blank
        "line 4: confidence 1.5 is outside [0, 1]",
        "line 5: confidence is missing (empty)",
        "line 6: confidence 'high' is not a number",
        "line 7: correct 2 is outside [0, 1] (use 0/1 or a graded value in between)",
        "line 8: duplicate (setting, item_id, signal) = ('A', 'q1', 'verbalized'); first at line 2",
        "line 9: setting is missing (empty)",
        "line 11: confidence is missing ('NaN')",
    ]


def test_bad_jsonl_rows_by_line():
    assert _problems(FIX / "analyze_bad.jsonl") == [
        "line 2: confidence 1.5 is outside [0, 1]",
        "line 3: confidence is missing (null)",
        "line 4: confidence 'high' is not a number",
        "line 5: correct 2 is outside [0, 1] (use 0/1 or a graded value in between)",
        "line 6: duplicate (setting, item_id, signal) = ('A', 'q1', 'verbalized'); first at line 1",
        "line 7: setting is missing (null)",
        "line 9: not valid JSON (Expecting ',' delimiter at character 85)",
    ]


def test_bad_parquet_rows_by_row_index(tmp_path):
    p = tmp_path / "bad.parquet"
    pd.DataFrame({
        "setting": ["A", "A", "A", None],
        "item_id": ["q1", "q2", "q1", "q3"],
        "signal": ["v", "v", "v", "v"],
        "confidence": [0.5, -0.1, 0.2, float("nan")],
        "correct": [1.0, 0.0, 1.0, 0.5],
    }).to_parquet(p, index=False)
    assert _problems(p) == [
        "row 1: confidence -0.1 is outside [0, 1]",
        "row 2: duplicate (setting, item_id, signal) = ('A', 'q1', 'v'); first at row 0",
        "row 3: setting is missing (null)",
        "row 3: confidence is missing (null)",  # pandas writes NaN as a Parquet null
    ]


def test_bad_rows_through_the_command_exit_2_and_write_nothing(tmp_path):
    for src in (FIX / "analyze_bad.csv", FIX / "analyze_bad.jsonl"):
        out = tmp_path / src.suffix[1:]
        r = invoke(src, "--out", out, *FAST)
        assert r.exit_code == 2
        assert "7 problem(s)" in r.output and "nothing was computed or written" in r.output
        assert "line 4: confidence 'high'" in r.output or "line 6: confidence 'high'" in r.output
        assert not out.exists()


def test_many_problems_are_capped_with_a_count(tmp_path):
    p = tmp_path / "many.csv"
    p.write_text("setting,item_id,signal,confidence,correct\n"
                 + "".join(f"A,q{i},v,{2 + i},1\n" for i in range(MAX_PROBLEMS + 7)))
    with pytest.raises(AnalyzeInputError) as info:
        read_input(p)
    msg = str(info.value)
    assert len(info.value.problems) == MAX_PROBLEMS + 7
    assert f"line {MAX_PROBLEMS + 1}: confidence" in msg and f"line {MAX_PROBLEMS + 2}:" not in msg
    assert "... and 7 more problem(s)" in msg


def test_mapped_column_named_in_messages_and_other_input_errors(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("setting,item_id,signal,p,correct\nA,q1,v,2,1\n")
    assert _problems(p, columns={"confidence": "p"}) == ["line 2: 'p' (confidence) 2 is outside [0, 1]"]
    with pytest.raises(AnalyzeInputError, match=r"unsupported extension '\.txt'.*\.csv"):
        read_input(tmp_path / "x.txt")
    with pytest.raises(AnalyzeInputError, match="no such file"):
        read_input(tmp_path / "absent.csv")
    ragged = tmp_path / "r.csv"
    ragged.write_text("setting,item_id,signal,confidence,correct\nA,q1,v,0.5,1,extra\n")
    assert _problems(ragged) == ["line 2: 6 fields, but the header has 5"]
    with pytest.raises(AnalyzeInputError, match="--bootstrap \\(n_resamples\\): must be an integer >= 1"):
        analyze(AnalyzeSpec(input=SMALL, out=tmp_path / "o", n_resamples=0, track=False))


# ---------------------------------------------------------------------------
# alignment
# ---------------------------------------------------------------------------


def test_items_missing_a_signal_are_left_out_and_reported(tmp_path):
    df = pd.read_csv(SMALL)
    drop = (df.setting == "m2/d1") & (df.signal == "token") & df.item_id.isin(["q7", "q8"])
    src = tmp_path / "partial.csv"
    df[~drop].to_csv(src, index=False)
    out = tmp_path / "out"
    with pytest.warns(AnalyzeWarning, match=r"setting 'm2/d1'.*'verbalized': 2 of 8.*6 items used"):
        tables = analyze(AnalyzeSpec(input=src, out=out, n_resamples=50, track=False))
    al = tables["alignment"].set_index(["setting", "signal"])
    assert al.loc[("m2/d1", "verbalized"), ["n_items", "n_used", "n_left_out"]].tolist() == [8, 6, 2]
    assert al.loc[("m2/d1", "verbalized"), "left_out_examples"] == "q7 q8"
    assert al.loc[("m2/d1", "token"), ["n_items", "n_used", "n_left_out"]].tolist() == [6, 6, 0]
    m = tables["metrics"]
    assert set(m[m.setting == "m2/d1"].n) == {6} and set(m[m.setting == "m1/d1"].n) == {8}
    c, y = wide("m2/d1")["verbalized"]
    got = m[(m.setting == "m2/d1") & (m.signal == "verbalized") & (m.metric == "auroc")].point.item()
    assert got == pytest.approx(M.auroc(c[:6], y[:6]))
    r = invoke(src, "--out", tmp_path / "cli", *FAST)
    assert r.exit_code == 0 and "warning: setting 'm2/d1'" in r.output


# ---------------------------------------------------------------------------
# MLflow and Ray
# ---------------------------------------------------------------------------


def test_mlflow_parent_and_child_runs(tmp_path):
    import mlflow

    out = tmp_path / "out"
    r = invoke(SMALL, "--out", out, "--bootstrap", B)
    assert r.exit_code == 0, r.output
    assert (out / "mlflow.db").is_file()
    mlflow.set_tracking_uri(f"sqlite:///{out.resolve() / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=[EXPERIMENT])
    parent = runs[runs["tags.mlflow.runName"] == "analyze_small.csv"]
    assert len(parent) == 1
    pid = parent.run_id.item()
    children = runs[runs["tags.mlflow.parentRunId"] == pid]
    assert sorted(children["tags.mlflow.runName"]) == ["m1/d1", "m2/d1"]
    child = children[children["tags.mlflow.runName"] == "m1/d1"].iloc[0]
    assert child["metrics.token/auroc/point"] == 1.0
    assert child["metrics.verbalized/ece/point"] == pytest.approx(0.225)
    assert parent["params.n_resamples"].item() == B
    # the same vocabulary as a grid run: gaps too, gap/<signal_a>-<signal_b>/<metric>/{point,lo,hi}
    g = pd.read_csv(out / "results" / "gaps.csv").set_index(["setting", "signal_a", "signal_b", "metric"])
    assert child["metrics.gap/token-verbalized/ece/point"] == pytest.approx(g.loc[("m1/d1", "token", "verbalized",
                                                                                   "ece"), "gap"])
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(pid, "results")}
    assert {"results/metrics.csv", "results/gaps.csv", "results/alignment.csv"} <= arts
    assert pid in r.output
    # artifacts inside --out (not ./mlruns of the working directory)
    uri = mlflow.MlflowClient().get_run(pid).info.artifact_uri
    assert uri.startswith((out.resolve() / "mlartifacts").as_uri()), uri
    assert (out / "mlartifacts").is_dir()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_tracking_server_writes_everything_exits_3_and_log_logs_it_later(tmp_path):
    from mlflow.tracking import MlflowClient

    from confgrid.flows.tracking import EXIT_TRACKING_FAILED

    out, dead = tmp_path / "out", f"http://127.0.0.1:{free_port()}"
    r = invoke(SMALL, "--out", out, "--bootstrap", B, "--tracking-uri", dead)
    assert r.exit_code == EXIT_TRACKING_FAILED == 3, r.output
    for name in ("metrics", "gaps", "alignment"):
        assert (out / "results" / f"{name}.csv").is_file() and (out / "results" / f"{name}.parquet").is_file()
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"confgrid analyze: MLflow tracking failed ({dead}): no MLflow server answers at {dead} " \
                       "within 5 s ([Errno 111] Connection refused)"
    assert lines[1].endswith(f"confgrid log {out} --tracking-uri {dead}")
    assert len(lines) == 2 and "warning:" not in r.stderr  # said once
    # later: `confgrid log OUT` into a store that works, and the numbers are there
    uri = f"sqlite:///{tmp_path / 'later.db'}"
    r = runner.invoke(app, ["log", str(out), "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    parent = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
    assert [x.info.run_name for x in parent] == ["analyze_small.csv"] and parent[0].info.run_id in r.output
    assert parent[0].data.params["n_resamples"] == B
    child = {x.info.run_name: x.data for x in runs if x.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id}
    assert sorted(child) == ["m1/d1", "m2/d1"]
    assert child["m1/d1"].metrics["token/auroc/point"] == 1.0  # by hand, see test_hand_checked_metrics_and_gaps
    assert child["m1/d1"].metrics["verbalized/ece/point"] == pytest.approx(0.225)
    m = pd.read_csv(out / "results" / "metrics.csv").set_index(["setting", "signal", "metric"])
    assert child["m2/d1"].metrics["verbalized/brier/hi"] == pytest.approx(m.loc[("m2/d1", "verbalized", "brier"), "hi"])
    assert {a.path for a in client.list_artifacts(parent[0].info.run_id, "results")} >= {"results/metrics.csv"}
    # without --tracking-uri, log goes to the store the analysis was given (still down): exit 3 again
    r = runner.invoke(app, ["log", str(out)])
    assert r.exit_code == 3 and f"MLflow tracking failed ({dead})" in r.stderr and "Traceback" not in r.stderr
    r = runner.invoke(app, ["log", str(tmp_path)])
    assert r.exit_code == 2 and "neither grid.yaml" in r.stderr


def test_a_broken_sqlite_store_is_a_visible_failure(tmp_path):
    bad = tmp_path / "broken.db"
    bad.write_bytes(b"not a database" * 100)
    out = tmp_path / "out"
    r = invoke(SMALL, "--out", out, "--bootstrap", B, "--tracking-uri", f"sqlite:///{bad}")
    assert r.exit_code == 3, r.output
    assert (out / "results" / "metrics.csv").is_file() and (out / "analyze.json").is_file()
    assert f"MLflow tracking failed (sqlite:///{bad}): " in r.stderr and "Traceback" not in r.stderr
    with pytest.warns(AnalyzeWarning, match="MLflow tracking failed"):  # the Python API says it too
        t = analyze(AnalyzeSpec(input=SMALL, out=tmp_path / "api", n_resamples=20, tracking_uri=f"sqlite:///{bad}"))
    assert t.tracking_failure.tracking_uri == f"sqlite:///{bad}"
    assert t.run_id is None


def test_ray_path_writes_the_same_files(tmp_path, ray_local):
    # chunking, NaN resamples and every metric are covered in test_bootstrap_ray.py
    a, b = tmp_path / "noray", tmp_path / "ray"
    assert invoke(SMALL, "--out", a, *FAST, "--no-ray").exit_code == 0
    r = invoke(SMALL, "--out", b, *FAST, "--ray", "--workers", 2)
    assert r.exit_code == 0, r.output
    for name in ("metrics.csv", "gaps.csv", "alignment.csv"):
        assert (a / "results" / name).read_bytes() == (b / "results" / name).read_bytes()
    assert np.isfinite(pd.read_csv(b / "results" / "metrics.csv").lo).all()


# ---------------------------------------------------------------------------
# the spec (flags, YAML) and the typed result
# ---------------------------------------------------------------------------


def test_spec_file_gives_the_flags_numbers_and_flags_given_override_it(tmp_path):
    import yaml

    flags = tmp_path / "flags"
    assert invoke(SMALL, "--out", flags, "--metrics", "ece,brier", "--bootstrap", "30", "--seed", "4",
                  "--no-tracking").exit_code == 0
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"input": str(SMALL), "out": "from_file", "metrics": ["ece", "brier"],
                                    "n_resamples": 99, "seed": 4, "track": False}), encoding="utf-8")
    r = invoke("--spec", spec, "--bootstrap", "30")  # the flag given wins; out is relative to the file
    assert r.exit_code == 0, r.output
    for name in ("metrics.csv", "gaps.csv", "alignment.csv"):
        assert (tmp_path / "from_file" / "results" / name).read_bytes() == (flags / "results" / name).read_bytes()
    params = json.loads((tmp_path / "from_file" / "analyze.json").read_text())["params"]
    assert params["n_resamples"] == 30 and params["metrics"] == ["ece", "brier"]
    spec.write_text(yaml.safe_dump({"input": str(SMALL), "out": "x", "n_resample": 5}), encoding="utf-8")
    r = invoke("--spec", spec)
    assert r.exit_code == 2 and "unknown option 'n_resample'" in r.output and "n_resamples" in r.output
    r = invoke("--metrics", "ece")
    assert r.exit_code == 2 and "INPUT: required" in r.output


def test_the_spec_is_frozen_checked_and_the_result_typed(tmp_path):
    spec = AnalyzeSpec(input=SMALL, out=tmp_path / "o", metrics="ece, Brier", n_resamples=20, track=False,
                       signal_pairs="verbalized:token")
    assert spec.metrics == ("ece", "brier") and spec.signal_pairs == (("verbalized", "token"),)
    with pytest.raises(Exception):
        spec.seed = 3
    for bad, says in (({"n_resamples": 0}, "--bootstrap (n_resamples): must be an integer >= 1"),
                      ({"interval": "wide"}, "--interval: 'wide'"), ({"level": 1.5}, "level: must lie in (0, 1)"),
                      ({"seed": "x"}, "--seed (seed)")):
        with pytest.raises(AnalyzeInputError, match=re.escape(says)):
            AnalyzeSpec(input=SMALL, out=tmp_path / "o", **bad)
    res = analyze(spec)
    assert res.road == "columns" and res.run_id is None and res.tracking_failure is None
    assert res["metrics"] is res.tables["metrics"] and not res["metrics"].attrs
    assert set(res["gaps"][["signal_a", "signal_b"]].itertuples(index=False, name=None)) == {("verbalized", "token")}


@pytest.mark.parametrize("field, value, says", [
    ("metrics", 5, "--metrics: 5; give names"), ("metrics", True, "--metrics: True"),
    ("ece_closure", {"a": 1}, "--ece-closure: {'a': 1}"), ("ece_conventions", 3, "--ece-convention: 3"),
    ("views", [1, 2], "--views: [1, 2]"), ("views", 7, "--views: 7"),
    ("pairs", [1, 2], "--pairs: [1, 2]"), ("pairs", True, "--pairs: True"),
    ("signal_pairs", 5, "--signal-pairs: 5"), ("signal_pairs", [1, 2], "--signal-pairs"),
    ("columns", ["setting"], "columns (--*-col): ['setting']"), ("columns", 5, "columns (--*-col): 5"),
    ("columns", {"setting": 3}, "columns (--*-col)"),
    ("n_resamples", True, "--bootstrap (n_resamples): must be an integer, got True"),
    ("chunk_size", False, "chunk_size: must"),
    ("ia_strata", True, "--ia-strata: must be an integer"),
    ("tracking_uri", "notauri", "--tracking-uri 'notauri' is not a URI"),
])
def test_a_value_of_the_wrong_shape_is_refused_naming_its_field(tmp_path, field, value, says):
    """From a breaker's walk-through: lists, mappings and booleans where they do not belong raised TypeError or
    AttributeError tracebacks, or (true as an integer) ran a 1-resample bootstrap; a tracking URI was checked only
    on the flag."""
    with pytest.raises(AnalyzeInputError, match=re.escape(says)):
        AnalyzeSpec(input=SMALL, out=tmp_path / "o", **{field: value})


def test_a_spec_file_with_a_bad_value_exits_2_with_one_line(tmp_path):
    import yaml

    spec = tmp_path / "spec.yaml"
    for data, says in (({"metrics": 5}, "--metrics: 5"), ({"columns": ["setting"]}, "columns (--*-col)"),
                       ({"verdicts": {"robust_min_setting": 2}}, "unknown option verdicts.robust_min_setting; "
                                                                 "choose from robust_point_share"),
                       ({"n_resamples": True}, "--bootstrap (n_resamples): must be an integer, got True"),
                       ({"tracking_uri": "notauri"}, "is not a URI")):
        spec.write_text(yaml.safe_dump({"input": str(SMALL), "out": "o", **data}), encoding="utf-8")
        r = invoke("--spec", spec)
        assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, (data, r.output)
    with pytest.raises(TypeError, match="AnalyzeSpec"):
        analyze(SMALL)


def test_a_corrupt_run_info_is_named_not_a_traceback(tmp_path):
    out = tmp_path / "o"
    assert invoke(SMALL, "--out", out, "--bootstrap", "20", "--no-tracking").exit_code == 0
    path = out / "results" / "run_info.json"
    for text in ("{not json", '{"command": "analyze", "n_bins": "ten"}'):
        path.write_text(text, encoding="utf-8")
        for cmd in ("show", "report"):
            r = runner.invoke(app, [cmd, str(out)])
            assert r.exit_code == 2 and "run_info.json: not a run-info record" in r.output, (cmd, text, r.output)


def test_analyze_writes_the_run_info_that_show_reads(tmp_path):
    from confgrid.flows.store.run_info import read_run_info

    out = tmp_path / "o"
    r = invoke(SMALL, "--out", out, "--bootstrap", "20", "--level", "0.9", "--ece-closure", "right,left",
               "--no-tracking")
    assert r.exit_code == 0, r.output
    info = json.loads((out / "results" / "run_info.json").read_text())
    assert info == {"command": "analyze", "name": None, "n_bins": 10, "ece_closure": ["right", "left"],
                    "ece_bin_confidence": ["mean"], "level": 0.9, "primary": {}}
    assert read_run_info(out).closure == "right"
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0 and "90% paired bootstrap interval" in shown.output


def test_each_input_is_read_by_its_registry_entry(tmp_path):
    from confgrid.flows.analyze.roads import ROADS, Road, road_for
    from confgrid.registry import UnknownNameError

    assert ROADS.names() == ["signal_table", "in_turn", "columns"]
    with pytest.raises(ValueError, match="signal_table"):
        ROADS.register("signal_table", ROADS.get("columns"))
    with pytest.raises(UnknownNameError, match="columns"):
        ROADS.get("feather")
    pq_path = tmp_path / "small.parquet"
    pd.read_csv(SMALL).to_parquet(pq_path)
    spec = lambda path, **kw: AnalyzeSpec(input=path, out=tmp_path / "o", track=False, **kw)  # noqa: E731
    assert road_for(spec(SMALL)).name == "columns"
    assert road_for(spec(pq_path)).name == "in_turn"
    assert road_for(spec(pq_path, in_turn=False)).name == "columns"
    with pytest.raises(AnalyzeInputError, match="--in-turn: needs a Parquet input"):
        road_for(spec(SMALL, in_turn=True))
    columns = ROADS.get("columns")  # a new entry is tried before the fallback, and reads through the same road
    ROADS.register("tsv", Road("tsv", "tab-separated", lambda s: s.input.suffix == ".tsv", columns.read))
    try:
        assert road_for(spec(tmp_path / "x.tsv")).name == "tsv" and road_for(spec(SMALL)).name == "columns"
    finally:
        ROADS.unregister("tsv")


def test_the_in_turn_road_gives_one_setting_at_a_time_and_frees_it(tmp_path):
    """The in-turn road reads a Parquet file one setting per part of signal rows, and the evaluator frees each
    part's arrays after its bootstrap (memory of one setting, not of the file); the tables equal the whole file's."""
    pq_path = tmp_path / "small.parquet"
    frame = pd.read_csv(SMALL)
    frame.sample(frac=1.0, random_state=0).to_parquet(pq_path, row_group_size=3)  # settings spread over groups
    spec = AnalyzeSpec(input=pq_path, out=tmp_path / "o", track=False, n_resamples=20)
    parts = list(ROADS.get("in_turn").read(spec))
    assert [p.table["setting"].unique().tolist() for p in parts] == [[s] for s in sorted(frame["setting"].unique())]
    assert sum(p.n_rows for p in parts) == len(frame)
    table = parts[0].table  # the run's signal rows (text as Categoricals)
    plain = table.assign(**{c: table[c].astype(object) for c in table.columns
                            if isinstance(table[c].dtype, pd.CategoricalDtype)})
    pd.testing.assert_frame_equal(plain, conform(plain))
    turn = evaluate_input(spec)
    assert turn.road == "in_turn" and all(u.confidence.shape[1] == 0 for u in turn.units)
    whole = evaluate_input(AnalyzeSpec(input=pq_path, out=tmp_path / "o", track=False, n_resamples=20,
                                       in_turn=False))
    assert whole.road == "columns" and [s.n_items for s in whole.settings] == [s.n_items for s in turn.settings]
    for a, b in zip(turn.results, whole.results, strict=True):
        np.testing.assert_array_equal(a.resamples, b.resamples)
