"""Parse a generated ``Guess: ... / Probability: ...`` output into answer and stated confidence.

Rule (study 000 Appendix A, "Parsing"): the answer is the first non-empty text after a ``Guess:`` label; without that
label, it is the first line that is not a label. The verbalized score is the number after a ``Probability:`` label; if
no label matches, the first standalone number between 0 and 1 in the output (the *fallback*). Markdown is not stripped
from answers.

Tolerances added here (each one a decision, documented so that a report can state it): labels match case-insensitively
and may be wrapped in Markdown bold (``**Guess:** Paris``, ``**Probability**: 0.9``); a number may carry trailing
punctuation (``0.9.``) or a percent sign (``85%`` -> 0.85); without a ``Guess:`` label, a leading ``Answer:`` label on
the answer line is removed; an output truncated mid-line parses whatever it holds.

Number grammar (:func:`parse_number`), the only numbers that become a value::

    number = [sign] (digits [sep [digits]] | sep digits) [[space] "%"]
    sign   = "+" | "-"
    digits = one or more of the ASCII digits 0-9
    sep    = "."  (or "," with decimal_comma=True, and then "." is not a separator)
    space  = one space, tab or other horizontal whitespace (a no-break space too)

Where a number ends: the token after the label (or a standalone token, for the fallback) starts like a number (a digit
of any script, or up to three signs and a point before one) and runs over letters, digits, ``_`` and ``%``; on over
marks written inside numbers (``. , / : ' ^ * × · ~``, dashes, signs) when a letter, digit or ``%`` follows; over any
other punctuation when a digit follows directly; and over spaces (mixed with such marks) when a digit or ``%``
follows, or `` x `` before a digit -- except a point or comma, then spaces, then a digit, which ends a number as in a
sentence. It ends anywhere else: at a line break, at whitespace before a word, at trailing punctuation; a closing
``_`` is dropped. So ``0.9.``, ``0.9,``, ``**0.9**``, ``0.9)``, ``0.9, maybe 0.7``, ``0.9, 0.7``, ``0.9 (90%)`` read
0.9, and a token that is not in the grammar -- ``1e-5``, ``1e308``, ``0,9`` (without ``decimal_comma``), ``1,000``,
``1 000``, ``1/2``, ``0x1``, ``0<NBSP>.9``, ``0.9.5``, ``0.8-0.9``, ``0.9 0.8``, ``1_000``, digits of other scripts,
``−0.2`` (U+2212) -- gives status ``unparsed_number`` after the label, never a value; the fallback skips such tokens.
Every pattern is linear in the length of the text (possessive quantifiers; no two adjacent quantifiers over one
character set), and at most :data:`MAX_PARSE_CHARS` characters are read.

Examples
--------
>>> parse_output("Guess: Paris\\nProbability: 0.9")
ParseResult(answer='Paris', verbalized=0.9, status='ok', used_fallback=False)
>>> parse_output("**Guess:** Paris\\n**Probability:** 85%")
ParseResult(answer='Paris', verbalized=0.85, status='ok', used_fallback=False)
>>> parse_output("Guess: Paris\\nProbab")
ParseResult(answer='Paris', verbalized=None, status='missing_confidence', used_fallback=False)
>>> parse_output("Guess: Paris\\nProbability: 1e-5")
ParseResult(answer='Paris', verbalized=None, status='unparsed_number', used_fallback=False)
>>> parse_output("Guess: Paris\\nProbability: 0,9", decimal_comma=True).verbalized
0.9
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "DEFAULT_PARSE_POLICY",
    "DROP_REASONS",
    "MAX_PARSE_CHARS",
    "PARSE_POLICIES",
    "STATUSES",
    "Number",
    "ParseResult",
    "apply_parse_policy",
    "drop_reason",
    "LabelledNumber",
    "last_labelled_confidence",
    "parse_number",
    "parse_output",
]

#: Every status :func:`parse_output` can return, then ``unlabelled_confidence`` (set only by
#: :func:`apply_parse_policy` under ``label_only``) and ``reasoning_unterminated`` (a thinking model's reasoning never
#: ended, so there is no answer to parse; protocols/reasoning.py), then the statuses of JSON replies
#: (protocols/json_output.py): ``refusal`` (declined, or no valid option letter), ``unparseable`` (no JSON object with
#: the asked keys) and ``zero_sum`` (option probabilities that sum to 0).
STATUSES = (
    "ok",
    "missing_answer",
    "missing_confidence",
    "missing_both",
    "out_of_range",
    "unparsed_number",
    "empty",
    "unlabelled_confidence",
    "reasoning_unterminated",
    "refusal",
    "unparseable",
    "zero_sum",
)

#: Parse policies (study 000 section 3.3 and Appendix B.1): ``label_or_fallback`` keeps a confidence found by the
#: unlabelled-number fallback (the main analysis); ``label_only`` keeps only confidences after the ``Probability:``
#: label (the 0-100 analysis).
PARSE_POLICIES = ("label_or_fallback", "label_only")

#: The default parse policy (study 000 main analysis).
DEFAULT_PARSE_POLICY = "label_or_fallback"

#: Why a row is dropped: every status except ``ok``.
DROP_REASONS = tuple(s for s in STATUSES if s != "ok")

#: At most this many characters of an output are parsed; the rest is ignored. Outputs are at most ``max_new_tokens``
#: tokens (a few characters each), so a real answer and confidence lie far inside; the cap bounds the time a
#: pathological output can take (linear patterns, about 10 ms per 100,000 characters of the worst inputs tried).
MAX_PARSE_CHARS = 1_000_000


class ParseResult(NamedTuple):
    """Result of :func:`parse_output`.

    Attributes
    ----------
    answer : str or None
        The parsed answer, stripped of surrounding whitespace; None if missing.
    verbalized : float or None
        The stated confidence in [0, 1]; None if missing, unparsed or out of range.
    status : str
        One of :data:`STATUSES`: ``ok`` (both found), ``missing_answer``, ``missing_confidence``, ``missing_both``,
        ``out_of_range`` (a labelled number outside [0, 1]; ``verbalized`` is then None, ``answer`` may be set),
        ``unparsed_number`` (the label is followed by something that starts like a number but is not in the number
        grammar, e.g. ``1e-5``; ``verbalized`` None, ``answer`` may be set), ``empty`` (blank output).
    used_fallback : bool
        True when ``verbalized`` came from the unlabelled-number fallback.
    """

    answer: str | None
    verbalized: float | None
    status: str
    used_fallback: bool


class Number(NamedTuple):
    """A number read by :func:`parse_number`.

    Attributes
    ----------
    value : float
        The number as written, sign included, not scaled (``85%`` -> 85.0); ``inf`` when the digits overflow a float
        (``1`` followed by 400 zeros).
    percent : bool
        Whether a percent sign followed it.
    """

    value: float
    percent: bool


_GRAMMAR = {
    sep: re.compile(
        rf"(?P<num>[+-]?(?:[0-9]+(?:{re.escape(sep)}[0-9]*)?|{re.escape(sep)}[0-9]+))(?:[^\S\n]?(?P<pct>%))?"
    )
    for sep in (".", ",")
}


def parse_number(text: str, *, decimal_comma: bool = False) -> Number | None:
    """The number ``text`` writes in the number grammar (module docstring), or None.

    The whole of ``text`` must be the number (no surrounding whitespace or punctuation; :func:`parse_output` finds
    where a number ends first).

    Parameters
    ----------
    text : str
        A candidate, e.g. ``"0.9"``, ``".5"``, ``"-1"``, ``"85 %"``, ``"0."``.
    decimal_comma : bool, default False
        The decimal separator is ``","`` instead of ``"."`` (``"0,9"`` -> 0.9, and ``"0.9"`` is then not a number).
        Never guessed: a prompt declares it.

    Returns
    -------
    Number or None
        None for anything outside the grammar: exponents, fractions, thousands separators, hexadecimal, inner spaces,
        digits of other scripts, ``inf``/``nan``.

    Examples
    --------
    >>> parse_number("85 %")
    Number(value=85.0, percent=True)
    >>> parse_number("1e-5") is None, parse_number("0,9") is None, parse_number("0,9", decimal_comma=True)
    (True, True, Number(value=0.9, percent=False))
    """
    m = _GRAMMAR["," if decimal_comma else "."].fullmatch(text)
    if m is None:
        return None
    return Number(float(m.group("num").replace(",", ".")), m.group("pct") is not None)


_MD = r"(?:\*\*|__|\*|_)"
_HS = r"[^\S\n]"  # horizontal whitespace (a no-break space included)
_SIGNS = "+\\-\u2212\u2013"  # + - minus-sign en-dash, as a character class body
_PCT = "%\u2030\u066a"  # % per-mille arabic-percent
# marks written inside numbers: separators, fraction, ratio, thousands, exponent, product, ranges, signs
_GLUE = ".,/:'\u2019\\^*\u00d7\u00b7~\u2014\u207a\u207b" + _SIGNS
_PART = rf"[\w{_PCT}]++"
_SEP = (
    rf"(?:[{_GLUE}]++(?=[\w{_PCT}])"  # marks, then a letter or digit: 1e-5, 0,9, 1/2, 1'000, 0.8-0.9, 0.9-ish, 1.%
    rf"|[^\w\s]++(?=\d)"  # any marks, then a digit: 0.9)5, 0.9!5
    # marks and spaces, then a digit: 0 .9, 1 / 2, 0.8 - 0.9, 1 000, 0.9 0.8, 85 % (but "0.9, 0.8": a comma or point
    # then a space ends a number, as in a sentence)
    rf"|(?![.,]{_HS}++\d)(?:{_HS}|[{_GLUE}])++(?=[\d{_PCT}])"
    rf"|{_HS}++[xX]{_HS}++(?=\d))"  # 1 x 10^-5
)
# a token that starts like a number (signs, a point, then a digit of any script) and runs to where it ends
_TOKEN = rf"(?=[{_SIGNS}]{{0,3}}[.,]?\d)[{_SIGNS}]{{0,3}}[.,]?{_PART}(?:{_SEP}{_PART})*+"
# the fallback's tokens: not glued to a letter, digit or mark of a number before them (an underscore,
# ":", "*" and "~" before are fine: "_0.9_", "Confidence:0.3", "**0.9**", "~0.9"; "item_1" is not)
_GLUED_BEFORE = _PCT + ".,/'\u2019\\^\u00d7\u00b7\u2014\u207a\u207b" + _SIGNS
_FALLBACK_TOKEN = re.compile(rf"(?=[{_SIGNS}.,\d])(?<![^\W_])(?<![^\W_]_)(?<![{_GLUED_BEFORE}]){_TOKEN}")
# a token right after a label, past spaces and Markdown emphasis ("Probability: **0.9**")
_LABELLED_TOKEN = re.compile(rf"{_HS}*+{_MD}?{_HS}*+(?P<tok>{_TOKEN})")


class _Span(NamedTuple):
    start: int
    end: int


# emphasis opened just before a label's word, itself not glued to a letter or digit
_OPENER_BEFORE = re.compile(rf"(?<![A-Za-z0-9]){_MD}[ \t]{{0,8}}\Z")
_OPENER_AT = re.compile(rf"(?P<open>{_MD})?[ \t]*+")
_CLOSER_AT = re.compile(rf"{_MD}?[ \t]*+")


class _Label:
    """A label (``Guess:``) matched case-insensitively, optionally in Markdown emphasis.

    Emphasis opened before the word and closed before or after the colon (``**Guess:** x``, ``**Guess**: x``) is part
    of the label; emphasis after the colon without an opener before the word belongs to the answer
    (``Guess: **Paris**`` keeps its asterisks, study 000 Appendix A). The pattern starts at the word (a literal, so
    the search is fast) and every run of spaces in it is possessive, so finding all labels is linear in the text.
    """

    def __init__(self, label: str) -> None:
        word = re.escape(label.rstrip(":").strip())
        self._re = re.compile(rf"{word}(?<![A-Za-z0-9]{word})[ \t]*+(?:{_MD}[ \t]*+)?:[ \t]*+", re.IGNORECASE)

    def _span(self, text: str, m: re.Match[str], opener: int | None = None) -> _Span:
        if opener is None:
            o = _OPENER_BEFORE.search(text, max(0, m.start() - 10), m.start())
            opener = -1 if o is None else o.start()
        if opener < 0:
            return _Span(m.start(), m.end())
        return _Span(opener, _CLOSER_AT.match(text, m.end()).end())

    def search(self, text: str) -> _Span | None:
        m = self._re.search(text)
        return None if m is None else self._span(text, m)

    def ends(self, text: str) -> Iterator[int]:
        """Where each occurrence of the label ends, before any closing emphasis, in order."""
        return (m.end() for m in self._re.finditer(text))

    def match(self, line: str) -> _Span | None:
        """The label at the very start of ``line`` (after an optional opener and spaces)."""
        o = _OPENER_AT.match(line)
        m = self._re.match(line, o.end())
        return None if m is None else self._span(line, m, 0 if o.group("open") else -1)


_GUESS = _Label("Guess:")
_PROB = _Label("Probability:")
_ANSWER_PREFIX = _Label("Answer:")
_ANY_LABEL_LINE = re.compile(
    rf"\s*+(?:[-*>#]++\s++)?{_MD}?\s*+(?:guess|probability|answer|confidence)\s*+(?:{_MD}\s*+)?:", re.IGNORECASE
)


def _clean_answer(text: str) -> str | None:
    s = text.strip()
    # an unbalanced closing bold left by "**Guess: Paris**"
    if s.endswith("**") and s.count("**") == 1:
        s = s[:-2].rstrip()
    return s or None


def _answer_after_label(text: str, label_re: _Label, stop_re: _Label) -> tuple[bool, str | None]:
    m = label_re.search(text)
    if m is None:
        return False, None
    rest = text[m.end :]
    first, _, tail = rest.partition("\n")
    stop = stop_re.search(first)  # "Guess: Paris Probability: 0.9" on one line
    if stop is not None:
        first = first[: stop.start]
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
            ans = _clean_answer(line.lstrip()[m.end :])
            if ans is not None:
                return ans
            continue
        if _ANY_LABEL_LINE.match(line):
            continue
        return _clean_answer(line)
    return None


class _Read(NamedTuple):
    """A token read on a scale: ``value`` in [0, 1] when ``status`` is ``ok``, else None."""

    value: float | None
    status: str  # ok, out_of_range, unparsed_number


def _read_token(token: str, percent_scale: bool, decimal_comma: bool) -> _Read:
    # a token never ends in a mark; it may end in spaces (before a mark that ends it) or "_" (a closing __)
    n = parse_number(token.rstrip().rstrip("_"), decimal_comma=decimal_comma)
    if n is None:
        return _Read(None, "unparsed_number")
    v = n.value / 100.0 if (percent_scale or n.percent) else n.value
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        return _Read(None, "out_of_range")
    return _Read(v + 0.0, "ok")  # + 0.0: -0 reads as 0.0


def _check_label(name: str, label: object) -> str:
    if not isinstance(label, str) or not label.rstrip(":").strip():
        raise ValueError(f"{name}={label!r}: must be a non-empty string such as 'Guess:'")
    return label


def parse_output(
    text: str | None,
    *,
    answer_label: str = "Guess:",
    confidence_label: str = "Probability:",
    scale: str | None = "unit",
    decimal_comma: bool = False,
    max_chars: int = MAX_PARSE_CHARS,
) -> ParseResult:
    """Parse a generated output into answer, stated confidence and a status.

    Never raises for any ``text`` (None and non-text included): every output gives a :class:`ParseResult` with a
    status from :data:`STATUSES`. There is no catch-all: an interrupt or a timeout raised while parsing propagates.

    Parameters
    ----------
    text : str
        The generated text (decoded, special tokens removed).
    answer_label, confidence_label : str
        Labels of the confidence prompt (study 000: ``Guess:`` and ``Probability:``). Matched case-insensitively,
        optionally in Markdown bold.
    scale : {"unit", "percent"} or None, default "unit"
        The prompt's declared scale (:attr:`Prompt.scale`; None reads as ``"unit"``). ``"unit"``: a number in [0, 1]
        is the probability, a number with ``%`` is divided by 100. ``"percent"`` (study 000 Appendix B.1): every
        number is a percentage, divided by 100 whether or not it carries ``%`` (so ``Probability: 85`` -> 0.85 and
        ``Probability: 0.85`` -> 0.0085, read literally); the fallback takes the first standalone number in [0, 100].
        An unknown scale gives status ``missing_both`` (never raises).
    decimal_comma : bool, default False
        The prompt's numbers use a decimal comma (``0,9``); ``.`` is then not a decimal separator. Off by default and
        never guessed (:func:`parse_number`).
    max_chars : int, default :data:`MAX_PARSE_CHARS`
        Only the first ``max_chars`` characters are parsed.

    Returns
    -------
    ParseResult
        ``verbalized`` is in [0, 1] or None. The first label occurrence wins. A labelled number outside the scale
        (``Probability: 85`` on the unit scale, ``Probability: 150%``, ``-0.2``) gives status ``out_of_range``; a
        labelled token that starts like a number but is not in the number grammar (``1e-5``, ``1/2``, ``0,9``) gives
        ``unparsed_number``; both take precedence over a missing answer. A label without anything number-like after it
        counts as no label, and the fallback applies.

    Raises
    ------
    ValueError
        If a label is not a non-empty string, or ``max_chars`` is not a positive int.
    """
    _check_label("answer_label", answer_label)
    _check_label("confidence_label", confidence_label)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars={max_chars!r}: must be a positive int")
    scale = scale or "unit"
    if scale not in ("unit", "percent"):
        return ParseResult(None, None, "missing_both", False)
    if not isinstance(text, str) or not text.strip():
        return ParseResult(None, None, "empty", False)
    text = text[:max_chars].replace("\r\n", "\n").replace("\r", "\n")
    guess_re = _GUESS if answer_label == "Guess:" else _Label(answer_label)
    prob_re = _PROB if confidence_label == "Probability:" else _Label(confidence_label)

    has_label, answer = _answer_after_label(text, guess_re, prob_re)
    if not has_label:
        answer = _answer_without_label(text)
    conf, used_fallback = _confidence(text, prob_re, scale == "percent", bool(decimal_comma))

    if conf.status != "ok" and conf.status != "missing":
        status = conf.status  # out_of_range, unparsed_number
    elif answer is None and conf.value is None:
        status = "missing_both"
    elif answer is None:
        status = "missing_answer"
    elif conf.value is None:
        status = "missing_confidence"
    else:
        status = "ok"
    return ParseResult(answer, conf.value, status, used_fallback)


def _confidence(text: str, prob_re: _Label, percent_scale: bool, decimal_comma: bool) -> tuple[_Read, bool]:
    """The labelled confidence (the first label followed by a number-like token), else the fallback's."""
    for end in prob_re.ends(text):
        t = _LABELLED_TOKEN.match(text, end)
        if t is not None:
            return _read_token(t.group("tok"), percent_scale, decimal_comma), False
    for t in _FALLBACK_TOKEN.finditer(text):
        r = _read_token(t.group(), percent_scale, decimal_comma)
        if r.status == "ok":
            return r, True
    return _Read(None, "missing"), False


