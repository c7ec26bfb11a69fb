r"""The final number of a worked solution, and numeric comparison with a gold answer (study 004, GSM8K).

The ``numeric`` correctness rule (protocols/correctness.py) and the reply of a prompt with ``output: boxed``
(:func:`parse_boxed_output`, below) both read a model's number with :func:`final_number`:

1. the **last closed** ``\boxed{...}`` of the text, braces balanced (the box that closes last; an unclosed ``\boxed{``
   of a truncated output is not a box). If there is one, the number is the last number token inside it, and nothing
   outside it is read: ``\boxed{}`` or ``\boxed{\text{none}}`` has no number, even if the text before it has some.
2. otherwise the **last number token** of the whole text.

Number tokens (:data:`NUMBER_GRAMMAR`)::

    token    = [sign] ["$" | "\$"] (digits ["." 0-9+] | "." 0-9+) ["%" | "\%"]
    sign     = "+" | "-" | U+2212 (minus sign)
    digits   = 0-9+  |  1-3 digits ("," 3 digits)+        (thousands separators: 1,234,567)
    fraction = token "/" token  |  [sign] "\frac" | "\dfrac" | "\tfrac" "{" token "}" "{" token "}"
                                                           (only inside \boxed{}; a zero denominator: no number)

A token does not start right after a letter, digit, ``_`` or ``.`` (``x2``, ``item_3`` and the ``5`` of ``1e5`` are
not numbers; ``3-4`` reads 3 and 4, never -4). A comma followed by exactly three digits and no fourth is a thousands
separator (``1,234`` is 1234; ``3,4,5`` is three numbers; ``1,2345`` reads 1 and 2345); the decimal separator is
always ``.``. ``$`` and ``%`` change nothing (``25%`` is 25, not 0.25: GSM8K states percentages as plain numbers).
Inside ``\boxed{}``, LaTeX spacing (``\,``, ``\!``, ``\;``, ``\:``, ``\ ``) is removed and ``{,}`` is a comma, so
``\boxed{1{,}234}`` and ``\boxed{1\,234}`` are 1234. Not numbers: exponents (``1e5`` reads 1), mixed numbers
(``1\frac{1}{2}`` reads 1/2), powers (``2^{10}`` reads 10), words (``eighteen``), digits of other scripts. At most
:data:`~confgrid.protocols.parsing.MAX_PARSE_CHARS` characters are read.

Comparison (:func:`numbers_match`): ``|a - g| <= 1e-6 * max(1, |g|)`` (study 004 GSM8K convention: relative tolerance
1e-6, absolute 1e-6 below 1).

Examples
--------
>>> final_number(r"So she makes 9 * 2 = 18 dollars. \boxed{18}").value
18.0
>>> final_number("The total is $1,234.50, not 1,000.").value
1000.0
>>> final_number(r"\boxed{\frac{3}{4}}").value, final_number(r"\boxed{-3/4}").value
(0.75, -0.75)
>>> final_number(r"I computed 12 but \boxed{} is empty").source
'boxed_no_number'
>>> format_number(1234.5), format_number(18.0), format_number(-0.0)
('1234.5', '18', '0')
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np

from confgrid.protocols.parsing import MAX_PARSE_CHARS, ParseResult, last_labelled_confidence

__all__ = [
    "NUMBER_GRAMMAR",
    "NUMERIC_TOLERANCE",
    "FinalNumber",
    "final_number",
    "format_number",
    "gold_number",
    "numbers_match",
    "parse_boxed_output",
]

#: Relative (and, below 1, absolute) tolerance of :func:`numbers_match` (study 004 GSM8K convention).
NUMERIC_TOLERANCE = 1e-6

_SIGN = "[-+\u2212]"
# digits with thousands separators (a comma and exactly 3 digits, no fourth), or plain digits, then decimals
_DIGITS = r"(?:[0-9]{1,3}(?:,[0-9]{3})++(?![0-9])|[0-9]++)(?:\.[0-9]++)?|\.[0-9]++"
_START = r"(?<![\w.])"  # not glued to a letter, digit, "_" or "." before it
_NUM = rf"(?P<{{g}}sign>{_SIGN})?(?:\\?\$)?(?P<{{g}}num>{_DIGITS})(?:\\?%)?"


def _num(group: str) -> str:
    return _NUM.replace("{g}", group)


#: The number tokens, as a regular expression (module docstring).
NUMBER_GRAMMAR = _START + _num("")

_PLAIN = re.compile(NUMBER_GRAMMAR)
_HS = r"[^\S\n]*+"
# inside \boxed{}: \frac{a}{b}, a / b, or a plain number, whichever starts first (finditer: the fraction wins)
_IN_BOX = re.compile(
    rf"(?P<fsign>{_SIGN})?{_HS}\\[dt]?frac{_HS}\{{{_HS}{_num('fa')}{_HS}\}}{_HS}\{{{_HS}{_num('fb')}{_HS}\}}"
    rf"|{_START}{_num('sa')}{_HS}/{_HS}{_num('sb')}(?![0-9])"
    rf"|{_START}{_num('p')}"
)
_BOX_TOKENS = re.compile(r"\\boxed[^\S\n]*+\{|[{}]")
_LATEX_SPACE = re.compile(r"\\[,!;: ]")


class FinalNumber(NamedTuple):
    """The number :func:`final_number` read.

    Attributes
    ----------
    value : float or None
        The number (finite), or None when there is none.
    text : str or None
        The token it was read from (``"1,234"``, ``"\\frac{3}{4}"``), or None.
    source : str
        ``boxed`` (from the last closed ``\\boxed{}``), ``boxed_no_number`` (that box holds no number: value None),
        ``last_number`` (no box: the text's last number token) or ``none`` (no box and no number).
    """

    value: float | None
    text: str | None
    source: str


def _signed(m: re.Match[str], g: str) -> float:
    v = float(m.group(f"{g}num").replace(",", ""))
    return -v if m.group(f"{g}sign") in ("-", "\u2212") else v


def _box_value(m: re.Match[str]) -> float | None:
    """The value of one token of a box's content (a fraction or a plain number); None for a zero denominator."""
    if m.group("pnum") is not None:
        return _signed(m, "p")
    if m.group("fanum") is not None:
        a, b = _signed(m, "fa"), _signed(m, "fb")
        if m.group("fsign") in ("-", "\u2212"):
            a = -a
    else:
        a, b = _signed(m, "sa"), _signed(m, "sb")
    return a / b if b != 0 else None


def _last_box(text: str) -> str | None:
    """The content of the ``\\boxed{...}`` that closes last (braces balanced), or None if no box closes."""
    stack: list[int] = []  # content start of an open box, or -1 for a plain brace
    last = None
    for m in _BOX_TOKENS.finditer(text):
        tok = m.group()
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0:
                    last = (start, m.start())
        elif tok == "{":
            stack.append(-1)
        else:
            stack.append(m.end())
    return None if last is None else text[last[0]: last[1]]


def final_number(text: str | None) -> FinalNumber:
    r"""The model's final number: the last number in the last ``\boxed{}``, else the last number of the text.

    Rules and grammar in the module docstring. Never raises. ``text`` is a model's output (after its reasoning block
    is removed) or a parsed answer; the result's ``value`` is a finite float or None (also for a number too large for
    a float, and for a fraction with a zero denominator).

    Examples
    --------
    >>> final_number(r"\boxed{5} at first, then \boxed{7}").value
    7.0
    >>> final_number("no digits here")
    FinalNumber(value=None, text=None, source='none')
    """
    if not isinstance(text, str):
        return FinalNumber(None, None, "none")
    text = text[:MAX_PARSE_CHARS]
    box = _last_box(text)
    if box is not None:
        content = _LATEX_SPACE.sub("", box).replace("{,}", ",")
        matches = list(_IN_BOX.finditer(content))
        if not matches:
            return FinalNumber(None, None, "boxed_no_number")
        m = matches[-1]
        v = _box_value(m)
        ok = v is not None and math.isfinite(v)
        return FinalNumber(v + 0.0 if ok else None, m.group().strip(), "boxed" if ok else "boxed_no_number")
    m = None
    for m in _PLAIN.finditer(text):
        pass
    if m is None:
        return FinalNumber(None, None, "none")
    v = _signed(m, "")
    return FinalNumber(v + 0.0, m.group(), "last_number") if math.isfinite(v) else FinalNumber(None, None, "none")


_GOLD = re.compile(rf"{_HS}(?:{_IN_BOX.pattern}){_HS}")


def gold_number(text: str | None) -> float | None:
    """A gold answer as a number: the whole string (spaces around it aside) must be one token or fraction.

    ``"18"``, ``"1,450,000"``, ``"-3"``, ``"$5.50"``, ``"3/4"`` are numbers; ``"5 km"``, ``"12 September 1988"``,
    ``""`` are not (None), so a gold answer in words never matches a number by accident.

    Examples
    --------
    >>> gold_number("1,450,000"), gold_number("3/4"), gold_number("5 km")
    (1450000.0, 0.75, None)
    """
    if not isinstance(text, str):
        return None
    m = _GOLD.fullmatch(text)
    if m is None:
        return None
    v = _box_value(m)
    return v + 0.0 if v is not None and math.isfinite(v) else None


def numbers_match(answer: float, gold: float, tolerance: float = NUMERIC_TOLERANCE) -> bool:
    """Whether ``|answer - gold| <= tolerance * max(1, |gold|)`` (inclusive; absolute for golds within (-1, 1)).

    Examples
    --------
    >>> numbers_match(1000.0009, 1000.0), numbers_match(1000.0011, 1000.0)
    (True, False)
    """
    return abs(answer - gold) <= tolerance * max(1.0, abs(gold))


def format_number(value: float) -> str:
    """``value`` written positionally, shortest round-trip digits, no exponent, no trailing ``.0`` (``-0`` is ``0``).

    :func:`final_number` reads the result back as the same float. Raises ``ValueError`` if ``value`` is not finite.
    """
    if not math.isfinite(value):
        raise ValueError(f"value={value!r}: must be a finite number")
    return np.format_float_positional(float(value) + 0.0, trim="-")


def parse_boxed_output(
    text: str | None,
    *,
    confidence_label: str | None = None,
    scale: str | None = "unit",
    decimal_comma: bool = False,
    max_chars: int = MAX_PARSE_CHARS,
) -> ParseResult:
    r"""A worked solution whose final number is in ``\boxed{}`` (prompt ``output: boxed``; study 004, GSM8K).

    Confidence (only with ``confidence_label``, e.g. ``"Probability:"``): the **last** occurrence of the label
    followed by a number, optionally inside ``\boxed{}`` or after ``$``
    (:func:`~confgrid.protocols.parsing.last_labelled_confidence`: the prompt's ``scale``, ``%``, ``decimal_comma``;
    statuses ``out_of_range`` and ``unparsed_number`` as for labelled replies). There is no unlabelled fallback: a
    worked solution is full of numbers in [0, 1]. Answer: the label and its number are cut out of the text and the
    rest is read by :func:`final_number`; the answer is that number written by :func:`format_number` (``"1234.5"``,
    ``"-3"``, ``"0.75"`` for ``\boxed{3/4}``), so every correctness rule, the token score and the agreement of sampled
    answers see the number, not the solution (``\boxed{18.00}`` and ``$18`` agree with ``18``). ``decimal_comma``
    applies to the confidence only (the answer's decimal separator is ``.``); ``scale`` None reads as ``"unit"``. Only
    the first ``max_chars`` characters of ``text`` (the reply, its reasoning block removed) are read.

    Returns
    -------
    ParseResult
        ``answer`` a number string or None; ``verbalized`` in [0, 1] or None. Status ``empty`` (blank),
        ``missing_answer`` (no number, or a box without one, but a confidence), ``missing_confidence`` (a number but
        no labelled confidence, always so when none is asked), ``missing_both``, ``out_of_range`` /
        ``unparsed_number`` (the labelled confidence; they take precedence), or ``ok``. ``used_fallback`` is always
        False. Never raises for any ``text``.

    Raises
    ------
    ValueError
        If ``confidence_label`` is given but empty, or ``max_chars`` is not a positive int.

    Examples
    --------
    >>> parse_boxed_output("9 * 2 = 18, so \\boxed{18}\nProbability: 0.9", confidence_label="Probability:")
    ParseResult(answer='18', verbalized=0.9, status='ok', used_fallback=False)
    >>> parse_boxed_output("I cannot solve this.").status
    'missing_both'
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars={max_chars!r}: must be a positive int")
    if confidence_label is not None and (not isinstance(confidence_label, str) or not confidence_label.strip()):
        raise ValueError(f"confidence_label={confidence_label!r}: must be a non-empty string such as 'Probability:'")
    if not isinstance(text, str) or not text.strip():
        return ParseResult(None, None, "empty", False)
    text = text[:max_chars].replace("\r\n", "\n").replace("\r", "\n")
    conf = last_labelled_confidence(text, confidence_label, scale=scale, decimal_comma=decimal_comma) \
        if confidence_label else None
    rest = text if conf is None else text[: conf.start] + text[conf.end:]
    n = final_number(rest)
    answer = format_number(n.value) if n.value is not None else None
    value = conf.value if conf is not None else None
    if conf is not None and conf.status != "ok":
        status = conf.status
    elif answer is None:
        status = "missing_both" if value is None else "missing_answer"
    else:
        status = "ok" if value is not None else "missing_confidence"
    return ParseResult(answer, value, status, False)
