"""The model-major scheduler on a real local Ray cluster that declares GPUs it does not have.

``ray.init(num_gpus=4, num_cpus=4)``: every replica reserves one "GPU" and one
CPU and runs on the CPU with one torch thread. Four models are four identities
of the bundled fixture model (chat template on/off x float32/bfloat16). What a
cluster user measures is asserted from the manifest and the log: model loads,
pools alive at the same time, every row exactly once, no model call on resume,
a grid that cannot fit failing before any model is loaded.
"""

from __future__ import annotations

import json
import time
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest

from confgrid.flows.spec.grid import parse_grid

ray = pytest.importorskip("ray")

MODELS = [
    {"name": "chat32", "model": "confgrid-fixture", "chat_template": True, "dtype": "float32"},
    {"name": "plain32", "model": "confgrid-fixture", "chat_template": False, "dtype": "float32"},
    {"name": "chat16", "model": "confgrid-fixture", "chat_template": True, "dtype": "bfloat16"},
    {"name": "plain16", "model": "confgrid-fixture", "chat_template": False, "dtype": "bfloat16"},
]


def _grid(**over) -> dict:
    g = {
        "name": "sched",
        "models": MODELS,
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 16, "seed": 3}],
        "scoring": {"contexts": ["bare", "guess_slot"]},
        "metrics": {"names": ["ece", "auroc"]},
        "bootstrap": {"resamples": 50},
        "execution": {"shard_size": 8},
    }
    g.update(over)
    return g


@pytest.fixture(scope="module")
def four_gpus():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _meta(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["meta"]


def _overlapping_models(replicas: list[dict]) -> set[frozenset[str]]:
    """Pairs of models whose replicas were loaded at the same time."""
    spans = [(r["model"], r["ready_at"], r["released_at"]) for r in replicas if r["ready_at"]]
    return {frozenset((a[0], b[0])) for a, b in combinations(spans, 2)
            if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]}


def _rows_exactly_once(out: Path, models: list[str], n_items: int, contexts: int) -> None:
    graded = pd.read_parquet(out / "tables" / "graded.parquet")
    assert sorted(set(graded["model"])) == sorted(models)
    assert not graded.duplicated(["model", "item_id"]).any() and len(graded) == len(models) * n_items
    scores = pd.read_parquet(out / "tables" / "scores.parquet")
    answered = graded[graded["answer"].notna() & (graded["answer"].str.strip() != "")]
    assert not scores.duplicated(["model", "item_id", "context_id"]).any()
    assert len(scores) == contexts * len(answered)


def test_four_models_run_in_parallel_pools_each_loaded_once(four_gpus, tmp_path):
    from confgrid.flows.runner import run_grid

    spec = parse_grid(_grid())
    out = tmp_path / "run"
    summary = run_grid(spec, out)
    meta = _meta(out)
    assert meta["loads"] == {m["name"]: 1 for m in MODELS}
    assert summary.model_loads == 4 and summary.restarts == 0
    assert len(_overlapping_models(meta["replicas"])) >= 1, meta["replicas"]
    assert {r["state"] for r in meta["replicas"]} == {"released"}
    assert all(r["busy_seconds"] > 0 and r["calls"] > 0 for r in meta["replicas"])
    _rows_exactly_once(out, [m["name"] for m in MODELS], 16, 2)
    assert set(summary.metrics["setting"]) == {f"{m['name']}/triviaqa" for m in MODELS}
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    assert all(r["replica"] and r["replica"].split("#")[0] == r["setting"].split("/")[0]
               for r in shards if r["stage"] != "items")

    again = run_grid(spec, out, resume=True)
    assert again.model_calls == 0 and again.computed_shards == 0 and again.model_loads == 0


def test_the_progress_total_comes_from_the_plan_and_never_grows(four_gpus, tmp_path, monkeypatch):
    """Issue 20: the bar's total counts each generate shard's later shards from the start (an upper bound), so
    it only shrinks as answers that do not parse plan fewer requests, and ends at the requests made."""
    import confgrid.flows.execute.executor as ex
    from confgrid.flows.runner import run_grid

    seen: list[tuple[int, int]] = []

    class Bar:  # records (total, n) whenever the executor touches the bar
        def __init__(self, total=0, **_):
            self.total, self.n = total, 0

        def refresh(self):
            seen.append((self.total, self.n))

        def update(self, k):
            self.n += k
            seen.append((self.total, self.n))

        def close(self):
            pass

    monkeypatch.setattr(ex, "progress", lambda desc, unit: Bar())
    grid = _grid(models=MODELS[:1])
    summary = run_grid(parse_grid(grid), tmp_path / "run")
    first = next(i for i, (_, n) in enumerate(seen) if n > 0)  # the plan is queued before any work is done
    totals = [t for t, _ in seen[first - 1:]]
    assert all(b <= a for a, b in zip(totals, totals[1:])), totals  # never grows once work has started
    assert totals[0] == 16 + 16 * 2  # 16 generations + at most 16 answers in each of 2 contexts
    assert seen[-1] == (summary.model_calls, summary.model_calls)  # it ends at 100%


