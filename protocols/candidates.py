"""Candidate strings of a next-token method (``A``/``B``, ``Yes``/``No``, option letters) as token ids.

A candidate is read from the next-token distribution through every token that decodes to it, with or without a leading
space, and in the case variants the method declares: ``A`` is ``"A"`` and ``" A"`` (and ``"a"``, ``" a"`` with the
``lower`` variant). How the variants' probabilities are merged is the method's ``merge`` rule (protocols/methods.py):
``sum`` of the variants present, or ``exact`` (the token that decodes to exactly the candidate).

Pure: the tokenizer is only read (decoded id by id, once per candidate set).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["CASES", "candidate_variants", "candidate_token_ids", "candidate_tokens_from_strings"]

#: Case variants a method may declare.
CASES = ("lower", "upper", "title")


def candidate_variants(candidate: str, cases: Sequence[str] = ()) -> tuple[str, ...]:
    """The candidate and its declared case variants, in that order, without repeats.

    Raises ``ValueError`` if ``candidate`` is empty or a case is not one of :data:`CASES`.

    Examples
    --------
    >>> candidate_variants("Yes", ("lower", "upper"))
    ('Yes', 'yes', 'YES')
    """
    if not isinstance(candidate, str) or not candidate.strip():
        raise ValueError(f"candidate={candidate!r}: must be a non-empty string")
    bad = [c for c in cases if c not in CASES]
    if bad:
        raise ValueError(f"cases: unknown case variant(s) {bad}; allowed: {list(CASES)}")
    out = [candidate]
    for c in cases:
        v = getattr(candidate, c)()
        if v not in out:
            out.append(v)
    return tuple(out)


def candidate_token_ids(tokenizer: Any, candidates: Sequence[str], cases: Sequence[str] = ()) -> dict[str, dict[int, str]]:
    """For each candidate, every token id that decodes to one of its variants (:data:`CASES`), bare or after one space.

    Returns ``candidate -> {token_id: decoded string}`` (the decoded string tells which variant the id is, e.g.
    ``" A"``), ids in ascending order; a candidate whose variants are no single token maps to ``{}``. Raises
    ``ValueError`` if two candidates share a token (the read would be ambiguous).
    """
    return candidate_tokens_from_strings({tid: tokenizer.decode([tid]) for tid in range(len(tokenizer))},
                                         candidates, cases)


def _forms(candidates: Sequence[str], cases: Sequence[str]) -> dict[str, str]:
    """Every token form (variant, bare or after one space) -> its candidate; raises if two candidates share one."""
    wanted: dict[str, str] = {}
    for cand in candidates:
        for v in candidate_variants(cand, cases):
            for form in (v, " " + v):
                if form in wanted and wanted[form] != cand:
                    raise ValueError(f"candidates {wanted[form]!r} and {cand!r} share the token form {form!r}")
                wanted[form] = cand
    return wanted


def candidate_tokens_from_strings(tokens: Mapping[int, str], candidates: Sequence[str],
                                  cases: Sequence[str] = ()) -> dict[str, dict[int, str]]:
    """Like :func:`candidate_token_ids`, over given ``{id: token string}`` instead of a whole vocabulary.

    An API model returns the top next tokens as strings: each returned token gets an id (actors/openai_backend.py:
    ``-1 - rank``) and this finds the candidates among them, by the same forms (a variant, bare or after one space).
    Ids keep the order of ``tokens``.

    Raises ``ValueError`` if two candidates share a token form, or a candidate or case is invalid.

    Examples
    --------
    >>> candidate_tokens_from_strings({-1: " A", -2: "B", -3: "A."}, ["A", "B"])
    {'A': {-1: ' A'}, 'B': {-2: 'B'}}
    """
    wanted = _forms(candidates, cases)
    out: dict[str, dict[int, str]] = {c: {} for c in candidates}
    for tid, s in tokens.items():
        cand = wanted.get(s)
        if cand is not None:
            out[cand][int(tid)] = s
    return out
