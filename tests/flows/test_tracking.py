"""MLflow tracking of a run directory: artifacts inside it, and a moved directory still finds them."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from confgrid.flows.tracking import ARTIFACT_DIR, Tracker, default_tracking_uri, relocate_artifacts, result_metrics


def _log_one(out, text: str = "hello") -> tuple[str, str]:
    tracker = Tracker(default_tracking_uri(out), "confgrid/moved")
    f = out / "note.txt"
    f.write_text(text, encoding="utf-8")
    with tracker.parent("grid", {"a": 1}) as pid:
        kid = tracker.child("m/d", {"x": 1}, {"verbalized/ece/point": 0.25}, [f])
        tracker.log_artifacts([f], "results")
    return pid, kid


def test_artifacts_live_in_the_run_directory(tmp_path):
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    out.mkdir()
    pid, kid = _log_one(out)
    client = MlflowClient(default_tracking_uri(out))
    assert client.get_run(pid).info.artifact_uri.startswith((out / ARTIFACT_DIR).resolve().as_uri())
    assert (out / ARTIFACT_DIR).is_dir()
    assert [a.path for a in client.list_artifacts(kid)] == ["note.txt"]


def test_a_moved_run_directory_finds_its_artifacts(tmp_path):
    from mlflow.tracking import MlflowClient

    old = tmp_path / "old" / "run"
    old.mkdir(parents=True)
    pid, kid = _log_one(old)
    new = tmp_path / "elsewhere" / "run"
    shutil.move(str(old.parent), str(new.parent))
    assert not old.exists()
    Tracker(default_tracking_uri(new), "confgrid/moved")  # any confgrid command opening the store
    client = MlflowClient(default_tracking_uri(new))
    uri = client.get_run(kid).info.artifact_uri
    assert uri.startswith((new / ARTIFACT_DIR).resolve().as_uri()), uri
    local = client.download_artifacts(kid, "note.txt", str(tmp_path))
    assert open(local, encoding="utf-8").read() == "hello"
    assert relocate_artifacts(new / "mlflow.db") == 0  # nothing left to rewrite
    # and logging goes on into the new place
    t = Tracker(default_tracking_uri(new), "confgrid/moved")
    t.open_parent(run_id=pid, run_name="grid", params={})
    assert MlflowClient(default_tracking_uri(new)).get_experiment(t.experiment_id).artifact_location.startswith(
        (new / ARTIFACT_DIR).resolve().as_uri())


def test_result_metrics_one_vocabulary():
    m = pd.DataFrame({"signal": ["verbalized", "token_bare"], "metric": ["ece", "ece"], "point": [0.2, 0.1],
                      "lo": [0.1, 0.05], "hi": [0.3, 0.15]})
    g = pd.DataFrame({"signal_a": ["verbalized"], "signal_b": ["token_bare"], "metric": ["ece"], "gap": [0.1],
                      "lo": [0.0], "hi": [0.2]})
    out = result_metrics(m, g)
    assert out["verbalized/ece/point"] == 0.2 and out["token_bare/ece/hi"] == 0.15
    assert out["gap/verbalized-token_bare/ece/point"] == pytest.approx(0.1)
    assert len(out) == 9


# ---------------------------------------------------------------------------
# a store that fails: shared SQLite, locked database, no server
# ---------------------------------------------------------------------------


def free_port() -> int:
    """A local TCP port nothing listens on (bound once by the OS, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # about 16 s (CI budget); run with -m slow
def test_four_analyze_processes_share_one_fresh_sqlite_store(tmp_path):
    # four writers start together on a store that does not exist yet: without the lock they race through
    # MLflow's migrations (duplicate column, _alembic_tmp_* exists) and lose their runs
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    small = Path(__file__).parents[1] / "fixtures" / "analyze_small.csv"
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-m", "confgrid.cli.main", "analyze", str(small), "--out",
                               str(tmp_path / f"o{i}"), "--bootstrap", "20", "--tracking-uri", uri],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(4)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errs
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("confgrid/analyze")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 4 and len(runs) == 4 + 4 * 2  # a child per setting (m1/d1, m2/d1)
    assert {r.info.status for r in runs} == {"FINISHED"}
    # the store is whole: a later open (what `confgrid run` does at its start) works and logs
    t = Tracker(uri, "confgrid/later")
    with t.parent("later", {"a": 1}):
        kid = t.child("m/d", {}, {"x/ece/point": 0.5}, [])
    assert client.get_run(kid).data.metrics == {"x/ece/point": 0.5}


