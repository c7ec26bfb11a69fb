"""Output parsing (study 000 Appendix A, "Parsing"), with a table of tricky outputs and a property test."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confgrid.protocols.parsing import STATUSES, ParseResult, parse_output

# text, answer, verbalized, status, used_fallback
CASES = [
    ("Guess: Paris\nProbability: 0.9", "Paris", 0.9, "ok", False),
    ("Guess: Paris\nProbability: 0.9.", "Paris", 0.9, "ok", False),  # trailing sentence period
    ("Guess: Paris\nProbability: 85%", "Paris", 0.85, "ok", False),  # percentage
    ("Guess: Paris\nProbability: 85 %", "Paris", 0.85, "ok", False),
    ("**Guess:** Paris\n**Probability:** 0.9", "Paris", 0.9, "ok", False),  # Markdown bold labels
    ("**Guess**: Paris\n**Probability**: 0.75", "Paris", 0.75, "ok", False),
    ("Guess: Paris\nProbability: **0.6**", "Paris", 0.6, "ok", False),
    ("Guess: **Paris**\nProbability: 0.6", "**Paris**", 0.6, "ok", False),  # answers keep Markdown
    ("**Guess: Paris**\n**Probability: 0.6**", "Paris", 0.6, "ok", False),
    ("guess: paris\nPROBABILITY: 1", "paris", 1.0, "ok", False),  # case-insensitive labels
    ("Guess: Paris\nProbability: 0", "Paris", 0.0, "ok", False),
    ("Guess: Paris\nProbability: .7", "Paris", 0.7, "ok", False),
    ("  Guess:   Paris  \n\n  Probability:  0.9  ", "Paris", 0.9, "ok", False),
    ("Guess:\nParis\nProbability: 0.9", "Paris", 0.9, "ok", False),  # first non-empty text after the label
    ("Guess: Paris Probability: 0.9", "Paris", 0.9, "ok", False),  # both on one line
    ("Probability: 0.4\nGuess: Rome", "Rome", 0.4, "ok", False),  # order does not matter
    ("Sure!\nGuess: 1889\nProbability: 0.8", "1889", 0.8, "ok", False),  # Guess: label wins over the first line
    ("Guess: Paris\nProbability: 0.9\nGuess: Rome\nProbability: 0.2", "Paris", 0.9, "ok", False),  # first wins
    ("Guess: Paris\r\nProbability: 0.9\r\n", "Paris", 0.9, "ok", False),
    # no labels: the first line that is not a label; the first number in [0, 1]
    ("Paris\n0.9", "Paris", 0.9, "ok", True),
    ("Paris\n0.9.", "Paris", 0.9, "ok", True),
    ("Paris, with confidence 0.85", "Paris, with confidence 0.85", 0.85, "ok", True),
    ("Paris (I am 70% sure)", "Paris (I am 70% sure)", 0.7, "ok", True),
    ("Answer: Paris\nProbability: 0.7", "Paris", 0.7, "ok", False),  # Answer: label removed without Guess:
    ("Guess: Paris\nConfidence: 0.3", "Paris", 0.3, "ok", True),  # only Probability: is a label; fallback
    ("Guess: Paris\nProbability: high, about 0.8", "Paris", 0.8, "ok", True),  # label with no number
    ("Guess: 1969\nProbability: high", "1969", None, "missing_confidence", False),  # 1969 not in [0, 1]
    # refusals and partial outputs
    ("I don't know", "I don't know", None, "missing_confidence", False),
    ("I don't know.\nProbability: 0.1", "I don't know.", 0.1, "ok", False),
    ("Guess: Paris\nProbab", "Paris", None, "missing_confidence", False),  # truncated mid-line
    ("Guess: Par", "Par", None, "missing_confidence", False),
    ("Guess: Paris\nProbability: 0.", "Paris", 0.0, "ok", False),  # truncated mid-number
    ("Guess:\nProbability: 0.9", None, 0.9, "missing_answer", False),
    ("Guess:   \n\nProbability: 0.9", None, 0.9, "missing_answer", False),
    ("Probability: 0.9", None, 0.9, "missing_answer", False),
    ("Guess:", None, None, "missing_both", False),
    ("**Probability:**", None, None, "missing_both", False),
    # out of range: a labelled number outside [0, 1]
    ("Guess: Paris\nProbability: 85", "Paris", None, "out_of_range", False),
    ("Guess: Paris\nProbability: 150%", "Paris", None, "out_of_range", False),
    ("Guess: Paris\nProbability: -0.2", "Paris", None, "out_of_range", False),
    # empty
    ("", None, None, "empty", False),
    ("   \n\t ", None, None, "empty", False),
]


@pytest.mark.parametrize(("text", "answer", "verbalized", "status", "fallback"), CASES)
def test_parse_table(text, answer, verbalized, status, fallback):
    r = parse_output(text)
    assert isinstance(r, ParseResult)
    assert r.answer == answer
    if verbalized is None:
        assert r.verbalized is None
    else:
        assert r.verbalized == pytest.approx(verbalized, abs=1e-12)
    assert r.status == status
    assert r.used_fallback is fallback


def test_custom_labels():
    r = parse_output("Answer: Rome\nConfidence: 40%", answer_label="Answer:", confidence_label="Confidence:")
    assert r == ParseResult("Rome", 0.4, "ok", False)


@pytest.mark.parametrize("bad", [None, 3, b"Guess: x"])
def test_non_text_is_empty(bad):
    assert parse_output(bad).status == "empty"  # type: ignore[arg-type]


_alphabet = st.sampled_from(list("Guess:Probability0123456789.%*_- \n\tAnswer:abcXYZ!?()éü{}"))
_tokens = st.sampled_from(["Guess:", "Probability:", "**", "0.9", "85%", "1.5", "\n", " ", "Paris", "-", ".", "%"])


def _check(r: ParseResult) -> None:
    assert r.status in STATUSES
    assert r.verbalized is None or (isinstance(r.verbalized, float) and 0.0 <= r.verbalized <= 1.0)
    assert not (r.verbalized is not None and math.isnan(r.verbalized))
    assert r.answer is None or (isinstance(r.answer, str) and r.answer == r.answer.strip() and r.answer)
    assert (r.status == "ok") == (r.answer is not None and r.verbalized is not None)
    if r.used_fallback:
        assert r.verbalized is not None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_property_arbitrary_text(text):
    _check(parse_output(text))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_tokens, st.text(_alphabet, max_size=5)), max_size=12).map("".join))
def test_property_label_soup(text):
    _check(parse_output(text))