# a confidence after its label, optionally inside \boxed{} or $...$ ("Probability: \boxed{0.9}")
_BOXED_CONF_TOKEN = re.compile(rf"{_HS}*+{_MD}?{_HS}*+(?:\$?\\boxed{_HS}*+\{{{_HS}*+|\$)?(?P<tok>{_TOKEN})")


class LabelledNumber(NamedTuple):
    """A confidence read after its label by :func:`last_labelled_confidence`.

    ``value`` is in [0, 1] when ``status`` is ``ok``, else None (``out_of_range``, ``unparsed_number``); ``start`` and
    ``end`` delimit the label and its number in the text.
    """

    value: float | None
    status: str
    start: int
    end: int


def last_labelled_confidence(text: str, label: str = "Probability:", *, scale: str | None = "unit",
                             decimal_comma: bool = False) -> LabelledNumber | None:
    r"""The **last** occurrence of ``label`` followed by a number, read like :func:`parse_output`'s labelled confidence.

    The number may sit inside ``\boxed{...}`` or after a ``$`` (``Probability: \boxed{0.9}``); labels match as in
    :func:`parse_output` (case, Markdown emphasis). None when no occurrence of the label is followed by something
    number-like. Used by replies whose confidence ends a worked solution (``output: boxed``,
    :func:`confgrid.protocols.numeric.parse_boxed_output`).

    Raises ``ValueError`` if ``label`` is not a non-empty string.
    """
    _check_label("label", label)
    lab = _PROB if label == "Probability:" else _Label(label)
    for m in reversed(list(lab._re.finditer(text))):
        t = _BOXED_CONF_TOKEN.match(text, m.end())
        if t is not None:
            r = _read_token(t.group("tok"), scale == "percent", bool(decimal_comma))
            return LabelledNumber(r.value, r.status, m.start(), t.end())
    return None


def apply_parse_policy(result: ParseResult, policy: str = DEFAULT_PARSE_POLICY) -> ParseResult:
    """``result`` under a parse policy (:data:`PARSE_POLICIES`).

    ``label_or_fallback`` returns ``result`` unchanged. ``label_only`` drops a confidence that came from the fallback:
    ``verbalized`` becomes None, ``used_fallback`` stays True (the record of where the number came from), and the
    status becomes ``unlabelled_confidence`` when the row has an answer, ``missing_both`` when it has none.

    Raises ``ValueError`` if ``policy`` is not one of :data:`PARSE_POLICIES`.

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

    Raises ``ValueError`` if ``policy`` is not one of :data:`PARSE_POLICIES`.
    """
    r = apply_parse_policy(result, policy)
    return None if r.status == "ok" else r.status
