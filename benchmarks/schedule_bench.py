"""Benchmark of the model-major scheduler: pools in parallel against one model at a time.

Not a test. Three clusters (``--cluster``):

``local`` (default; issue 8)
    A local Ray cluster declares 2 GPUs it does not have
    (``ray.init(num_gpus=2, num_cpus=2)``): each replica reserves one "GPU"
    and one CPU and runs on the CPU with one torch thread (actors/model_actor.py
    ``replica_resources``). The grid: four identities of the bundled fixture
    model (chat template on/off x float32/bfloat16) on ``--items`` TriviaQA
    questions, three scoring contexts.

``8gpu`` (issue 21 item 5, "scheduling at a scale users have")
    A two-node cluster on this machine (cluster/local.py
    ``start_local_cluster(workers=2, gpus_per_worker=4, cpus_per_worker=4)``:
    a head without GPUs and two workers, each a ``ray start`` of its own with
    its own ``--temp-dir``, stopped by their pids at the end) declaring 8 GPUs,
    4 per node. Five models whose replicas need different shapes, 10 GPUs
    in all, so they cannot all run at once:

    ========  ========================  ===============================================
    model     identity                  a replica reserves
    ========  ========================  ===============================================
    one-a     fixture, chat, float32    1 GPU + 1 CPU
    one-b     fixture-small, chat, f32  1 GPU + 1 CPU
    tp2       fixture, plain, float32   one actor holding 2 GPUs + 2 CPUs
    tp4       fixture, chat, bfloat16   one actor holding 4 GPUs + 4 CPUs
    dp2       fixture-small, plain, f32 2 replicas of 1 GPU + 1 CPU
    ========  ========================  ===============================================

    tp2 and tp4 take the tensor-parallel path of the scheduler (by default one
    actor holding N GPUs on one node, as vLLM's multiprocessing executor runs;
    a STRICT_PACK placement group of N bundles with ``executor: ray``, as the
    benchmarks/RESULTS.md numbers of this mode were measured; both need the same
    on one node), which the grid allows only for vLLM: the benchmark sets
    ``tensor_parallel_size`` on the parsed spec, so the fixture model still
    computes with transformers on the CPU (one torch thread: the nodes run
    with ``OMP_NUM_THREADS=1``) while the scheduler sees the resource shape of a
    TP-2 / TP-4 vLLM replica. ``--items`` TriviaQA questions, two scoring
    contexts, shards of 8.

``long`` (issue 21 item 5: when an extra replica pays)
    A local Ray cluster declaring ``--gpus`` GPUs (default 2) and one model
    with a long queue: the fixture model with ``batch_size: 1`` (slow calls),
    ``--items`` TriviaQA questions (default 128), three scoring contexts, a
    self-consistency method of ``LONG_K`` (8) samples per question, shards
    of 4. Its one replica computes on one core while the other core and
    GPU sit idle, so an extra replica (``--elastic``) has free compute to use
    once it has loaded. Modes: default and elastic only (one model: the
    baseline is the default).

``--workload`` (``--cluster 8gpu`` only)
    ``short`` (default): the grid above, about 1 s of compute per model against
    5-25 s loads. ``long``: every model with ``batch_size: 1`` and a
    self-consistency method of ``LONG_K`` samples (default 32 items), computed
    on the 2 shared cores, so 8 replicas computing at once slow one another
    and every load. ``sim``: the short grid plus simulated device time: each
    replica sleeps ``--sim-load-s`` (10) after loading its model and
    ``--sim-request-s`` (0.4) per request after each engine call (a Ray worker
    setup hook wraps the transformers backend, ``_sim_hook``), so a model's
    work and load have the ratio of a user's cluster (tunable) and one
    replica's device time does not slow another's, as on real GPUs; what is
    measured is the scheduler. ``--no-baseline`` leaves out the one-at-a-time
    mode (``--cluster 8gpu``; ``--cluster long`` runs none anyway; the
    ``--json`` file's ``ratio`` is then null). ``--sim-load-s`` and
    ``--sim-request-s`` (seconds >= 0) are for ``--workload sim`` only; a
    combination that cannot run as asked stops at once with one line naming
    the flag, its value and what is allowed.

Each mode runs the grid ``--repeats`` times per mode, in alternating order,
into fresh output directories, on the same cluster:

* baseline: ``execution.max_concurrent_models: 1`` (one pool at a time: the
  models run one after another, the sum of the models run alone);
* default: as many pools as the cluster fits;
* with ``--elastic``, a third mode, elastic: the default with
  ``max_replicas: auto`` on every model (issue 21 item 5: extra replicas of a
  model with queued work on GPUs left free; flows/execute/capacity.py
  ``grow_replicas``). The three modes rotate their order from one repeat to the
  next.

Printed per run, from its manifest: wall seconds of ``run_grid``; model loads
(``meta.loads``) against the goal of one per replica (none loaded twice; a
replica whose request was withdrawn before its load finished, because its
model's work was done first, is named, with whether its load had started);
from the replicas' timeline (``meta.replicas``): replica-seconds held (from
the start of the model load to release), of which loading, computing and
idle, and the seconds replicas waited before their load started; and the
share of GPU-seconds idle while work was queued (flows/execute/timeline.py
``idle_while_queued``):

    idle while queued = integral, over the times some shard waited in the
    driver's queues (planned, not yet sent to a replica), of (declared GPUs -
    GPUs of the replicas loading or computing at that moment); share = that /
    (declared GPUs x the executor's wall time, its first shard queued to its
    last pool released).

A GPU counts as busy only while a replica holding it loads its model or runs
an engine call (both measured inside the replica); a GPU that is free, or
reserved by a replica that is starting its process or between calls, is idle.
With ``--cluster 8gpu`` each replica's node and its spans are printed too.

Then the fastest wall time of each mode and their ratio (baseline / default).

Usage::

    .venv/bin/python benchmarks/schedule_bench.py                               # local, 60 items, 2 repeats
    .venv/bin/python benchmarks/schedule_bench.py --items 24 --repeats 1        # local, quick
    .venv/bin/python benchmarks/schedule_bench.py --cluster 8gpu                # 8 GPUs, 24 items, 2 repeats
    .venv/bin/python benchmarks/schedule_bench.py --cluster 8gpu --items 8 --repeats 1   # quick
    .venv/bin/python benchmarks/schedule_bench.py --cluster 8gpu --elastic --repeats 3    # before/after elastic
    .venv/bin/python benchmarks/schedule_bench.py --cluster long --elastic --repeats 2     # one long model
    .venv/bin/python benchmarks/schedule_bench.py --cluster 8gpu --workload sim --elastic --repeats 1   # device time simulated
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

MODELS = [
    {"name": "chat32", "model": "confgrid-fixture", "chat_template": True, "dtype": "float32", "batch_size": 16},
    {"name": "plain32", "model": "confgrid-fixture", "chat_template": False, "dtype": "float32", "batch_size": 16},
    {"name": "chat16", "model": "confgrid-fixture", "chat_template": True, "dtype": "bfloat16", "batch_size": 16},
    {"name": "plain16", "model": "confgrid-fixture", "chat_template": False, "dtype": "bfloat16", "batch_size": 16},
]

#: ``--cluster 8gpu``: five models with different replica shapes (10 GPUs in all on an 8-GPU cluster).
CLUSTER_MODELS = [
    {"name": "one-a", "model": "confgrid-fixture", "chat_template": True, "dtype": "float32"},
    {"name": "one-b", "model": "confgrid-fixture-small", "chat_template": True, "dtype": "float32"},
    {"name": "tp2", "model": "confgrid-fixture", "chat_template": False, "dtype": "float32"},
    {"name": "tp4", "model": "confgrid-fixture", "chat_template": True, "dtype": "bfloat16"},
    {"name": "dp2", "model": "confgrid-fixture-small", "chat_template": False, "dtype": "float32", "replicas": 2},
]
#: ``--cluster long``: one model whose calls are slow (one sequence per forward pass).
LONG_MODELS = [{"name": "long", "model": "confgrid-fixture", "chat_template": True, "dtype": "float32",
                "batch_size": 1}]
#: ``--cluster long``: samples per question of its self-consistency method (the long part of its queue).
LONG_K = 8
#: ``--workload sim``: simulated device time, seconds (load, per request). Each replica sleeps this long after loading
#: its model and after each engine call, per request (a sampling request counts its ``n`` samples), so a model's work
#: is about 29 s of one replica against a 10 s load, and replicas do not slow one another on the 2 shared cores.
SIM_ENV = "CONFGRID_BENCH_SIM"
SIM_DEFAULT = (10.0, 0.4)
#: Tensor-parallel sizes set on the parsed spec (the grid allows them only for vLLM; see the module docstring).
CLUSTER_TP = {"tp2": 2, "tp4": 4}
BASELINE = "baseline (max_concurrent_models=1)"
ELASTIC = "elastic (max_replicas: auto)"


def grid(items: int, concurrent: int | None, cluster: str = "local", elastic: bool = False,
         workload: str = "short") -> dict:
    """The benchmark's grid (a dict for ``parse_grid``); ``elastic``: every model gets ``max_replicas: auto``;
    ``workload == "long"`` (implied by ``cluster == "long"``): every model scores one sequence per forward pass
    (``batch_size: 1``) and samples ``LONG_K`` answers per question (self-consistency), in shards of 4."""
    big = cluster in ("8gpu", "long")
    long = cluster == "long" or workload == "long"
    models = {"8gpu": CLUSTER_MODELS, "long": LONG_MODELS}.get(cluster, MODELS)
    if long:
        models = [dict(m, batch_size=1) for m in models]
    return {
        "name": "schedule-bench",
        "models": [dict(m, max_replicas="auto") for m in models] if elastic else models,
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": items, "seed": 0}],
        "scoring": {"contexts": ["bare", "guess_slot"] if cluster == "8gpu" else ["bare", "answer_slot", "guess_slot"]},
        **({"methods": [{"id": "sc", "kind": "self_consistency", "k": LONG_K}]} if long else {}),
        "metrics": {"names": ["ece", "auroc", "aurc"]},
        "bootstrap": {"resamples": 200},
        "execution": {"shard_size": 4 if long else 8 if big else 16, "max_concurrent_models": concurrent},
    }


def _sim_hook():
    """Ray worker setup hook of ``--workload sim`` (pickled by value: this file is ``__main__``): the transformers
    backend computes as always, then sleeps the simulated device time of ``$CONFGRID_BENCH_SIM`` ("load,per_request"
    seconds) after loading and after each engine call, so the replicas' spans are those of a GPU cluster where one
    replica's compute does not slow another's."""
    import functools
    import os
    import time

    from confgrid.actors import transformers_backend as tb

    cls = tb.TransformersBackend
    if getattr(cls, "_bench_sim", False) or not os.environ.get("CONFGRID_BENCH_SIM"):
        return
    load_s, per_request = (float(x) for x in os.environ["CONFGRID_BENCH_SIM"].split(","))

    def timed(fn, count):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            out = fn(self, *args, **kwargs)
            time.sleep(per_request * count(args, kwargs))
            return out
        return wrapper

    init = cls.__init__

    @functools.wraps(init)
    def loaded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        time.sleep(load_s)

    cls.__init__ = loaded
    first = lambda a, k: len(a[0]) if a else len(next(iter(k.values())))  # noqa: E731
    for name in ("generate", "score", "next_token", "hidden_states"):
        setattr(cls, name, timed(getattr(cls, name), first))
    cls.generate_samples = timed(cls.generate_samples, lambda a, k: first(a, k) * int(k.get("n", 1)))
    cls._bench_sim = True


def spec_for(items: int, concurrent: int | None, cluster: str, elastic: bool = False, workload: str = "short"):
    """The parsed grid; with ``cluster == "8gpu"`` tp2 and tp4 get their tensor-parallel sizes (CLUSTER_TP)."""
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid(grid(items, concurrent, cluster, elastic, workload))
    if cluster != "8gpu":
        return spec
    models = tuple(m.model_copy(update={"tensor_parallel_size": CLUSTER_TP[m.name]}) if m.name in CLUSTER_TP else m
                   for m in spec.models)
    return spec.model_copy(update={"models": models})


def timeline(out: Path, nodes: dict[str, str] | None = None) -> dict:
    """What a run's manifest says about its replicas: loads, replica-seconds held and how they were spent, the
    seconds replicas waited, the share of GPU-seconds idle while work was queued, and each replica's line.

    Replica-seconds held run from the start of the model load to release; waiting seconds (asked for -> load
    started: waiting for resources and starting the actor's process) are counted apart: a replica that waits
    holds no GPU. ``nodes`` maps Ray node ids to names for the per-replica lines.
    """
    from confgrid.flows.execute.timeline import idle_share_of_run, merge_spans

    meta = json.loads((out / "manifest.json").read_text())["meta"]
    reps = [r for r in meta["replicas"] if r["released_at"] and r["ready_at"]]
    held = sum(r["released_at"] - r["ready_at"] + r["load_seconds"] for r in reps)
    waited = sum(r["ready_at"] - r["load_seconds"] - r["requested_at"] for r in reps)
    load = sum(r["load_seconds"] for r in reps)
    busy = sum(r["busy_seconds"] for r in reps)
    idle = idle_share_of_run(meta)
    inv = meta["invocations"][-1]
    t0 = inv["started_at"]
    per_replica = []
    for r in meta["replicas"]:
        spans = merge_spans(r["loading"] + r["computing"], t0, inv["ended_at"])
        per_replica.append({
            "replica": r["replica"], "node": (nodes or {}).get(r["node_id"] or "", (r["node_id"] or "?")[:8]),
            "gpus": r["gpus"], "loads": r["loads"], "requested": r["requested_at"] - t0,
            "load_start": (r["loading"][0][0] - t0) if r["loading"] else None, "elastic": bool(r.get("elastic")),
            "released": (r["released_at"] - t0) if r["released_at"] else None,
            "loading_s": r["load_seconds"], "computing_s": r["busy_seconds"],
            "busy_until": (spans[-1][1] - t0) if spans else None})
    models: dict[str, list[float]] = {}
    for r in meta["replicas"]:
        if r["released_at"]:
            lo, hi = models.get(r["model"], [r["requested_at"], r["released_at"]])
            models[r["model"]] = [min(lo, r["requested_at"]), max(hi, r["released_at"])]
    withdrawn = {r["replica"]: r.get("withdrawn") for r in meta["replicas"] if r.get("withdrawn")}
    return {"loads": sum(meta["loads"].values()), "loads_per_model": meta["loads"], "withdrawn": withdrawn,
            "replicas_asked": len(meta["replicas"]), "extra": sorted(r["replica"] for r in meta["replicas"]
                                                                     if r.get("elastic")),
            "extra_unused": sorted(r["replica"] for r in meta["replicas"]
                                   if r.get("elastic") and r["loads"] and not r["calls"]),
            "reloaded": sorted(r["replica"] for r in meta["replicas"] if r["loads"] > 1), "replica_s": held,
            "loading_s": load, "computing_s": busy, "other_s": held - load - busy, "waiting_s": waited,
            "gpus": idle.gpus, "executor_s": idle.window_s, "queued_s": idle.queued_s, "busy_gpu_s": idle.busy_gpu_s,
            "idle_queued_gpu_s": idle.idle_queued_gpu_s, "idle_share": idle.share,
            "model_spans_s": {m: hi - lo for m, (lo, hi) in models.items()}, "replicas": per_replica}


def run_once(items: int, mode: str, root: Path, cluster: str = "local", address: str | None = None,
             nodes: dict[str, str] | None = None, workload: str = "short") -> dict:
    """One run of the grid in ``mode`` (BASELINE, "default" or ELASTIC) into a fresh directory under ``root``; its
    wall time and :func:`timeline`."""
    from confgrid.flows.runner import run_grid

    out = Path(tempfile.mkdtemp(prefix="sched-", dir=root))
    spec = spec_for(items, 1 if mode == BASELINE else None, cluster, elastic=mode == ELASTIC, workload=workload)
    t0 = time.perf_counter()
    summary = run_grid(spec, out, address=address)
    wall = time.perf_counter() - t0
    return {"mode": mode, "wall_s": wall, "out": str(out),
            "model_calls": summary.model_calls, "failed_shards": summary.failed_shards, **timeline(out, nodes)}


def _print_run(r: dict, goal: int, per_replica: bool) -> None:
    cut = ", ".join(f"{k} while {v}" for k, v in r["withdrawn"].items())
    unused = f"; loaded with nothing left to compute: {', '.join(r['extra_unused'])}" if r["extra_unused"] else ""
    extra = f" + {len(r['extra'])} extra: {', '.join(r['extra'])}{unused}" if r["extra"] else ""
    print(f"{r['mode']:<36} wall {r['wall_s']:6.1f} s  loads {r['loads']} ({goal} replicas{extra}"
          f"{'; withdrawn before loaded: ' + cut if cut else ''})  replica-s "
          f"{r['replica_s']:6.1f} = loading {r['loading_s']:5.1f} ({r['loading_s'] / r['replica_s']:.0%}) + computing "
          f"{r['computing_s']:5.1f} ({r['computing_s'] / r['replica_s']:.0%}) + idle {r['other_s']:5.1f} "
          f"({r['other_s'] / r['replica_s']:.0%}); waited {r['waiting_s']:5.1f} s for resources and a process")
    print(f"{'':<36} GPU-s idle while work was queued: {r['idle_queued_gpu_s']:6.1f} of {r['gpus']:g} GPUs x "
          f"{r['executor_s']:.1f} s = {r['idle_share']:.1%} (work queued {r['queued_s']:.1f} s of "
          f"{r['executor_s']:.1f} s; GPU-s loading or computing {r['busy_gpu_s']:.1f}); failed shards "
          f"{r['failed_shards']}")
    if per_replica:
        print(f"{'':<6}{'replica':<10}{'node':<9}{'GPUs':>5}{'asked':>8}{'load at':>9}{'loading':>9}"
              f"{'computing':>11}{'busy until':>12}{'released':>10}")
        for x in r["replicas"]:
            f = (lambda v: "-" if v is None else f"{v:.1f}")
            print(f"{'':<6}{x['replica'] + ('+' if x['elastic'] else ''):<10}{x['node']:<9}{x['gpus']:>5g}{f(x['requested']):>8}"
                  f"{f(x['load_start']):>9}{f(x['loading_s']):>9}{f(x['computing_s']):>11}{f(x['busy_until']):>12}"
                  f"{f(x['released']):>10}")
        print(f"{'':<6}per model, first replica asked for to last released (s): "
              + ", ".join(f"{m} {s:.1f}" for m, s in r["model_spans_s"].items()))


def _start_8gpu(sim: tuple[float, float] | None = None):
    """The two-worker cluster of ``--cluster 8gpu``, joined by this process; returns (cluster, node names). With
    ``sim`` (load, per-request seconds) every worker process of the job runs :func:`_sim_hook`."""
    import ray

    from confgrid.cluster.local import start_local_cluster

    t0 = time.perf_counter()
    cluster = start_local_cluster(workers=2, gpus_per_worker=4, cpus_per_worker=4, head_cpus=1,
                                  python=sys.executable, env={"OMP_NUM_THREADS": "1"})
    try:
        env = {} if sim is None else {"env_vars": {SIM_ENV: f"{sim[0]},{sim[1]}"}, "worker_process_setup_hook": _sim_hook}
        ray.init(address=cluster.address, log_to_driver=False, runtime_env=env or None)
    except BaseException:
        cluster.stop()
        raise
    names = {n["NodeID"]: (n.get("Labels") or {}).get("confgrid.node", n["NodeID"][:8]) for n in ray.nodes()
             if n.get("Alive")}
    print(f"cluster of {len(cluster.nodes)} nodes started in {time.perf_counter() - t0:.0f} s at {cluster.address}: "
          + ", ".join(f"{n.name} {{GPU: {n.resources['GPU']:g}, CPU: {n.resources['CPU']:g}}}" for n in cluster.nodes))
    return cluster, names


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, int]:
    """The command line (``argv``, default ``sys.argv[1:]``) and the items per model it asks for. A combination that
    cannot run as asked exits at once (status 2) with one line naming the flag, its value and what is allowed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", choices=("local", "8gpu", "long"), default="local",
                    help="local: ray.init with --gpus declared GPUs; 8gpu: a head and two 4-GPU workers; long: one "
                    "model with a long queue on --gpus declared GPUs (default local)")
    ap.add_argument("--items", type=int, default=None,
                    help="TriviaQA questions per model (default 60 local, 24 8gpu, 128 long)")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each mode; the fastest is kept (default 2)")
    ap.add_argument("--gpus", type=int, default=2, help="--cluster local or long: GPUs the local cluster declares (default 2; --cluster 8gpu declares 8)")
    ap.add_argument("--elastic", action="store_true",
                    help="also run each repeat with max_replicas: auto on every model (a third mode)")
    ap.add_argument("--workload", choices=("short", "long", "sim"), default="short",
                    help="--cluster 8gpu: short (batched calls, about 1 s of compute per model; default), long "
                    "(batch_size 1 and self-consistency with LONG_K samples per question: each model's queue "
                    "outlasts its load, computed on the 2 shared cores) or sim (the short grid plus simulated "
                    "device time: --sim-load-s after each load, --sim-request-s per request after each call)")
    ap.add_argument("--sim-load-s", type=float, default=None,
                    help=f"--workload sim: seconds per load, >= 0 (default {SIM_DEFAULT[0]:g})")
    ap.add_argument("--sim-request-s", type=float, default=None,
                    help=f"--workload sim: seconds per request of an engine call, >= 0 (default {SIM_DEFAULT[1]:g})")
    ap.add_argument("--no-baseline", action="store_true",
                    help="--cluster 8gpu: leave out the baseline mode (the models one at a time), e.g. for a long "
                    "--workload sim whose baseline is the sum of the models' spans anyway")
    ap.add_argument("--json", type=Path, default=None, help="also write every run's numbers to this file")
    args = ap.parse_args(argv)
    for flag, value in (("--items", args.items), ("--repeats", args.repeats), ("--gpus", args.gpus)):
        if value is not None and value < 1:
            ap.error(f"{flag} {value}: must be at least 1")
    if args.workload != "short" and args.cluster != "8gpu" and not (args.workload == "long" and args.cluster == "long"):
        ap.error(f"--workload {args.workload} with --cluster {args.cluster}: --workload long or sim needs "
                 "--cluster 8gpu (--cluster long is one model whose workload is long already)")
    for flag, i in (("--sim-load-s", 0), ("--sim-request-s", 1)):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and args.workload != "sim":
            ap.error(f"{flag} {value:g}: only with --workload sim (got --workload {args.workload})")
        if value is not None and not (value >= 0 and math.isfinite(value)):
            ap.error(f"{flag} {value:g}: must be a finite number of seconds >= 0")
        if value is None:
            setattr(args, flag[2:].replace("-", "_"), SIM_DEFAULT[i])
    if args.cluster == "8gpu" and args.gpus != ap.get_default("gpus"):
        ap.error(f"--gpus {args.gpus} with --cluster 8gpu: that cluster declares 8 GPUs (two workers of 4); "
                 "--gpus is for --cluster local or long")
    if args.no_baseline and args.cluster == "local":
        ap.error("--no-baseline with --cluster local: the local benchmark is the baseline / default ratio; "
                 "use --cluster 8gpu (--cluster long runs no baseline anyway)")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: its folder {args.json.parent} does not exist")
    items = args.items if args.items is not None else {
        "8gpu": 32 if args.workload == "long" else 24, "long": 128}.get(args.cluster, 60)
    return args, items


