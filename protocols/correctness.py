"""Correctness rules: grade a parsed answer against an item's gold answers.

Definitions from study 000 (section 3.4 and Appendix A, "Normalization" and "Exact match"). A rule is a function
``rule(answer, item) -> float`` returning 1.0 (correct) or 0.0 (wrong); rules are kept in a registry (:data:`RULES`).
A rule returns NaN (undefined, not wrong) on an item it does not apply to; a NaN label drops the row from metrics
instead of counting it as wrong.

Registered: ``containment`` (default), ``exact_match``, ``alias`` (containment over the gold answers, all aliases and
TriviaQA normalized aliases), ``mc_letter`` (multiple-choice letter match, Appendix F), ``mc_favoured`` (the favoured
option of option probabilities, ties scored proportionally, study 002 section 3), ``given_answer`` (HaluEval QA:
whether the answer the item showed is the right one; study 002 section 4.4), ``lifeeval`` (graded: the true
probability in [0, 1] of a LifeEval guess, study 002 section 4.5), ``numeric`` (the answer's final number equals a
gold number within a relative tolerance of 1e-6: GSM8K, study 004).

Examples
--------
>>> normalize("  The Eiffel-Tower! ")
'the eiffel tower'
"""

from __future__ import annotations

import re
from collections.abc import Callable

from confgrid.protocols.items import Item
from confgrid.protocols.json_output import TIE_SEPARATOR, favoured_letters, favoured_score
from confgrid.protocols.lifeeval_items import score_answer
from confgrid.protocols.mc import LETTERS, parse_letter
from confgrid.protocols.numeric import final_number, format_number, gold_number, numbers_match
from confgrid.registry import Registry

__all__ = [
    "ANSWER_FREE_RULES",
    "agreement_key",
    "DEFAULT_RULE",
    "GIVEN_ANSWER_KEY",
    "RULES",
    "Rule",
    "alias",
    "containment",
    "exact_match",
    "get_rule",
    "mc_favoured",
    "given_answer",
    "lifeeval",
    "mc_letter",
    "normalize",
    "numeric",
    "option_letters",
    "register_rule",
]

#: ``rule(answer, item) -> float``: 1.0 or 0.0, graded in [0, 1] (``lifeeval``), or NaN where undefined.
Rule = Callable[[str | None, Item], float]

#: Registered correctness rules, by name (kind ``"correctness rule"``).
RULES: Registry[Rule] = Registry("correctness rule")

#: Name of the default rule (study 000 section 3.4: normalized containment).
DEFAULT_RULE = "containment"

_NOT_ALNUM_SPACE = re.compile(r"[^A-Za-z0-9\s]")
_SPACES = re.compile(r"\s+")


def normalize(text: str | None) -> str:
    """Normalize a string for comparison (study 000 Appendix A, "Normalization"); None gives ``""``.

    Lowercases; replaces every character other than an ASCII letter, ASCII digit or whitespace with a space (so
    accented letters, punctuation and Markdown become spaces); merges runs of whitespace into one space; strips.

    Examples
    --------
    >>> normalize("**Paris**.")
    'paris'
    >>> normalize("Zürich")
    'z rich'
    """
    if not text:
        return ""
    return _SPACES.sub(" ", _NOT_ALNUM_SPACE.sub(" ", text.lower())).strip()


#: ``@register_rule(name)`` registers a correctness rule (``correctness.rules`` in grid specs).
register_rule = RULES.register
#: The correctness rule registered under a name (:meth:`~confgrid.registry.Registry.get`).
get_rule = RULES.get


def _golds(item: Item) -> list[str]:
    return [g for g in (normalize(x) for x in item.gold_answers) if g]


def _contained(a: str, golds: list[str]) -> float:
    """1.0 when the normalized answer ``a`` (non-empty) equals, contains or is contained in one of ``golds``."""
    return float(bool(a) and any(a == g or a in g or g in a for g in golds))


@register_rule("containment")
def containment(answer: str | None, item: Item) -> float:
    """Normalized containment, the default rule (study 000 section 3.4).

    Correct (1.0, else 0.0) when, after :func:`normalize`, the answer equals a gold answer or one of the two strings
    contains the other as a substring (character level: ``"paris"`` is contained in ``"paris france"``, and also
    ``"a"`` in ``"a cat"``). An answer or a gold answer that normalizes to ``""`` (None, ``"?!"``) never matches.
    """
    return _contained(normalize(answer), _golds(item))


@register_rule("exact_match")
def exact_match(answer: str | None, item: Item) -> float:
    """Exact match (study 000 Appendix F): the answer equals a gold answer after :func:`normalize`.

    1.0 or 0.0; an empty normalized answer or gold is never correct.
    """
    a = normalize(answer)
    if not a:
        return 0.0
    return float(a in _golds(item))


@register_rule("alias")
def alias(answer: str | None, item: Item) -> float:
    """Alias-aware normalized containment.

    1.0 or 0.0, as :func:`containment`, but against every accepted form: the gold answers, the canonical reference,
    every released alias and the TriviaQA ``normalized_aliases``. It differs from :func:`containment` only where
    ``aliases`` or ``normalized_aliases`` hold forms that ``gold_answers`` lacks (the TriviaQA and TruthfulQA adapters
    list them all).
    """
    forms = (*item.gold_answers, item.canonical, *item.aliases, *item.normalized_aliases)
    return _contained(normalize(answer), [g for g in map(normalize, forms) if g])


