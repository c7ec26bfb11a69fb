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
