"""Early stopping (issue 22 item 4, ``execution.stop_when_resolved``), without Ray or a model: the seeded round
order of whole chunks, the plan's admission (keys unchanged, cross-model work held back to the last round), the
stop decision on constructed estimates, and the grid's validation. The run end to end is in
tests/e2e/test_stopping_run.py."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis.evaluation import Comparisons, estimates, plan_units
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.analysis.signals import conform
from confgrid.analysis.stopping import StopRule, conclusion_gaps, decide, round_chunks, round_order
from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import parse_grid
from confgrid.protocols.datasets import BUNDLED, load_items

ITEMS = {"triviaqa": load_items("triviaqa", BUNDLED["triviaqa"], limit=22, seed=0, dataset_name="triviaqa")}


def _grid(stop=None, **over) -> dict:
    g = {"name": "stop", "models": [{"name": "a", "model": "confgrid-fixture"},
                                    {"name": "b", "model": "confgrid-fixture", "chat_template": False}],
         "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 22, "seed": 0}],
         "scoring": {"contexts": ["bare", "guess_slot"]},
         "execution": {"shard_size": 4, **({"stop_when_resolved": stop} if stop is not None else {})}}
    g.update(over)
    return g


def _generations(shard, right: bool = False) -> pd.DataFrame:
    gold = {i.item_id: i.gold_answers[0] for i in ITEMS["triviaqa"]}
    return pd.DataFrame({
        "model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids,
        "prompt_id": "confidence", "sample_idx": 0, "chunk": shard.chunk,
        "raw_output": [f"Guess: {gold[i] if right else 'Zzyzx'}\nProbability: 0.7" for i in shard.item_ids],
        "finish_reason": "stop", "n_new_tokens": 5})


# -- the round order ---------------------------------------------------------------------------------------------
def test_round_order_is_a_seeded_permutation_per_dataset():
    o = round_order(40, "triviaqa", 0)
    assert sorted(o.tolist()) == list(range(40))
    assert o.tolist() == round_order(40, "triviaqa", 0).tolist()  # the same in every call (and for every model)
    assert o.tolist() != list(range(40))  # not the file order (a prefix of it could be biased)
    assert o.tolist() != round_order(40, "triviaqa", 1).tolist()
    assert o.tolist() != round_order(40, "mmlu", 0).tolist()
    assert round_order(0, "d").tolist() == []
    with pytest.raises(ValueError, match="n_chunks"):
        round_order(-1, "d")


@pytest.mark.parametrize("items, share, min_items, expected", [
    ([10] * 10, 0.1, 1, list(range(1, 11))),
    ([10] * 10, 0.25, 1, [3, 6, 9, 10]),
    ([10] * 10, 0.1, 35, [4, 5, 6, 7, 8, 9, 10]),  # the first round reaches min_items
    ([10] * 10, 1.0, 1, [10]),
    ([4, 4, 2], 0.5, 1000, [3]),  # fewer items than min_items: one round of everything
    ([], 0.1, 1, []),
])
def test_round_chunks(items, share, min_items, expected):
    assert round_chunks(items, share, min_items) == expected


def test_round_chunks_rejects_a_share_outside_0_1():
    with pytest.raises(ValueError, match="share"):
        round_chunks([1, 2], 0.0)


# -- the plan's admission ----------------------------------------------------------------------------------------
def test_without_stopping_every_shard_is_planned_as_before():
    spec = parse_grid(_grid())
    assert "stop_when_resolved" not in spec.model_dump(mode="json")["execution"]  # grid.yaml as before
    plan = GridPlan(spec, ITEMS)
    shards = plan.generate_shards()
    assert plan.admitted is None and len(shards) == 2 * 6  # 22 items in chunks of 4, two models
    with pytest.raises(ValueError, match="stop_when_resolved"):
        plan.admit("a", "triviaqa", ["x"])


def test_admitted_rounds_are_whole_chunks_with_the_keys_of_a_full_plan():
    full = GridPlan(parse_grid(_grid()), ITEMS)
    full_keys = {(s.model, s.chunk): s.key for s in full.generate_shards()}
    plan = GridPlan(parse_grid(_grid(stop=True)), ITEMS)
    assert plan.generate_shards() == []  # nothing runs before a round admits it
    chunks = plan.main_chunks("triviaqa")
    assert [len(c) for c in chunks] == [4, 4, 4, 4, 4, 2]
    order = round_order(len(chunks), "triviaqa")
    first = plan.admit("a", "triviaqa", chunks[order[0]] + chunks[order[1]])
    assert sorted(s.chunk for s in first) == sorted(order[:2].tolist()) and {s.model for s in first} == {"a"}
    assert all(s.key == full_keys[(s.model, s.chunk)] for s in first)
    assert [len(s.rows) for s in first] == [len(chunks[s.chunk]) for s in first]
    assert plan.admit("a", "triviaqa", chunks[order[0]][:2]) == []  # part of a chunk admits nothing new
    rest = plan.admit("a", "triviaqa", [i for c in chunks for i in c])
    rest += plan.admit("b", "triviaqa", [i for c in chunks for i in c])
    assert {(s.model, s.chunk): s.key for s in first + rest} == full_keys


def test_the_cross_model_probe_waits_for_every_models_last_round():
    plan = GridPlan(parse_grid(_grid(stop=True, probe={"enabled": True})), ITEMS)
    plan.generate_shards()
    chunks = plan.main_chunks("triviaqa")
    later = []
    for m in ("a", "b"):
        for sh in plan.admit(m, "triviaqa", chunks[0]):
            later += plan.on_done(sh, _generations(sh, right=m == "a"))
    assert not [s for s in later if s.part == "cross"]  # every unit settled, but more rounds may come
    assert any("waits for the last round" in w for w in plan.waiting_for())
    assert plan.finalize("a", "triviaqa") == []  # b may still admit items
    cross = plan.finalize("b", "triviaqa")
    assert cross and {s.part for s in cross} == {"cross"} and {s.model for s in cross} == {"a", "b"}
    assert {r.item_id for s in cross for r in s.rows} <= set(chunks[0])


# -- the decision ------------------------------------------------------------------------------------------------
def _gaps(n: int, token_offset: float, seed: int = 0, metrics=("ece", "brier")):
    """One unit: verbalized (calibrated) against a token score ``token_offset`` too high, on ``n`` answers."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, n)
    y = (rng.random(n) < p).astype(float)
    ids = [f"q{i}" for i in range(n)]
    unit = dict(setting="m/d", model="m", dataset="d", answer_set="main", parse_policy="label", refusal="drop",
                rule="containment")
    table = conform(pd.concat([
        conform(pd.DataFrame({"item_id": ids, "signal": "verbalized", "kind": "verbalized", "confidence": p,
                              "target": y, "align": "answer"}), **unit),
        conform(pd.DataFrame({"item_id": ids, "signal": "token_bare", "kind": "token", "context": "bare",
                              "aggregation": "geometric_mean", "confidence": np.clip(p + token_offset, 0, 1),
                              "target": y, "align": "answer"}), **unit)], ignore_index=True))
    plans = plan_units(table, Comparisons(against="verbalized"), base_seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        est = estimates(plans, bootstrap_units(plans, list(metrics), 300))
    return est.gaps, plans


def test_every_conclusion_gap_resolved_stops_resolved():
    gaps, units = _gaps(300, 0.3)
    assert conclusion_gaps(gaps)["excludes_zero"].all()
    d = decide(gaps, units, items_run=300, items_total=3000, exhausted=False, rule=StopRule(min_items=30))
    assert (d.action, d.reason, d.n_gaps, d.n_resolved) == ("stop", "resolved", 2, 2)
    assert d.deciding is not None and d.deciding.signal_b == "token_bare"
    # before min_items nothing stops, resolved or not
    d = decide(gaps, units, items_run=300, items_total=3000, exhausted=False, rule=StopRule(min_items=400))
    assert (d.action, d.reason) == ("continue", "continue") and "min_items=400" in d.detail


def test_a_gap_the_whole_setting_cannot_resolve_stops_budget_insufficient_and_a_larger_one_continues():
    gaps, units = _gaps(200, 0.01, seed=1)
    unresolved = conclusion_gaps(gaps)
    assert not unresolved["excludes_zero"].all()
    small = decide(gaps, units, items_run=200, items_total=400, exhausted=False, rule=StopRule(planner_resamples=100))
    assert (small.action, small.reason) == ("stop", "budget_insufficient")
    need = small.deciding
    assert need.status == "ok" and need.budget == 400 and need.n_required > need.budget
    assert f"needs {need.n_required} items" in small.detail
    # the same rows with a budget above what the planner needs: go on with the next round
    big = decide(gaps, units, items_run=200, items_total=need.n_required * 3, exhausted=False,
                 rule=StopRule(planner_resamples=100))
    assert (big.action, big.reason) == ("continue", "continue")
    assert big.deciding.n_required <= big.deciding.budget


def test_every_chunk_run_with_a_gap_unresolved_is_exhausted():
    gaps, units = _gaps(200, 0.01, seed=1)
    d = decide(gaps, units, items_run=200, items_total=200, exhausted=True)
    assert (d.action, d.reason) == ("stop", "exhausted") and d.n_resolved < d.n_gaps
    d = decide(gaps.iloc[:0], units, items_run=0, items_total=0, exhausted=True)
    assert (d.reason, d.n_gaps) == ("exhausted", 0)


def test_the_planner_cannot_tell_on_a_small_pilot_so_the_setting_continues():
    gaps, units = _gaps(24, 0.01, seed=2)
    d = decide(gaps, units, items_run=24, items_total=25, exhausted=False, rule=StopRule(min_items=10))
    assert (d.action, d.reason) == ("continue", "continue")
    assert {x.status for x in d.needs} == {"pilot_too_small"} and "cannot tell" in d.detail


def test_signals_equal_on_every_item_are_tied_and_an_exact_zero_gap_gives_the_planner_nothing_to_plan_for():
    gaps, units = _gaps(100, 0.0)  # the same confidences: every gap is 0 in every resample, [0, 0]
    d = decide(gaps, units, items_run=100, items_total=10_000, exhausted=False)
    assert (d.action, d.n_gaps, d.n_tied) == ("continue", 0, 2) and "2 tied" in d.detail
    # a point gap of exactly 0 with a spread (a tie of a discrete metric on few items): no size to plan for
    gaps, units = _gaps(200, 0.01, seed=1)
    zero = gaps.assign(gap=0.0, excludes_zero=False)
    d = decide(zero, units, items_run=200, items_total=400, exhausted=False)
    assert (d.action, {x.status for x in d.needs}) == ("continue", {"zero_gap"})


def test_undefined_gaps_are_counted_apart_and_signal_pairs_of_one_side_are_no_conclusion():
    gaps, units = _gaps(300, 0.3)
    shift = gaps.iloc[:1].assign(signal_a="token_guess_slot", kind_a="token")  # two token scores: a shift
    nan = gaps.iloc[:1].assign(gap=float("nan"), excludes_zero=False)
    d = decide(pd.concat([gaps, shift, nan], ignore_index=True), units, items_run=300, items_total=3000,
               exhausted=False)
    assert (d.reason, d.n_gaps, d.n_undefined) == ("resolved", 2, 1)


# -- validation --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, field, message", [
    (0.2, "execution.stop_when_resolved", "expected true, false or a mapping of round_share, min_items"),
    ("yes", "execution.stop_when_resolved", "(received 'yes')"),
    ({"round_share": 0}, "execution.stop_when_resolved.round_share", "greater than 0"),
    ({"round_share": 1.5}, "execution.stop_when_resolved.round_share", "less than or equal to 1"),
    ({"min_items": 0}, "execution.stop_when_resolved.min_items", "greater than or equal to 1"),
    ({"power": 1.0}, "execution.stop_when_resolved.power", "less than 1"),
    ({"planner_resamples": 2}, "execution.stop_when_resolved.planner_resamples", "greater than or equal to 3"),
    ({"rounds": 3}, "execution.stop_when_resolved.rounds", "allowed: round_share, min_items, power"),
])
def test_bad_stop_values_name_the_field_the_value_and_what_is_allowed(value, field, message):
    with pytest.raises(GridSpecError) as e:
        parse_grid(_grid(stop=value))
    assert [f for f, _ in e.value.problems] == [field]
    assert message in e.value.problems[0][1]


def test_stopping_needs_two_signals_and_a_conclusion_metric():
    with pytest.raises(GridSpecError, match="compares no two signals"):
        parse_grid(_grid(stop=True, scoring={"contexts": []}))
    with pytest.raises(GridSpecError, match="no metric a conclusion is judged on"):
        parse_grid(_grid(stop=True, metrics={"names": ["spearman"]}))


def test_stop_values_round_trip_through_grid_yaml():
    spec = parse_grid(_grid(stop={"round_share": 0.2, "min_items": 50}))
    st = spec.execution.stopping
    assert (st.round_share, st.min_items, st.power) == (0.2, 50, 0.5)
    again = parse_grid(spec.model_dump(mode="json"))
    assert again.execution.stopping == st
    assert parse_grid(_grid(stop=True)).execution.stopping.round_share == 0.1
    assert parse_grid(_grid(stop=False)).execution.stopping is None
