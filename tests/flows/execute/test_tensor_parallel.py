"""Tensor parallelism without a model (issue 38): the executor a replica runs its ranks with, what it reserves,
each rank's CPU cores, the engine's processes and which one died, pure. The same through the scheduler on a
declared-GPU Ray cluster: tests/flows/execute/test_scheduler.py; with real vLLM ranks on CPU: tests/vllm_cpu/test_tp_vllm.py.
"""

from __future__ import annotations

import copy
import pickle
import signal
import subprocess
import sys
import time

import pytest
import yaml

from confgrid.actors.backend import EngineDied, engine_died
from confgrid.actors.model_actor import ModelConfig, cpu_thread_binding, replica_resources
from confgrid.actors.engine_processes import ExitOrder, engine_process_name
from confgrid.flows.execute.capacity import check_capacity, start_order
from confgrid.flows.execute.pools import model_config
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import parse_grid

GRID = {
    "name": "tp",
    "models": [{"name": "big", "model": "confgrid-fixture", "backend": "vllm", "tensor_parallel_size": 4}],
    "datasets": [{"name": "tq", "adapter": "truthfulqa", "limit": 4}],
}
EIGHT = {"GPU": 8.0, "CPU": 16.0}


def _grid(**model) -> dict:
    g = copy.deepcopy(GRID)
    g["models"][0].update(model)
    return g


def test_the_multiprocessing_executor_is_the_default_and_ray_a_choice():
    spec = parse_grid(GRID)
    assert spec.models[0].executor is None and spec.models[0].resolved_executor == "mp"
    assert model_config(spec.models[0], spec).executor == "mp"
    ray_spec = parse_grid(_grid(executor="ray"))
    assert ray_spec.models[0].resolved_executor == "ray"
    assert model_config(ray_spec.models[0], ray_spec).executor == "ray"
    one = parse_grid({**GRID, "models": [{"name": "m", "model": "confgrid-fixture"}]})
    assert one.models[0].resolved_executor is None and model_config(one.models[0], one).executor is None


@pytest.mark.parametrize("model, words", [
    ({"executor": "ray", "tensor_parallel_size": 1}, "received backend 'vllm', tensor_parallel_size=1"),
    ({"executor": "mp", "backend": "transformers", "tensor_parallel_size": 1}, "received backend 'transformers'"),
    ({"executor": "nccl"}, "executor"),
])
def test_an_executor_that_chooses_nothing_is_refused_naming_what_was_received(model, words):
    with pytest.raises(GridSpecError) as ei:
        parse_grid(_grid(**model))
    assert words in str(ei.value)


def test_grid_yaml_records_the_executor_and_reloads_it():
    """grid.yaml records the executor as given (null: vLLM's multiprocessing executor) and parses back to it; no
    shard key reads the model's dump, so earlier runs resume unchanged."""
    for grid, want in ((GRID, None), (_grid(executor="ray"), "ray")):
        dumped = yaml.safe_dump(parse_grid(grid).model_dump(mode="json"))
        assert yaml.safe_load(dumped)["models"][0]["executor"] == want
        assert parse_grid(yaml.safe_load(dumped)).models[0].executor == want


def test_one_actor_holds_the_gpus_with_mp_and_a_placement_group_with_ray_each_needing_the_same_on_one_node():
    mp = replica_resources(ModelConfig("big", "m", backend="vllm", tensor_parallel_size=4, executor="mp"), EIGHT)
    pg = replica_resources(ModelConfig("big", "m", backend="vllm", tensor_parallel_size=4, executor="ray"), EIGHT)
    assert mp.actor == {"num_gpus": 4, "num_cpus": 4} and mp.bundles is None
    assert pg.actor == {"num_gpus": 0, "num_cpus": 0} and pg.bundles == [{"GPU": 1, "CPU": 1}] * 4
    assert mp.per_node == pg.per_node == {"GPU": 4.0, "CPU": 4.0}
    assert "one actor holding 4 GPUs, vLLM's multiprocessing executor" in mp.note
    assert "executor ray: a STRICT_PACK placement group of 4" in pg.note
    cpu = replica_resources(ModelConfig("big", "m", backend="vllm", tensor_parallel_size=2, executor="mp"),
                            {"CPU": 2.0})
    assert cpu.actor == {"num_cpus": 2} and cpu.per_node == {"CPU": 2.0} and cpu.bundles is None
    assert "2 CPU cores" in cpu.note and "one core per rank" in cpu.note


