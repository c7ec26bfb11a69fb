"""The comparison section of a grid and its candidate-rating shards (study 001 CA view), without Ray or a model."""

from __future__ import annotations

import pandas as pd
import pytest

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.spec.base import GridSpecError
from confgrid.protocols.correctness import normalize
from confgrid.protocols.datasets import BUNDLED, load_items

ITEMS = {"triviaqa": load_items("triviaqa", BUNDLED["triviaqa"], limit=6, seed=18, dataset_name="triviaqa")}
GOLD = {i.item_id: i.gold_answers[0] for i in ITEMS["triviaqa"]}
#: An answer that normalizes to the empty string (this draw, seed 18, has one: a symbol) is no candidate.
SHOWN = [i for i, g in GOLD.items() if normalize(g)]


def _grid(**over) -> dict:
    g = {"name": "ace", "models": [{"name": "a", "model": "confgrid-fixture"},
                                   {"name": "b", "model": "confgrid-fixture-small"}],
         "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 6, "seed": 18}],
         "scoring": {"contexts": ["guess_slot"]}, "execution": {"shard_size": 4},
         "methods": [{"id": "p_true", "kind": "p_true"}, {"id": "rating", "kind": "rating"},
                     {"id": "sc", "kind": "self_consistency", "k": 3}],
         "comparison": {"views": ["raw", "ia", "da", "ca"], "bootstrap": 50}}
    g.update(over)
    return g


def _gen(shard: ShardRequest, answers: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set,
                         "item_id": shard.item_ids, "prompt_id": "confidence", "sample_idx": 0, "chunk": shard.chunk,
                         "raw_output": [f"Guess: {answers.get(i, 'Zzyzx')}\nProbability: 0.7"
                                        for i in shard.item_ids],
                         "finish_reason": "stop", "n_new_tokens": 5})


def test_comparison_section_is_validated():
    with pytest.raises(GridSpecError, match="comparison: needs at least two models"):
        parse_grid(_grid(models=[{"name": "a", "model": "confgrid-fixture"}]))
    with pytest.raises(GridSpecError, match=r"comparison.pairs\[0\]: unknown model\(s\) \['c'\]"):
        parse_grid(_grid(comparison={"views": ["raw"], "pairs": [{"a": "a", "b": "c"}]}))
    with pytest.raises(GridSpecError, match="comparison.methods: unknown signal 'nope'; allowed: "):
        parse_grid(_grid(comparison={"views": ["raw"], "methods": ["nope"]}))
    with pytest.raises(GridSpecError, match="'ca' needs a compared method"):
        parse_grid(_grid(comparison={"views": ["ca"], "methods": ["verbalized"]}))
    with pytest.raises(GridSpecError, match="target must be 'mean' or an accuracy"):
        parse_grid(_grid(comparison={"views": ["da"], "target": 1.5}))
    spec = parse_grid(_grid())
    assert spec.comparison_signals() == ["verbalized", "p_true", "rating", "sc"]
    assert [m.id for m in spec.ca_methods()] == ["p_true", "rating"]
    assert not parse_grid(_grid(comparison={})).comparison.enabled


def test_candidate_ratings_wait_for_every_models_answers_then_rate_the_pool():
    plan = GridPlan(parse_grid(_grid()), ITEMS)
    gens = [s for s in plan.generate_shards() if s.stage == "generate"]
    ca: list[ShardRequest] = []
    for sh in gens:
        assert plan.expects_work(sh.model)  # both models still have candidate ratings to come
        # model a answers right everywhere; model b writes its own wrong answer except on the first item
        answers = GOLD if sh.model == "a" else {SHOWN[0]: GOLD[SHOWN[0]]}
        new = plan.on_done(sh, _gen(sh, answers))
        ca += [s for s in new if s.part == "ca"]
        if sh is not gens[-1]:
            assert not [s for s in new if s.part == "ca"]
    pool = plan.candidate_pool("triviaqa")
    # a's (right) answer on every item where it is a candidate; b's 'Zzyzx' on every item but SHOWN[0]
    n = len(SHOWN)
    assert len(GOLD) == 6 and n == 5 and len(pool) == n + 5
    assert pool.loc[pool["item_id"] == SHOWN[0], "producers"].tolist() == [("a", "b")]
    assert sorted(pool["label"].tolist()) == [0.0] * 5 + [1.0] * n
    # 2 raters x 2 rating methods; each rates every candidate
    assert {(s.model, s.method) for s in ca} == {("a", "p_true"), ("b", "p_true"), ("a", "rating"), ("b", "rating")}
    for s in ca:
        assert sorted(r.rated_answer for r in s.rows) == sorted(pool["surface"])
        assert s.stage == ("next_token" if s.method == "p_true" else "rate")
    assert len({s.key for s in ca}) == 4 and not plan.expects_work("a") and not plan.expects_work("b")
    assert len({s.label for s in ca}) == 4 and all("/ca/" in s.label for s in ca)


def test_a_failed_answer_shard_blocks_candidate_ratings_with_a_reason(caplog):
    plan = GridPlan(parse_grid(_grid()), ITEMS)
    gens = [s for s in plan.generate_shards() if s.stage == "generate"]
    with caplog.at_level("WARNING", logger="confgrid"):
        plan.on_failed(gens[0])
    assert "candidate ratings (comparison view ca)" in caplog.text
    out = [s for sh in gens[1:] for s in plan.on_done(sh, _gen(sh, GOLD))]
    assert not [s for s in out if s.part == "ca"] and plan.candidate_pool("triviaqa") is None
    assert not plan.expects_work("b")


def test_a_thinking_and_a_non_thinking_entry_of_one_checkpoint_form_a_mode_pair():
    """Study 001's mode comparison: two entries of the same model, chat_template_kwargs telling them apart,
    are two models with their own shards (their identities differ), declared as a pair labelled mode."""
    from confgrid.flows.plan.grid_plan import model_identity

    spec = parse_grid(_grid(
        models=[{"name": "think", "model": "confgrid-fixture", "chat_template_kwargs": {"enable_thinking": True}},
                {"name": "nothink", "model": "confgrid-fixture", "chat_template_kwargs": {"enable_thinking": False}}],
        comparison={"views": ["raw", "ia", "da"], "pairs": [{"a": "think", "b": "nothink", "label": "mode"}]}))
    a, b = spec.models
    assert model_identity(a) != model_identity(b)
    plan = GridPlan(spec, ITEMS)
    keys = {s.model: {x.key for x in plan.generate_shards() if x.model == s.model and x.stage == "generate"}
            for s in plan.generate_shards()}
    assert not keys["think"] & keys["nothink"]  # no shared shard: each mode generates its own answers
    assert spec.comparison.pairs[0].label == "mode"
