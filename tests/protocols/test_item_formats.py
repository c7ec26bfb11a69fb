"""The item-format registry (protocols/item_formats.py): each entry's fields hold the behaviour the answer sets, the
plan and the contexts had when they compared format names."""

import pytest

from confgrid.flows.spec.answers import AnswerSetSpec
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import parse_grid
from confgrid.protocols.contexts import ScoringContext
from confgrid.protocols.item_formats import ITEM_FORMATS, ItemFormat, item_format
from confgrid.protocols.items import Item
from confgrid.registry import UnknownNameError

ITEM = Item(item_id="q1", dataset="d", question="What is 2+2?", gold_answers=("4",), canonical="4", options=("3", "4"),
            gold_letter="B")


def test_registered_formats_in_order():
    assert ITEM_FORMATS.names() == ["open", "mc"]


def test_unknown_format_lists_the_allowed_names():
    with pytest.raises(UnknownNameError, match=r"unknown item format 'cloze'; allowed: mc, open"):
        item_format("cloze")


def test_open_entry():
    f = item_format("open")
    assert (f.options, f.new_tokens, f.contexts, f.rules, f.probe_prompt) == (False, 32, None, None, None)
    assert f.question(ITEM) == "What is 2+2?"


def test_mc_entry():
    f = item_format("mc")
    assert (f.options, f.new_tokens, f.rules, f.probe_prompt) == (True, 20, ("mc_letter",), "mc_confidence")
    assert f.contexts == ("mc_bare", "mc_answer_slot", "mc_guess_slot")
    assert f.question(ITEM) == "What is 2+2?\nA. 3\nB. 4"


def test_entries_are_frozen_and_typed():
    with pytest.raises(AttributeError):
        item_format("mc").options = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        ITEM_FORMATS.register("cloze", object())  # type: ignore[arg-type]
    assert isinstance(item_format("open"), ItemFormat)


@pytest.mark.parametrize("fmt, prompt, tokens, contexts, rules, probes", [
    ("open", "answer_only", 32, ("bare",), ("containment",), True),
    ("mc", "mc_letter", 20, ("mc_bare", "mc_answer_slot", "mc_guess_slot"), ("mc_letter",), False),
    ("mc", "mc_confidence", 20, ("mc_bare", "mc_answer_slot", "mc_guess_slot"), ("mc_letter",), False),
])
def test_answer_set_defaults_follow_the_entry(fmt, prompt, tokens, contexts, rules, probes):
    a = AnswerSetSpec(id="x", prompt=prompt, format=fmt)
    assert a.new_tokens == tokens
    assert a.scoring_contexts(("bare",)) == contexts
    assert a.analysis_rules(("containment", "mc_letter")) == rules
    assert a.probes_open_answers == (probes and a.verbalized_by_probe)


def test_answer_set_rejects_an_unknown_format_with_the_registry_message():
    with pytest.raises(GridSpecError, match=r"unknown item format 'cloze'; allowed: mc, open"):
        parse_grid({"name": "g", "models": [{"name": "m", "model": "confgrid-fixture"}],
                    "datasets": [{"name": "d", "adapter": "triviaqa"}],
                    "answer_sets": [{"id": "x", "prompt": "answer_only", "format": "cloze"}]})


def test_context_item_format_checked_against_the_registry():
    with pytest.raises(ValueError, match=r"item_format='cloze'; allowed: \['open', 'mc'\]"):
        ScoringContext("c", "bare", item_format="cloze")
    assert ScoringContext("c", "mc_letter", item_format="mc").question_text(ITEM) == "What is 2+2?\nA. 3\nB. 4"


def test_where_the_plan_and_the_signals_read_the_entry():
    from confgrid.flows.plan.grid_plan import GridPlan, set_items
    from confgrid.flows.tables.signals import _refusals

    spec = parse_grid({"name": "g", "models": [{"name": "m", "model": "confgrid-fixture"}],
                       "datasets": [{"name": "d", "adapter": "triviaqa"}], "parsing": {"refusal": ["drop", "chance"]},
                       "answer_sets": [{"id": "x", "prompt": "mc_letter", "format": "mc"}]})
    main, mc = spec.all_answer_sets()
    bare = Item(item_id="q2", dataset="d", question="Q?", gold_answers=("a",), canonical="a")
    assert set_items(main, [ITEM, bare]) == [ITEM, bare] and set_items(mc, [ITEM, bare]) == [ITEM]
    assert _refusals(spec, main) == ("drop",) and _refusals(spec, mc) == ("drop", "chance")
    plan = GridPlan(spec, {"d": [ITEM, bare]})
    assert plan._probe_prompt(main) == "confidence" and plan._probe_prompt(mc) == "mc_confidence"