def test_capacity_and_start_order_treat_both_executors_alike():
    """What a replica needs on one node, not how its ranks run, decides where and when it starts."""
    nodes = [{"GPU": 4.0, "CPU": 8.0}, {"GPU": 4.0, "CPU": 8.0}]
    needs = {}
    for name, executor, tp in (("mp8", "mp", 8), ("ray8", "ray", 8), ("mp4", "mp", 4), ("ray4", "ray", 4)):
        rr = replica_resources(ModelConfig(name, "m", backend="vllm", tensor_parallel_size=tp, executor=executor),
                               {"GPU": 8.0, "CPU": 16.0})
        needs[name] = (1, rr.per_node, rr.note)
    problems = check_capacity(needs, nodes)
    assert [p.split("'")[1] for p in problems] == ["mp8", "ray8"]
    assert "one replica asks for {GPU: 8, CPU: 8} on one node (tensor_parallel_size=8: one actor holding 8 GPUs" \
        in problems[0]
    assert all("the largest node offers {GPU: 4, CPU: 8} (2 node(s) in the cluster)" in p for p in problems)
    assert start_order(needs) == ["mp8", "ray8", "mp4", "ray4"]


def test_each_rank_gets_cores_of_its_own_from_those_ray_gave_the_replica():
    assert cpu_thread_binding(2, {0, 1}, 2) == "0|1"
    assert cpu_thread_binding(2, [3, 2, 1, 0], 4) == "0,1|2,3"
    assert cpu_thread_binding(2, range(64), 5) == "0,1|2,3"  # the fifth core Ray gave stays unused
    assert cpu_thread_binding(1, [7], 1) == "7"
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2: .* holds 1 usable core\(s\) \(1 CPU\(s\) from "
                                         r"Ray, cores this process may run on: \[0, 1\]\); allowed: "
                                         r"tensor_parallel_size <= 1"):
        cpu_thread_binding(2, [0, 1], 1)


def test_engine_processes_are_named_by_their_vllm_titles():
    assert engine_process_name("VLLM::Worker_TP0", 2) == "rank 0 of 2"
    assert engine_process_name("VLLM::Worker_DP0_PP1_TP3_EP3", 4) == "rank 3 of 4"
    assert engine_process_name("VLLM::EngineCore") == "engine core"
    assert engine_process_name("python -c from multiprocessing.resource_tracker import main") is None


def test_engine_died_crosses_ray_with_its_fields():
    exc = EngineDied("the engine died", "rank 1 of 2 (pid 42)", "abc")
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), back.process, back.incarnation, str(back)) == (EngineDied, "rank 1 of 2 (pid 42)", "abc",
                                                                      "the engine died")

    class Wrapped(Exception):  # Ray's RayTaskError keeps the actor's exception as ``cause``
        cause = exc

    assert engine_died(Wrapped()) is exc and engine_died(ValueError("x")) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "pidfd_open"), reason="needs os.pidfd_open (Linux >= 5.3)")
