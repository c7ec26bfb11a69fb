"""Benchmark of the capability study (issue 12): examples/capability.yaml end to end, samples per second.

Not a test. Runs the example grid (optionally with fewer items or samples) on
a private local Ray cluster and prints the wall time of the whole run, the
samples drawn (k_eval + k_train + the consistency pool), the samples per
second of the sample stage (samples over the seconds its shards computed, from
the manifest) and of the whole run, model loads and model calls.

Usage::

    .venv/bin/python benchmarks/capability_bench.py [--limit 100] [--k-eval 20] [--out /tmp/capability_bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "capability.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="items per dataset (default: the example's)")
    ap.add_argument("--k-eval", type=int, default=None, help="samples of the target and the consistency pool")
    ap.add_argument("--out", default="/tmp/capability_bench")
    args = ap.parse_args()

    import pandas as pd
    import ray

    from confgrid.flows.runner import run_grid
    from confgrid.flows.spec.grid import parse_grid

    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    if args.limit:
        for d in raw["datasets"]:
            d["limit"] = args.limit
    if args.k_eval:
        for m in raw["methods"]:
            if m["id"] in ("target", "consistency"):
                m["k"] = args.k_eval
        raw["capability"]["consistency_k"] = [k for k in raw["capability"]["consistency_k"] if k <= args.k_eval]
    spec = parse_grid(raw, base_dir=EXAMPLE.parent)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    load0 = os.getloadavg()[0]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    t0 = time.perf_counter()
    try:
        summary = run_grid(spec, out)
    finally:
        wall = time.perf_counter() - t0
        ray.shutdown()
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    sample_s = sum(s.get("seconds") or 0.0 for s in shards if s["stage"] == "sample" and s["status"] == "done")
    samples = pd.read_parquet(out / "tables" / "samples.parquet")
    print(f"examples/capability.yaml: {[(d.name, d.limit) for d in spec.datasets]}, "
          f"k_eval={next(m.k for m in spec.methods if m.id == 'target')}; load average {load0:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print(f"wall {wall:.1f} s; {len(samples)} samples; sample stage {sample_s:.1f} s of shard compute: "
          f"{len(samples) / sample_s:.1f} samples/s; whole run {len(samples) / wall:.1f} samples/s")
    print(f"model loads {summary.model_loads}, model calls {summary.model_calls}")


if __name__ == "__main__":
    main()
