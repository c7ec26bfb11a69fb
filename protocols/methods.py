"""Confidence methods beyond the stated score and the token score: the pure formulas.

Each function turns what a model produced (sampled answers, a next-token distribution, a rating text) into a
confidence in [0, 1] and a status; the status says why there is no number, and nothing unparsed becomes one.

* Self-consistency (study 001 Appendix D.3): ``c = (1/k) sum_j 1[a_j = a_1]``, the share of the k sampled answers
  equal to the first one after the correctness rule's normalization; the rated answer is ``a_1``.
* Majority share (study 004): the share of the most frequent normalized answer; the rated answer is that answer (ties:
  the one sampled first).
* Expected accuracy (study 004, the capability target): the mean correctness of k sampled answers, an unparsed sample
  counting as wrong, with the standard error ``sqrt(p (1 - p) / (k - 1))`` (the sample standard deviation over
  sqrt(k)).
* P(True) (Kadavath et al. 2022; study 001 D.3, study 004): the probability of a candidate token (``A`` = True,
  ``Yes``) in the next-token distribution, or renormalized over the candidates, ``p(A) / (p(A) + p(B))``.
* Rating of a supplied answer on 0-100 (study 001 Table 5): the number in ``\\boxed{}``, divided by 100.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from confgrid.protocols.parsing import MAX_PARSE_CHARS, parse_number

__all__ = [
    "MERGE_RULES",
    "Confidence",
    "agreement_share",
    "majority_share",
    "expected_accuracy",
    "candidate_probability",
    "p_true",
    "parse_boxed",
]

#: How the variant tokens of a candidate are merged: ``sum`` of the probabilities of every variant in the returned
#: distribution, or ``exact``: only the token that decodes to exactly the candidate string.
MERGE_RULES = ("sum", "exact")


class Confidence(NamedTuple):
    """A method's confidence for one item.

    Attributes
    ----------
    value : float or None
        In [0, 1]; None when ``status`` says there is none.
    status : str
        ``ok`` or why not (method-specific: ``first_unparsed``, ``all_absent``, ``missing``, ``out_of_range``,
        ``unparsed_number``...).
    rated : str or None
        The answer the confidence is about (self-consistency: the first sample; majority share: the majority answer),
        when the method picks one.
    detail : float or None
        A second number where the method has one (the standard error of an expected accuracy; the number of candidates
        absent from the top k).
    """

    value: float | None
    status: str
    rated: str | None = None
    detail: float | None = None


def _norm_all(answers: Sequence[str | None], normalize: Callable[[str], str]) -> list[str | None]:
    return [normalize(a) if isinstance(a, str) and a.strip() else None for a in answers]


def agreement_share(answers: Sequence[str | None], normalize: Callable[[str], str]) -> Confidence:
    """Self-consistency: the share of the k answers equal to the first after normalization (study 001 D.3).

    Parameters
    ----------
    answers : sequence of str or None
        The k parsed sampled answers in sample order (None: unparsed; it counts in k and matches nothing).
    normalize : callable
        The correctness rule's normalization (protocols/correctness.py ``normalize``).

    Returns
    -------
    Confidence
        ``value`` in [1/k, 1]; ``rated`` the first answer. Status ``first_unparsed`` (value None) when the first
        sample has no answer, ``no_samples`` when ``answers`` is empty.

    Examples
    --------
    >>> from confgrid.protocols.correctness import normalize
    >>> agreement_share(["Paris", "paris.", "Lyon", None], normalize).value
    0.5
    """
    k = len(answers)
    if k == 0:
        return Confidence(None, "no_samples")
    norm = _norm_all(answers, normalize)
    if norm[0] is None:
        return Confidence(None, "first_unparsed")
    return Confidence(sum(n == norm[0] for n in norm) / k, "ok", str(answers[0]).strip())


def majority_share(answers: Sequence[str | None], normalize: Callable[[str], str]) -> Confidence:
    """The share of the most frequent normalized answer among the k samples (study 004).

    Unparsed samples count in k and never form the majority; among equally frequent answers the one sampled first
    wins. ``rated`` is the first sample with the majority's normalization. Status ``all_unparsed`` (value None) when
    no sample has an answer.

    Examples
    --------
    >>> from confgrid.protocols.correctness import normalize
    >>> majority_share(["Lyon", "Paris", "paris", None], normalize)
    Confidence(value=0.5, status='ok', rated='Paris', detail=None)
    """
    k = len(answers)
    norm = _norm_all(answers, normalize)
    counts = Counter(n for n in norm if n is not None)
    if not counts:
        return Confidence(None, "all_unparsed" if k else "no_samples")
    best = max(counts.values())
    winner = next(n for n in norm if n is not None and counts[n] == best)
    first = next(a for a, n in zip(answers, norm, strict=True) if n == winner)
    return Confidence(best / k, "ok", str(first).strip())


def expected_accuracy(correct: Sequence[float | None]) -> Confidence:
    """Mean correctness over k samples with its standard error (study 004's capability target).

    ``correct``: each sample's correctness in [0, 1]; None or NaN (unparsed, no answer) counts as 0. ``value`` is the
    mean; ``detail`` is ``sqrt(p (1 - p) / (k - 1))`` for binary correctness, in general the sample standard deviation
    (ddof 1) over ``sqrt(k)`` (NaN for k = 1). Status ``no_samples`` when empty.

    Examples
    --------
    >>> r = expected_accuracy([1, 0, 1, 1, None])
    >>> round(r.value, 3), round(r.detail, 4)
    (0.6, 0.2449)
    """
    k = len(correct)
    if k == 0:
        return Confidence(None, "no_samples")
    x = np.array([0.0 if c is None or (isinstance(c, float) and math.isnan(c)) else float(c) for c in correct])
    se = float(x.std(ddof=1) / math.sqrt(k)) if k > 1 else float("nan")
    return Confidence(float(x.mean()), "ok", None, se)


def candidate_probability(tokens: Mapping[int, str], top: Mapping[int, float], candidate: str,
                          merge: str = "sum") -> float | None:
    """The probability of one candidate in a returned next-token distribution, in [0, 1], or None when absent.

    Parameters
    ----------
    tokens : mapping of int to str
        The candidate's variant token ids and what each decodes to (protocols/candidates.py ``candidate_token_ids``).
    top : mapping of int to float
        The returned distribution: token id -> log-prob (nats).
    candidate : str
        The candidate string (for ``exact``).
    merge : {"sum", "exact"}
        ``sum``: the probabilities of every variant present added; ``exact``: only the token decoding to exactly
        ``candidate``. Another value raises ``ValueError``.

    Returns
    -------
    float or None
        None when no variant (``exact``: not the exact token) is in the returned distribution: absent, which is not
        probability 0.
    """
    if merge not in MERGE_RULES:
        raise ValueError(f"merge={merge!r}; allowed: {list(MERGE_RULES)}")
    ids = [t for t, s in tokens.items() if merge == "sum" or s == candidate]
    present = [math.exp(top[t]) for t in ids if t in top]
    return float(min(1.0, sum(present))) if present else None


def p_true(probs: Mapping[str, float | None], target: str, renormalize: bool) -> Confidence:
    """P(True): the target candidate's probability, alone or renormalized over the candidates.

    Parameters
    ----------
    probs : mapping of str to float or None
        Each candidate's probability (:func:`candidate_probability`; None = absent from the top k).
    target : str
        The candidate that means "true" / "yes" (``A``, ``Yes``).
    renormalize : bool
        False: ``p(target)``. True: ``p(target) / sum of the candidates' probabilities``, an absent candidate counting
        0 there.

    Returns
    -------
    Confidence
        ``detail`` = how many candidates were absent. Status ``ok``; ``target_absent`` (value 0.0, recorded: the
        target is below every returned token) when only the target is missing; ``all_absent`` (value None) when no
        candidate is in the distribution.

    Examples
    --------
    >>> p_true({"A": 0.6, "B": 0.3}, "A", renormalize=False).value
    0.6
    >>> round(p_true({"A": 0.6, "B": 0.2}, "A", renormalize=True).value, 12)
    0.75
    >>> p_true({"A": None, "B": 0.9}, "A", renormalize=True)
    Confidence(value=0.0, status='target_absent', rated=None, detail=1.0)
    """
    if target not in probs:
        raise ValueError(f"target {target!r} is not among the candidates {list(probs)}")
    absent = sum(v is None for v in probs.values())
    if absent == len(probs):
        return Confidence(None, "all_absent", None, float(absent))
    pt = probs[target]
    if pt is None:
        return Confidence(0.0, "target_absent", None, float(absent))
    if not renormalize:
        return Confidence(float(pt), "ok", None, float(absent))
    total = sum(v for v in probs.values() if v is not None)
    return Confidence(float(pt / total), "ok", None, float(absent))


# every \boxed{...} without nested braces (possessive: linear in the text)
_BOXED = re.compile(r"\\boxed[^\S\n]*+\{(?P<c>[^{}]*+)\}")
_DIGIT = re.compile(r"\d")


def parse_boxed(text: str | None, scale: float = 100.0, *, decimal_comma: bool = False) -> Confidence:
    r"""The confidence in the last ``\boxed{N}`` of a rating, divided by ``scale`` (study 001 Table 5).

    The rated box is the last ``\boxed{...}`` whose content holds a digit; boxes without one (``\boxed{Paris}``) are
    not ratings. Its content, spaces around it removed, must be a number in the parser's grammar
    (:func:`~confgrid.protocols.parsing.parse_number`: ``85``, ``85.5``, ``85%`` -- N is already on the 0-``scale``
    scale, so a percent sign changes nothing). At most :data:`~confgrid.protocols.parsing.MAX_PARSE_CHARS` characters
    are read.

    Parameters
    ----------
    text : str or None
        The rating output.
    scale : float, default 100
        The top of the rating scale.
    decimal_comma : bool, default False
        The rating prompt's numbers use a decimal comma (``\boxed{85,5}``).

    Returns
    -------
    Confidence
        Status ``ok`` (value in [0, 1]); ``missing`` (no ``\boxed{}`` with a digit); ``unparsed_number`` (its content
        is not a number in the grammar: ``\boxed{1e-5}``, ``\boxed{1/2}``, ``\boxed{80-90}``; value None);
        ``out_of_range`` (N outside [0, scale]; value None).

    Examples
    --------
    >>> parse_boxed(r"### Confidence: \boxed{85}").value
    0.85
    >>> parse_boxed("I am fairly sure").status, parse_boxed(r"\boxed{0,85}").status
    ('missing', 'unparsed_number')
    """
    found = [c for c in (m.group("c").strip() for m in _BOXED.finditer((text or "")[:MAX_PARSE_CHARS]))
             if _DIGIT.search(c)]
    if not found:
        return Confidence(None, "missing")
    n = parse_number(found[-1], decimal_comma=decimal_comma)
    if n is None:
        return Confidence(None, "unparsed_number")
    if not (math.isfinite(n.value) and 0.0 <= n.value <= scale):
        return Confidence(None, "out_of_range")
    return Confidence(n.value / scale + 0.0, "ok")