@register_rule("mc_letter")
def mc_letter(answer: str | None, item: Item) -> float:
    """Multiple-choice letter match (study 000 Appendix F).

    1.0, 0.0, or NaN for an item without options or gold letter. The answer's option letter
    (:func:`confgrid.protocols.mc.parse_letter`, limited to the item's options: ``"B"``, ``"(b)"``, ``"B) Paris"``,
    ``"**B**"``, ``"Answer: B"``) equals ``item.gold_letter``; 0.0 when no letter is found (a refusal, an option's
    text without its letter).
    """
    if not item.options or not item.gold_letter:
        return float("nan")
    letter = parse_letter(answer, n_options=len(item.options))
    return float(letter is not None and letter == item.gold_letter.strip().upper())


#: Metadata key :func:`given_answer` reads (set by the ``halueval_qa`` adapter).
GIVEN_ANSWER_KEY = "given_answer_correct"

#: Names of rules whose label does not depend on the model's answer: the grade stage
#: (``flows/stages/grade.py: grade_answers``) labels rows with no parsed answer under them too (other rules give such
#: rows NaN). Add a rule of your own here when it reads only the item.
ANSWER_FREE_RULES: set[str] = {"given_answer"}


@register_rule("given_answer")
def given_answer(answer: str | None, item: Item) -> float:
    """Whether the answer the item showed the model is the right one (HaluEval QA; study 002 section 4.4).

    The model is shown a candidate answer, the right one or a hallucinated one, and states only its confidence that it
    is correct (Appendix F.5), so the label is read from ``item.metadata["given_answer_correct"]`` (``"1"`` -> 1.0,
    ``"0"`` -> 0.0, set by the ``halueval_qa`` adapter) and ``answer`` is ignored (the rule is in
    :data:`ANSWER_FREE_RULES`). Accuracy is thus fixed by the data (half right, half hallucinated; study 002 section
    7). NaN when the metadata is missing (every dataset but HaluEval QA) or neither ``"1"`` nor ``"0"``.
    """
    flag = item.metadata.get(GIVEN_ANSWER_KEY)
    if flag == "1":
        return 1.0
    if flag == "0":
        return 0.0
    return float("nan")


@register_rule("lifeeval")
def lifeeval(answer: str | None, item: Item) -> float:
    """LifeEval's graded correctness (study 002 section 4.5, Eq. 3): the true probability of the guess.

    In [0, 1]. The answer's integer age (exactly one number in the text, decimals rounded half up;
    :func:`confgrid.protocols.lifeeval_items.parse_age`) is scored with
    :func:`confgrid.protocols.lifeeval_items.score_answer`: ``P(D in window(guess, radius) | D >= min_age)`` under the
    item's life table, year and window. 0.0 when no single number can be read (``"old age"``, ``"75-80"``); NaN for an
    item without LifeEval metadata.
    """
    return score_answer(answer, item)


@register_rule("mc_favoured")
def mc_favoured(answer: str | None, item: Item) -> float:
    """Favoured-option match with proportional tie scoring (study 002 section 3).

    In [0, 1]. The answer of an option-probabilities reply is its favoured letter, or the tied favoured letters joined
    by ``|`` (``"A|C"``, protocols/json_output.py); it scores ``1/m`` when the gold letter is among the ``m`` favoured
    options, else 0. Any other answer is read like :func:`mc_letter`. NaN when the item has no options or no gold
    letter.
    """
    if not item.options or not item.gold_letter:
        return float("nan")
    if isinstance(answer, str) and TIE_SEPARATOR in answer:
        letters = [x for x in favoured_letters(answer) if x in option_letters(item)]
        return favoured_score(letters, item.gold_letter.strip().upper())
    return mc_letter(answer, item)


@register_rule("numeric")
def numeric(answer: str | None, item: Item) -> float:
    r"""Numeric match of the final number (study 004's GSM8K convention).

    1.0 or 0.0; never raises. The model's number is :func:`confgrid.protocols.numeric.final_number` of the answer (the
    last number in the last closed ``\boxed{...}``, else the last number of the text; see that module for the
    grammar). Each gold answer is read whole with :func:`~confgrid.protocols.numeric.gold_number` (a gold in words is
    not a number). Correct when ``|a - g| <= 1e-6 * max(1, |g|)`` for some gold number ``g``
    (:func:`~confgrid.protocols.numeric.numbers_match`). Only the **last** box counts, a box without a number is
    wrong, and without a box a worked solution that ends on a check ("... 18, and 18 - 2 = 16") is graded on 16. 0.0
    when the answer holds no number (None, ``"I don't know"``, ``\boxed{}``); NaN when no gold answer of the item is a
    number.
    """
    golds = [g for g in (gold_number(x) for x in item.gold_answers) if g is not None]
    if not golds:
        return float("nan")
    a = final_number(answer).value
    if a is None:
        return 0.0
    return float(any(numbers_match(a, g) for g in golds))


def option_letters(item: Item) -> str:
    """The option letters of ``item`` (``"ABCD"`` for four options)."""
    return LETTERS[: len(item.options)]


def agreement_key(rule: str) -> Callable[[str], str]:
    """How sampled answers are compared for agreement (self-consistency, response consistency) under ``rule``.

    ``numeric``: the answer's final number written by :func:`confgrid.protocols.numeric.format_number` (``"-3"`` and
    ``"3"`` differ, ``"1,234"`` equals ``"1234"``; an answer without a number falls back to :func:`normalize`); every
    other rule: :func:`normalize` (study 000 Appendix A), which drops signs and punctuation.
    """
    if rule != "numeric":
        return normalize

    def key(text: str) -> str:
        v = final_number(text).value
        return format_number(v) if v is not None else normalize(text)

    return key