def main() -> None:
    args, items = parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bar between the printed lines (read when tqdm loads)

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # INFO goes to each run's confgrid.log (what the scheduler asked for and why), not to this console: the run log's
    # file handler is a handler of the "confgrid" logger, so Python's last-resort console handler stays unused
    logging.getLogger("confgrid").setLevel(logging.INFO)
    load_before = os.getloadavg()
    cluster, nodes, address = None, None, None
    runs = []
    try:
        if args.cluster == "8gpu":
            cluster, nodes = _start_8gpu((args.sim_load_s, args.sim_request_s) if args.workload == "sim" else None)
            address = cluster.address
            specs = spec_for(items, None, "8gpu", workload=args.workload).models
            goal = sum(m.replicas for m in specs)
        else:
            ray.init(num_gpus=args.gpus, num_cpus=args.gpus, include_dashboard=False, log_to_driver=False)
            specs = spec_for(items, None, args.cluster).models
            goal = len(specs)
        root = Path(tempfile.mkdtemp(prefix="schedule-bench-"))
        res = ray.cluster_resources()
        print(f"Ray cluster: {res.get('GPU', 0):g} declared GPUs, {res.get('CPU', 0):g} CPUs; {os.cpu_count()} cores; "
              f"load average {load_before[0]:.2f} (before the cluster started) {os.getloadavg()[0]:.2f} (now)")
        print(f"grid: {len(specs)} models ({', '.join(f'{m.name} x{m.replicas} tp{m.tensor_parallel_size}' for m in specs)}"
              f") x {items} TriviaQA items, {args.workload} workload"
              f"{f' ({args.sim_load_s:g} s per load, {args.sim_request_s:g} s per request)' if args.workload == 'sim' else ''}"
              f"; outputs under {root}\n")
        modes = ([] if args.cluster == "long" or args.no_baseline else [BASELINE]) + ["default"] + (
            [ELASTIC] if args.elastic else [])
        for rep in range(args.repeats):
            order = modes[rep % len(modes):] + modes[:rep % len(modes)] if args.elastic else (
                modes if rep % 2 == 0 else modes[::-1])
            for mode in order:
                r = run_once(items, mode, root, args.cluster, address, nodes, args.workload)
                r["load_average"] = os.getloadavg()[0]
                runs.append(r)
                _print_run(r, goal, per_replica=args.cluster != "local")
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.stop()
    best = {m: min((r for r in runs if r["mode"] == m), key=lambda r: r["wall_s"]) for m in {r["mode"] for r in runs}}
    base, new = best.get(BASELINE, best["default"]), best["default"]
    ratio = base["wall_s"] / new["wall_s"]
    print(f"\nfastest: baseline {base['wall_s']:.1f} s, default {new['wall_s']:.1f} s -> ratio {ratio:.2f}x"
          if BASELINE in best else f"\nfastest default {new['wall_s']:.1f} s")
    if ELASTIC in best:
        el = best[ELASTIC]
        print(f"fastest elastic {el['wall_s']:.1f} s -> "
              + (f"baseline / elastic {base['wall_s'] / el['wall_s']:.2f}x, " if BASELINE in best else "")
              + f"default / elastic {new['wall_s'] / el['wall_s']:.2f}x"
              + ("" if el["extra"] else " (no extra replica started in that run: it ran as the default mode does, "
                 "so this ratio is run-to-run variation, not elastic replicas)"))
        for m in ("default", ELASTIC):
            shares = [r["idle_share"] for r in runs if r["mode"] == m]
            walls = [r["wall_s"] for r in runs if r["mode"] == m]
            print(f"  {m:<30} idle share while queued: mean {sum(shares) / len(shares):.1%} "
                  f"({min(shares):.1%}-{max(shares):.1%}); wall mean {sum(walls) / len(walls):.1f} s over "
                  f"{len(shares)} run(s)")
    if args.cluster == "local":
        print(f"(issue 8 target >= 1.6x: {'MET' if ratio >= 1.6 else 'NOT MET'})")
    elif args.cluster == "8gpu" and BASELINE in best:
        print(f"baseline: the models one after another; sum of their pools' spans {sum(base['model_spans_s'].values()):.1f} s")
    once = all(not r["reloaded"] and r["loads"] <= r["replicas_asked"] for r in runs)
    extras = (f" + the extra ones ({[len(r['extra']) for r in runs]}, of which loaded with nothing left to compute: "
              f"{[len(r['extra_unused']) for r in runs]})" if args.elastic else "")
    print(f"model loads per run: {[r['loads'] for r in runs]} for {goal} replicas{extras} "
          f"(goal: one per replica, none "
          f"loaded twice: {'MET' if once else 'NOT MET'}); replicas withdrawn before their load finished: "
          f"{[len(r['withdrawn']) for r in runs]}; idle share while queued: "
          + ", ".join(f"{r['mode'].split(' ')[0]} {r['idle_share']:.1%}" for r in runs)
          + f"; load average now {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"cluster": args.cluster, "workload": args.workload, "items": items,
                                         "repeats": args.repeats,
                                         "load_before": load_before, "runs": runs,
                                         "ratio": ratio if BASELINE in best else None}, indent=1))
        print(f"numbers written to {args.json}")


if __name__ == "__main__":
    main()
