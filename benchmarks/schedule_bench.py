"""Benchmark of the model-major scheduler: pools in parallel against one model at a time.

Not a test. A local Ray cluster declares 2 GPUs it does not have
(``ray.init(num_gpus=2, num_cpus=2)``): each replica reserves one "GPU" and
one CPU and runs on the CPU with one torch thread (actors/model_actor.py
``replica_resources``). The grid: four identities of the bundled fixture model
(chat template on/off x float32/bfloat16) on ``--items`` TriviaQA questions,
three scoring contexts. It runs twice per repeat into fresh output
directories, in alternating order:

* baseline: ``execution.max_concurrent_models: 1`` (one pool at a time, as the
  executor before issue 8 did);
* default: as many pools as the cluster fits (here two at once).

Printed per run: wall seconds of ``run_grid``, model loads (from the
manifest), and from the replicas' timeline (manifest ``meta.replicas``):
replica-seconds held (from the start of the model load to release), of which
loading (the load measured inside the replica), computing (engine calls
measured inside the replica) and idle (between calls, and while the driver
parses, grades and plans); and the seconds replicas waited before their load
started (for resources and for their process to start; a waiting replica
holds nothing). Then the fastest wall time of each mode, their ratio and the
target (issue 8): ratio >= 1.6 on the 2-core machine, loads == number of models.

Usage::

    .venv/bin/python benchmarks/schedule_bench.py                 # 60 items, 2 repeats
    .venv/bin/python benchmarks/schedule_bench.py --items 24 --repeats 1   # quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

MODELS = [
    {"name": "chat32", "model": "confgrid-fixture", "chat_template": True, "dtype": "float32", "batch_size": 16},
    {"name": "plain32", "model": "confgrid-fixture", "chat_template": False, "dtype": "float32", "batch_size": 16},
    {"name": "chat16", "model": "confgrid-fixture", "chat_template": True, "dtype": "bfloat16", "batch_size": 16},
    {"name": "plain16", "model": "confgrid-fixture", "chat_template": False, "dtype": "bfloat16", "batch_size": 16},
]


def grid(items: int, concurrent: int | None) -> dict:
    return {
        "name": "schedule-bench",
        "models": MODELS,
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": items, "seed": 0}],
        "scoring": {"contexts": ["bare", "answer_slot", "guess_slot"]},
        "metrics": {"names": ["ece", "auroc", "aurc"]},
        "bootstrap": {"resamples": 200},
        "execution": {"shard_size": 16, "max_concurrent_models": concurrent},
    }


def timeline(out: Path) -> dict:
    """Replica-seconds held (from the start of the model load to release), loading, computing, from the manifest.

    Waiting seconds (asked for -> load started: waiting for resources and starting the actor's process) are
    counted apart: a replica that waits holds no GPU.
    """
    meta = json.loads((out / "manifest.json").read_text())["meta"]
    reps = [r for r in meta["replicas"] if r["released_at"] and r["ready_at"]]
    held = sum(r["released_at"] - r["ready_at"] + r["load_seconds"] for r in reps)
    waited = sum(r["ready_at"] - r["load_seconds"] - r["requested_at"] for r in reps)
    load = sum(r["load_seconds"] for r in reps)
    busy = sum(r["busy_seconds"] for r in reps)
    return {"loads": sum(meta["loads"].values()), "loads_per_model": meta["loads"], "replica_s": held,
            "loading_s": load, "computing_s": busy, "other_s": held - load - busy, "waiting_s": waited}


def run_once(items: int, concurrent: int | None, root: Path) -> dict:
    from confgrid.flows.runner import run_grid
    from confgrid.flows.spec.grid import parse_grid

    out = Path(tempfile.mkdtemp(prefix="sched-", dir=root))
    spec = parse_grid(grid(items, concurrent))
    t0 = time.perf_counter()
    summary = run_grid(spec, out)
    wall = time.perf_counter() - t0
    return {"mode": "baseline (max_concurrent_models=1)" if concurrent == 1 else "default", "wall_s": wall,
            "model_calls": summary.model_calls, **timeline(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=60, help="TriviaQA questions per model (default 60)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each mode; the fastest is kept (default 2)")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs the local cluster declares (default 2)")
    args = ap.parse_args()

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    logging.getLogger("confgrid").setLevel(logging.WARNING)
    ray.init(num_gpus=args.gpus, num_cpus=args.gpus, include_dashboard=False, log_to_driver=False)
    root = Path(tempfile.mkdtemp(prefix="schedule-bench-"))
    print(f"local Ray cluster: {ray.cluster_resources().get('GPU', 0):g} declared GPUs, "
          f"{ray.cluster_resources().get('CPU', 0):g} CPUs; {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"grid: {len(MODELS)} models x {args.items} TriviaQA items x 3 contexts; outputs under {root}\n")
    runs = []
    for rep in range(args.repeats):
        order = (1, None) if rep % 2 == 0 else (None, 1)
        for concurrent in order:
            r = run_once(args.items, concurrent, root)
            runs.append(r)
            print(f"{r['mode']:<36} wall {r['wall_s']:6.1f} s  loads {r['loads']}  replica-s {r['replica_s']:6.1f} "
                  f"= loading {r['loading_s']:5.1f} ({r['loading_s'] / r['replica_s']:.0%}) + computing "
                  f"{r['computing_s']:5.1f} ({r['computing_s'] / r['replica_s']:.0%}) + idle "
                  f"{r['other_s']:5.1f} ({r['other_s'] / r['replica_s']:.0%}); waited {r['waiting_s']:5.1f}")
    ray.shutdown()
    best = {m: min((r for r in runs if r["mode"] == m), key=lambda r: r["wall_s"]) for m in {r["mode"] for r in runs}}
    base = best["baseline (max_concurrent_models=1)"]
    new = best["default"]
    ratio = base["wall_s"] / new["wall_s"]
    print(f"\nfastest: baseline {base['wall_s']:.1f} s, default {new['wall_s']:.1f} s -> ratio {ratio:.2f}x "
          f"(target >= 1.6x: {'MET' if ratio >= 1.6 else 'NOT MET'})")
    ok_loads = all(r["loads"] == len(MODELS) for r in runs)
    print(f"model loads per run: {[r['loads'] for r in runs]} (target {len(MODELS)} each: "
          f"{'MET' if ok_loads else 'NOT MET'}); load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
