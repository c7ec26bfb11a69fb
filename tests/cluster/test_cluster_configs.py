"""The cluster configs parse and say what the README says they do."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2] / "cluster"


def test_autoscaler_config_has_gpu_node_types():
    cfg = yaml.safe_load((ROOT / "autoscaler-gpu.yaml").read_text())
    types = cfg["available_node_types"]
    assert types[cfg["head_node_type"]]["resources"]["GPU"] == 0
    assert {t["resources"]["GPU"] for n, t in types.items() if n != cfg["head_node_type"]} == {1, 8}
    assert any("confgrid[gpu]" in c for c in cfg["setup_commands"])


def test_rayjob_manifest_runs_confgrid():
    job = yaml.safe_load((ROOT / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["entrypoint"].startswith("confgrid run ")
    workers = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
