"""Structured (JSON) model outputs: an answer with a probability, or a probability per option.

Pure functions; nothing here raises for any model text: what cannot be read is a status. Definitions:

* JSON answer and probability (study 003 section 3.2 and Appendix C): the reply holds
  ``{"answer": <letter>, "probability": <0-100>}``; :func:`parse_json_answer` returns the answer, the probability on
  the prompt's scale mapped to [0, 1], and a status that separates ``ok``, a ``refusal`` (the model declines, or
  answers without a valid option letter) and ``unparseable`` (no JSON object with the answer key can be read).
* Option probabilities (study 002 section 3, Appendix F.2-F.4): a probability per option letter;
  :func:`parse_option_probabilities` normalizes them to sum to 1 (a reply whose values sum to 0 is the status
  ``zero_sum``, not a division), and the favoured options are the argmax set (ties kept).
* Letter token probabilities (study 002 Appendix E.1): :func:`letter_distribution` restricts a next-token distribution
  to the option letters and renormalizes; a letter absent from the returned top k counts as 0 and is counted (E.3).
* Tie scoring (study 002 section 3, "proportional scoring for ties"): :func:`favoured_score`, 1/m when the gold letter
  is among the m favoured options, else 0.
* The chance policy of refusals (study 003 section 3.2): :func:`chance_answer`, a seeded uniformly random letter
  scored with confidence 1/k.

Reading rules (each a decision a report should state, docs/studies/003.md):

* Where the JSON is: the text may wrap it in a code fence, put prose before and after it and hold several objects;
  every top-level ``{...}`` is tried (a linear scan that respects quoted strings) and the **last** one that parses and
  holds the key(s) wins (earlier ones are drafts or the prompt's example echoed). An object parses with
  :func:`json.loads` or, failing that, as a Python literal (:func:`ast.literal_eval`: single quotes, ``True``).
* Keys match case-insensitively after stripping spaces (``"Answer"``, ``"answer"``, ``" ANSWER "``); the prompt
  declares which keys it asked for.
* A probability is a JSON number or a string in the number grammar of protocols/parsing.py (``"75"``, ``"75%"``,
  ``"0.75"``); a trailing ``%`` always means percent; otherwise the prompt's scale applies (``percent``: divided by
  100; so ``0.75`` on a 0-100 prompt is 0.0075, not 0.75: the scale is never guessed). Booleans are not numbers.
* A refusal: the answer value is missing, null, empty or not an option letter
  (:func:`confgrid.protocols.mc.parse_letter`, restricted to the item's options), or no JSON object holds the answer
  key and the text declines (:data:`DECLINE`); a JSON object without the answer key and no declining text is
  ``unparseable``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from confgrid.protocols.mc import LETTERS, parse_letter
from confgrid.protocols.parsing import MAX_PARSE_CHARS, parse_number

__all__ = [
    "JSON_STATUSES",
    "OPTION_STATUSES",
    "DECLINE",
    "JsonAnswer",
    "OptionProbabilities",
    "LetterDistribution",
    "json_objects",
    "find_json",
    "parse_json_answer",
    "parse_option_probabilities",
    "letter_distribution",
    "favoured_letters",
    "favoured_score",
    "chance_answer",
    "TIE_SEPARATOR",
]

#: Statuses of :func:`parse_json_answer`.
JSON_STATUSES = ("ok", "refusal", "unparseable", "missing_confidence", "out_of_range", "unparsed_number", "empty")
#: Statuses of :func:`parse_option_probabilities`.
OPTION_STATUSES = ("ok", "refusal", "unparseable", "zero_sum", "out_of_range", "unparsed_number", "empty")
#: Phrases that make a reply without a readable answer a refusal rather than unparseable (case-insensitive).
DECLINE = re.compile(r"\b(?:i\s+(?:can\s*not|can't|cannot|won't|will\s+not|am\s+unable|'m\s+unable|am\s+not\s+able|"
                     r"'m\s+not\s+able|must\s+decline|decline|refuse)|i'm\s+sorry|unable\s+to\s+(?:answer|provide|"
                     r"determine|help)|not\s+able\s+to\s+(?:answer|provide|determine))", re.IGNORECASE)
#: Joins the letters of tied favoured options in a parsed answer (``"A|C"``), read by the rule ``mc_favoured``.
TIE_SEPARATOR = "|"

_FENCE = re.compile(r"```[A-Za-z0-9_-]*+")
#: An object longer than this is not tried (a bound on the literal parser's time and recursion).
_MAX_OBJECT_CHARS = 100_000
_REL_TIE = 1e-12


class JsonAnswer(NamedTuple):
    """What :func:`parse_json_answer` read.

    Attributes
    ----------
    answer : str or None
        The answer: an option letter (upper case) when ``n_options`` was given, else the answer value as text; None
        when there is none.
    probability : float or None
        In [0, 1]; None when missing, not a number or out of range.
    status : str
        One of :data:`JSON_STATUSES`.
    """

    answer: str | None
    probability: float | None
    status: str


class OptionProbabilities(NamedTuple):
    """What :func:`parse_option_probabilities` read.

    Attributes
    ----------
    probabilities : dict of str to float
        Option letter -> normalized probability (sums to 1), every option of the item; empty unless ``status`` is
        ``ok``.
    favoured : tuple of str
        The letters with the largest probability (several on a tie), in letter order.
    confidence : float or None
        The favoured options' (common) probability, in [0, 1].
    status : str
        One of :data:`OPTION_STATUSES`.
    n_missing : int
        Options the reply gave no probability for (counted as 0).
    raw_sum : float or None
        Sum of the values as stated, before normalization (on the stated scale).
    """

    probabilities: dict[str, float]
    favoured: tuple[str, ...]
    confidence: float | None
    status: str
    n_missing: int = 0
    raw_sum: float | None = None


class LetterDistribution(NamedTuple):
    """What :func:`letter_distribution` computed.

    Attributes
    ----------
    probabilities : dict of str to float
        Letter -> probability renormalized over the option letters (sums to 1); empty when every letter is absent.
    favoured : tuple of str
        Argmax letters (several on a tie).
    confidence : float or None
        The favoured letters' probability, in [0, 1]; None when all are absent.
    status : str
        ``ok`` or ``all_absent``.
    n_absent : int
        Option letters not in the returned top k (counted as probability 0).
    mass : float
        Total (unnormalized) probability of the option letters in [0, 1].
    """

    probabilities: dict[str, float]
    favoured: tuple[str, ...]
    confidence: float | None
    status: str
    n_absent: int
    mass: float


# ----------------------------------------------------------------------------- finding the JSON


def json_objects(text: str) -> Iterator[str]:
    """Every top-level ``{...}`` span of ``text``, in order (code fences removed first).

    One linear scan: braces inside single- or double-quoted strings (with backslash escapes) do not count; an
    unbalanced ``{`` at the end yields nothing. At most :data:`~confgrid.protocols.parsing.MAX_PARSE_CHARS` characters
    are read.
    """
    s = _FENCE.sub(" ", text[:MAX_PARSE_CHARS])
    depth, start, quote, escaped = 0, -1, "", False
    for i, ch in enumerate(s):
        if depth == 0:
            if ch == "{":
                depth, start, quote = 1, i, ""
            continue
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            # an apostrophe inside a bare word (don't) is not a quote
            if ch == "'" and i > 0 and s[i - 1].isalnum() and i + 1 < len(s) and s[i + 1].isalnum():
                continue
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                yield s[start:i + 1]


def _load(obj: str) -> dict[str, Any] | None:
    if len(obj) > _MAX_OBJECT_CHARS:
        return None
    try:
        value = json.loads(obj)
    except ValueError:
        try:
            with warnings.catch_warnings():  # a reply like {"a": 0.9.5} is a SyntaxWarning, not ours to print
                warnings.simplefilter("ignore", SyntaxWarning)
                value = ast.literal_eval(obj)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _norm_key(key: object) -> str:
    return str(key).strip().lower()


def find_json(text: str | None, keys: Sequence[str]) -> dict[str, Any] | None:
    """The last JSON object of ``text`` holding at least one of ``keys``, with its keys normalized, or None.

    Keys match case-insensitively, spaces stripped; the returned object has lower-cased, stripped keys (the first of
    duplicate keys after normalization wins).
    """
    if not isinstance(text, str) or "{" not in text:
        return None
    wanted = {_norm_key(k) for k in keys}
    found = None
    for obj in json_objects(text):
        d = _load(obj)
        if d is None:
            continue
        norm: dict[str, Any] = {}
        for k, v in d.items():
            norm.setdefault(_norm_key(k), v)
        if wanted & norm.keys():
            found = norm
    return found


# ----------------------------------------------------------------------------- values


class _Prob(NamedTuple):
    value: float | None
    status: str  # ok, missing, out_of_range, unparsed_number


def _number(value: Any) -> tuple[float | None, bool, str]:
    """(value as written, percent sign?, status) of a JSON number or number string."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, False, "missing"
    if isinstance(value, bool):
        return None, False, "unparsed_number"
    if isinstance(value, (int, float)):
        x, pct = float(value), False
    elif isinstance(value, str):
        n = parse_number(value.strip())
        if n is None:
            return None, False, "unparsed_number"
        x, pct = n.value, n.percent
    else:
        return None, False, "unparsed_number"
    return (x, pct, "ok") if math.isfinite(x) else (None, False, "unparsed_number")


def _probability(value: Any, scale: str) -> _Prob:
    """A stated probability on ``scale`` ("unit" or "percent") mapped to [0, 1]; a ``%`` sign means percent."""
    x, pct, status = _number(value)
    if status != "ok":
        return _Prob(None, status)
    if pct or scale == "percent":
        x /= 100.0
    return _Prob(x, "ok") if 0.0 <= x <= 1.0 else _Prob(None, "out_of_range")


def _raw_value(value: Any) -> _Prob:
    """A per-option value as stated (normalization makes the scale irrelevant); must be >= 0."""
    x, _pct, status = _number(value)
    if status != "ok":
        return _Prob(None, status)
    return _Prob(x, "ok") if x >= 0.0 else _Prob(None, "out_of_range")


def _answer_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    s = str(value).strip()
    return s or None


# ----------------------------------------------------------------------------- parsers


def parse_json_answer(text: str | None, *, answer_key: str = "answer", confidence_key: str = "probability",
                      scale: str = "percent", n_options: int | None = None) -> JsonAnswer:
    """The answer and stated probability of a JSON reply (study 003 section 3.2, Appendix C).

    Parameters
    ----------
    text : str or None
        The model's reply (reasoning already removed).
    answer_key, confidence_key : str
        The keys the prompt asked for (matched case-insensitively).
    scale : {"percent", "unit"}
        Scale of the stated probability: 0-100 (divided by 100) or 0-1.
    n_options : int or None
        Number of lettered options of the item: the answer must be one of their letters (else ``refusal``). None: the
        answer is free text (e.g. an age, ``"True"``) and any non-empty value is an answer.

    Returns
    -------
    JsonAnswer
        ``status``: ``ok``; ``refusal`` (declined, or no valid letter; the probability is still read when present);
        ``unparseable``; ``missing_confidence`` / ``out_of_range`` / ``unparsed_number`` (an answer without a usable
        probability); ``empty`` (blank reply).

    Raises
    ------
    ValueError
        If ``scale`` is not ``percent`` or ``unit`` (a protocol error, not a model output).

    Examples
    --------
    >>> parse_json_answer('```json\\n{"answer": "B", "probability": 80}\\n```', n_options=4)
    JsonAnswer(answer='B', probability=0.8, status='ok')
    >>> parse_json_answer("{'answer': 'E', 'probability': '60'}", n_options=4).status
    'refusal'
    """
    if scale not in ("percent", "unit"):
        raise ValueError(f"scale={scale!r}; allowed: 'percent' (0-100) or 'unit' (0-1)")
    if not isinstance(text, str) or not text.strip():
        return JsonAnswer(None, None, "empty")
    ak, ck = _norm_key(answer_key), _norm_key(confidence_key)
    obj = find_json(text, (answer_key,))
    if obj is None:
        return JsonAnswer(None, None, "refusal" if DECLINE.search(text[:MAX_PARSE_CHARS]) else "unparseable")
    prob = _probability(obj.get(ck), scale)
    raw = _answer_text(obj.get(ak))
    answer = raw if n_options is None else parse_letter(raw, n_options)
    if answer is None:
        return JsonAnswer(None, prob.value, "refusal")
    if prob.status != "ok":
        return JsonAnswer(answer, None, "missing_confidence" if prob.status == "missing" else prob.status)
    return JsonAnswer(answer, prob.value, "ok")


def _argmax(probs: Mapping[str, float]) -> tuple[str, ...]:
    top = max(probs.values())
    return tuple(k for k, v in probs.items() if v >= top - _REL_TIE * max(top, 1e-300))


def parse_option_probabilities(text: str | None, n_options: int) -> OptionProbabilities:
    """A probability per option from a JSON reply, normalized (study 002 section 3, Appendix F.2).

    Parameters
    ----------
    text : str or None
        The reply; the object's keys are the option letters (any case). Values are numbers or number strings, on [0,
        1] or 0-100 (normalization makes the scale irrelevant; a value above 1 is read as stated).
    n_options : int
        Options of the item (>= 1); letters ``A``.. of that many.

    Returns
    -------
    OptionProbabilities
        ``ok`` with normalized probabilities; ``unparseable`` (no object with any option letter; ``refusal`` when the
        text declines); ``zero_sum`` (every value 0); ``out_of_range`` (a negative value); ``unparsed_number`` (a
        value that is not a number). A letter the object lacks counts as 0 (``n_missing``).

    Raises
    ------
    ValueError
        If ``n_options`` is not an integer in [1, 26].

    Examples
    --------
    >>> r = parse_option_probabilities('{"A": 0.1, "B": 0.6, "C": 0.2, "D": 0.1}', 4)
    >>> r.favoured, round(r.confidence, 6)
    (('B',), 0.6)
    """
    if isinstance(n_options, bool) or not isinstance(n_options, int) or not 1 <= n_options <= len(LETTERS):
        raise ValueError(f"n_options={n_options!r}; allowed: an integer from 1 to {len(LETTERS)}")
    letters = LETTERS[:n_options]
    if not isinstance(text, str) or not text.strip():
        return OptionProbabilities({}, (), None, "empty")
    obj = find_json(text, letters)
    if obj is None:
        status = "refusal" if DECLINE.search(text[:MAX_PARSE_CHARS]) else "unparseable"
        return OptionProbabilities({}, (), None, status, n_options)
    values: dict[str, float] = {}
    missing = 0
    for letter in letters:
        v = _raw_value(obj.get(letter.lower()))
        if v.status == "missing":
            missing += 1
            values[letter] = 0.0
        elif v.status != "ok":
            return OptionProbabilities({}, (), None, v.status, missing)
        else:
            values[letter] = v.value
    total = math.fsum(values.values())
    if total <= 0.0:
        return OptionProbabilities({}, (), None, "zero_sum", missing, total)
    probs = {k: v / total for k, v in values.items()}
    fav = _argmax(probs)
    return OptionProbabilities(probs, fav, probs[fav[0]], "ok", missing, total)


def letter_distribution(letter_probs: Mapping[str, float | None]) -> LetterDistribution:
    """Next-token probabilities of the option letters, renormalized over them (study 002 Appendix E.1).

    ``P_i = p_i / sum_{j in T} p_j`` with ``p_i = exp(l_i)`` over the option letters ``T``; a letter absent from the
    returned top k has ``p_i = 0`` (Appendix E.3) and is counted in ``n_absent``.

    Parameters
    ----------
    letter_probs : mapping of str to float or None
        Option letter -> its probability in the returned distribution (in [0, 1], variants merged,
        protocols/methods.py ``candidate_probability``), None when absent. Its keys are the item's option letters, in
        order.

    Returns
    -------
    LetterDistribution
        ``all_absent`` (no number) when every letter is absent or has probability 0.

    Raises
    ------
    ValueError
        If a probability lies outside [0, 1] or is not finite.
    """
    probs: dict[str, float] = {}
    absent = 0
    for k, p in letter_probs.items():
        if p is None:
            absent += 1
            probs[k] = 0.0
            continue
        p = float(p)
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"letter_probs[{k!r}]={p!r}; allowed: a probability in [0, 1] or None (absent)")
        probs[k] = p
    mass = math.fsum(probs.values())
    if mass <= 0.0:
        return LetterDistribution({}, (), None, "all_absent", absent, 0.0)
    norm = {k: v / mass for k, v in probs.items()}
    fav = _argmax(norm)
    return LetterDistribution(norm, fav, norm[fav[0]], "ok", absent, min(mass, 1.0))


