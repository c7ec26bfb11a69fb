"""End to end on the real stack: Ray actor, transformers backend, Parquet, MLflow.

A small grid (the bundled fixture model, 3 datasets x 24 questions, 200
resamples) runs through `run_grid` exactly as `confgrid run` does; a second run
of the same grid must make zero model calls.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from confgrid.analysis.conventions import CONVENTIONS
from confgrid.analysis.signals import analyzed
from confgrid.cli.main import app
from confgrid.flows.evaluate.run_evaluation import primary_group
from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import load_grid, parse_grid
from confgrid.flows.store.run_store import read_manifest
from confgrid.flows.tracking import default_tracking_uri
from confgrid.report import FigureOptions, RunTables, write_figures
from confgrid.report.html import _log_mlflow

ray = pytest.importorskip("ray")

GRID = {
    "name": "e2e",
    "models": [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 16}],
    "datasets": [
        {"name": "truthfulqa", "adapter": "truthfulqa", "limit": 24, "seed": 1},
        {"name": "triviaqa", "adapter": "triviaqa", "limit": 24, "seed": 1},
        {"name": "mmlu", "adapter": "mmlu", "limit": 24, "seed": 1},
    ],
    "bootstrap": {"resamples": 200, "seed": 3},
}


@pytest.fixture(scope="module")
def first_run(ray_local, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    spec = parse_grid(GRID)
    return spec, out, run_grid(spec, out)


def test_tables_exist_with_protocol_columns(first_run):
    _, out, summary = first_run
    for stage in ("items", "generations", "graded", "scores", "signals"):
        assert (out / "tables" / f"{stage}.parquet").is_file(), stage
    gen = pd.read_parquet(out / "tables" / "generations.parquet")
    assert len(gen) == 72 and set(gen["dataset"]) == {"truthfulqa", "triviaqa", "mmlu"}
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    assert {"answer", "verbalized", "parse_status", "correct_containment", "correct_exact_match", "correct"} <= set(graded.columns)
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    assert set(scores["context_id"]) == {"bare", "answer_slot", "guess_slot"}
    assert (scores["n_tokens"] == scores["logprobs"].map(len)).all()
    assert ((scores["token_score"] > 0) & (scores["token_score"] <= 1)).all()
    # the token score is the geometric mean of the stored per-token probabilities
    r = scores.iloc[0]
    assert math.isclose(r["token_score"], math.exp(sum(r["logprobs"]) / len(r["logprobs"])), rel_tol=1e-12)


def test_metrics_with_intervals_for_every_signal(first_run):
    _, out, summary = first_run
    assert set(summary.metrics["rule"]) == {"containment", "exact_match"}  # every rule is analyzed
    m = summary.metrics[summary.metrics["rule"] == "containment"]
    assert set(m["signal"]) == {"verbalized", "token_bare", "token_answer_slot", "token_guess_slot"}
    assert set(m["metric"]) == {"ece", "auroc", "aurc"}
    assert len(m) == 3 * 4 * 3
    ok = m.dropna(subset=["point"])
    assert (ok["lo"] <= ok["point"] + 1e-12).all() and (ok["point"] <= ok["hi"] + 1e-12).all()
    assert not summary.gaps.empty and not summary.shifts.empty
    # the gap is verbalized minus token on the point estimates
    one = m[(m["setting"] == "fixture/triviaqa") & (m["metric"] == "ece")].set_index("signal")["point"]
    g = summary.gaps.query("setting == 'fixture/triviaqa' and metric == 'ece' and context == 'bare' "
                           "and rule == 'containment'")["gap"].item()
    assert g == pytest.approx(one["verbalized"] - one["token_bare"], abs=1e-12)
    assert (out / "results" / "metrics.csv").is_file() and (out / "results" / "report.md").is_file()


def test_mlflow_parent_and_child_runs(first_run):
    import mlflow

    _, out, summary = first_run
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["confgrid/e2e"])
    parent = runs[runs["run_id"] == summary.parent_run_id]
    assert len(parent) == 1
    kids = runs[runs["tags.mlflow.parentRunId"] == summary.parent_run_id]
    children = kids[kids["tags.confgrid.kind"] == "setting"]
    assert sorted(children["tags.mlflow.runName"]) == ["fixture/mmlu", "fixture/triviaqa", "fixture/truthfulqa"]
    # shards live in the manifest (an artifact of the parent run); per-shard runs are opt-in
    assert summary.computed_shards == 12  # 3 datasets x (1 generate + 3 score) shards of 24 items
    assert not (kids["tags.confgrid.kind"] == "shard").any()
    assert set(children["params.scoring.aggregations"]) == {"geometric_mean"}
    assert set(children["params.model.id"]) == {"confgrid-fixture"}
    # one metric vocabulary with `confgrid analyze`: <signal>/<metric>/{point,lo,hi}, gap/<a>-<b>/<metric>/...
    assert children["metrics.verbalized/ece/point"].notna().all()
    assert children["metrics.token_bare/auroc/hi"].notna().all()
    assert children["metrics.gap/verbalized-token_bare/ece/point"].notna().all()
    # the run directory is self-contained: artifacts under OUT/mlartifacts, none in the working directory
    client = mlflow.tracking.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    uri = client.get_run(summary.parent_run_id).info.artifact_uri
    assert uri.startswith((out / "mlartifacts").as_uri()), uri
    arts = {a.path for a in client.list_artifacts(summary.parent_run_id)}
    assert {"manifest.json", "grid.yaml", "results", "tables"} <= arts
    assert (out / "mlartifacts").is_dir()
    # issue 22: the verdicts on the parent run, comparable across runs in the UI
    verdicts = pd.read_csv(out / "results" / "verdicts.csv").set_index(["signal_a", "signal_b", "metric"])
    got = client.get_run(summary.parent_run_id).data
    share = verdicts.loc[("verbalized", "token", "ece"), "share_a_better"]
    assert got.metrics["verdict/verbalized-token/ece/share_a_better"] == pytest.approx(share)
    assert got.tags["confgrid.verdict.verbalized-token.ece"].startswith(verdicts.loc[("verbalized", "token", "ece"),
                                                                                     "verdict"])


def test_second_run_makes_no_model_calls(first_run, caplog):
    spec, out, first = first_run
    assert first.model_calls > 0
    with caplog.at_level("INFO", logger="confgrid"):
        again = run_grid(spec, out)
    assert again.model_calls == 0 and again.computed_shards == 0
    assert again.reused_shards == first.computed_shards
    assert "reusing" in caplog.text
    pd.testing.assert_frame_equal(first.metrics, again.metrics)


def test_changing_only_downstream_axes_reruns_no_model(first_run, tmp_path):
    spec, out, _ = first_run
    grid = dict(GRID)
    grid["metrics"] = {"names": ["ece", "auroc", "aurc"], "ece_bins": 15}
    grid["correctness"] = {"rules": ["exact_match", "containment"], "primary": "exact_match"}
    grid["scoring"] = {"aggregations": ["min_probability", "geometric_mean"]}
    again = run_grid(parse_grid(grid), out)
    assert again.model_calls == 0 and again.computed_shards == 0
    assert set(again.metrics["aggregation"]) == {"", "min_probability", "geometric_mean"}
    # the primary aggregation is the first: token_<context> now reads the minimum token probability
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    r = scores.iloc[0]
    assert r["token_score"] == pytest.approx(math.exp(min(r["logprobs"])), rel=1e-12)


def test_every_binned_name_a_grid_accepts_computes_what_it_names(first_run, tmp_path):
    """Issue 36: named closures, bin confidences, centred bins and every convention, in one grid run (no model
    call), each equal, on every signal, to the reference of its name on the rows that enter the metrics."""
    import shutil

    from reference.ece_conventions import PROJECTS, ece_spelled

    out = tmp_path / "copy"  # a copy of the run: the other tests read the first run's grid and results
    shutil.copytree(first_run[1], out, ignore=shutil.ignore_patterns("results", "mlflow.db*", "mlartifacts"))
    names = ["ece_right", "ece_15_left_float_midpoint", "ece_11_centred_midpoint", "ece_equal_mass_right"]
    grid = {**GRID, "metrics": {"names": names, "ece_conventions": list(CONVENTIONS)},
            "bootstrap": {"resamples": 20, "seed": 3}}
    again = run_grid(parse_grid(grid), out)
    assert again.model_calls == 0
    m = again.metrics
    assert set(m["metric"]) == {*names, *(f"ece_{c}" for c in CONVENTIONS)}
    rows = analyzed(pd.read_parquet(out / "tables" / "signals.parquet"))
    checked = 0
    for r in m.itertuples():
        g = rows[(rows["setting"] == r.setting) & (rows["signal"] == r.signal) & (rows["answer_set"] == r.answer_set)
                 & (rows["parse_policy"] == r.parse_policy) & (rows["refusal"] == r.refusal) & (rows["rule"] == r.rule)
                 & (rows["context"] == r.context) & (rows["aggregation"] == r.aggregation)]
        if len(g) != r.n:
            continue  # a signal evaluated on an aligned support: its rows are checked through analyze's tests
        c, y = g["confidence"].to_numpy(), g["target"].to_numpy()
        conv = r.metric.removeprefix("ece_")
        ref = PROJECTS[conv](c, y) if conv in PROJECTS else ece_spelled(r.metric, c, y)
        assert r.point == pytest.approx(ref, abs=1e-12), (r.setting, r.signal, r.metric)
        checked += 1
    assert checked >= len(set(m["metric"])) * 3


@pytest.mark.slow  # about 22 s (CI budget); damaged shards and manifests: tests/flows/store/test_store_integrity.py
def test_resume_recomputes_a_damaged_shard_and_rebuilds_a_damaged_manifest(first_run, tmp_path, caplog):
    """Issue 14, items 1-2: a truncated shard and a garbage manifest cost one shard's recomputation, no crash."""
    import shutil


    spec, out, first = first_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    victim = sorted((copy / "shards" / "score").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with caplog.at_level("WARNING", logger="confgrid"):
        again = run_grid(spec, copy, resume=True)
    assert str(victim) in caplog.text and again.computed_shards == 1
    assert victim.is_file() and (copy / "damaged").is_dir()
    pd.testing.assert_frame_equal(first.metrics, again.metrics)
    (copy / "manifest.json").write_text("{ garbage")
    third = run_grid(spec, copy, resume=True)
    assert third.computed_shards == 0 and third.model_calls == 0
    pd.testing.assert_frame_equal(first.metrics, third.metrics)

    settings = {r["setting"] for r in read_manifest(copy / "manifest.json")["shards"]}
    assert not any(s.startswith("recovered:") for s in settings)


def test_no_tracking_server_the_run_writes_everything_exits_3_and_log_logs_it(first_run, tmp_path):
    # a copy of the finished run, without its results and MLflow store: every shard is reused, no model call
    import shutil
    import socket

    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner


    _, out, _ = first_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("results", "mlflow.db*", "mlartifacts"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    cli = CliRunner()
    r = cli.invoke(app, ["run", str(copy / "grid.yaml"), "--out", str(copy), "--tracking-uri", dead])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.stderr
    assert f"MLflow tracking failed ({dead}): no MLflow server answers at {dead}" in r.stderr
    assert f"confgrid log {copy} --tracking-uri {dead}" in r.stderr
    # the report is written all the same (figures not sent to the dead store), and its path printed
    assert f"Report: {copy / 'report.html'}" in r.stdout
    assert (copy / "results" / "figures" / "reliability__fixture__triviaqa.png").is_file()
    for name in ("metrics.parquet", "gaps.parquet", "settings.csv", "report.md", "checklist.json"):
        assert (copy / "results" / name).is_file(), name
    assert not (copy / "mlflow.db").exists()

    uri = f"sqlite:///{tmp_path / 'later.db'}"
    r = cli.invoke(app, ["log", str(copy), "--tracking-uri", uri])
    assert r.exit_code == 0, r.output
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("confgrid/e2e").experiment_id])
    parent = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
    assert len(parent) == 1 and parent[0].info.run_id in r.output and parent[0].info.status == "FINISHED"
    assert parent[0].data.metrics["model_calls"] == 0 and parent[0].data.metrics["shards_computed"] == 0
    kids = {x.info.run_name: x.data.metrics for x in runs if x.data.tags.get("mlflow.parentRunId")}
    assert sorted(kids) == ["fixture/mmlu", "fixture/triviaqa", "fixture/truthfulqa"]
    spec = load_grid(copy / "grid.yaml")
    m = pd.read_parquet(copy / "results" / "metrics.parquet")
    for k, v in primary_group(spec).items():
        m = m[m[k] == v]
    row = m[(m["setting"] == "fixture/triviaqa") & (m["signal"] == "verbalized") & (m["metric"] == "ece")]
    assert kids["fixture/triviaqa"]["verbalized/ece/point"] == pytest.approx(row["point"].item(), abs=1e-12)
    assert {a.path for a in client.list_artifacts(parent[0].info.run_id)} >= {"manifest.json", "grid.yaml", "results",
                                                                            "tables", "report.html"}
    figs = {a.path for a in client.list_artifacts(parent[0].info.run_id, "results/figures")}
    assert {"results/figures/gaps.png", "results/figures/gaps.svg"} <= figs


