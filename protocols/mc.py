"""Multiple-choice format: lettered options, seeded shuffling and letter parsing.

Study 000 Appendix F ("Multiple-choice format"): the model sees the question with lettered options and answers with a
letter, which is correct if it matches the gold letter. Two prompts: ``mc_confidence`` (letter and probability; the
Guess: slot uses it) and ``mc_letter`` (letter only; the bare context uses it, the Answer: slot uses it without its
final ``Answer:`` and opens the assistant turn with ``Answer:``). At most :data:`MC_MAX_NEW_TOKENS` new tokens.
Options are shuffled with a fixed seed per question where a dataset asks for it (SciQ in the study; MMLU keeps its
given order).

Rendering rule (:func:`mc_question`): the text that replaces ``{question}`` in the multiple-choice prompts is the
question, a newline, then one line per option, ``"<letter>. <option>"``, joined by newlines::

    What is 2+2?
    A. 3
    B. 4

Examples
--------
>>> mc_question_text("What is 2+2?", ("3", "4"))
'What is 2+2?\\nA. 3\\nB. 4'
>>> parse_letter("**B**"), parse_letter("(c) Paris", n_options=4), parse_letter("I am not sure")
('B', 'C', None)
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import string

import numpy as np

from confgrid.protocols.items import Item

__all__ = [
    "LETTERS",
    "MC_MAX_NEW_TOKENS",
    "mc_question",
    "mc_question_text",
    "option_seed",
    "parse_letter",
    "shuffle_options",
]

#: Option letters, in order (at most 26 options).
LETTERS = string.ascii_uppercase

#: Generation limit of the multiple-choice format (study 000 Appendix F): at most 20 new tokens.
MC_MAX_NEW_TOKENS = 20


def mc_question_text(question: str, options: tuple[str, ...] | list[str]) -> str:
    """``question`` followed by one ``"<letter>. <option>"`` line per option.

    Raises ``ValueError`` if ``options`` is empty or has more than 26 entries.
    """
    if not options:
        raise ValueError("mc_question_text: options is empty; the multiple-choice format needs at least one option")
    if len(options) > len(LETTERS):
        raise ValueError(f"mc_question_text: {len(options)} options; at most {len(LETTERS)} are allowed")
    lines = [f"{LETTERS[k]}. {str(o).strip()}" for k, o in enumerate(options)]
    return question.rstrip() + "\n" + "\n".join(lines)


def mc_question(item: Item) -> str:
    """The text that replaces ``{question}`` in a multiple-choice prompt for ``item``.

    Raises ``ValueError`` if the item has no options (ask it as an open question instead).
    """
    if not item.options:
        raise ValueError(f"Item {item.item_id!r} has no options; it cannot be asked in the multiple-choice format")
    return mc_question_text(item.question, item.options)


def option_seed(seed: int, item_id: str) -> int:
    """A 64-bit seed from ``(seed, item_id)`` via SHA-256 (stable across runs and Python processes).

    Python's ``hash()`` is salted per process and is never used.
    """
    digest = hashlib.sha256(f"{int(seed)}\x00{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shuffle_options(item: Item, seed: int) -> Item:
    """``item`` with its options permuted by a generator seeded from ``(seed, item.item_id)``.

    The permutation depends only on ``seed``, the item id and the number of options, so the same question gets the
    same order in every run, whatever the order of the items. ``gold_letter`` follows the gold option;
    ``incorrect_answers`` are unchanged; ``metadata["option_order"]`` records the original indices, e.g. ``"2,0,3,1"``
    (new position k holds original option ``order[k]``).

    Raises ``ValueError`` if the item has no options, or its ``gold_letter`` does not name one of them.
    """
    if not item.options:
        raise ValueError(f"shuffle_options: item {item.item_id!r} has no options")
    n = len(item.options)
    if item.gold_letter is None or item.gold_letter not in LETTERS[:n]:
        raise ValueError(
            f"shuffle_options: item {item.item_id!r} has gold_letter={item.gold_letter!r}; "
            f"allowed: one of {list(LETTERS[:n])}"
        )
    rng = np.random.default_rng(option_seed(seed, item.item_id))
    order = [int(k) for k in rng.permutation(n)]
    gold_index = LETTERS.index(item.gold_letter)
    meta = dict(item.metadata)
    meta["option_order"] = ",".join(str(k) for k in order)
    return dataclasses.replace(
        item,
        options=tuple(item.options[k] for k in order),
        gold_letter=LETTERS[order.index(gold_index)],
        metadata=meta,
    )


# an optional leading label: "Answer: B", "**Guess:** B", "Option B"
_LEADING_LABEL = re.compile(r"^[\s*_#>]*(?:answer|guess|option|choice|letter)\b[\s*_]*[:\-]?[\s*_]*", re.IGNORECASE)
# a letter that stands alone at the start: "B", "B.", "(B)", "B) text", "**B**", "[B]", "B: text", "B - text";
# a letter followed by a space and a lower-case word ("A cat", "I think") is text, not an option letter
_LEADING_LETTER = re.compile(r"^[\s*_(\[{\"'`]*(?P<l>[A-Za-z])(?!['\u2019][a-z])(?=$|[.):\]}*_\"'`,;\-]|\s+[^a-z\s]|\s*$)")
# "The answer is B", "the correct option is (B)."
# (possessive runs: linear in the text, however many spaces follow "answer")
_ANSWER_IS = re.compile(r"\b(?:answer|option|choice)\s++(?:is\s++)?[\s*_(\[]*+(?P<l>[A-Z])\b(?![A-Za-z'])", re.IGNORECASE)


def parse_letter(text: str | None, n_options: int | None = None) -> str | None:
    """The option letter in a multiple-choice answer, upper-cased, or None.

    Accepts ``"B"``, ``"B."``, ``"(B)"``, ``"B) text"``, ``"**B**"``, ``"Answer: B"``, ``"b"`` and
    ``"The answer is B"``. Rule: on the first non-empty line, after an optional leading label (``Answer:``,
    ``Guess:``, ``Option``), a letter that stands alone (followed by the end, punctuation, or a space and a word that
    does not start in lower case); else the letter after "answer/option/choice (is)" anywhere in the text. ``"A cat"``
    and ``"I don't know"`` give None. Never raises for any text; nothing is caught, so an interrupt or a timeout while
    parsing propagates.

    Parameters
    ----------
    text : str or None
        A parsed answer (the text after ``Guess:`` or ``Answer:``) or a raw output.
    n_options : int or None
        When given, a letter beyond the options (``"E"`` with 4 options) gives None.

    Returns
    -------
    str or None
        ``"A"``...; None when no letter is found (refusals, empty text, an option's text written without its letter).
    """
    if not isinstance(text, str) or not text.strip():
        return None
    s = text.strip()
    first_line = next(ln for ln in s.splitlines() if ln.strip())
    rest = _LEADING_LABEL.sub("", first_line, count=1)
    m = _LEADING_LETTER.match(rest) or _ANSWER_IS.search(s)
    if m is None:
        return None
    letter = m.group("l").upper()
    if n_options is not None and letter not in LETTERS[: max(int(n_options), 0)]:
        return None
    return letter
