"""Parse a generated ``Guess: ... / Probability: ...`` output into answer and stated confidence.

Rule (study 000 Appendix A, "Parsing"): the answer is the first non-empty text
after a ``Guess:`` label; without that label, it is the first line that is not a
label. The verbalized score is the number after a ``Probability:`` label; if no
label matches, the first standalone number between 0 and 1 in the output (the
*fallback*). Markdown is not stripped from answers.

Tolerances added here (each one a decision, documented so that a report can
state it): labels match case-insensitively and may be wrapped in Markdown bold
(``**Guess:** Paris``, ``**Probability**: 0.9``); a number may carry trailing
punctuation (``0.9.``) or a percent sign (``85%`` -> 0.85); without a ``Guess:``
label, a leading ``Answer:`` label on the answer line is removed; an output
truncated mid-line parses whatever it holds.

Examples
--------
>>> parse_output("Guess: Paris\\nProbability: 0.9")
ParseResult(answer='Paris', verbalized=0.9, status='ok', used_fallback=False)
>>> parse_output("**Guess:** Paris\\n**Probability:** 85%")
ParseResult(answer='Paris', verbalized=0.85, status='ok', used_fallback=False)
>>> parse_output("Guess: Paris\\nProbab")
ParseResult(answer='Paris', verbalized=None, status='missing_confidence', used_fallback=False)
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

__all__ = [
    "DEFAULT_PARSE_POLICY",
    "DROP_REASONS",
    "PARSE_POLICIES",
    "STATUSES",
    "ParseResult",
    "apply_parse_policy",
    "drop_reason",
    "parse_for_prompt",
    "parse_output",
]

#: Every status :func:`parse_output` can return, then ``unlabelled_confidence``
#: (set only by :func:`apply_parse_policy` under ``label_only``) and
#: ``reasoning_unterminated`` (a thinking model's reasoning never ended, so
#: there is no answer to parse; protocols/reasoning.py).
STATUSES = (
    "ok",
    "missing_answer",
    "missing_confidence",
    "missing_both",
    "out_of_range",
    "empty",
    "unlabelled_confidence",
    "reasoning_unterminated",
)

#: Parse policies (study 000 section 3.3 and Appendix B.1): ``label_or_fallback``
#: keeps a confidence found by the unlabelled-number fallback (the main
#: analysis); ``label_only`` keeps only confidences after the ``Probability:``
#: label (the 0-100 analysis).
PARSE_POLICIES = ("label_or_fallback", "label_only")

#: The default parse policy (study 000 main analysis).
DEFAULT_PARSE_POLICY = "label_or_fallback"

#: Why a row is dropped: every status except ``ok``.
DROP_REASONS = tuple(s for s in STATUSES if s != "ok")


class ParseResult(NamedTuple):
    """Result of :func:`parse_output`.

    Attributes
    ----------
    answer : str or None
        The parsed answer, stripped of surrounding whitespace; None if missing.
    verbalized : float or None
        The stated confidence in [0, 1]; None if missing or out of range.
    status : str
        One of :data:`STATUSES`: ``ok`` (both found), ``missing_answer``,
        ``missing_confidence``, ``missing_both``, ``out_of_range`` (a labelled
        number outside [0, 1]; ``verbalized`` is then None, ``answer`` may be
        set), ``empty`` (blank output).
    used_fallback : bool
        True when ``verbalized`` came from the unlabelled-number fallback.
    """

    answer: str | None
    verbalized: float | None
    status: str
    used_fallback: bool


_MD = r"(?:\*\*|__|\*|_)?"
_NUMBER = r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+))"
# A standalone number: not glued to a letter, digit or decimal point on either side
# (a trailing sentence period is allowed: "0.9.").
_STANDALONE = re.compile(
    r"(?<![\w.])(?P<num>\d+(?:\.\d+)?|\.\d+)(?P<pct>\s?%)?(?![\w%]|\.\d)",
)


def _label_re(label: str) -> re.Pattern[str]:
    word = re.escape(label.rstrip(":").strip())
    # optional Markdown emphasis opened before the word and closed before or after the colon
    # ("**Guess:** x", "**Guess**: x"); emphasis after the colon without an opener before the
    # word belongs to the answer ("Guess: **Paris**" keeps its asterisks, study 000 Appendix A)
    return re.compile(
        rf"(?<![A-Za-z0-9])(?P<open>\*\*|__|\*|_)?[ \t]*{word}[ \t]*{_MD}[ \t]*:[ \t]*(?(open){_MD})[ \t]*",
        re.IGNORECASE,
    )


_GUESS = _label_re("Guess:")
_PROB = _label_re("Probability:")
_ANY_LABEL_LINE = re.compile(
    rf"^\s*(?:[-*>#]+\s+)?{_MD}\s*(?:guess|probability|answer|confidence)\s*{_MD}\s*:", re.IGNORECASE
)
_ANSWER_PREFIX = _label_re("Answer:")
_LABELLED_NUMBER = re.compile(rf"[ \t]*{_MD}[ \t]*{_NUMBER}(?P<pct>[ \t]?%)?")


def _clean_answer(text: str) -> str | None:
    s = text.strip()
    # an unbalanced closing bold left by "**Guess: Paris**"
    if s.endswith("**") and s.count("**") == 1:
        s = s[:-2].rstrip()
    return s or None


def _answer_after_label(
    text: str, label_re: re.Pattern[str], stop_re: re.Pattern[str]
) -> tuple[bool, str | None]:
    m = label_re.search(text)
    if m is None:
        return False, None
    rest = text[m.end() :]
    first, _, tail = rest.partition("\n")
    stop = stop_re.search(first)  # "Guess: Paris Probability: 0.9" on one line
    if stop is not None:
        first = first[: stop.start()]
    ans = _clean_answer(first)
    if ans is not None:
        return True, ans
    for line in tail.split("\n"):
        if not line.strip():
            continue
        if _ANY_LABEL_LINE.match(line):
            return True, None
        return True, _clean_answer(line)
    return True, None


def _answer_without_label(text: str) -> str | None:
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = _ANSWER_PREFIX.match(line.lstrip())
        if m is not None:  # "Answer: Paris"
            ans = _clean_answer(line.lstrip()[m.end() :])
            if ans is not None:
                return ans
            continue
        if _ANY_LABEL_LINE.match(line):
            continue
        return _clean_answer(line)
    return None


def _to_float(num: str, pct: str | None) -> float | None:
    try:
        v = float(num)
    except ValueError:
        return None
    if not math.isfinite(v):
        return None
    return v / 100.0 if pct else v


def _percent_to_float(num: str, pct: str | None) -> float | None:
    v = _to_float(num, None)
    return None if v is None else v / 100.0


def parse_output(
    text: str | None,
    *,
    answer_label: str = "Guess:",
    confidence_label: str = "Probability:",
    scale: str | None = "unit",
) -> ParseResult:
    """Parse a generated output into answer, stated confidence and a status.

    Never raises: any input, including None or non-text, gives a
    :class:`ParseResult` with a status from :data:`STATUSES`.

    Parameters
    ----------
    text : str
        The generated text (decoded, special tokens removed).
    answer_label, confidence_label : str
        Labels of the confidence prompt (study 000: ``Guess:`` and
        ``Probability:``). Matched case-insensitively, optionally in Markdown bold.
    scale : {"unit", "percent"} or None, default "unit"
        The prompt's declared scale (:attr:`Prompt.scale`; None reads as
        ``"unit"``). ``"unit"``: a number in [0, 1] is the probability, a
        number with ``%`` is divided by 100. ``"percent"`` (study 000 Appendix
        B.1): every number is a percentage, divided by 100 whether or not it
        carries ``%`` (so ``Probability: 85`` -> 0.85 and ``Probability: 0.85``
        -> 0.0085, read literally); the fallback takes the first standalone
        number in [0, 100]. An unknown scale gives status ``missing_both``
        (never raises).

    Returns
    -------
    ParseResult
        ``verbalized`` is in [0, 1] or None. The first label occurrence wins.
        A labelled number outside the scale (``Probability: 85`` on the unit
        scale, ``Probability: 150%``) gives status ``out_of_range``; a label
        without any number after it counts as no label, and the fallback applies.
    """
    try:
        return _parse(text, answer_label, confidence_label, scale or "unit")
    except Exception:  # pragma: no cover - defensive; the parser is meant not to raise
        return ParseResult(None, None, "missing_both", False)


def _parse(text: object, answer_label: str, confidence_label: str, scale: str = "unit") -> ParseResult:
    if scale not in ("unit", "percent"):
        return ParseResult(None, None, "missing_both", False)
    to_unit = _to_float if scale == "unit" else _percent_to_float
    if not isinstance(text, str) or not text.strip():
        return ParseResult(None, None, "empty", False)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    guess_re = _GUESS if answer_label == "Guess:" else _label_re(answer_label)
    prob_re = _PROB if confidence_label == "Probability:" else _label_re(confidence_label)

    has_label, answer = _answer_after_label(text, guess_re, prob_re)
    if not has_label:
        answer = _answer_without_label(text)

    verbalized: float | None = None
    used_fallback = False
    out_of_range = False
    labelled = False
    for m in prob_re.finditer(text):
        n = _LABELLED_NUMBER.match(text, m.end())
        if n is None:
            continue
        v = to_unit(n.group("num"), n.group("pct"))
        if v is None:
            continue
        labelled = True
        if 0.0 <= v <= 1.0:
            verbalized = v
        else:
            out_of_range = True
        break
    if not labelled:
        for m in _STANDALONE.finditer(text):
            v = to_unit(m.group("num"), m.group("pct"))
            if v is not None and 0.0 <= v <= 1.0:
                verbalized, used_fallback = v, True
                break

    if out_of_range:
        status = "out_of_range"
    elif answer is None and verbalized is None:
        status = "missing_both"
    elif answer is None:
        status = "missing_answer"
    elif verbalized is None:
        status = "missing_confidence"
    else:
        status = "ok"
    return ParseResult(answer, verbalized, status, used_fallback)


def parse_for_prompt(text: str | None, prompt: object) -> ParseResult:
    """:func:`parse_output` with the labels and scale a prompt declares.

    Parameters
    ----------
    text : str
        The generated text.
    prompt : Prompt or str
        A :class:`~confgrid.protocols.prompts.Prompt` or a registered prompt id.
        Missing labels fall back to ``Guess:`` / ``Probability:``.

    Raises
    ------
    KeyError
        If ``prompt`` is an id that is not registered (the only error; the
        parse itself never raises).
    """
    from confgrid.protocols.prompts import get_prompt

    p = get_prompt(prompt) if isinstance(prompt, str) else prompt
    return parse_output(
        text,
        answer_label=getattr(p, "answer_label", None) or "Guess:",
        confidence_label=getattr(p, "confidence_label", None) or "Probability:",
        scale=getattr(p, "scale", None) or "unit",
    )


def apply_parse_policy(result: ParseResult, policy: str = DEFAULT_PARSE_POLICY) -> ParseResult:
    """``result`` under a parse policy (:data:`PARSE_POLICIES`).

    ``label_or_fallback`` returns ``result`` unchanged. ``label_only`` drops a
    confidence that came from the fallback: ``verbalized`` becomes None,
    ``used_fallback`` stays True (the record of where the number came from),
    and the status becomes ``unlabelled_confidence`` when the row has an
    answer, ``missing_both`` when it has none.

    Raises
    ------
    ValueError
        If ``policy`` is not one of :data:`PARSE_POLICIES`.

    Examples
    --------
    >>> r = parse_output("Paris\\n0.9")
    >>> apply_parse_policy(r, "label_only")
    ParseResult(answer='Paris', verbalized=None, status='unlabelled_confidence', used_fallback=True)
    """
    if policy not in PARSE_POLICIES:
        raise ValueError(f"parse policy={policy!r} is not known; choose one of {list(PARSE_POLICIES)}")
    if policy == "label_or_fallback" or not result.used_fallback:
        return result
    # a fallback confidence implies status "ok" (answer found) or "missing_answer" (none)
    status = "unlabelled_confidence" if result.answer is not None else "missing_both"
    return ParseResult(result.answer, None, status, True)


def drop_reason(result: ParseResult, policy: str = DEFAULT_PARSE_POLICY) -> str | None:
    """Why a row is dropped under ``policy`` (a status from :data:`DROP_REASONS`), or None if it is kept.

    A row is kept when it has both an answer and a confidence after the policy.

    Raises
    ------
    ValueError
        If ``policy`` is not one of :data:`PARSE_POLICIES`.
    """
    r = apply_parse_policy(result, policy)
    return None if r.status == "ok" else r.status
