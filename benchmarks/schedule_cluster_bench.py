"""Scheduling at a cluster user's scale: 5 models on a declared 8-GPU, two-node cluster (issue 21, item 5).

Not a test. cluster/local.py starts a head and two worker nodes with ``ray start`` (each its own temp dir,
4 declared GPUs and 4 declared CPUs per worker; stopped by their pids at the end). The grid has five models of
different replica needs, all the bundled fixture model under different identities (chat template on/off,
float32/bfloat16, so each is its own model with its own shard keys):

========  ==========================================  ===============
model     replica needs                               GPUs at once
========  ==========================================  ===============
one_a     1 replica x 1 GPU                           1
one_b     1 replica x 1 GPU                           1
tp2       1 replica x tensor_parallel_size 2          2 (one node)
tp4       1 replica x tensor_parallel_size 4          4 (one node)
two       2 replicas x 1 GPU                          2
========  ==========================================  ===============

Together they want 10 GPUs of the 8, so one model waits for another's release. The tensor-parallel models
reserve the placement group a vLLM replica of that size reserves (``tensor_parallel_size`` bundles of
``{GPU: 1, CPU: 1}``, STRICT_PACK: actors/model_actor.py ``replica_resources``); their engine is the fixture
on the transformers backend, because this machine has no vLLM tensor parallelism (the grid check refuses
``tensor_parallel_size > 1`` off vLLM, so the benchmark sets it on the validated spec). Declared GPUs are CPU
processes here: the figures measure the scheduler (loads, placement, waiting), not an engine.

Reported, from the manifest (``meta.loads``, ``meta.replicas``, each shard's ``replica``, ``started`` and
``seconds``):

* model loads (goal: one per replica);
* the share of GPU-seconds idle while work was queued (goal < 15%), :func:`idle_share`: over the window from
  the first replica request to the start of the last shard (some shard was still waiting to start throughout),
  ``1 - busy / (declared GPUs x window)``, where a replica's GPUs count as busy while it loads its model
  (``ready_at - load_seconds`` to ``ready_at``) or runs an engine call (the union of its shards'
  ``[started, started + seconds]``);
* wall time of the 5-model grid against the sum of the 5 models run one at a time on the same cluster, in
  the same invocation.

Usage::

    .venv/bin/python benchmarks/schedule_cluster_bench.py               # 24 items per model
    .venv/bin/python benchmarks/schedule_cluster_bench.py --items 8     # quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np

#: (name, grid entry, GPUs per replica): the five models of the benchmark.
MODELS = [
    ("one_a", {"model": "confgrid-fixture", "chat_template": True, "dtype": "float32"}, 1),
    ("one_b", {"model": "confgrid-fixture", "chat_template": False, "dtype": "float32"}, 1),
    ("tp2", {"model": "confgrid-fixture", "chat_template": True, "dtype": "bfloat16"}, 2),
    ("tp4", {"model": "confgrid-fixture", "chat_template": False, "dtype": "bfloat16"}, 4),
    ("two", {"model": "confgrid-fixture-small", "chat_template": True, "dtype": "float32", "replicas": 2}, 1),
]
DECLARED_GPUS = 8


def grid(items: int, names: list[str]) -> dict:
    """The benchmark's grid restricted to the models ``names`` (tensor parallelism is set after validation)."""
    return {
        "name": "schedule-cluster-bench",
        "models": [{"name": n, "batch_size": 8, **entry} for n, entry, _ in MODELS if n in names],
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": items, "seed": 0}],
        "scoring": {"contexts": ["bare", "guess_slot"]},
        "metrics": {"names": ["ece", "auroc"]},
        "bootstrap": {"resamples": 100},
        "execution": {"shard_size": 8, "bootstrap_backend": "local"},
    }


def spec_of(items: int, names: list[str]):
    """The validated spec with ``tp2`` and ``tp4`` given their tensor parallelism (see the module docstring)."""
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid(grid(items, names))
    tp = {n: g for n, _, g in MODELS if g > 1}
    models = [m.model_copy(update={"tensor_parallel_size": tp[m.name]}) if m.name in tp else m for m in spec.models]
    return spec.model_copy(update={"models": type(spec.models)(models)})


def _union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> np.ndarray:
    """Indicator on the grid ``np.arange(lo, hi, STEP)`` of the union of ``intervals``."""
    t = np.arange(lo, hi, STEP)
    on = np.zeros(t.size, dtype=bool)
    for a, b in intervals:
        on |= (t >= a) & (t < b)
    return on


#: Time step (seconds) of the busy-GPU integral.
STEP = 0.01


