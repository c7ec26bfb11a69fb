"""The pure figure of benchmarks/schedule_cluster_bench.py: the share of GPU-seconds idle while work was queued,
against a hand-computed timeline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "schedule_cluster_bench", Path(__file__).resolve().parent.parent / "benchmarks" / "schedule_cluster_bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_idle_share_of_a_hand_timeline():
    # A (1 GPU): loads 1-2, computes 2-5; B (2 GPUs): loads 2-4, computes 4-6; the last shard starts at 4, so the
    # window is 0-4; busy GPU-seconds in it: A 3 x 1 + B 2 x 2 = 7 of 4 GPUs x 4 s = 16 -> idle 9/16
    reps = [{"replica": "a#0", "model": "a", "requested_at": 0.0, "ready_at": 2.0, "load_seconds": 1.0},
            {"replica": "b#0", "model": "b", "requested_at": 0.0, "ready_at": 4.0, "load_seconds": 2.0}]
    shards = [{"replica": "a#0", "started": 2.0, "seconds": 3.0}, {"replica": "b#0", "started": 4.0, "seconds": 2.0},
              {"replica": None, "started": None, "seconds": None}]
    got = bench.idle_share(reps, shards, {"a": 1, "b": 2}, 4)
    assert got["window_s"] == 4.0
    assert got["busy_gpu_s"] == pytest.approx(7.0, abs=0.02)
    assert got["idle_share"] == pytest.approx(9 / 16, abs=0.002)


def test_idle_share_counts_overlapping_shards_of_a_replica_once_and_refuses_empty_input():
    reps = [{"replica": "a#0", "model": "a", "requested_at": 0.0, "ready_at": 0.0, "load_seconds": 0.0}]
    shards = [{"replica": "a#0", "started": 0.0, "seconds": 2.0}, {"replica": "a#0", "started": 1.0, "seconds": 2.0},
              {"replica": "a#0", "started": 2.0, "seconds": 1.0}]
    got = bench.idle_share(reps, shards, {"a": 1}, 2)  # window 0-2, busy 2 of 2 x 2
    assert got["idle_share"] == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="no shard ran"):
        bench.idle_share(reps, [], {"a": 1}, 2)
    with pytest.raises(ValueError, match="declared: 0"):
        bench.idle_share(reps, shards, {"a": 1}, 0)