def test_the_first_process_to_end_is_the_one_named():
    """Two stand-ins for ranks; the second is killed, then the first is stopped: the second is named first."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        watch = ExitOrder([("rank 0 of 2", procs[0].pid), ("rank 1 of 2", procs[1].pid)])
        assert watch.watching and watch.first() is None
        procs[1].send_signal(signal.SIGKILL)
        time.sleep(0.3)
        procs[0].terminate()
        first = watch.first(wait=5.0)
        assert first is not None and first[:2] == ("rank 1 of 2", procs[1].pid)
        deadline = time.monotonic() + 5.0
        while len(watch.ended) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [e[0] for e in watch.ended] == ["rank 1 of 2", "rank 0 of 2"]
        watch.close()
        watch.close()  # idempotent
    finally:
        for p in procs:
            p.kill()
            p.wait()


# -- the 72B plan of README "A 72B model next to two 8B models" (issue 38 item 4) -------------------------------

#: The plan's grid (README): Qwen2.5-72B-Instruct at TP=4 next to two 8B models, one replica each.
PLAN_72B = {
    "name": "plan72b",
    "models": [
        {"name": "llama8b", "model": "meta-llama/Llama-3.1-8B-Instruct", "backend": "vllm", "dtype": "bfloat16"},
        {"name": "qwen72b", "model": "Qwen/Qwen2.5-72B-Instruct", "backend": "vllm", "dtype": "bfloat16",
         "tensor_parallel_size": 4},
        {"name": "qwen8b", "model": "Qwen/Qwen3-8B", "backend": "vllm", "dtype": "bfloat16"},
    ],
    "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 1000, "seed": 0}],
}
#: The two clusters of the plan, node by node as Ray declares them (a CPU-only head, then GPU workers).
ONE_8GPU_NODE = [{"GPU": 0.0, "CPU": 8.0}, {"GPU": 8.0, "CPU": 64.0}]
TWO_4GPU_NODES = [{"GPU": 0.0, "CPU": 8.0}, {"GPU": 4.0, "CPU": 32.0}, {"GPU": 4.0, "CPU": 32.0}]


def _plan(nodes: list[dict[str, float]]) -> tuple[dict, list[str], dict[str, int]]:
    """What the executor decides before any model loads (pools.py ``ensure_ray``, ``start_pools``):
    each replica's needs, the capacity problems, the order of the pools, and a placement of that order where each
    replica goes to the node with the fewest free GPUs that holds it (Ray places them; every replica fits at once
    here, so any placement Ray picks holds them all)."""
    spec = parse_grid(PLAN_72B)
    cluster = {"GPU": sum(n["GPU"] for n in nodes), "CPU": max(n["CPU"] for n in nodes)}
    needs = {}
    for m in spec.models:
        rr = replica_resources(model_config(m, spec), cluster)
        needs[m.name] = (m.replicas, rr.per_node, rr.note)
    assert check_capacity(needs, nodes) == []
    free = [dict(n) for n in nodes]
    where = {}
    for name in start_order(needs):
        need = needs[name][1]
        fits = [i for i, n in enumerate(free) if all(n[k] >= v for k, v in need.items())]
        assert fits, f"{name} would wait: {free}"
        i = min(fits, key=lambda j: (free[j]["GPU"], free[j]["CPU"], j))
        for k, v in need.items():
            free[i][k] -= v
        where[name] = i
    return needs, start_order(needs), where


def test_the_72b_plan_on_one_8_gpu_node():
    needs, order, where = _plan(ONE_8GPU_NODE)
    assert order == ["qwen72b", "llama8b", "qwen8b"]  # the largest replica is asked for first
    assert needs["qwen72b"][1] == {"GPU": 4.0, "CPU": 4.0} and needs["llama8b"][1] == {"GPU": 1.0, "CPU": 1.0}
    assert "one actor holding 4 GPUs, vLLM's multiprocessing executor" in needs["qwen72b"][2]
    assert set(where.values()) == {1}  # all three at once on the GPU node: three loads, 2 of 8 GPUs idle
    assert sum(n[1]["GPU"] for n in needs.values()) == 6


def test_the_72b_plan_on_two_4_gpu_nodes():
    needs, order, where = _plan(TWO_4GPU_NODES)
    assert order == ["qwen72b", "llama8b", "qwen8b"]
    assert where["qwen72b"] != where["llama8b"] == where["qwen8b"]  # the 72B alone on a node, the 8Bs on the other
    assert check_capacity({"qwen72b": needs["qwen72b"]}, [{"GPU": 2.0, "CPU": 32.0}] * 4) == [
        "model 'qwen72b': one replica asks for {GPU: 4, CPU: 4} on one node (tensor_parallel_size=4: one actor "
        "holding 4 GPUs, vLLM's multiprocessing executor); the largest node offers {GPU: 2, CPU: 32} (4 node(s) in "
        "the cluster)"]


def test_status_shows_what_each_replica_of_the_plan_holds(tmp_path):
    """``confgrid status`` while the plan runs: one line per replica with the GPUs it holds (the 72B: 4)."""
    import json
    import os
    import socket

    from typer.testing import CliRunner

    from confgrid.cli.main import app
    from confgrid.flows.execute.pools import Replica

    needs, order, _ = _plan(ONE_8GPU_NODE)
    reps = []
    for name in order:
        r = Replica(name, 0, 0, state="ready", gpus=needs[name][1]["GPU"], cpus=needs[name][1]["CPU"], loads=1)
        reps.append(r.record())
    out = tmp_path / "run"
    out.mkdir()
    (out / "grid.yaml").write_text("name: plan72b\n")
    live = {"driver_pid": os.getpid(), "driver_host": socket.gethostname(), "started_at": 1.0}
    (out / "manifest.json").write_text(json.dumps({"shards": [], "meta": {"replicas": reps, "invocations": [live]}}))
    res = CliRunner().invoke(app, ["status", str(out)])
    assert res.exit_code == 0, res.output
    rows = [line.split("│") for line in res.output.splitlines() if "#0" in line]
    assert [(c[1].strip(), c[2].strip(), c[3].strip(), c[4].strip()) for c in rows] == [
        ("qwen72b#0", "ready", "4 GPUs", "1"), ("llama8b#0", "ready", "1 GPU", "1"),
        ("qwen8b#0", "ready", "1 GPU", "1")]
    assert "driver pid" in res.output and "running" in res.output