def test_figures_go_into_the_runs_mlflow_parent_run(first_run):
    """`confgrid run` ends with write_report, which logs the figures into the run's parent run (the store the
    run opened; here one family only, to keep the test short)."""
    from mlflow.tracking import MlflowClient


    _, out, _ = first_run
    figs = write_figures(RunTables(out), out / "results" / "figures", FigureOptions(width_px=400, dpi=50),
                         families=["gaps"])
    paths = [figs.files[0].png, figs.files[0].svg]
    assert _log_mlflow(out, RunTables(out), paths) is None

    parent = read_manifest(out / "manifest.json")["meta"]["mlflow_parent_run_id"]  # the latest run into `out`
    logged = {a.path for a in MlflowClient(default_tracking_uri(out)).list_artifacts(parent, "results/figures")}
    assert logged == {"results/figures/gaps.png", "results/figures/gaps.svg"}


# ---------------------------------------------------------------------------
# a team's tracking server: `mlflow server --serve-artifacts`, chosen through MLFLOW_TRACKING_URI
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real ``mlflow server`` for the module (tests/mlflow_server.py), with folders no run shares."""
    from mlflow_server import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow_server")) as srv:
        yield srv


@pytest.fixture(scope="module")
def server_run(first_run, server, tmp_path_factory):
    """A copy of the finished run, run again by ``confgrid run`` with only ``MLFLOW_TRACKING_URI`` pointing at
    the server (every shard reused): ``(copy, CLI result)``."""
    import shutil

    from typer.testing import CliRunner


    _, out, _ = first_run
    copy = tmp_path_factory.mktemp("client") / "run"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("results", "mlflow.db*", "mlartifacts"))
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", server.url)
    try:
        r = CliRunner().invoke(app, ["run", str(copy / "grid.yaml"), "--out", str(copy)])
    finally:
        mp.undo()
    return copy, r


def test_a_tracking_server_from_the_environment_receives_the_run_and_serves_its_artifacts(server, server_run,
                                                                                           tmp_path):
    import hashlib
    import json

    from mlflow.tracking import MlflowClient


    copy, r = server_run
    assert r.exit_code == 0, r.output
    meta = read_manifest(copy / "manifest.json")["meta"]
    parent_id = meta["mlflow_parent_run_id"]
    assert f"MLflow parent run {parent_id} in {server.url}" in r.stdout
    assert f"MLflow tracking URI {server.url} (from MLFLOW_TRACKING_URI)" in (copy / "confgrid.log").read_text()
    assert meta["custom_tracking_uri"] == server.url and meta["tracking_uri_source"] == "MLFLOW_TRACKING_URI"
    # nothing of MLflow's in the run folder: the store and the artifacts are the server's
    assert not (copy / "mlflow.db").exists() and not (copy / "mlartifacts").exists()
    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name("confgrid/e2e")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs table
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED" and parent.info.artifact_uri.startswith("mlflow-artifacts:/")
    # an artifact goes through the server and comes back byte for byte; the server's folder holds it
    got = Path(client.download_artifacts(parent_id, "grid.yaml", str(tmp_path)))
    assert got.read_bytes() == (copy / "grid.yaml").read_bytes()
    assert len(list(server.artifact_root.rglob("grid.yaml"))) == 1
    assert {"results", "tables", "manifest.json", "report.html"} <= {a.path for a in client.list_artifacts(parent_id)}
    # each setting run: its dataset as an input (name, digest of its item ids, source) and its model
    items = pd.read_parquet(copy / "tables" / "items.parquet", columns=["dataset", "item_id"])
    kids = [x for x in client.search_runs([exp.experiment_id]) if x.data.tags.get("mlflow.parentRunId") == parent_id]
    assert sorted(k.info.run_name for k in kids) == ["fixture/mmlu", "fixture/triviaqa", "fixture/truthfulqa"]
    for kid in kids:
        name = kid.info.run_name.split("/")[1]
        (inp,) = kid.inputs.dataset_inputs
        ids = sorted(items.loc[items["dataset"] == name, "item_id"])
        assert len(ids) == 24
        assert inp.dataset.name == name and inp.dataset.source_type == "bundled"
        assert inp.dataset.digest == hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        assert json.loads(inp.dataset.source) == {"path": f"bundled:{name}"}
        assert [t.value for t in inp.tags if t.key == "mlflow.data.context"] == ["evaluation"]
        (out_model,) = kid.outputs.model_outputs  # the runs table's Models column
        model = client.get_logged_model(out_model.model_id)
        assert model.name == "fixture" and model.params["model_id"] == "confgrid-fixture"
        assert model.params["revision"] == "" and model.source_run_id == kid.info.run_id
        assert [m.model_id for m in client.get_run(kid.info.run_id).inputs.model_inputs] == [model.model_id]


def test_the_mlflow_ui_lists_the_setting_runs_with_their_metrics(server, server_run, capsys):
    """Headless Chromium opens the experiment in the server's UI on the runs table (not the GenAI traces page),
    adds a metric column, expands the parent run and finds the three setting runs with their datasets."""
    from chromium import artifact_dir, browser
    from mlflow.tracking import MlflowClient

    _, r = server_run
    assert r.exit_code == 0, r.output
    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name("confgrid/e2e")
    datasets = {x.inputs.dataset_inputs[0].dataset.name: x.inputs.dataset_inputs[0].dataset.digest
                for x in client.search_runs([exp.experiment_id]) if x.inputs.dataset_inputs}
    assert sorted(datasets) == ["mmlu", "triviaqa", "truthfulqa"]
    kept = artifact_dir() / "mlflow_ui_runs.png"
    with browser() as b:
        page = b.new_page(viewport={"width": 1600, "height": 1000})
        # MLflow 3.17: the "Model training" side of the UI's GenAI / Model training switch (README)
        page.goto(f"{server.url}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning",
                  wait_until="domcontentloaded", timeout=120_000)  # the UI polls: never network-idle
        page.locator(".ag-row").first.wait_for(timeout=120_000)
        page.get_by_role("button", name="Columns").click(timeout=30_000)
        page.get_by_text("verbalized/ece/point").first.click(timeout=30_000)
        page.keyboard.press("Escape")
        # the parent run's "+" (its run-name cell) shows its child runs
        page.locator('.ag-row button[data-component-id*="runnamecellrenderer"]').first.click(timeout=30_000)
        page.get_by_text("fixture/truthfulqa").first.wait_for(timeout=60_000)
        text = page.inner_text("body")
        page.screenshot(path=str(kept), full_page=True)
    assert "No data available" not in text
    for name in ("fixture/mmlu", "fixture/triviaqa", "fixture/truthfulqa"):
        assert name in text, name
    assert "verbalized/ece/point" in text
    for name, digest in datasets.items():  # the Dataset column: name (digest)
        assert f"{name} ({digest[:8]}" in text or f"{name} ({digest})" in text, (name, digest)
    assert kept.stat().st_size > 10_000
    with capsys.disabled():  # printed past pytest's capture, so the path shows in the test output
        print(f"\nMLflow UI screenshot: {kept}")
