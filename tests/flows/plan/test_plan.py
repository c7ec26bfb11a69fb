"""The pure plan (flows/plan/grid_plan.py), the capacity check and the pools' start order (flows/execute/capacity.py),
without Ray or a model.

Generations are fed to the plan by hand, as the executor would after a model
call, so the whole chain (generate -> parse + grade -> score + own probe ->
cross-model probe) is checked in milliseconds.
"""

from __future__ import annotations

import pandas as pd
import pytest

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.execute.capacity import at_once, check_capacity, start_order
from confgrid.flows.execute.pools import model_config
from confgrid.flows.spec.grid import parse_grid
from confgrid.protocols.datasets import BUNDLED, load_items

ITEMS = {"triviaqa": load_items("triviaqa", BUNDLED["triviaqa"], limit=6, seed=0, dataset_name="triviaqa")}


def _grid(**over) -> dict:
    g = {
        "name": "plan",
        "models": [{"name": "a", "model": "confgrid-fixture"}, {"name": "b", "model": "confgrid-fixture",
                                                                  "chat_template": False}],
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 6, "seed": 0}],
        "scoring": {"contexts": ["bare", "guess_slot"]},
        "execution": {"shard_size": 4},
    }
    g.update(over)
    return g


def _generations(shard: ShardRequest, answers: dict[str, str]) -> pd.DataFrame:
    """What a model 'wrote' for a generate shard: Guess/Probability lines."""
    return pd.DataFrame({
        "model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids,
        "prompt_id": "confidence", "sample_idx": 0, "chunk": shard.chunk,
        "raw_output": [f"Guess: {answers.get(i, 'Zzyzx')}\nProbability: 0.7" for i in shard.item_ids],
        "finish_reason": "stop", "n_new_tokens": 5,
    })


def _finish_generate(plan: GridPlan, right: set[str] = frozenset()) -> dict[str, list[ShardRequest]]:
    """Run every generate shard through the plan; model ``a`` answers right on the models in ``right``."""
    gold = {i.item_id: i.gold_answers[0] for i in ITEMS["triviaqa"]}
    out: dict[str, list[ShardRequest]] = {}
    for sh in plan.generate_shards():
        answers = gold if sh.model in right else {}
        out.setdefault(sh.model, []).extend(plan.on_done(sh, _generations(sh, answers)))
    return out


def test_generate_shards_cover_every_item_once_with_stable_keys():
    spec = parse_grid(_grid())
    plan = GridPlan(spec, ITEMS)
    shards = plan.generate_shards()
    assert len(shards) == 2 * 2  # 2 models x ceil(6 / 4) chunks
    for m in ("a", "b"):
        ids = [i for s in shards if s.model == m for i in s.item_ids]
        assert sorted(ids) == sorted(i.item_id for i in ITEMS["triviaqa"])
    assert len({s.key for s in shards}) == 4
    assert [s.key for s in GridPlan(spec, ITEMS).generate_shards()] == [s.key for s in shards]
    # engine knobs are not inputs of a shard: same keys with another batch size, replicas or call size
    other = _grid(models=[{"name": "a", "model": "confgrid-fixture", "batch_size": 3, "replicas": 4,
                           "prompts_per_call": 7},
                          {"name": "b", "model": "confgrid-fixture", "chat_template": False}])
    assert [s.key for s in GridPlan(parse_grid(other), ITEMS).generate_shards()] == [s.key for s in shards]
    assert {s.label for s in shards} == {"a/triviaqa#0", "a/triviaqa#1", "b/triviaqa#0", "b/triviaqa#1"}


def test_a_generate_shard_yields_its_score_shards_per_context():
    plan = GridPlan(parse_grid(_grid()), ITEMS)
    sh = plan.generate_shards()[0]
    new = plan.on_done(sh, _generations(sh, {}))
    assert [(s.stage, s.context) for s in new] == [("score", "bare"), ("score", "guess_slot")]
    for s in new:
        assert s.upstream == (sh.key,) and s.item_ids == sh.item_ids
        assert {r.answer for r in s.rows} == {"Zzyzx"}
    graded = plan.answers(sh.model, sh.dataset, sh.answer_set)
    assert {"correct_containment", "correct"} <= set(graded.columns) and len(graded) == len(sh.rows)
    assert not plan.expects_work("a")  # no probe: nothing follows the model's own chain