@pytest.mark.slow  # about 30 s on 2 cores (CI budget); the pools' order is also in the schedule benchmark
def test_max_concurrent_models_one_runs_pools_one_after_another(four_gpus, tmp_path, caplog):
    from confgrid.flows.runner import run_grid

    spec = parse_grid(_grid(models=MODELS[:2], execution={"shard_size": 8, "max_concurrent_models": 1}))
    out = tmp_path / "run"
    with caplog.at_level("INFO", logger="confgrid"):
        run_grid(spec, out)
    meta = _meta(out)
    assert meta["loads"] == {"chat32": 1, "plain32": 1}
    assert _overlapping_models(meta["replicas"]) == set()
    assert "waits for a free slot (execution.max_concurrent_models=1; running: chat32)" in caplog.text


@pytest.mark.slow  # three pools and a reload: about a minute on 2 cores; run with -m slow (the ACE example
# checks cross-model work in the default suite)
def test_cross_model_probe_loads_a_model_twice_only_when_it_must(four_gpus, tmp_path):
    """The plausible-wrong probe needs the other model's answers: with room for both pools every model is
    loaded once; with one pool at a time the first model is released for the second and reloaded once."""
    from confgrid.flows.runner import run_grid

    probe = {"enabled": True, "kinds": ["canonical", "plausible_wrong", "own"], "resamples": 50}
    both = run_grid(parse_grid(_grid(models=MODELS[:2], probe=probe)), tmp_path / "both")
    assert _meta(tmp_path / "both")["loads"] == {"chat32": 1, "plain32": 1}
    one = tmp_path / "one"
    run_grid(parse_grid(_grid(models=MODELS[:2], probe=probe,
                              execution={"shard_size": 8, "max_concurrent_models": 1})), one)
    assert _meta(one)["loads"] == {"chat32": 2, "plain32": 1}
    probe_rows = pd.read_parquet(one / "tables" / "probe.parquet")
    assert {"canonical", "own"} <= set(probe_rows["kind"])
    assert not probe_rows.duplicated(["model", "item_id", "kind"]).any()
    assert both.metrics.shape == run_grid(parse_grid(_grid(models=MODELS[:2], probe=probe)),
                                          tmp_path / "both").metrics.shape
    # fix the answer, vary the measurement: another primary rule reruns no model, the probe included
    grid = _grid(models=MODELS[:2], probe=probe, correctness={"rules": ["containment", "exact_match"],
                                                              "primary": "exact_match"})
    again = run_grid(parse_grid(grid), tmp_path / "both")
    assert again.model_calls == 0 and again.model_loads == 0


@pytest.mark.slow  # about 30 s on 2 cores (CI budget); run with -m slow
def test_more_replicas_than_fit_run_as_room_frees_up(four_gpus, tmp_path, caplog):
    from confgrid.flows.runner import run_grid

    grid = _grid(models=[dict(MODELS[0], replicas=6)], execution={"shard_size": 2})
    with caplog.at_level("INFO", logger="confgrid"):
        summary = run_grid(parse_grid(grid), tmp_path / "run")
    assert "6 replicas of {GPU: 1, CPU: 1}, the cluster holds 4 at once" in caplog.text
    reps = _meta(tmp_path / "run")["replicas"]
    assert len(reps) == 6 and 1 <= sum(r["loads"] for r in reps) <= 6
    assert sum(r["calls"] for r in reps) > 0 and summary.failed_shards == 0
    _rows_exactly_once(tmp_path / "run", ["chat32"], 16, 2)


def test_a_grid_that_cannot_fit_fails_before_any_model_is_loaded(four_gpus, tmp_path):
    from confgrid.flows.execute.capacity import CapacityError
    from confgrid.flows.runner import run_grid

    grid = _grid(models=[MODELS[0], {"name": "big", "model": "confgrid-fixture", "backend": "vllm",
                                     "tensor_parallel_size": 8}])
    t0 = time.time()
    with pytest.raises(CapacityError) as ei:
        run_grid(parse_grid(grid), tmp_path / "run")
    assert time.time() - t0 < 10
    msg = str(ei.value)
    assert "model 'big'" in msg and "{GPU: 8, CPU: 8}" in msg
    assert "tensor_parallel_size=8: one actor holding 8 GPUs, vLLM's multiprocessing executor" in msg
    assert "largest node offers {GPU: 4, CPU: 4}" in msg
    assert _meta(tmp_path / "run").get("replicas", []) == []  # not one replica was asked for
    assert not [a for a in ray.util.list_named_actors() if a.startswith("confgrid-")]


