"""Cluster behaviour on real Ray (no mocks): kill-and-resubmit, resume, Jobs API submission."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from confgrid.flows.spec import parse_grid

ray = pytest.importorskip("ray")

GRID = {
    "name": "killtest",
    "models": [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 8}],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 64, "seed": 2}],
    "scoring": {"contexts": ["bare", "answer_slot", "guess_slot"]},
    "bootstrap": {"resamples": 100},
    "execution": {"shard_size": 4, "max_retries": 1},
}


@pytest.fixture(scope="module")
def ray_local():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _manifest(out: Path) -> list[dict]:
    return json.loads((out / "manifest.json").read_text())["shards"]


def test_killed_actor_then_resubmit_failed(ray_local, tmp_path):
    from confgrid.flows.runner import ShardFailures, run_grid

    spec = parse_grid(GRID)
    out = tmp_path / "run"
    errors: list[BaseException] = []

    def target():
        try:
            run_grid(spec, out)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=target)
    th.start()
    # wait until scoring has started, then kill the model actor mid-run
    deadline = time.time() + 300
    name = f"confgrid-fixture-0-{os.getpid()}"
    while time.time() < deadline:
        if (out / "shards" / "score").is_dir() and any((out / "shards" / "score").glob("*.parquet")):
            break
        time.sleep(0.02)
    ray.kill(ray.get_actor(name))
    th.join(600)
    assert errors and isinstance(errors[0], ShardFailures), errors
    failed = [r for r in _manifest(out) if r["status"] == "failed"]
    assert failed, "killing the actor mid-run must leave failed shards"
    assert all(r["stage"] == "score" for r in failed)
    assert all(r["error"] for r in failed)
    done_before = {r["key"] for r in _manifest(out) if r["status"] == "done"}

    summary = run_grid(spec, out, only_failed=True, resume=True)
    assert summary.computed_shards == len(failed)
    assert summary.model_calls > 0
    recs = _manifest(out)
    assert {r["status"] for r in recs} == {"done"}
    # every shard file written once, never twice; earlier shards untouched
    files = list((out / "shards" / "score").glob("*.parquet"))
    assert len(files) == len({r["key"] for r in recs if r["stage"] == "score"})
    assert done_before <= {r["key"] for r in recs}
    # every expected row exists exactly once
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    answered = graded[graded["answer"].notna() & (graded["answer"].str.strip() != "")]
    assert not scores.duplicated(["item_id", "context_id"]).any()
    assert len(scores) == 3 * len(answered)
    assert set(scores["item_id"]) == set(answered["item_id"])
    assert len(summary.metrics[summary.metrics["rule"] == "containment"]) == 4 * 3

    # resume on a finished run makes no model call
    again = run_grid(spec, out, resume=True)
    assert again.model_calls == 0 and again.computed_shards == 0


def test_failed_shards_keep_their_mlflow_run_on_resubmit(ray_local, tmp_path):
    """A model that cannot load fails its shards (recorded, run continues to the end); once fixed,
    `resubmit --failed` reruns exactly those shards (and their dependents) in the same MLflow runs."""
    import mlflow

    from confgrid.actors.fixture import FIXTURE_MODEL_DIR
    from confgrid.flows.runner import ShardFailures, run_grid

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{not json", encoding="utf-8")
    grid = dict(GRID, name="mlflowshards")
    grid["datasets"] = [{"name": "mmlu", "adapter": "mmlu", "limit": 8, "seed": 0}]
    grid["models"] = [{"name": "local", "model": str(model_dir)}]
    spec = parse_grid(grid)
    out = tmp_path / "run"
    with pytest.raises(ShardFailures) as ei:
        run_grid(spec, out)
    assert "config.json" in str(ei.value) or "JSON" in str(ei.value)
    failed = [r for r in _manifest(out) if r["status"] == "failed"]
    assert len(failed) == 2 and {r["stage"] for r in failed} == {"generate"}
    ids = {r["key"]: r["mlflow_run_id"] for r in failed}
    assert all(ids.values())

    shutil.rmtree(model_dir)
    shutil.copytree(FIXTURE_MODEL_DIR, model_dir)
    summary = run_grid(spec, out, only_failed=True, resume=True)
    after = {r["key"]: r for r in _manifest(out)}
    for key, rid in ids.items():
        assert after[key]["status"] == "done"
        assert after[key]["mlflow_run_id"] == rid and after[key]["attempts"] == 2
    # the failed generate shards and the score shards that depend on them: 2 + 2 x 3 contexts
    assert summary.computed_shards == 8
    assert len(summary.metrics[summary.metrics["rule"] == "containment"]) == 4 * 3
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["confgrid/mlflowshards"])
    shard_runs = runs[runs["tags.confgrid.kind"] == "shard"]
    assert len(shard_runs) == 8
    assert set(shard_runs["tags.confgrid.status"]) == {"done"}
    assert len(runs[runs["tags.confgrid.kind"] == "grid"]) == 1  # resubmit continued the parent run


@pytest.fixture()
def ray_head(tmp_path):
    """A real head node started with `ray start --head` on 127.0.0.1, serving the Jobs API."""
    if ray.is_initialized():
        ray.shutdown()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "disabled"}
    port, dash = "6391", "8267"
    subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)
    subprocess.run([ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--num-cpus=2",
                    "--include-dashboard=true", "--disable-usage-stats"], env=env, check=True,
                   capture_output=True, timeout=180)
    yield f"http://127.0.0.1:{dash}"
    subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_submit_through_jobs_api(ray_head, tmp_path):
    from typer.testing import CliRunner

    from confgrid.flows.cli import app

    grid = dict(GRID, name="jobtest")
    grid["datasets"] = [{"name": "mmlu", "adapter": "mmlu", "limit": 6, "seed": 0}]
    grid["bootstrap"] = {"resamples": 50}
    gpath = tmp_path / "grid.yaml"
    gpath.write_text(yaml.safe_dump(grid), encoding="utf-8")
    out = tmp_path / "jobout"
    res = CliRunner().invoke(app, ["submit", str(gpath), "--address", ray_head, "--out", str(out), "--wait"])
    assert res.exit_code == 0, res.output
    assert "SUCCEEDED" in res.output
    assert (out / "results" / "metrics.csv").is_file()
    m = pd.read_csv(out / "results" / "metrics.csv")
    assert set(m["signal"]) == {"verbalized", "token_bare", "token_answer_slot", "token_guess_slot"}
    job_id = res.output.split()[1].rstrip(";")
    st = CliRunner().invoke(app, ["status", "--job", job_id, "--address", ray_head])
    assert st.output.strip() == "SUCCEEDED"
    logs = CliRunner().invoke(app, ["logs", job_id, "--address", ray_head])
    assert "dataset mmlu: 6 items" in logs.output
