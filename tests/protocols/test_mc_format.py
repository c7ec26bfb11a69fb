"""Multiple-choice format (study 000 Appendix F, "Multiple-choice format"): rendering, seeded shuffling,
letter parsing, the mc_letter rule and the multiple-choice prompts."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confgrid.protocols import correctness as C
from confgrid.protocols.contexts import get_context
from confgrid.protocols.items import Item
from confgrid.protocols.mc import (
    MC_MAX_NEW_TOKENS,
    mc_question,
    mc_question_text,
    option_seed,
    parse_letter,
    shuffle_options,
)
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.prompts import get_prompt


def _item(item_id="q1", options=("Rome", "Paris", "Berlin", "Madrid"), gold="B"):
    return Item(item_id, "toy", "Which city is the capital of France?", (options[ord(gold) - 65],),
                options[ord(gold) - 65], options=options, gold_letter=gold)


def test_render_lettered_options():
    assert mc_question(_item()) == "Which city is the capital of France?\nA. Rome\nB. Paris\nC. Berlin\nD. Madrid"
    assert mc_question_text("Q? ", [" x ", "y"]) == "Q?\nA. x\nB. y"
    with pytest.raises(ValueError, match="no options"):
        mc_question(Item("x", "toy", "Q?", ("a",), "a"))
    with pytest.raises(ValueError, match="at most 26"):
        mc_question_text("Q?", [str(k) for k in range(27)])
    assert MC_MAX_NEW_TOKENS == 20


def test_prompts():
    letter, conf = get_prompt("mc_letter"), get_prompt("mc_confidence")
    assert letter.template.endswith("Question: {question}\nAnswer:") and letter.confidence_label is None
    assert get_prompt("mc_letter_instruction").template == letter.template[: -len("\nAnswer:")]
    assert (conf.answer_label, conf.confidence_label, conf.scale) == ("Guess:", "Probability:", "unit")
    no_prob = conf.without_probability_request().template
    assert "probab" not in no_prob.lower() and "Guess: <the letter of your answer>" in no_prob
    assert [(get_context(c).user_prompt, get_context(c).assistant_prefix, get_context(c).separator)
            for c in ("mc_bare", "mc_answer_slot", "mc_guess_slot")] == [
        ("mc_letter", "", ""), ("mc_letter_instruction", "Answer:", " "), ("mc_confidence", "Guess:", " ")
    ]


def test_shuffle_is_seeded_per_question_and_tracks_gold():
    it = _item()
    a, b = shuffle_options(it, 2), shuffle_options(it, 2)
    assert a == b  # same seed, same order
    assert sorted(a.options) == sorted(it.options)
    assert a.options[ord(a.gold_letter) - 65] == "Paris"
    order = [int(k) for k in a.metadata["option_order"].split(",")]
    assert tuple(it.options[k] for k in order) == a.options
    # pinned: the seed comes from sha256(seed, item_id), not the per-process hash()
    assert option_seed(0, "q1") == int.from_bytes(__import__("hashlib").sha256(b"0\x00q1").digest()[:8], "big")
    assert a.options == ("Madrid", "Berlin", "Rome", "Paris") and a.gold_letter == "D"
    # different questions and seeds give different orders (over enough draws)
    orders = {shuffle_options(_item(f"q{k}"), 0).options for k in range(30)}
    assert len(orders) > 5
    assert {shuffle_options(it, s).options for s in range(30)} != {a.options}
    # the item itself is unchanged (frozen)
    assert it.options == ("Rome", "Paris", "Berlin", "Madrid") and it.gold_letter == "B"


def test_shuffle_stable_across_processes():
    code = ("from confgrid.protocols.mc import shuffle_options; from confgrid.protocols.items import Item;"
            "print(shuffle_options(Item('q1','toy','Q?',('Paris',),'Paris',options=('Rome','Paris','Berlin','Madrid'),"
            "gold_letter='B'), 2).options)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert out == "('Madrid', 'Berlin', 'Rome', 'Paris')"


def test_shuffle_errors():
    with pytest.raises(ValueError, match="no options"):
        shuffle_options(Item("x", "toy", "Q?", ("a",), "a"), 0)
    with pytest.raises(ValueError, match=r"gold_letter='E'.*\['A', 'B', 'C', 'D'\]"):
        shuffle_options(Item("x", "toy", "Q?", ("a",), "a", options=("a", "b", "c", "d"), gold_letter="E"), 0)


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"), ("B.", "B"), ("(B)", "B"), ("B) Paris", "B"), ("**B**", "B"), ("Answer: B", "B"),
        ("**Answer:** B", "B"), ("b", "B"), ("  c  ", "C"), ("[D]", "D"), ("B: Paris", "B"), ("B - Paris", "B"),
        ("Guess: (d)", "D"), ("Option B", "B"), ("The answer is B.", "B"), ("I think the answer is (C).", "C"),
        ("C\nProbability: 0.9", "C"), ("A. Rome", "A"),
        ("A cat", None), ("I don't know", None), ("I'm not sure", None), ("Paris", None), ("", None),
        ("   ", None), ("E", None), ("Answers vary", None), (None, None),
    ],
)
def test_parse_letter(text, letter):
    assert parse_letter(text, n_options=4) == letter


def test_parse_letter_without_option_count():
    assert parse_letter("E") == "E"
    assert parse_letter("B", n_options=0) is None


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parse_letter_never_raises(text):
    r = parse_letter(text, n_options=4)
    assert r is None or r in "ABCD"


def test_parse_letter_is_linear_and_lets_interrupts_through(monkeypatch):
    import time

    from confgrid.protocols import mc

    text = "The answer" + " " * 100_000 + "."  # was quadratic: 0.2 s at 4,000 spaces
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        assert parse_letter(text) is None
        best = min(best, time.perf_counter() - t0)
    assert best < 0.05
    assert parse_letter("The answer   is   (C)") == "C"

    class Timeout:
        def sub(self, *args, **kwargs):
            raise TimeoutError

    monkeypatch.setattr(mc, "_LEADING_LABEL", Timeout())
    with pytest.raises(TimeoutError):  # was swallowed as "no letter"
        parse_letter("B")


def test_mc_letter_rule():
    it = _item()
    assert [C.mc_letter(a, it) for a in ("B", "(b)", "B) Paris", "**B**", "Answer: B", "A", "Paris", None)] == [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0
    ]
    assert C.get_rule("mc_letter") is C.mc_letter
    assert math.isnan(C.mc_letter("B", Item("x", "toy", "Q?", ("a",), "a")))  # undefined without options
    shuffled = shuffle_options(it, 2)  # Paris moves from B to D
    assert C.mc_letter("D", shuffled) == 1.0 and C.mc_letter("B", shuffled) == 0.0


def test_mc_confidence_output_parses_to_letter():
    r = parse_for_prompt("**Guess:** (B)\n**Probability:** 0.8", "mc_confidence")
    assert (r.answer, r.verbalized, r.status) == ("(B)", 0.8, "ok")
    assert C.mc_letter(r.answer, _item()) == 1.0