def test_unparsed_answers_are_not_scored():
    plan = GridPlan(parse_grid(_grid()), ITEMS)
    sh = plan.generate_shards()[0]
    gen = _generations(sh, {}).assign(raw_output="I cannot say.")
    new = plan.on_done(sh, gen)
    assert all(len(s.rows) == len(sh.rows) for s in new) or new == []
    assert set(plan.units[(sh.model, sh.dataset, sh.answer_set)].graded[sh.label]["parse_status"]) != {"ok"}


def test_cross_model_probe_waits_for_every_models_answers():
    spec = parse_grid(_grid(probe={"enabled": True, "kinds": ["canonical", "plausible_wrong", "own"]}))
    plan = GridPlan(spec, ITEMS)
    gens = plan.generate_shards()
    a_shards = [s for s in gens if s.model == "a"]
    new = [x for s in a_shards for x in plan.on_done(s, _generations(s, {}))]
    # a's own chain: score shards and the probe kinds that need no other model
    assert {s.stage for s in new} == {"score", "probe"}
    assert {s.part for s in new if s.stage == "probe"} == {"own"}
    assert {r.kind for s in new if s.stage == "probe" for r in s.rows} == {"canonical", "own"}
    assert plan.expects_work("a") and plan.expects_work("b")
    assert plan.waiting_for() == ["probe on triviaqa waits for the main answers of b"]
    gold = {i.item_id: i.gold_answers[0] for i in ITEMS["triviaqa"]}
    b_shards = [s for s in gens if s.model == "b"]
    new_b = [x for s in b_shards for x in plan.on_done(s, _generations(s, gold))]
    cross = [s for s in new_b if s.part == "cross"]
    # b answered right, a wrong: a gets no plausible wrong answer from b (no shard), b gets a's wrong answer
    assert {s.model for s in cross} == {"b"}
    assert not plan.expects_cross_for("a", "triviaqa")
    b_rows = [r for s in cross if s.model == "b" for r in s.rows]
    assert b_rows and {r.kind for r in b_rows} == {"plausible_wrong"} and {r.source for r in b_rows} == {"a"}
    assert set(cross[0].upstream) == {s.key for s in gens}
    assert not plan.expects_work("a") and not plan.expects_work("b")


def test_probe_keys_depend_on_the_probe_rule_not_on_the_primary_rule():
    def cross_keys(**over) -> set[str]:
        plan = GridPlan(parse_grid(_grid(**{"probe": {"enabled": True}, **over})), ITEMS)
        return {s.key for ss in _finish_generate(plan).values() for s in ss if s.stage == "probe"}

    base = cross_keys()
    assert base
    assert cross_keys(correctness={"rules": ["containment", "exact_match"], "primary": "exact_match"}) == base
    changed = cross_keys(probe={"enabled": True, "rule": "exact_match"})
    assert changed != base and changed & base  # own-part shards are unchanged, cross-part ones are new


def test_a_failed_generate_shard_blocks_the_cross_probe_with_a_reason(caplog):
    plan = GridPlan(parse_grid(_grid(probe={"enabled": True})), ITEMS)
    gens = plan.generate_shards()
    with caplog.at_level("WARNING", logger="confgrid"):
        plan.on_failed(gens[0])
    for s in gens[1:]:
        assert all(x.part != "cross" for x in plan.on_done(s, _generations(s, {})))
    assert not plan.expects_work("a") and not plan.expects_work("b")
    assert plan.expects_cross_for("a", "triviaqa")
    assert "failed shards" in caplog.text


def test_capacity_check_names_the_model_the_request_and_the_largest_node():
    nodes = [{"GPU": 4.0, "CPU": 8.0}, {"GPU": 0.0, "CPU": 64.0}]
    ok = {"small": (2, {"GPU": 1.0, "CPU": 1.0}, "one GPU and one CPU")}
    assert check_capacity(ok, nodes) == []
    (p,) = check_capacity({"big": (1, {"GPU": 8.0, "CPU": 8.0}, "tensor_parallel_size=8, STRICT_PACK")}, nodes)
    assert "'big'" in p and "{GPU: 8, CPU: 8}" in p and "largest node offers {GPU: 4, CPU: 8}" in p
    # GPUs and CPUs must be on the same node
    (p,) = check_capacity({"cpu_heavy": (1, {"GPU": 1.0, "CPU": 16.0}, "x")}, nodes)
    assert "cpu_heavy" in p
    assert check_capacity({"x": (1, {"GPU": 1.0}, "y")}, []) != []  # no node at all