def idle_share(replicas: list[dict], shards: list[dict], gpus_of: dict[str, int], declared: int) -> dict:
    """The share of declared GPU-seconds idle while work was queued (the module docstring's definition).

    Parameters
    ----------
    replicas : list of dict
        ``meta.replicas`` of the manifest: ``replica``, ``model``, ``requested_at``, ``ready_at``,
        ``load_seconds`` (seconds since the epoch, and seconds).
    shards : list of dict
        The manifest's shards with ``replica``, ``started`` and ``seconds`` (those never run are skipped).
    gpus_of : dict of str to int
        GPUs one replica of each model reserves.
    declared : int
        GPUs the cluster declares (> 0).

    Returns
    -------
    dict
        ``window_s`` (first request to the start of the last shard), ``busy_gpu_s``, ``idle_share`` in [0, 1].

    Raises
    ------
    ValueError
        If nothing ran (no shard started) or ``declared`` is not positive.
    """
    if declared <= 0:
        raise ValueError(f"declared: {declared}; allowed: > 0")
    ran = [s for s in shards if s.get("started") is not None and s.get("replica")]
    if not ran or not replicas:
        raise ValueError("idle_share: no shard ran, so no window of queued work")
    lo = min(r["requested_at"] for r in replicas)
    hi = max(s["started"] for s in ran)
    if hi <= lo:
        return {"window_s": 0.0, "busy_gpu_s": 0.0, "idle_share": 0.0}
    busy = 0.0
    for r in replicas:
        spans = []
        if r.get("ready_at") is not None:
            spans.append((r["ready_at"] - r.get("load_seconds", 0.0), r["ready_at"]))
        spans += [(s["started"], s["started"] + (s.get("seconds") or 0.0)) for s in ran if s["replica"] == r["replica"]]
        busy += gpus_of[r["model"]] * float(_union_length(spans, lo, hi).sum()) * STEP
    window = hi - lo
    return {"window_s": window, "busy_gpu_s": busy, "idle_share": max(0.0, 1.0 - busy / (declared * window))}


def run(items: int, names: list[str], address: str, root: Path) -> dict:
    """One run of the grid restricted to ``names`` on the cluster: wall seconds and the manifest's figures."""
    from confgrid.flows.runner import run_grid

    out = Path(tempfile.mkdtemp(prefix="sched-", dir=root))
    spec = spec_of(items, names)
    t0 = time.perf_counter()
    run_grid(spec, out, address=address)
    wall = time.perf_counter() - t0
    man = json.loads((out / "manifest.json").read_text())
    meta = man["meta"]
    gpus = {n: g for n, _, g in MODELS}
    want = sum(m.replicas for m in spec.models)
    return {"models": names, "wall_s": wall, "loads": sum(meta["loads"].values()), "replicas": want,
            "nodes": len({r.get("node_id") for r in meta["replicas"] if r.get("node_id")}),
            **idle_share(meta["replicas"], man["shards"], gpus, DECLARED_GPUS)}


def main() -> None:  # pragma: no cover - a benchmark
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=24, help="TriviaQA questions per model (default 24)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    logging.getLogger("confgrid").setLevel(logging.WARNING)
    from confgrid.cluster.local import start_local_cluster

    root = Path(tempfile.mkdtemp(prefix="schedule-cluster-bench-"))
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; outputs under {root}", flush=True)
    with start_local_cluster(workers=2, gpus_per_worker=DECLARED_GPUS // 2, cpus_per_worker=DECLARED_GPUS // 2,
                             head_cpus=1) as cluster:
        print(f"cluster {cluster.address}: head + 2 workers x {DECLARED_GPUS // 2} declared GPUs", flush=True)
        every = [n for n, _, _ in MODELS]
        together = run(args.items, every, cluster.address, root)
        print(f"5 models together: {together['wall_s']:.1f} s, loads {together['loads']} of "
              f"{together['replicas']} replicas on {together['nodes']} node(s), idle share "
              f"{together['idle_share']:.1%} of {DECLARED_GPUS} x {together['window_s']:.1f} s", flush=True)
        alone = []
        for n in every:
            r = run(args.items, [n], cluster.address, root)
            alone.append(r)
            print(f"  {n} alone: {r['wall_s']:.1f} s, loads {r['loads']}", flush=True)
    total = sum(r["wall_s"] for r in alone)
    res = {"items": args.items, "together_s": round(together["wall_s"], 1), "one_at_a_time_s": round(total, 1),
           "ratio": round(total / together["wall_s"], 2), "loads": together["loads"],
           "replicas": together["replicas"], "idle_share": round(together["idle_share"], 3),
           "window_s": round(together["window_s"], 1), "nodes": together["nodes"],
           "load_average": round(os.getloadavg()[0], 2)}
    print(json.dumps(res, indent=1))
    print(f"loads one per replica: {'MET' if res['loads'] == res['replicas'] else 'NOT MET'}; idle share < 15%: "
          f"{'MET' if res['idle_share'] < 0.15 else 'NOT MET'}")


if __name__ == "__main__":
    main()
