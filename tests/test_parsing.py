"""Output parsing (study 000 Appendix A, "Parsing"), with a table of tricky outputs and a property test."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confgrid.protocols.parsing import (
    DEFAULT_PARSE_POLICY,
    DROP_REASONS,
    PARSE_POLICIES,
    STATUSES,
    ParseResult,
    apply_parse_policy,
    drop_reason,
    parse_for_prompt,
    parse_output,
)

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


# ----------------------------------------------------------------------------- more tricky outputs (issue 3 item 10)

MORE_CASES = [
    ("**Guess:** Paris\n**Probability:** 0.9.", "Paris", 0.9, "ok", False),  # bold labels, trailing period
    ("Guess: Paris\nProbability: 0.9!", "Paris", 0.9, "ok", False),
    ("Guess: Paris\nProbability: 0.9, maybe 0.7", "Paris", 0.9, "ok", False),  # several numbers: the labelled first
    ("Guess: 3 or 4\nProbability: 0.5", "3 or 4", 0.5, "ok", False),
    ("Paris, or maybe Lyon: 0.6 vs 0.3", "Paris, or maybe Lyon: 0.6 vs 0.3", 0.6, "ok", True),  # first number wins
    ("I'm sorry, I cannot answer that.", "I'm sorry, I cannot answer that.", None, "missing_confidence", False),
    ("Guess: unknown\nProbability: 0", "unknown", 0.0, "ok", False),  # refusal as an answer, stated zero
    ("Guess: The Eiffel Tower was completed in the year eighteen", "The Eiffel Tower was completed in the year eighteen",
     None, "missing_confidence", False),  # truncated at the token limit before the Probability: line
    ("Guess: Paris\nProbability: 0.8", "Paris", 0.8, "ok", False),
    ("\n\n\n", None, None, "empty", False),
]


@pytest.mark.parametrize(("text", "answer", "verbalized", "status", "fallback"), MORE_CASES)
def test_more_tricky_outputs(text, answer, verbalized, status, fallback):
    r = parse_output(text)
    assert (r.answer, r.status, r.used_fallback) == (answer, status, fallback)
    assert r.verbalized == (pytest.approx(verbalized) if verbalized is not None else None)


# ----------------------------------------------------------------------------- 0-100 scale (study 000 Appendix B.1)

PERCENT_CASES = [
    ("Guess: Paris\nProbability: 85", 0.85, "ok", False),
    ("Guess: Paris\nProbability: 85%", 0.85, "ok", False),
    ("Guess: Paris\nProbability: **100**", 1.0, "ok", False),
    ("Guess: Paris\nProbability: 0", 0.0, "ok", False),
    ("Guess: Paris\nProbability: 0.85", 0.0085, "ok", False),  # read literally on the declared scale
    ("Guess: Paris\nProbability: 150", None, "out_of_range", False),
    ("Guess: Paris\nConfidence: 70", 0.7, "ok", True),  # fallback: first standalone number in [0, 100]
    ("Guess: 1969\nProbability: high", None, "missing_confidence", False),
]


@pytest.mark.parametrize(("text", "verbalized", "status", "fallback"), PERCENT_CASES)
def test_percent_scale(text, verbalized, status, fallback):
    r = parse_output(text, scale="percent")
    assert (r.status, r.used_fallback) == (status, fallback)
    assert r.verbalized == (pytest.approx(verbalized) if verbalized is not None else None)


def test_parse_for_prompt_uses_declared_scale():
    assert parse_for_prompt("Guess: Paris\nProbability: 85", "confidence_percent").verbalized == pytest.approx(0.85)
    assert parse_for_prompt("Guess: Paris\nProbability: 85", "confidence").status == "out_of_range"
    assert parse_for_prompt("Guess: B\nProbability: 0.7", "mc_confidence") == ParseResult("B", 0.7, "ok", False)
    with pytest.raises(KeyError, match="unknown prompt 'nope'"):
        parse_for_prompt("x", "nope")
    assert parse_output("Guess: Paris\nProbability: 0.5", scale="bogus").status == "missing_both"  # never raises


# ----------------------------------------------------------------------------- parse policy


def test_parse_policy():
    labelled = parse_output("Guess: Paris\nProbability: 0.9")
    fallback = parse_output("Paris\n0.9")
    # a lone number is both the answer line and the fallback confidence; label_only drops the confidence
    assert parse_output("0.9") == ParseResult("0.9", 0.9, "ok", True)
    assert apply_parse_policy(labelled, "label_only") is labelled
    assert apply_parse_policy(fallback, "label_or_fallback") is fallback
    assert apply_parse_policy(fallback, "label_only") == ParseResult("Paris", None, "unlabelled_confidence", True)
    only_number = ParseResult(None, 0.9, "missing_answer", True)
    assert apply_parse_policy(only_number, "label_only") == ParseResult(None, None, "missing_both", True)
    assert drop_reason(fallback) is None and drop_reason(fallback, "label_only") == "unlabelled_confidence"
    assert drop_reason(parse_output("")) == "empty" and drop_reason(labelled, "label_only") is None
    assert DEFAULT_PARSE_POLICY == "label_or_fallback" and set(PARSE_POLICIES) == {"label_only", "label_or_fallback"}
    assert "ok" not in DROP_REASONS and "unlabelled_confidence" in DROP_REASONS
    with pytest.raises(ValueError, match=r"policy='strict'.*\['label_or_fallback', 'label_only'\]"):
        apply_parse_policy(labelled, "strict")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_tokens, st.text(_alphabet, max_size=5)), max_size=12).map("".join),
       st.sampled_from(["unit", "percent"]), st.sampled_from(["label_only", "label_or_fallback"]))
def test_property_scale_and_policy(text, scale, policy):
    r = apply_parse_policy(parse_output(text, scale=scale), policy)
    assert r.status in STATUSES
    assert r.verbalized is None or 0.0 <= r.verbalized <= 1.0
    assert (r.status == "ok") == (r.answer is not None and r.verbalized is not None)
    if policy == "label_only":
        assert not (r.used_fallback and r.verbalized is not None)
