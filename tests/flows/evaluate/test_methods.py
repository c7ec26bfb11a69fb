"""Confidence methods, pure parts: the formulas (protocols/methods.py), candidate tokens
(protocols/candidates.py) and the method tables built from hand-made shard outputs (flows/evaluate/methods.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from confgrid.protocols.candidates import candidate_token_ids, candidate_variants
from confgrid.protocols.correctness import normalize
from confgrid.protocols.methods import (
    agreement_share,
    candidate_probability,
    expected_accuracy,
    majority_share,
    p_true,
    parse_boxed,
)


def test_agreement_share_is_seed_001_formula():
    answers = ["Paris", "paris!", "Lyon", "PARIS", None, "Marseille", "Paris", "Lyon", "paris", "Nice"]
    c = agreement_share(answers, normalize)
    assert c.value == pytest.approx(sum(normalize(a or "") == "paris" for a in answers) / 10) == 0.5
    assert c.rated == "Paris" and c.status == "ok"
    assert agreement_share([None, "Paris"], normalize).status == "first_unparsed"
    assert agreement_share([], normalize).status == "no_samples"
    assert agreement_share(["x"], normalize).value == 1.0


def test_majority_share_ties_go_to_the_first_sampled():
    c = majority_share(["Lyon", "Paris", "lyon", "paris", None], normalize)
    assert c.value == pytest.approx(2 / 5) and c.rated == "Lyon"
    assert majority_share([None, None], normalize).status == "all_unparsed"


@pytest.mark.parametrize("correct", [[1, 0, 1, 1], [1] * 7 + [0] * 3, [0, 0, 0], [1, 1], [1, 0]])
def test_expected_accuracy_and_its_standard_error_closed_form(correct):
    r = expected_accuracy(correct)
    k, p = len(correct), float(np.mean(correct))
    assert r.value == pytest.approx(p)
    assert r.detail == pytest.approx(math.sqrt(p * (1 - p) / (k - 1)))  # binary: s / sqrt(k) = sqrt(p(1-p)/(k-1))


def test_expected_accuracy_counts_unparsed_samples_as_wrong():
    r = expected_accuracy([1.0, None, float("nan"), 1.0])
    assert r.value == 0.5
    assert math.isnan(expected_accuracy([1.0]).detail)


def test_p_true_by_hand():
    top = {10: math.log(0.5), 11: math.log(0.2), 12: math.log(0.1), 13: math.log(0.05)}
    a_tokens = {10: "A", 12: " A"}
    b_tokens = {11: "B", 99: " B"}  # 99: not in the top k
    pa = candidate_probability(a_tokens, top, "A", "sum")
    assert pa == pytest.approx(0.6)
    assert candidate_probability(a_tokens, top, "A", "exact") == pytest.approx(0.5)
    pb = candidate_probability(b_tokens, top, "B", "sum")
    assert pb == pytest.approx(0.2)
    assert p_true({"A": pa, "B": pb}, "A", renormalize=True).value == pytest.approx(0.6 / 0.8)
    assert p_true({"A": pa, "B": pb}, "A", renormalize=False).value == pytest.approx(0.6)
    # absent is recorded, never a silent 0
    assert candidate_probability({99: " B"}, top, "B", "sum") is None
    r = p_true({"A": None, "B": 0.3}, "A", renormalize=True)
    assert (r.value, r.status, r.detail) == (0.0, "target_absent", 1.0)
    r = p_true({"A": None, "B": None}, "A", renormalize=False)
    assert r.value is None and r.status == "all_absent"
    with pytest.raises(ValueError, match="merge"):
        candidate_probability(a_tokens, top, "A", "max")


@pytest.mark.parametrize("text, value, status", [
    (r"### Confidence: \boxed{85}", 0.85, "ok"),
    (r"\boxed{0}", 0.0, "ok"), (r"\boxed{100}", 1.0, "ok"), (r"\boxed{ 10 }", 0.1, "ok"),
    (r"first \boxed{20} then \boxed{70}", 0.7, "ok"),
    (r"\boxed{150}", None, "out_of_range"), ("85%", None, "missing"), (None, None, "missing"),
    # the parser's number grammar (issue 14 item 5): nothing outside it becomes a number
    (r"\boxed{85%}", 0.85, "ok"), (r"\boxed{85.5}", 0.855, "ok"), ("\\boxed{\n 85 \n}", 0.85, "ok"),
    (r"\boxed{85} for \boxed{Paris}", 0.85, "ok"),  # a box without a digit is not a rating
    (r"\boxed{Paris}", None, "missing"), (r"\boxed{}", None, "missing"),
    (r"\boxed{1e-5}", None, "unparsed_number"), (r"\boxed{1/2}", None, "unparsed_number"),
    (r"\boxed{0,85}", None, "unparsed_number"), (r"\boxed{80-90}", None, "unparsed_number"),
    (r"\boxed{85 or 90}", None, "unparsed_number"), ("\\boxed{\u0668\u0665}", None, "unparsed_number"),
    (r"\boxed{20} then \boxed{1e2}", None, "unparsed_number"),  # the last rating box decides
    (r"\boxed{-5}", None, "out_of_range"),
])
def test_parse_boxed(text, value, status):
    c = parse_boxed(text)
    assert c.status == status and (c.value == pytest.approx(value) if value is not None else c.value is None)


def test_parse_boxed_decimal_comma_and_linear_time():
    assert parse_boxed(r"\boxed{85,5}", decimal_comma=True).value == pytest.approx(0.855)
    assert parse_boxed(r"\boxed{85.5}", decimal_comma=True).status == "unparsed_number"
    for text in ("\\boxed{1" + " " * 100_000 + "x", "\\boxed{" * 14_000, "\\boxed " * 14_000 + "{85}"):
        best = min(_timed(parse_boxed, text) for _ in range(3))
        assert best < 0.05


def _timed(f, *args) -> float:
    import time

    t0 = time.perf_counter()
    f(*args)
    return time.perf_counter() - t0


@pytest.mark.parametrize("kind, text, value, status", [
    ("rating", r"\boxed{70}", 0.7, "ok"), ("rating", r"\boxed{7e1}", None, "unparsed_number"),
    ("rating", "no box", None, "missing"),
    ("verbalized_before", "Probability: 0.7\nGuess: Paris", 0.7, "ok"),
    ("verbalized_before", "Probability: 1e-5\nGuess: Paris", None, "unparsed_number"),
    ("verbalized_before", "Probability: 7\nGuess: Paris", None, "out_of_range"),
    ("verbalized_before", "Guess: Paris", None, "missing"),
])
def test_rated_confidence_keeps_unparsed_numbers_apart(kind, text, value, status):
    from confgrid.flows.stages.rate import PARSERS
    from confgrid.protocols.method_kinds import method_kind

    template = "rate_0_100" if kind == "rating" else "verbalized_before"
    got = PARSERS[method_kind(kind).reader](text, template)
    assert (got.value, got.status) == (pytest.approx(value) if value is not None else None, status)


def test_candidate_tokens_with_and_without_space_and_cases():
    from confgrid.actors.named_models import FIXTURE_MODEL_DIR
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(FIXTURE_MODEL_DIR))
    ids = candidate_token_ids(tok, ["A", "B"], ("lower",))
    for cand, m in ids.items():
        assert m and all(tok.decode([t]) == s for t, s in m.items())
        assert set(m.values()) <= {cand, " " + cand, cand.lower(), " " + cand.lower()}
    assert "A" in ids["A"].values()
    assert candidate_variants("yes", ("title", "upper")) == ("yes", "Yes", "YES")
    with pytest.raises(ValueError, match="unknown case"):
        candidate_variants("A", ("swap",))
    with pytest.raises(ValueError, match="share the token form"):
        candidate_token_ids(tok, ["A", "a"], ("lower",))


# ---------------------------------------------------------------- method tables from hand-made shards


def _plan_with(methods):
    from confgrid.flows.plan.grid_plan import GridPlan
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.protocols.datasets import BUNDLED, load_items

    items = {"triviaqa": load_items("triviaqa", BUNDLED["triviaqa"], limit=3, seed=0, dataset_name="triviaqa")}
    spec = parse_grid({"models": [{"name": "m", "model": "confgrid-fixture"}],
                       "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 3}],
                       "methods": methods, "bootstrap": {"resamples": 20}, "execution": {"shard_size": 3}})
    return GridPlan(spec, items), items["triviaqa"]


def _done_generate(plan, items):
    gen = [s for s in plan.generate_shards() if s.stage == "generate"]
    gold = items[0].gold_answers[0]
    table = pd.DataFrame({"model": "m", "dataset": "triviaqa", "answer_set": "main", "item_id": gen[0].item_ids,
                          "prompt_id": "confidence", "sample_idx": 0, "chunk": 0,
                          "raw_output": [f"Guess: {gold}\nProbability: 0.9", "Guess: Zzyzx\nProbability: 0.2",
                                         ""],
                          "finish_reason": "stop", "n_new_tokens": 4})
    return gen[0], table, plan.on_done(gen[0], table)


def test_self_consistency_and_expected_accuracy_tables():
    from confgrid.flows.evaluate.methods import method_tables

    plan, items = _plan_with([{"id": "sc", "kind": "self_consistency", "k": 4},
                              {"id": "ea", "kind": "expected_accuracy", "k": 4}])
    shards = plan.generate_shards()
    gold = items[0].gold_answers[0]
    done = {}
    for sh in shards:
        if sh.stage != "sample":
            continue
        answers = {items[0].item_id: [gold, gold, "Zzyzx", None], items[1].item_id: [None, "x", "x", "x"],
                   items[2].item_id: ["Zzyzx", "zzyzx", "Quux", "zzyzx"]}
        rows = [{"model": "m", "dataset": "triviaqa", "answer_set": "main", "method": sh.method, "chunk": 0,
                 "item_id": i, "sample_idx": j, "raw_output": f"Guess: {a}\nProbability: 0.5" if a else "",
                 "finish_reason": "stop", "n_new_tokens": 3, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                 "n": 4, "seed": 0}
                for i in sh.item_ids for j, a in enumerate(answers[i])]
        done[sh.key] = pd.DataFrame(rows)
    t = method_tables(plan, done, shards)
    sig = t.signals.set_index(["signal", "item_id"])
    assert sig.loc[("sc", items[0].item_id), "confidence"] == 0.5
    assert sig.loc[("sc", items[0].item_id), "correct"] == 1.0
    assert sig.loc[("sc", items[1].item_id), "status"] == "first_unparsed"
    assert sig.loc[("sc__majority", items[1].item_id), "confidence"] == 0.75
    assert sig.loc[("sc", items[2].item_id), "correct"] == 0.0
    assert set(t.signals["temperature"]) == {1.0} and set(t.signals["k"]) == {4}
    ea = t.targets.set_index("item_id")
    assert ea.loc[items[0].item_id, "expected_accuracy"] == 0.5
    assert ea.loc[items[0].item_id, "se"] == pytest.approx(math.sqrt(0.25 / 3))
    assert ea.loc[items[1].item_id, "n_unparsed"] == 1
    assert len(t.samples) == 2 * 3 * 4 and {"answer", "correct_containment"} <= set(t.samples.columns)


def _evaluate_methods(method_signals: pd.DataFrame):
    """The one evaluator on the method rows alone (each method on its own items): metrics and dropped counts."""
    from confgrid.analysis.bootstrap import paired_bootstrap
    from confgrid.analysis.evaluation import Comparisons, estimates, plan_units
    from confgrid.analysis.signals import conform
    from confgrid.flows.evaluate.run_evaluation import dropped_table
    from confgrid.flows.stages.method_base import method_rows

    rows = method_rows(method_signals)
    table = conform(rows.assign(setting=rows["model"] + "/" + rows["dataset"]))
    plans = plan_units(table, Comparisons(against=None), base_seed=0)
    res = [paired_bootstrap(u.confidence, u.target, ["ece", "auroc"], n_resamples=20, seed=u.seed,
                            signal_names=u.cell_names, masks=u.masks) for u in plans]
    return estimates(plans, res).metrics, dropped_table(plans, table)


def test_p_true_and_rating_rate_the_greedy_answer():
    from confgrid.flows.evaluate.methods import method_tables

    plan, items = _plan_with([{"id": "pt", "kind": "p_true"}, {"id": "rt", "kind": "rating"},
                              {"id": "ptn", "kind": "p_true", "renormalize": True}])
    gen, gen_table, follow = _done_generate(plan, items)
    method_shards = [s for s in follow if s.method]
    assert {s.stage for s in method_shards} == {"next_token", "rate"}
    assert all(len(s.rows) == 2 for s in method_shards)  # the unparsed third answer is not rated
    assert all(r.rated_answer for s in method_shards for r in s.rows)
    done = {gen.key: gen_table}
    for s in method_shards:
        if s.stage == "next_token":
            cands = json.dumps({"A": {"10": "A"}, "B": {"11": "B"}})
            done[s.key] = pd.DataFrame({"model": "m", "dataset": "triviaqa", "answer_set": "main", "method": s.method,
                                        "chunk": 0, "item_id": s.item_ids,
                                        "rated_answer": [r.rated_answer for r in s.rows],
                                        "top_token_ids": [[10, 11], [11, 7]],
                                        "top_logprobs": [[math.log(0.6), math.log(0.2)], [math.log(0.7), -5.0]],
                                        "candidate_tokens": cands, "prompt_tokens": 9})
        else:
            done[s.key] = pd.DataFrame({"model": "m", "dataset": "triviaqa", "answer_set": "main", "method": "rt",
                                        "chunk": 0, "item_id": s.item_ids,
                                        "rated_answer": [r.rated_answer for r in s.rows],
                                        "raw_output": [r"Confidence: \boxed{80}", "I think so"],
                                        "finish_reason": "stop", "n_new_tokens": 5})
    t = method_tables(plan, done, [gen, *method_shards])
    sig = t.signals.set_index(["signal", "item_id"])
    first, second = method_shards[0].item_ids
    # study 001 D.3 by hand: p(A) = .6, p(B) = .2 -> P(True) = .60 by default; .6 / .8 = .75 renormalized
    assert sig.loc[("pt", first), "confidence"] == pytest.approx(0.6, abs=1e-12)
    assert sig.loc[("ptn", first), "confidence"] == pytest.approx(0.75, abs=1e-12)
    assert sig.loc[("pt", first), "correct"] == 1.0 and sig.loc[("pt", second), "correct"] == 0.0
    assert sig.loc[("pt", second), "status"] == "target_absent" and sig.loc[("pt", second), "confidence"] == 0.0
    assert sig.loc[("rt", first), "confidence"] == pytest.approx(0.8) and sig.loc[("rt", second), "status"] == "missing"
    m, dropped = _evaluate_methods(t.signals)
    rt = m[(m["signal"] == "rt") & (m["metric"] == "ece")].iloc[0]
    assert rt["n"] == 1
    assert dropped.set_index(["signal", "status"]).loc[("rt", "missing"), "n"] == 1
    pt = m[(m["signal"] == "pt") & (m["metric"] == "ece")].iloc[0]
    assert pt["n"] == 2 and pt["point"] == pytest.approx((abs(0.6 - 1) + abs(0 - 0)) / 2)
    ptn = m[(m["signal"] == "ptn") & (m["metric"] == "ece")].iloc[0]
    assert ptn["point"] == pytest.approx((abs(0.75 - 1) + abs(0 - 0)) / 2)


def test_p_true_renormalize_defaults_per_kind():
    """Issue 23 item 3: P(True) is p(A) alone by default (study 001 D.3), the capability form renormalized (study
    004); a grid may still say either, and the value is written out so a dumped grid loads to the same spec."""
    from confgrid.flows.spec.methods import MethodSpec
    from confgrid.protocols.method_kinds import method_kind

    pt = MethodSpec(id="pt", kind="p_true")
    cap = MethodSpec(id="pc", kind="p_true_capability")
    assert (pt.renormalize, cap.renormalize) == (False, True) == (
        method_kind("p_true").defaults["renormalize"], method_kind("p_true_capability").defaults["renormalize"])
    assert MethodSpec(id="pt", kind="p_true", renormalize=True).renormalize is True
    assert MethodSpec.model_validate(pt.model_dump()) == pt
    assert MethodSpec(id="r", kind="rating").renormalize is None
    # by hand: p(A) = .6, p(B) = .2
    assert p_true({"A": 0.6, "B": 0.2}, "A", pt.renormalize).value == pytest.approx(0.6, abs=1e-15)
    assert p_true({"Yes": 0.6, "No": 0.2}, "Yes", cap.renormalize).value == pytest.approx(0.75, abs=1e-15)


def test_declared_signal_pairs_are_checked_when_the_grid_loads():
    """metrics.pairs: paired gaps beyond every signal against verbalized; an unknown name fails before any model
    runs, naming the signals the grid can produce."""
    from confgrid.flows.evaluate.run_evaluation import comparisons_of
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.flows.spec.base import GridSpecError

    base = {"models": [{"name": "m", "model": "confgrid-fixture"}],
            "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 3}],
            "methods": [{"id": "pt", "kind": "p_true"}, {"id": "sc", "kind": "self_consistency", "k": 3}]}
    spec = parse_grid({**base, "metrics": {"pairs": [["pt", "sc__majority"], ["token_bare", "pt"]]}})
    c = comparisons_of(spec)
    assert c.pairs == (("pt", "sc__majority"), ("token_bare", "pt")) and c.against == "verbalized"
    assert c.pairs_of(["verbalized", "token_bare", "pt", "sc", "sc__majority"])[-2:] == list(c.pairs)
    with pytest.raises(GridSpecError, match=r"metrics.pairs\[0\]: unknown signal\(s\) \['p_true'\]; allowed: "
                                            r"verbalized, token_bare"):
        parse_grid({**base, "metrics": {"pairs": [["p_true", "sc"]]}})
    with pytest.raises(GridSpecError, match="a signal against itself"):
        parse_grid({**base, "metrics": {"pairs": [["pt", "pt"]]}})


def test_method_kinds_are_one_registry():
    # the grid's kind field, the capability estimator kinds and the stages all come from protocols/method_kinds.py
    import typing

    from confgrid.flows.spec.capability import ESTIMATOR_KINDS
    from confgrid.flows.spec.methods import MethodSpec
    from confgrid.flows.stages.base import get_stage
    from confgrid.protocols.method_kinds import METHOD_KINDS, method_kind
    from confgrid.registry import UnknownNameError

    allowed = typing.get_args(MethodSpec.model_fields["kind"].annotation)
    assert set(allowed) == set(METHOD_KINDS.names()) and len(allowed) == 8
    assert set(ESTIMATOR_KINDS) == {"self_consistency", "p_true", "p_true_capability", "rating", "verbalized_before",
                                    "hidden_states"}
    for name, k in METHOD_KINDS.items():
        assert get_stage(k.stage).method_call is not None, name  # a method stage
        assert ("k" in k.defaults) == ("k" in get_stage(k.stage).fields), name
        m = MethodSpec(id="m", kind=name)
        assert (m.reader.rated is None) == (m.signals() == ()), name
        assert m.template_id("confidence") == (k.template or "confidence")
    sig = {kind: MethodSpec(id="m", kind=kind).signals() for kind in ("self_consistency", "hidden_states", "rating")}
    assert sig == {"self_consistency": ("m", "m__majority"), "hidden_states": (), "rating": ("m",)}
    with pytest.raises(UnknownNameError, match="unknown method kind 'p_tru'; allowed: expected_accuracy"):
        method_kind("p_tru")
    # a field of another kind names the kinds that have it
    with pytest.raises(ValueError, match=r"k is for kinds \['self_consistency', 'expected_accuracy'\]"):
        MethodSpec(id="m", kind="rating", k=5)
    with pytest.raises(ValueError, match=r"top_logprobs is for kinds \['p_true', 'p_true_capability', "
                                         r"'letter_probability'\]"):
        MethodSpec(id="m", kind="rating", top_logprobs=5)