def test_a_locked_database_is_retried_other_errors_are_not():
    import sqlite3

    from mlflow.exceptions import MlflowException

    from confgrid.flows.tracking import _Retrying

    def locked():
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as e:  # MLflow wraps the driver's error
            raise MlflowException(f"(sqlite3.OperationalError) {e}") from e

    class Flaky:
        def __init__(self, fails: int, error=locked):
            self.calls, self.fails, self.error = 0, fails, error

        def log_batch(self, run_id):
            self.calls += 1
            if self.calls <= self.fails:
                self.error()
            return run_id

    slept = []
    ok = Flaky(fails=2)
    assert _Retrying(ok, waits=(0.1, 0.2, 0.4), sleep=slept.append).log_batch("r") == "r"
    assert ok.calls == 3 and slept == [0.1, 0.2]
    slept.clear()
    never = Flaky(fails=10)
    with pytest.raises(MlflowException, match="database is locked"):
        _Retrying(never, waits=(0.1, 0.2), sleep=slept.append).log_batch("r")
    assert never.calls == 3 and slept == [0.1, 0.2]  # bounded: len(waits) retries
    other = Flaky(fails=1, error=lambda: (_ for _ in ()).throw(MlflowException("RESOURCE_DOES_NOT_EXIST")))
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        _Retrying(other, waits=(0.1,), sleep=slept.append).log_batch("r")
    assert other.calls == 1


def test_probe_server_fails_fast_when_nothing_answers_and_passes_any_http_answer():
    import threading
    import time as _time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from confgrid.flows.tracking import TrackingUnavailable, probe_server

    port = free_port()
    t0 = _time.time()
    with pytest.raises(TrackingUnavailable, match=rf"no MLflow server answers at http://127.0.0.1:{port} .*refused"):
        probe_server(f"http://127.0.0.1:{port}")
    assert _time.time() - t0 < 2

    class NotFound(BaseHTTPRequestHandler):  # a server without /health still answers
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        probe_server(f"http://127.0.0.1:{srv.server_port}/")
    finally:
        srv.shutdown()
        srv.server_close()
    probe_server("sqlite:////nowhere/mlflow.db")  # not a server: not probed


# ---------------------------------------------------------------------------
# which store, and what a setting run says about its dataset and model
# ---------------------------------------------------------------------------


def test_tracking_uri_precedence_option_recorded_environment_folder(tmp_path):
    from confgrid.flows.tracking import choose_tracking_uri

    env = {"MLFLOW_TRACKING_URI": "http://team:5000"}
    folder = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert choose_tracking_uri("http://given:1", tmp_path, recorded="http://rec:2", environ=env).source == "--tracking-uri"
    c = choose_tracking_uri(None, tmp_path, recorded="http://rec:2", environ=env)
    assert (c.uri, c.source) == ("http://rec:2", "recorded")
    c = choose_tracking_uri(None, tmp_path, recorded=None, environ=env)
    assert (c.uri, c.source) == ("http://team:5000", "MLFLOW_TRACKING_URI")
    assert c.line() == "MLflow tracking URI http://team:5000 (from MLFLOW_TRACKING_URI)"
    for unset in ({}, {"MLFLOW_TRACKING_URI": ""}):
        c = choose_tracking_uri("", tmp_path, recorded="", environ=unset)
        assert (c.uri, c.source) == (folder, "run folder")