def test_several_shards_per_engine_call(four_gpus, tmp_path):
    """prompts_per_call packs whole shards into one engine call; each shard is still stored on its own."""
    from confgrid.flows.runner import run_grid

    grid = _grid(models=[dict(MODELS[0], prompts_per_call=16)], execution={"shard_size": 4})
    summary = run_grid(parse_grid(grid), tmp_path / "run")
    (rep,) = _meta(tmp_path / "run")["replicas"]
    shards = [r for r in json.loads((tmp_path / "run" / "manifest.json").read_text())["shards"]
              if r["stage"] in ("generate", "score")]
    assert len(shards) == summary.computed_shards == 4 + 2 * 4  # 16 items in shards of 4, 2 contexts
    assert rep["calls"] <= 4 < len(shards)  # 16 prompts per call: 1 generate call, then score calls of 4 shards
    assert len({r["key"] for r in shards}) == len(shards)
    _rows_exactly_once(tmp_path / "run", ["chat32"], 16, 2)


@pytest.mark.slow  # about 15 s (CI budget); shared shards by content key are also in test_plan.py
def test_two_names_for_one_model_share_its_shards_and_keep_their_names(four_gpus, tmp_path):
    """Shards are keyed by what a model is, not by its name: two entries with the same identity are computed
    once (one load), and every table row carries the name of the entry it is read for."""
    from confgrid.flows.runner import run_grid

    twins = [dict(MODELS[0], name="twin-a"), dict(MODELS[0], name="twin-b", batch_size=8)]
    summary = run_grid(parse_grid(_grid(models=twins)), tmp_path / "run")
    assert sum(_meta(tmp_path / "run")["loads"].values()) == 1
    _rows_exactly_once(tmp_path / "run", ["twin-a", "twin-b"], 16, 2)
    graded = pd.read_parquet(tmp_path / "run" / "tables" / "graded.parquet")
    a, b = (graded[graded["model"] == m].set_index("item_id")["raw_output"] for m in ("twin-a", "twin-b"))
    assert a.sort_index().equals(b.sort_index())
    m = summary.metrics
    pd.testing.assert_series_equal(m[m["model"] == "twin-a"]["point"].reset_index(drop=True),
                                   m[m["model"] == "twin-b"]["point"].reset_index(drop=True), check_names=False)



def test_elastic_replicas_start_on_idle_gpus_only_for_queued_work(four_gpus, tmp_path, caplog, monkeypatch):
    """Issue 21 item 5: ``max_replicas`` lets a model with queued work start extra replicas on GPUs left idle.

    Two models with ``max_replicas: auto`` on 4 declared GPUs and 32 items: ``el`` queues 16 generate shards
    (one per call, 2 calls in flight per replica), then 32 score shards. ``packed`` packs its shards into calls
    of up to 512 requests (1 generate call, then one per context), which its one replica takes at once: it
    gets none. Whether a queue outlasts a load depends on how busy the 2 cores are, so the measured load time
    the decision reads is scaled down to 1 ms and the start time to 0 (the rule itself is tested by hand in
    tests/flows/execute/test_elastic.py); it still needs a replica of the model loaded and a call finished. Every extra replica is asked for after that,
    with more calls queued than its model's replicas take, on GPUs free then; each replica loads at most once
    and every shard is computed once (extra replicas that loaded took calls from the same queue; on 2 cores
    they are often withdrawn while loading, the first replica having ended the queue)."""
    import dataclasses
    import re

    from confgrid.flows.execute.pools import ModelPool
    from confgrid.flows.runner import run_grid

    demand = ModelPool.demand

    def fast_loads(self, *a, **kw):
        d = demand(self, *a, **kw)
        return dataclasses.replace(d, load_s=None if d.load_s is None else 0.001, start_s=0.0)

    monkeypatch.setattr(ModelPool, "demand", fast_loads)
    grid = _grid(models=[dict(MODELS[0], name="el", max_replicas="auto"),
                         dict(MODELS[1], name="packed", max_replicas="auto", prompts_per_call=512)],
                 datasets=[{"name": "triviaqa", "adapter": "triviaqa", "limit": 32, "seed": 3}],
                 execution={"shard_size": 2})
    out = tmp_path / "run"
    with caplog.at_level("INFO", logger="confgrid"):
        summary = run_grid(parse_grid(grid), out)
    meta = _meta(out)
    reps = meta["replicas"]
    extra = [r for r in reps if r["elastic"]]
    assert extra and all(r["model"] == "el" for r in extra), reps
    assert len([r for r in reps if r["model"] == "packed"]) == 1
    asked = re.findall(r"extra replica (el#\d+) asked for \(max_replicas 4\): (\d+) call\(s\) queued for (\d+) "
                       r"replica\(s\)", caplog.text)
    assert sorted(a[0] for a in asked) == sorted(r["replica"] for r in extra)
    assert all(int(calls) > 2 * int(live) for _, calls, live in asked), asked  # work beyond its replicas' calls
    el0 = next(r for r in reps if r["replica"] == "el#0")
    for r in extra:  # after el#0 had loaded; GPUs idle: with it, the replicas not released held at most 4 GPUs
        t = r["requested_at"]
        assert t > el0["ready_at"]
        held = [x for x in reps if x["requested_at"] <= t and (x["released_at"] is None or x["released_at"] > t)]
        assert sum(x["gpus"] for x in held) <= 4, (r["replica"], held)
    assert all(r["loads"] <= 1 for r in reps) and summary.restarts == 0
    assert meta["loads"]["el"] == sum(r["loads"] for r in reps if r["model"] == "el")
    assert all(r["calls"] == 0 for r in extra if not r["loads"])
    assert summary.failed_shards == 0
    shards = json.loads((out / "manifest.json").read_text())["shards"]
    keys = [r["key"] for r in shards if r["stage"] in ("generate", "score")]
    assert len(keys) == len(set(keys))  # each shard computed once, by one replica
    assert {r["replica"] for r in shards if r["stage"] != "items" and r["setting"].startswith("packed")} == {"packed#0"}
    by_replica = {r["replica"] for r in shards if r["stage"] != "items" and r["setting"].startswith("el")}
    assert by_replica == {"el#0"} | {r["replica"] for r in extra if r["calls"]}
    _rows_exactly_once(out, ["el", "packed"], 32, 2)


