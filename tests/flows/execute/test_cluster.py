"""Failure semantics on real Ray (no mocks), with deterministic faults.

The faults are installed in Ray's worker processes by the tests
(tests/ray_faults.py, Ray's ``worker_process_setup_hook``; the product has no
fault hook): ``hang`` blocks a replica at a given engine call, ``hang_load``
before its model loads, and names it in a marker file; the test then kills
exactly that replica as a user or the OS would: ``ray.kill``, SIGKILL of its
process (Ray restarts the actor and retries its calls), Ctrl-C of the driver.
Nothing polls the disk for a moment to strike.

The Jobs API test starts its own head node (its own ``--temp-dir`` and ports)
and stops only that node's processes, never other Ray processes of the machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import ray_faults
from confgrid.actors.named_models import FIXTURE_MODEL_DIR
from confgrid.flows.runner import RunSummary, ShardFailures, run_grid
from confgrid.flows.spec.grid import parse_grid

ray = pytest.importorskip("ray")

GRID = {
    "name": "killtest",
    "models": [{"name": "hangs", "model": "confgrid-fixture", "batch_size": 8}],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 16, "seed": 2}],
    "scoring": {"contexts": ["bare", "answer_slot", "guess_slot"]},
    "bootstrap": {"resamples": 100},
    "execution": {"shard_size": 4, "max_retries": 1},
}
FAULT_DIR = Path(tempfile.mkdtemp(prefix="confgrid-faults-"))
HANG_MARKER = FAULT_DIR / "hang"
KILL_MARKER = FAULT_DIR / "sigkill"
LOAD_MARKER = FAULT_DIR / "sigkill-load"
STOP_MARKER = FAULT_DIR / "stop"
DIED_MARKER = FAULT_DIR / "engine-died"
GONE_MARKER = FAULT_DIR / "engine-died-no-restart"
FAULTS = (ray_faults.Fault("hangs", "hang", 5, HANG_MARKER), ray_faults.Fault("crashes", "hang", 3, KILL_MARKER),
          ray_faults.Fault("crashes_loading", "hang_load", 0, LOAD_MARKER),
          ray_faults.Fault("stops", "hang", 3, STOP_MARKER), ray_faults.Fault("dies", "engine_died", 3, DIED_MARKER),
          ray_faults.Fault("dies_for_good", "engine_died", 3, GONE_MARKER))


@pytest.fixture(scope="module")
def ray_local():
    if ray.is_initialized():
        ray.shutdown()
    with ray_faults.installed(FAULTS, num_cpus=2, include_dashboard=False, log_to_driver=False) as kwargs:
        ray.init(**kwargs)
        yield
        ray.shutdown()


def _run_sigkilled(name: str, model: str, marker: Path, out: Path, caplog) -> RunSummary:
    """Run GRID (named ``name``) on one replica of ``model`` and SIGKILL the replica's process once it hangs at
    its fault, as the OS would (Ray restarts the actor); asserts that the fault fired."""
    def kill():
        pid, _ = ray_faults.read_marker(marker)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    grid = dict(GRID, name=name, models=[{"name": model, "model": "confgrid-fixture", "batch_size": 8}])
    with caplog.at_level("INFO", logger="confgrid"):
        summary = run_grid(parse_grid(grid), out)
    killer.join(5)
    assert marker.exists()  # the fault did fire
    return summary


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _rows_exactly_once(out: Path, n_contexts: int = 3) -> None:
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    assert not graded.duplicated(["model", "item_id"]).any()
    answered = graded[graded["answer"].notna() & (graded["answer"].str.strip() != "")]
    assert not scores.duplicated(["model", "item_id", "context_id"]).any()
    assert len(scores) == n_contexts * len(answered)
    assert set(scores["item_id"]) == set(answered["item_id"])


def test_killed_replica_then_resubmit_failed(ray_local, tmp_path):
    """ray.kill of a replica in the middle of a call: its shards fail (recorded), the run ends with
    one error naming them, and `resubmit --failed` completes the run with every row exactly once."""
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
    _, name = ray_faults.read_marker(HANG_MARKER)
    ray.kill(ray.get_actor(name))  # the replica is inside call 6, deterministically
    th.join(600)
    assert errors and isinstance(errors[0], ShardFailures), errors
    shards = _manifest(out)["shards"]
    failed = [r for r in shards if r["status"] == "failed"]
    assert failed and all(r["error"] for r in failed)
    assert "resubmit" in str(errors[0])
    done_before = {r["key"] for r in shards if r["status"] == "done"}
    replicas = _manifest(out)["meta"]["replicas"]
    assert [r["state"] for r in replicas] == ["dead"]

    summary = run_grid(spec, out, only_failed=True, resume=True)
    recs = _manifest(out)["shards"]
    assert {r["status"] for r in recs} == {"done"}
    assert summary.computed_shards >= len(failed)
    # every shard file written once, never twice; earlier shards untouched
    for stage in ("generate", "score"):
        files = list((out / "shards" / stage).glob("*.parquet"))
        assert len(files) == len({r["key"] for r in recs if r["stage"] == stage})
    assert done_before <= {r["key"] for r in recs}
    _rows_exactly_once(out)
    assert len(summary.metrics[summary.metrics["rule"] == "containment"]) == 4 * 3

    again = run_grid(spec, out, resume=True)  # resume on a finished run makes no model call
    assert again.model_calls == 0 and again.computed_shards == 0 and again.model_loads == 0
    # the three invocations logged into one parent run and one child run per setting
    import mlflow

    runs = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}").search_runs(
        [mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}").get_experiment_by_name("confgrid/killtest")
         .experiment_id])
    kinds = [r.data.tags.get("confgrid.kind") for r in runs]
    assert kinds.count("grid") == 1 and kinds.count("setting") == 1
    assert len(_manifest(out)["meta"]["invocations"]) == 3


def test_interrupted_run_then_resume(ray_local, tmp_path, capfd):
    """Ctrl-C in the middle of a call: the in-flight shards are recorded as interrupted (neither done nor
    failed), the pools are released, the MLflow parent run is KILLED, and Ray prints no "will be retried" for
    the cancelled calls (issue 25); `resume` finishes every row once."""
    import _thread

    import mlflow

    grid = dict(GRID, name="stoptest")
    grid["models"] = [{"name": "stops", "model": "confgrid-fixture", "batch_size": 8}]
    spec = parse_grid(grid)
    out = tmp_path / "run"

    stopped = threading.Event()

    def stop_when_hung():
        ray_faults.read_marker(STOP_MARKER)
        # Ctrl-C, as a user presses it: again if the first press was lost (Ray defers SIGINT while it
        # deserializes a result in the main thread, and a simulated signal can be dropped then)
        for _ in range(6):
            _thread.interrupt_main()
            if stopped.wait(20):
                return

    import signal

    def watchdog(signum, frame):
        raise RuntimeError(f"Ctrl-C was not handled within 400 s (SIGINT handler: {signal.getsignal(signal.SIGINT)})")

    # a user's Ctrl-C reaches Python's default handler; an earlier test or library may have left another one
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_alarm = signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(400)  # fail, never hang, if the interrupt is lost
    threading.Thread(target=stop_when_hung, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                run_grid(spec, out)
            finally:
                stopped.set()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_alarm)
        signal.signal(signal.SIGINT, old_int)
    time.sleep(1.0)  # Ray's driver-side task messages are written asynchronously
    printed = capfd.readouterr()
    assert "will be retried" not in printed.out + printed.err
    man = _manifest(out)
    assert {r["status"] for r in man["shards"] if r["stage"] != "items"} >= {"done", "interrupted"}
    assert not [r for r in man["shards"] if r["status"] in ("running", "failed")]
    assert [r["state"] for r in man["meta"]["replicas"]] == ["released"]
    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    assert client.get_run(man["meta"]["mlflow_parent_run_id"]).info.status == "KILLED"
    summary = run_grid(spec, out, resume=True)
    assert summary.failed_shards == 0 and {r["status"] for r in _manifest(out)["shards"]} == {"done"}
    _rows_exactly_once(out)


@pytest.mark.slow  # about 40 s (CI budget); a model that cannot load is also in the resubmit test below
def test_a_model_that_cannot_load_leaves_the_others_results_whole(ray_local, tmp_path):
    """With the cross-model probe on, one model failing to load must not take the other model's metrics:
    they are computed, only the probe table waits for the missing answers (and fills in after resubmit)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{not json", encoding="utf-8")
    grid = dict(GRID, name="halfbroken", probe={"enabled": True, "kinds": ["canonical", "plausible_wrong", "own"],
                                                "resamples": 50})
    grid["datasets"] = [{"name": "mmlu", "adapter": "mmlu", "limit": 8, "seed": 0}]
    grid["models"] = [{"name": "good", "model": "confgrid-fixture"}, {"name": "broken", "model": str(model_dir)}]
    spec = parse_grid(grid)
    out = tmp_path / "run"
    with pytest.raises(ShardFailures) as ei:
        run_grid(spec, out)
    summary = ei.value.summary
    assert set(summary.metrics["model"]) == {"good"}
    assert not (out / "results" / "table17_probe.csv").exists()
    import shutil

    shutil.rmtree(model_dir)
    shutil.copytree(FIXTURE_MODEL_DIR, model_dir)
    after = run_grid(spec, out, only_failed=True, resume=True)
    assert set(after.metrics["model"]) == {"good", "broken"}
    probe = pd.read_parquet(out / "tables" / "probe.parquet")
    assert {"canonical", "own"} <= set(probe["kind"]) and set(probe["model"]) == {"good", "broken"}
    assert (out / "results" / "table17_probe.csv").is_file()


def _parent_metrics(out: Path) -> dict:
    import mlflow

    man = _manifest(out)
    client = mlflow.MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    return client.get_run(man["meta"]["mlflow_parent_run_id"]).data.metrics


def test_sigkill_restart_is_recorded(ray_local, tmp_path, caplog):
    """SIGKILL of a replica's process while it computes (issue 23 item 5): Ray restarts the actor and retries
    the calls in flight; the run completes, and the restart is in the manifest (replica: restarts and the
    reload; every shard that was in flight: attempts 2, restarts 1), the run summary, the log and the parent
    MLflow run."""
    out = tmp_path / "run"
    summary = _run_sigkilled("crashtest", "crashes", KILL_MARKER, out, caplog)
    man = _manifest(out)
    (rep,) = man["meta"]["replicas"]
    assert rep["restarts"] == 1 and rep["loads"] == 2
    assert man["meta"]["loads"] == {"crashes": 2}
    hit = [r for r in man["shards"] if r["restarts"]]
    assert hit and all(r["status"] == "done" and r["attempts"] == 2 and r["restarts"] == 1 for r in hit)
    assert all(r["attempts"] == 1 for r in man["shards"] if not r["restarts"] and r["stage"] != "items")
    assert {r["status"] for r in man["shards"]} == {"done"}
    assert summary.restarts == 1 and summary.failed_shards == 0
    assert man["meta"]["invocations"][-1]["restarts"] == 1
    assert "restarted its actor" in caplog.text
    assert _parent_metrics(out)["restarts"] == 1
    _rows_exactly_once(out)


def test_an_engine_that_dies_restarts_its_replica_and_its_calls_are_requeued(ray_local, tmp_path, caplog):
    """A replica whose engine died (issue 38: a tensor-parallel rank's process ended; here the backend raises
    EngineDied as a dead vLLM engine does, naming rank 1 of 2): the driver restarts the replica through Ray,
    puts the call's shards back in the queue, and the log names the rank. The tables equal an undisturbed run
    of the same grid (run second: the fault fires once), and the restart is in the manifest. (The same with a
    real vLLM rank killed: tests/vllm_cpu/test_tp_vllm.py.)"""
    grid = dict(GRID, name="enginedies")
    grid["models"] = [{"name": "dies", "model": "confgrid-fixture", "batch_size": 8}]
    spec = parse_grid(grid)
    with caplog.at_level("INFO", logger="confgrid"):
        summary = run_grid(spec, tmp_path / "run")
    assert DIED_MARKER.exists()  # the fault did fire
    assert "replica dies#0 on node" in caplog.text and "its engine died: rank 1 of 2 (pid 0)" in caplog.text
    assert "Ray restarts the replica" in caplog.text and "put back in the queue" in caplog.text
    man = _manifest(tmp_path / "run")
    (rep,) = man["meta"]["replicas"]
    assert rep["restarts"] == 1 and rep["loads"] == 2 and rep["state"] == "released"
    assert {r["status"] for r in man["shards"]} == {"done"} and summary.failed_shards == 0
    assert summary.restarts == 1
    _rows_exactly_once(tmp_path / "run")
    undisturbed = run_grid(spec, tmp_path / "again")
    assert undisturbed.restarts == 0
    for table in ("generations", "graded", "scores"):
        keys = ["item_id"] + (["context_id"] if table == "scores" else [])
        a = pd.read_parquet(tmp_path / "run" / "tables" / f"{table}.parquet").sort_values(keys, ignore_index=True)
        b = pd.read_parquet(tmp_path / "again" / "tables" / f"{table}.parquet").sort_values(keys, ignore_index=True)
        pd.testing.assert_frame_equal(a, b)


def test_an_engine_that_dies_with_no_restart_left_is_recorded_dead_naming_the_rank(ray_local, tmp_path, caplog):
    """The same with ``execution.max_retries: 0``: Ray may not restart the replica, so it is recorded dead with the
    rank in its error, and the model's remaining shards fail naming it (``resubmit --failed`` runs them)."""
    grid = dict(GRID, name="enginegone", execution={"shard_size": 4, "max_retries": 0})
    grid["models"] = [{"name": "dies_for_good", "model": "confgrid-fixture", "batch_size": 8}]
    with caplog.at_level("INFO", logger="confgrid"), pytest.raises(ShardFailures) as ei:
        run_grid(parse_grid(grid), tmp_path / "run")
    assert GONE_MARKER.exists()
    man = _manifest(tmp_path / "run")
    (rep,) = man["meta"]["replicas"]
    assert rep["state"] == "dead" and rep["restarts"] == 0 and rep["loads"] == 1
    assert "its engine died: rank 1 of 2 (pid 0)" in rep["error"]
    failed = [r for r in man["shards"] if r["status"] == "failed"]
    assert failed and all("rank 1 of 2" in r["error"] for r in failed)
    assert "resubmit" in str(ei.value)


def test_sigkill_while_the_model_loads_is_recorded(ray_local, tmp_path, caplog):
    """SIGKILL of a replica's process while its model loads (issue 23 item 5; a user's kill -9 4 s into the
    demo): no engine call sees the new process, yet the restart is counted from Ray's own restart count: on the
    replica, in the summary, the log and the parent MLflow run; every row exists once."""
    out = tmp_path / "run"
    summary = _run_sigkilled("loadcrash", "crashes_loading", LOAD_MARKER, out, caplog)
    man = _manifest(out)
    (rep,) = man["meta"]["replicas"]
    assert rep["restarts"] == 1 and rep["loads"] == 1  # one load finished: the killed one never did
    assert summary.restarts == 1 and summary.failed_shards == 0
    assert "while the model loaded" in caplog.text
    assert _parent_metrics(out)["restarts"] == 1
    _rows_exactly_once(out)


@pytest.mark.slow  # about 25 s (CI budget); resubmitting failed shards: test_killed_replica_then_resubmit_failed
def test_failed_shards_keep_their_mlflow_run_on_resubmit(ray_local, tmp_path):
    """A model that cannot load fails its shards (recorded, run continues to the end); once fixed,
    `resubmit --failed` reruns exactly those shards (and their dependents) in the same MLflow runs."""
    import mlflow

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{not json", encoding="utf-8")
    grid = dict(GRID, name="mlflowshards")
    grid["datasets"] = [{"name": "mmlu", "adapter": "mmlu", "limit": 8, "seed": 0}]
    grid["models"] = [{"name": "local", "model": str(model_dir)}]
    grid["execution"] = dict(GRID["execution"], mlflow_shard_runs=True)
    spec = parse_grid(grid)
    out = tmp_path / "run"
    with pytest.raises(ShardFailures) as ei:
        run_grid(spec, out)
    assert "could not be loaded" in str(ei.value)
    assert "config.json" in str(ei.value) or "JSON" in str(ei.value)
    failed = [r for r in _manifest(out)["shards"] if r["status"] == "failed"]
    assert len(failed) == 2 and {r["stage"] for r in failed} == {"generate"}
    assert all("\n" not in r["error"] for r in failed)  # one line each
    # the full traceback once: in the replica's manifest record and in the run's log file (issue 14, item 8)
    rep = _manifest(out)["meta"]["replicas"][0]
    assert 'File "' in rep["traceback"] and "transformers_backend.py" in rep["traceback"]  # the remote frames
    run_log = (out / "confgrid.log").read_text()
    assert run_log.count("ping failed") == 1 and "transformers_backend.py" in run_log
    ids = {r["key"]: r["mlflow_run_id"] for r in failed}
    assert all(ids.values())

    import shutil

    shutil.rmtree(model_dir)
    shutil.copytree(FIXTURE_MODEL_DIR, model_dir)
    summary = run_grid(spec, out, only_failed=True, resume=True)
    after = {r["key"]: r for r in _manifest(out)["shards"]}
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def ray_head():
    """A head node of our own: `ray start --head` with its own --temp-dir and free ports; stopped by the
    ids of its own processes (never `ray stop`, which would end every Ray process on the machine)."""
    import psutil

    if ray.is_initialized():
        ray.shutdown()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="cgr", dir="/tmp")  # short: Ray's socket paths must stay under 108 chars
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "disabled"}
    env.pop(ray_faults.ENV, None)
    dash = _free_port()
    subprocess.run([ray_bin, "start", "--head", f"--port={_free_port()}", "--node-ip-address=127.0.0.1",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--num-cpus=2",
                    f"--temp-dir={temp}", "--include-dashboard=true", "--disable-usage-stats"],
                   env=env, check=True, capture_output=True, timeout=180)
    try:
        yield f"http://127.0.0.1:{dash}"
    finally:
        ours = [p for p in psutil.process_iter(["cmdline"]) if temp in " ".join(p.info["cmdline"] or [])]
        procs = {p.pid: p for p in ours}
        for p in ours:
            try:
                procs.update({c.pid: c for c in p.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
        for p in procs.values():
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(list(procs.values()), timeout=8)
        for p in alive:
            p.kill()


@pytest.mark.slow  # a second Ray head and a job: over a minute on 2 cores; run with -m slow
def test_submit_through_jobs_api(ray_head, tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    grid = dict(GRID, name="jobtest")
    grid["models"] = [{"name": "fixture", "model": "confgrid-fixture", "batch_size": 8}]
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