def favoured_letters(answer: str | None) -> tuple[str, ...]:
    """The letters of a parsed favoured-option answer (``"B"`` or a tie ``"A|C"``); empty if none."""
    if not isinstance(answer, str) or not answer.strip():
        return ()
    return tuple(p.strip().upper() for p in answer.split(TIE_SEPARATOR) if p.strip())


def favoured_score(favoured: Sequence[str], gold: str | None) -> float:
    """Proportional tie scoring (study 002 section 3): 1/m if ``gold`` is among the m favoured letters, else 0.

    Returns NaN when ``gold`` is None (an item without options) and 0.0 when nothing is favoured.
    """
    if gold is None:
        return math.nan
    fav = list(dict.fromkeys(favoured))
    return 1.0 / len(fav) if gold in fav else 0.0


def chance_answer(seed: int, item_id: str, n_options: int, run: str = "") -> str:
    """The seeded uniformly random letter that replaces a refused answer (study 003 section 3.2).

    Deterministic in (``seed``, ``item_id``, ``run``): the same refusal gets the same letter in every evaluation, and
    each run draws its own. The letter is the first draw ``integers(0, n_options)`` of a numpy generator seeded by
    ``SeedSequence`` over the SHA-256 digest of the key, so draws of different runs, and of neighbouring item ids, are
    independent (a checksum modulo k is not: runs agreed on every item or on none).

    Raises ``ValueError`` if ``n_options`` is not an integer in [1, 26].
    """
    if isinstance(n_options, bool) or not isinstance(n_options, int) or not 1 <= n_options <= len(LETTERS):
        raise ValueError(f"n_options={n_options!r}; allowed: an integer from 1 to {len(LETTERS)}")
    digest = hashlib.sha256(f"{seed}\x1f{item_id}\x1f{run}".encode()).digest()
    rng = np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "little")))
    return LETTERS[int(rng.integers(0, n_options))]