def test_a_tensor_parallel_replica_is_one_actor_holding_its_gpus_unless_executor_ray(four_gpus, tmp_path):
    """Issue 38 item 1: a ``tensor_parallel_size: 2`` replica is ONE actor reserving 2 GPUs (vLLM's
    multiprocessing executor runs inside it), no placement group; ``executor: ray`` keeps the STRICT_PACK
    placement group (the actor holds no GPU itself: vLLM's Ray workers take the group's). Both are counted
    alike: 2 GPUs and 2 CPUs per replica in the manifest, one load each, the group removed at the end.

    The grid allows tensor parallelism for vLLM only, which this environment lacks; as in
    benchmarks/schedule_bench.py ``--cluster 8gpu``, the parsed spec gets the tensor-parallel shape, so the
    fixture model computes with transformers while the scheduler sees the replicas of TP-2 vLLM models."""
    from confgrid.flows.runner import run_grid

    spec = parse_grid(_grid(models=[dict(MODELS[0], name="tpmp"), dict(MODELS[2], name="tpray")]))
    mp, pg = spec.models
    spec = spec.model_copy(update={"models": (mp.model_copy(update={"tensor_parallel_size": 2}),
                                              pg.model_copy(update={"tensor_parallel_size": 2, "executor": "ray"}))})
    assert [m.resolved_executor for m in spec.models] == ["mp", "ray"]
    groups_before = set(ray.util.placement_group_table())
    summary = run_grid(spec, tmp_path / "run")
    reps = {r["model"]: r for r in _meta(tmp_path / "run")["replicas"]}
    assert sorted(reps) == ["tpmp", "tpray"] and summary.failed_shards == 0
    assert reps["tpmp"]["gpus"] == reps["tpray"]["gpus"] == 2.0 and reps["tpmp"]["cpus"] == reps["tpray"]["cpus"] == 2.0
    assert len(reps["tpmp"]["gpu_ids"]) == 2 and reps["tpray"]["gpu_ids"] == []
    assert reps["tpmp"]["loads"] == reps["tpray"]["loads"] == 1
    assert {r["state"] for r in reps.values()} == {"released"}
    groups = {k: g for k, g in ray.util.placement_group_table().items() if k not in groups_before}
    assert [g["name"] for g in groups.values()] == ["confgrid-tpray-0-0"], groups
    assert all(g["state"] == "REMOVED" for g in groups.values())
    assert [g["bundles"] for g in groups.values()] == [{0: {"GPU": 1.0, "CPU": 1.0}, 1: {"GPU": 1.0, "CPU": 1.0}}]
    _rows_exactly_once(tmp_path / "run", ["tpmp", "tpray"], 16, 2)