def test_replicas_at_once():
    assert at_once({"GPU": 1.0, "CPU": 1.0}, [{"GPU": 4.0, "CPU": 2.0}]) == 2
    assert at_once({"GPU": 2.0, "CPU": 2.0}, [{"GPU": 4.0, "CPU": 8.0}, {"GPU": 3.0, "CPU": 8.0}]) == 3
    assert at_once({"CPU": 2.0}, [{"GPU": 0.0, "CPU": 3.0}]) == 1


@pytest.mark.parametrize("bad", [{"max_concurrent_models": 0}, {"calls_in_flight": 0}])
def test_bad_execution_knobs_fail_validation(bad):
    from confgrid.flows.spec.base import GridSpecError

    with pytest.raises(GridSpecError, match="execution"):
        parse_grid(_grid(execution=bad))


def test_unknown_probe_rule_lists_the_rules():
    from confgrid.flows.spec.base import GridSpecError

    with pytest.raises(GridSpecError, match=r"probe\.rule: unknown correctness rule 'contain'"):
        parse_grid(_grid(probe={"enabled": True, "rule": "contain"}))


def _need(gpus: float, cpus: float, replicas: int = 1) -> tuple[int, dict[str, float], str]:
    return (replicas, {"GPU": gpus, "CPU": cpus} if gpus else {"CPU": cpus}, "")


def test_start_order_puts_the_largest_replica_first():
    # the five models of benchmarks/schedule_bench.py --cluster 8gpu, in grid order
    needs = {"one-a": _need(1, 1), "one-b": _need(1, 1), "tp2": _need(2, 2), "tp4": _need(4, 4),
             "dp2": _need(1, 1, replicas=2)}
    assert start_order(needs) == ["tp4", "tp2", "dp2", "one-a", "one-b"]
    assert list(needs) == ["one-a", "one-b", "tp2", "tp4", "dp2"]  # the input is left as it was


def test_start_order_keeps_grid_order_for_equal_shapes():
    assert start_order({"z": _need(1, 1), "a": _need(1, 1), "m": _need(1, 1)}) == ["z", "a", "m"]
    assert start_order({"m": _need(2, 2), "a": _need(1, 1), "z": _need(2, 2)}) == ["m", "z", "a"]
    assert start_order({}) == []


def test_start_order_gpus_then_cpus_then_replicas():
    # more replicas only break a tie of shape
    assert start_order({"one": _need(1, 1), "three": _need(1, 1, 3), "two": _need(1, 1, 2)}) == ["three", "two", "one"]
    assert start_order({"many": _need(1, 1, 4), "tp2": _need(2, 2)}) == ["tp2", "many"]
    # CPUs per replica before the number of replicas, after the GPUs
    assert start_order({"many": _need(1, 1, 4), "cpu2": _need(1, 2)}) == ["cpu2", "many"]
    assert start_order({"cpu8": _need(1, 8), "tp2": _need(2, 2)}) == ["tp2", "cpu8"]


def test_start_order_of_cpu_only_models():
    # a CPU cluster's replica takes one node's CPUs; an API model one CPU; a GPU model comes before both
    needs = {"api": _need(0, 1), "cpu": _need(0, 8), "api2": _need(0, 1, 2), "gpu": _need(1, 1)}
    assert start_order(needs) == ["gpu", "cpu", "api2", "api"]


def test_start_order_reads_the_tensor_parallel_shape_of_a_replica():
    """The shapes come from actors/model_actor.py ``replica_resources``, as the executor builds them."""
    from confgrid.actors.model_actor import replica_resources

    spec = parse_grid(_grid(models=[
        {"name": "one", "model": "confgrid-fixture", "replicas": 2},
        {"name": "tp4", "model": "confgrid-fixture", "backend": "vllm", "tensor_parallel_size": 4},
        {"name": "tp2", "model": "confgrid-fixture", "backend": "vllm", "tensor_parallel_size": 2},
    ]))
    cluster = {"GPU": 8.0, "CPU": 8.0}
    needs = {m.name: (m.replicas, replica_resources(model_config(m, spec), cluster).per_node, "") for m in spec.models}
    assert needs["tp4"][1] == {"GPU": 4.0, "CPU": 4.0}
    assert start_order(needs) == ["tp4", "tp2", "one"]
