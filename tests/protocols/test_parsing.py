"""Output parsing (study 000 Appendix A, "Parsing"), with a table of tricky outputs and a property test."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.parsing import (
    DEFAULT_PARSE_POLICY,
    DROP_REASONS,
    MAX_PARSE_CHARS,
    PARSE_POLICIES,
    STATUSES,
    Number,
    ParseResult,
    apply_parse_policy,
    drop_reason,
    parse_number,
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


# ----------------------------------------------------------------------------- number grammar (issue 14 item 5)

# every example of the issue, and more forms outside the grammar: after the label, none becomes a value
UNPARSED = ["1e-5", "1e308", "1E5", "0,9", "1,000", "1/2", "0x1", "0\u00a0.9", "0 .9", "1 000", "0.9.5", "0..9",
            "0.8-0.9", "0.8 - 0.9", "1_000", "1'000", "10^-5", "1 x 10^-5", "1 \u00d7 10^-5", "0.9%%", "50%/50%",
            "0.9-ish", "0.9e", "\u0660.\u0669", "\uff10.\uff19", "\u22120.2", "--0.5", "1:2", "10\u207b\u2075",
            "5\u2030", "0.9 0.8", "0.9 ,8"]


@pytest.mark.parametrize("number", UNPARSED)
def test_number_outside_the_grammar_is_unparsed(number):
    r = parse_output(f"Guess: Paris\nProbability: {number}")
    assert r == ParseResult("Paris", None, "unparsed_number", False)
    assert parse_output(f"**Probability:** {number}").status == "unparsed_number"  # precedes missing_answer
    assert parse_output(f"Guess: Paris\nProbability: {number}", scale="percent").verbalized is None
    # the fallback never takes a number out of such a token either
    assert parse_output(f"Paris\nConfidence: {number}").verbalized is None


# (text after "Probability: ", value): the documented tolerances are kept
ACCEPTED = [("0.9", 0.9), (".9", 0.9), ("0.", 0.0), ("1.", 1.0), ("+0.5", 0.5), ("-0", 0.0), ("0.9.", 0.9),
            ("0.9...", 0.9), ("0.9,", 0.9), ("0.9:", 0.9), ("0.9!", 0.9), ("0.9)", 0.9), ("**0.6**", 0.6),
            ("__0.6__", 0.6), ("85%", 0.85), ("85 %", 0.85), ("85\u00a0%", 0.85), ("85%.", 0.85),
            ("0.9, maybe 0.7", 0.9), ("0.9, 0.7", 0.9), ("0.9. 1", 0.9), ("0.9 - I am sure", 0.9),
            ("0.9 (90%)", 0.9), ("0.9\n0.8", 0.9)]


@pytest.mark.parametrize(("number", "value"), ACCEPTED)
def test_number_in_the_grammar(number, value):
    r = parse_output(f"Guess: Paris\nProbability: {number}")
    assert (r.status, r.used_fallback) == ("ok", False)
    assert r.verbalized == value and math.copysign(1.0, r.verbalized) == 1.0  # -0 reads as +0.0


def test_huge_and_negative_numbers_are_out_of_range():
    assert parse_output("Guess: Paris\nProbability: 1" + "0" * 400).status == "out_of_range"  # overflows to inf
    assert parse_output("Guess: Paris\nProbability: -0.2").status == "out_of_range"
    assert parse_output("Paris\n-0.2").verbalized is None  # the fallback reads the sign too


def test_decimal_comma_is_an_explicit_option():
    assert parse_output("Guess: Paris\nProbability: 0,9", decimal_comma=True) == ParseResult("Paris", 0.9, "ok", False)
    assert parse_output("Guess: Paris\nProbability: 0,9.", decimal_comma=True).verbalized == 0.9
    assert parse_output("Guess: Paris\nProbability: 85,5 %", decimal_comma=True).verbalized == pytest.approx(0.855)
    assert parse_output("Paris, about 0,7", decimal_comma=True).verbalized == 0.7
    for text in ("0.9", "1.000,5", "0,9,5"):
        assert parse_output(f"Guess: P\nProbability: {text}", decimal_comma=True).status == "unparsed_number"
    assert parse_output("Guess: Paris\nProbability: 0,9").status == "unparsed_number"  # never guessed


def test_parse_for_prompt_reads_the_declared_decimal_comma():
    from confgrid.protocols.prompts import Prompt

    p = Prompt(id="komma", template="{question}", answer_label="Antwort:", confidence_label="Wahrscheinlichkeit:",
               scale="unit", decimal_comma=True)
    assert parse_for_prompt("Antwort: Paris\nWahrscheinlichkeit: 0,8", p) == ParseResult("Paris", 0.8, "ok", False)
    assert parse_for_prompt("Antwort: Paris\nWahrscheinlichkeit: 0.8", p).status == "unparsed_number"


def test_parse_number():
    assert parse_number("0.9") == Number(0.9, False) and parse_number("-.5") == Number(-0.5, False)
    assert parse_number("85 %") == Number(85.0, True) and parse_number("0,5", decimal_comma=True) == Number(0.5, False)
    for bad in ("", " 0.9", "0.9 ", "inf", "nan", "1e5", "0,5", "\u0669", "0.9  %", "%", ".", "+", "1_0"):
        assert parse_number(bad) is None, bad


# accepted forms: the grammar, written out (independent of the parser's own patterns)
_accepted_number = st.from_regex(r"\A[+-]?(?:[0-9]{1,4}(?:\.[0-9]{0,5})?|\.[0-9]{1,5})(?: ?%)?\Z", fullmatch=True)
_decoration = st.sampled_from([("", ""), ("**", "**"), ("", "."), ("", ","), ("", "!"), ("", " (fairly sure)"),
                               ("", "\nGuess: Rome"), ("__", "__"), ("\t", " ")])


def _expected(s: str) -> float:
    from decimal import Decimal

    v = Decimal(s.rstrip("%").strip())
    return float(v / 100 if s.endswith("%") else v)


@settings(max_examples=150, deadline=None)
@given(_accepted_number, _decoration, st.booleans())
def test_property_accepted_numbers_round_trip(number, decoration, comma):
    pre, post = decoration
    written = number.replace(".", ",") if comma else number
    if comma and post in (",",):
        post = "."
    r = parse_output(f"Guess: Paris\nProbability: {pre}{written}{post}", decimal_comma=comma)
    v = _expected(number)
    if 0.0 <= v <= 1.0:
        assert (r.status, r.used_fallback) == ("ok", False)
        assert r.verbalized == pytest.approx(v, rel=1e-15, abs=0)
    else:
        assert (r.status, r.verbalized) == ("out_of_range", None)


# forms outside the grammar made by damaging an accepted number
_defects = st.sampled_from(["e-5", "e308", "E2", "/2", ",000", "'000", "_0", ".5", "-1", "x1", "^2", "\u00a0.5",
                            " .5", " 000", "%5", "\u0663", "ish"])


@settings(max_examples=150, deadline=None)
@given(st.from_regex(r"\A[0-9]{1,3}\.[0-9]{1,3}\Z", fullmatch=True), _defects, st.booleans())
def test_property_damaged_numbers_never_yield_a_value(number, defect, prefix_zero_x):
    text = ("0x" + number.replace(".", "")) if prefix_zero_x and defect == "x1" else number + defect
    r = parse_output(f"Guess: Paris\nProbability: {text}")
    assert (r.verbalized, r.status) == (None, "unparsed_number"), text


_numberish = st.text(alphabet="0123456789.,eExX+-/%_'^:*~\u00a0\u0663\u2212", min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(_numberish)
def test_property_no_wrong_value_near_a_label(s):
    """Whatever follows the label, a value is only ever the leading number itself, followed by punctuation."""
    import re

    r = parse_output(f"Guess: Paris\nProbability: {s}")
    _check(r)
    if r.verbalized is None or r.used_fallback:  # the fallback: a later token of s, delimited (":0" -> 0.0)
        return
    lead = re.match(r"[ \t\u00a0]*(?:\*\*|__|\*|_)?[ \t\u00a0]*", s).end()  # spaces and emphasis after the label
    m = re.match(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", s[lead:], re.ASCII)
    assert m is not None, s
    rest = s[lead + m.end():]
    pct = re.match(r"[^\S\n]?%", rest)
    rest = rest[pct.end():] if pct else rest
    glued, after = re.fullmatch(r"(\S*)(.*)", rest, re.DOTALL).groups()
    assert not re.match(r"[^\w\s]*\d", glued), s  # no digit glued to the number (after marks only)
    assert not re.match(r"[.,/:'^*~+-]*[A-Za-z]", glued), s  # nor a letter, after marks of numbers: 1e5, 0.9-ish
    if not glued and not m.group().endswith("."):  # ("0. 9": a sentence's point, then another number)
        assert not re.match(r"[^\S\n]*(?:[.,]?\d|%)", after), s  # nor continuing it after a space (0 .9)
    assert r.verbalized == pytest.approx(_expected(m.group() + ("%" if pct else "")) + 0.0)


# ----------------------------------------------------------------------------- linear time, cap, no catch-all (item 6)

_PATHOLOGICAL = {
    "spaces before Guess": " " * 100_000 + "Guess: Paris\nProbability: 0.9",
    "spaces": " " * 100_000,
    "tabs after a label line": "Guess:\n" + "\t" * 100_000 + "x",
    "no-break spaces": "\u00a0" * 100_000 + "x",
    "spaces after Guess": "Guess" + " " * 100_000 + "x",
    "bold then spaces": "**" + " " * 100_000 + "Guess",
    "Guess repeated": "Guess " * 16_667,
    "Guess: repeated": "Guess:" * 16_667,
    "Probability: repeated": "Probability: " * 7_693,
    "bold labels repeated": "**Probability:** **Guess:** " * 3_572,
    "spaced digits": "1 " * 50_000,
    "digits": "1" * 100_000,
    "stars": "*" * 100_000,
    "underscores": "_" * 100_000,
    "dashes": "-" * 100_000,
    "label line, spaces": " " * 50_000 + "Guess" + " " * 50_000,
}


def _best_of_3(f) -> float:
    import time

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("name", list(_PATHOLOGICAL))
def test_pathological_outputs_parse_in_linear_time(name):
    text = _PATHOLOGICAL[name]
    assert len(text) >= 100_000
    assert _best_of_3(lambda: parse_output(text)) < 0.05, name


def test_only_max_chars_are_parsed():
    assert MAX_PARSE_CHARS >= 100_000
    text = "Guess: Paris\n" + " " * 100 + "Probability: 0.9"
    assert parse_output(text).verbalized == 0.9
    assert parse_output(text, max_chars=50) == ParseResult("Paris", None, "missing_confidence", False)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=f"max_chars={bad!r}"):
            parse_output(text, max_chars=bad)


def test_bad_labels_raise_naming_the_field():
    with pytest.raises(ValueError, match="answer_label=''"):
        parse_output("x", answer_label="")
    with pytest.raises(ValueError, match="confidence_label=None"):
        parse_output("x", confidence_label=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, TimeoutError])
def test_an_interrupt_while_parsing_propagates(monkeypatch, exc):
    from confgrid.protocols import parsing

    def boom(*args, **kwargs):
        raise exc

    monkeypatch.setattr(parsing, "_confidence", boom)
    with pytest.raises(exc):
        parse_output("Guess: Paris\nProbability: 0.9")


def test_unparsed_number_is_a_drop_reason_of_its_own():
    import pandas as pd

    from confgrid.analysis.signals import analyzed, conform
    from confgrid.flows.stages.grade import answer_rows
    from confgrid.flows.stages.grade import parse_generations

    assert "unparsed_number" in STATUSES and "unparsed_number" in DROP_REASONS
    r = parse_output("Guess: Paris\nProbability: 1/2")
    assert drop_reason(r) == drop_reason(r, "label_only") == "unparsed_number"
    gen = pd.DataFrame({"item_id": ["1", "2", "3"], "raw_output": [
        "Guess: Paris\nProbability: 0.8", "Guess: Rome\nProbability: 1e-5", "Guess: Oslo"]})
    graded = parse_generations(gen, "confidence").assign(correct_containment=1.0)
    assert list(graded["parse_status"]) == ["ok", "unparsed_number", "missing_confidence"]
    rows = answer_rows(graded, pd.DataFrame(), (), rule="containment")
    assert list(rows["status"]) == ["ok", "unparsed_number", "missing_confidence"]  # the status is the reason
    assert list(analyzed(conform(rows, setting="m/d"))["item_id"]) == ["1"]