def test_a_run_folder_records_the_store_from_the_environment_and_logs_it(tmp_path, monkeypatch, caplog):
    import logging

    from confgrid.flows.runner import _tracking_uri
    from confgrid.flows.store.run_store import RunStore

    store = RunStore(tmp_path / "run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://team:5000")
    with caplog.at_level(logging.INFO, logger="confgrid"):
        assert _tracking_uri(store, None) == "http://team:5000"
    assert "MLflow tracking URI http://team:5000 (from MLFLOW_TRACKING_URI)" in caplog.text
    assert store.meta["custom_tracking_uri"] == "http://team:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # a resume elsewhere continues in the same store
    assert _tracking_uri(store, None) == "http://team:5000" and store.meta["tracking_uri_source"] == "recorded"
    assert _tracking_uri(store, "sqlite:///x.db") == "sqlite:///x.db"  # the option wins, and is kept
    assert _tracking_uri(store, None) == "sqlite:///x.db"
    fresh = RunStore(tmp_path / "other")
    assert _tracking_uri(fresh, None) == f"sqlite:///{(tmp_path / 'other').resolve() / 'mlflow.db'}"
    assert fresh.meta["custom_tracking_uri"] is None and fresh.meta["tracking_uri_source"] == "run folder"


def test_items_digest_is_of_the_set_of_ids_and_model_names_are_made_valid():
    import hashlib

    from confgrid.flows.tracking import items_digest, model_name

    ref = hashlib.sha256(b"q1\nq10\nq2").hexdigest()[:16]  # sorted as strings
    assert items_digest(["q2", "q10", "q1"]) == ref == items_digest(["q1", "q2", "q10", "q2"])
    assert items_digest(["q1"]) != items_digest(["q1", "q2"]) and len(ref) == 16
    with pytest.raises(ValueError, match="item_ids: no item id"):
        items_digest([])
    assert model_name("Qwen/Qwen2.5-7B:it's") == "Qwen-Qwen2-5-7B-it-s" and model_name("fixture") == "fixture"


def test_experiment_kind_tag_dataset_input_and_model_of_a_setting_run(tmp_path):
    import json

    from mlflow.tracking import MlflowClient

    from confgrid.flows.tracking import DatasetRef, ModelRef

    uri = default_tracking_uri(tmp_path)
    client = MlflowClient(uri)
    old = client.create_experiment("confgrid/old", artifact_location=(tmp_path / "a").as_uri())  # no kind tag
    t = Tracker(uri, "confgrid/old")
    assert t.experiment_id == old
    assert client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    ds = DatasetRef("qa", "0123456789abcdef", "/data/qa.jsonl", "local", 3)
    mr = ModelRef("org/m.1", "org/m-1", "abc123", {"backend": "vllm"})
    with t.parent("grid", {"a": 1}):
        kid = t.child("m/qa", {"x": 1}, {"v/ece/point": 0.2}, [], dataset=ds, model=mr)
        again = t.child("m/qa", {"x": 1}, {"v/ece/point": 0.3}, [], run_id=kid, step=1, dataset=ds, model=mr)
    assert again == kid
    run = client.get_run(kid)
    (inp,) = run.inputs.dataset_inputs  # logged twice, recorded once
    assert (inp.dataset.name, inp.dataset.digest, inp.dataset.source_type) == ("qa", "0123456789abcdef", "local")
    assert json.loads(inp.dataset.source) == {"path": "/data/qa.jsonl"}
    assert json.loads(inp.dataset.profile) == {"num_items": 3}
    (mi,) = run.inputs.model_inputs  # one logged model per setting run, however often it is logged
    (mo,) = run.outputs.model_outputs
    assert mi.model_id == mo.model_id and mo.step == 0
    lm = client.get_logged_model(mi.model_id)
    assert lm.name == "org-m-1" and lm.source_run_id == kid
    assert lm.params == {"model_id": "org/m-1", "revision": "abc123", "backend": "vllm"}
