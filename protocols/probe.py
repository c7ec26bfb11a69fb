"""Supplied-answer probe: the stated confidence for an answer the model did not write (pure parts).

Study 000 section 3.6 and Appendix I ("Setup"). The user turn is the confidence prompt; the assistant turn starts with
``Guess:``, the supplied answer, a newline and ``Probability:``; the model writes at most :data:`PROBE_MAX_NEW_TOKENS`
more tokens, parsed as the probability (:func:`parse_probe_output`).

Supplied answers (:func:`supplied_answers`), kinds in :data:`SUPPLIED_KINDS`:

``canonical``
    The dataset's reference: ``item.canonical`` (TriviaQA ``answer.value``, TruthfulQA best answer, the correct option
    text for MMLU, else the first gold answer; set by the adapters).
``first_alias``
    The first listed alias, ``item.aliases[0]`` (TriviaQA).
``plausible_wrong``
    A wrong answer another model gave to the same question, different after normalization from this model's own
    answer; among several, the one from the model whose name sorts first.
``off_type``
    Only when no plausible wrong answer exists: the first gold answer of a random other question, checked to be wrong
    for this one under the containment rule.
``own``
    The model's own answer, re-supplied.

Paired differences (:func:`probe_pairs`, definitions in :data:`PAIRS`) are built from a tidy table with one row per
(model, dataset, item, kind); the bootstrap over pooled pairs belongs to analysis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from confgrid.protocols.correctness import containment, normalize
from confgrid.protocols.items import Item
from confgrid.protocols.mc import option_seed
from confgrid.protocols.parsing import ParseResult, parse_output
from confgrid.protocols.prompts import get_prompt

__all__ = [
    "DEFAULT_PROBE_KINDS",
    "PAIRS",
    "PROBE_MAX_NEW_TOKENS",
    "SUPPLIED_KINDS",
    "PairDefinition",
    "ProbeRequest",
    "Supplied",
    "parse_probe_output",
    "probe_pairs",
    "probe_request",
    "supplied_answers",
]

#: The model writes at most 12 new tokens after ``Probability:`` (study 000 Appendix I).
PROBE_MAX_NEW_TOKENS = 12

#: Every kind of supplied answer, in the order :func:`supplied_answers` returns them.
SUPPLIED_KINDS = ("canonical", "first_alias", "plausible_wrong", "off_type", "own")

#: Kinds supplied by default (all of them).
DEFAULT_PROBE_KINDS = SUPPLIED_KINDS


class Supplied(NamedTuple):
    """One supplied answer.

    Attributes
    ----------
    kind : str
        One of :data:`SUPPLIED_KINDS`.
    answer : str
        The answer text placed after ``Guess:``.
    source : str or None
        Where it came from: the other model's name (``plausible_wrong``), the other item's id (``off_type``), else
        None.
    """

    kind: str
    answer: str
    source: str | None = None


class ProbeRequest(NamedTuple):
    """The generation request of one probe row.

    Attributes
    ----------
    user_text : str
        The rendered confidence prompt (the user turn).
    assistant_prefix : str
        ``"Guess: " + answer + "\\n" + "Probability:"`` (the opened assistant turn).
    max_new_tokens : int
        :data:`PROBE_MAX_NEW_TOKENS`.
    """

    user_text: str
    assistant_prefix: str
    max_new_tokens: int


def probe_request(question: str, answer: str, prompt_id: str = "confidence") -> ProbeRequest:
    """The probe request for a supplied ``answer``.

    Render it with ``render_prompt_ids(tokenizer, r.user_text, use_chat_template=...,
    assistant_prefix=r.assistant_prefix)`` and generate at most ``r.max_new_tokens`` tokens greedily. For a
    multiple-choice item pass the multiple-choice question text and ``prompt_id="mc_confidence"`` (a registered prompt
    with ``answer_label`` and ``confidence_label``). The answer's surrounding whitespace is stripped and inner
    newlines become spaces (it stays on the Guess: line).

    Raises ``ValueError`` if ``answer`` is empty or the prompt lacks either label, ``KeyError`` if the prompt is not
    registered.
    """
    prompt = get_prompt(prompt_id)
    if not prompt.answer_label or not prompt.confidence_label:
        raise ValueError(
            f"probe_request: prompt {prompt_id!r} has answer_label={prompt.answer_label!r}, "
            f"confidence_label={prompt.confidence_label!r}; both are needed"
        )
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"probe_request: answer={answer!r} is empty; there is nothing to supply")
    ans = " ".join(answer.split())
    prefix = f"{prompt.answer_label} {ans}\n{prompt.confidence_label}"
    return ProbeRequest(prompt.render(question), prefix, PROBE_MAX_NEW_TOKENS)


def parse_probe_output(continuation: str | None, supplied: str, prompt_id: str = "confidence") -> ParseResult:
    """Parse what the model wrote after ``Probability:`` (never raises for any continuation).

    ``confidence_label + continuation`` is parsed with :func:`~confgrid.protocols.parsing.parse_output` (the prompt's
    labels, scale and decimal separator): ``" 0.8"`` is labelled, ``" high, 0.8"`` uses the fallback, ``" high"``
    gives ``missing_confidence``, ``" 1.5"`` ``out_of_range``, ``" 1e-5"`` ``unparsed_number``. The answer is the
    supplied one; only the continuation is searched for a number. Apply a parse policy with
    :func:`~confgrid.protocols.parsing.apply_parse_policy` as for main rows. Raises ``KeyError`` if ``prompt_id`` is
    not a registered prompt.
    """
    prompt = get_prompt(prompt_id)
    ans = " ".join(str(supplied).split()) or None
    label = prompt.confidence_label or "Probability:"
    text = label + (continuation if isinstance(continuation, str) else "")
    # only the continuation is searched for a number (a numeric supplied answer is never read as one)
    r = parse_output(text, answer_label=prompt.answer_label or "Guess:", confidence_label=label,
                     scale=prompt.scale or "unit", decimal_comma=prompt.decimal_comma)
    if r.status in ("out_of_range", "unparsed_number"):
        status = r.status
    elif r.verbalized is None:
        status = "missing_confidence" if ans else "missing_both"
    else:
        status = "ok" if ans else "missing_answer"
    return ParseResult(ans, r.verbalized, status, r.used_fallback)


def _is_wrong(correct: Any) -> bool:
    try:
        return float(correct) == 0.0
    except (TypeError, ValueError):
        return False


def supplied_answers(
    item: Item,
    own_answer: str | None,
    other_models_answers: Mapping[str, tuple[str | None, Any]],
    rng_seed: int,
    all_items: Sequence[Item],
    *,
    kinds: Sequence[str] = DEFAULT_PROBE_KINDS,
) -> list[Supplied]:
    """The answers to supply for one (model, item), in :data:`SUPPLIED_KINDS` order.

    Parameters
    ----------
    item : Item
        The question.
    own_answer : str or None
        This model's own parsed answer (None or empty: no ``own`` row, and every wrong answer of another model counts
        as different from it).
    other_models_answers : mapping of str to (str or None, float)
        ``{model_name: (answer, correct)}`` for the other models on this item; ``correct`` is the label under the
        primary rule (1.0, 0.0, NaN or None); only ``correct == 0`` counts as wrong. The models available are the
        caller's choice (study 000 drew on models run earlier).
    rng_seed : int
        Seed of the off-type draw; combined with ``item.item_id`` via SHA-256
        (:func:`~confgrid.protocols.mc.option_seed`), so the draw does not depend on the order of items or on other
        items' draws.
    all_items : sequence of Item
        The dataset's items, the pool of off-type answers (the item itself is skipped; order does not matter:
        candidates are sorted by item id).
    kinds : sequence of str
        The kinds wanted (default all; an unknown kind raises ``ValueError``). ``off_type`` is produced only when
        requested and no ``plausible_wrong`` answer exists.

    Returns
    -------
    list of Supplied
        ``canonical`` always (when requested); ``first_alias`` when the item has aliases; ``plausible_wrong`` or
        ``off_type`` (at most one of the two); ``own`` when ``own_answer`` is non-empty.
    """
    unknown = [k for k in kinds if k not in SUPPLIED_KINDS]
    if unknown:
        raise ValueError(f"supplied_answers: kinds={list(kinds)!r} has unknown {unknown}; allowed: {list(SUPPLIED_KINDS)}")
    want = set(kinds)
    out: list[Supplied] = []
    if "canonical" in want and item.canonical.strip():
        out.append(Supplied("canonical", item.canonical.strip()))
    if "first_alias" in want and item.aliases and item.aliases[0].strip():
        out.append(Supplied("first_alias", item.aliases[0].strip()))
    own_norm = normalize(own_answer)
    wrong = None
    if "plausible_wrong" in want or "off_type" in want:
        for name in sorted(other_models_answers):
            ans, correct = other_models_answers[name]
            if not isinstance(ans, str) or not normalize(ans) or not _is_wrong(correct):
                continue
            if own_norm and normalize(ans) == own_norm:
                continue
            wrong = Supplied("plausible_wrong", ans.strip(), name)
            break
    if wrong is not None and "plausible_wrong" in want:
        out.append(wrong)
    if wrong is None and "off_type" in want:
        pool = sorted((it for it in all_items if it.item_id != item.item_id), key=lambda it: it.item_id)
        if pool:
            rng = np.random.default_rng(option_seed(rng_seed, item.item_id))
            for k in rng.permutation(len(pool)):
                other = pool[int(k)]
                cand = other.gold_answers[0].strip()
                if cand and containment(cand, item) == 0.0:
                    out.append(Supplied("off_type", cand, other.item_id))
                    break
    if "own" in want and isinstance(own_answer, str) and own_answer.strip():
        out.append(Supplied("own", own_answer.strip()))
    return out


class PairDefinition(NamedTuple):
    """A paired difference of stated confidence, ``diff = verbalized[a] - verbalized[b]`` on the same item.

    Attributes
    ----------
    id : str
        Pair id.
    a, b : str
        Kinds compared (``generated`` is the model's own answer with the confidence it stated when generating it, from
        the main run).
    own_correct : float or None
        Restrict to items where the model's own answer has this correctness (0.0: questions the model got wrong), or
        None for all.
    description : str
        One line for reports.
    """

    id: str
    a: str
    b: str
    own_correct: float | None
    description: str


#: The probe's paired differences (study 000 section 4.5, Table 17).
PAIRS: tuple[PairDefinition, ...] = (
    PairDefinition(
        "canonical_vs_first_alias", "canonical", "first_alias", None,
        "Two correct forms: the canonical reference minus the first listed alias.",
    ),
    PairDefinition(
        "canonical_vs_plausible_wrong", "canonical", "plausible_wrong", None,
        "Right vs wrong: the canonical reference minus another model's wrong answer.",
    ),
    PairDefinition(
        "own_wrong_vs_plausible_wrong", "own", "plausible_wrong", 0.0,
        "On questions the model got wrong: its own wrong answer (re-supplied) minus another model's wrong answer.",
    ),
    PairDefinition(
        "own_vs_resupplied", "generated", "own", None,
        "The confidence stated with the generated answer minus that stated when the same answer is re-supplied.",
    ),
)


def probe_pairs(table: Any, pairs: Sequence[PairDefinition] = PAIRS) -> Any:
    """Paired differences of stated confidence from a tidy probe table.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (model, dataset, item_id, kind) with columns ``model``, ``dataset``, ``item_id``, ``kind`` (a
        supplied kind or ``generated``: the main run's own stated confidence), ``answer`` (str), ``verbalized`` (float
        in [0, 1] or NaN for a row that did not parse) and ``own_correct`` (correctness of the model's own answer to
        the item, the same on every row of an item; needed by pairs with ``own_correct``).
    pairs : sequence of PairDefinition
        Default :data:`PAIRS`.

    Returns
    -------
    pandas.DataFrame
        One row per pair and item where both sides have a verbalized score, columns ``pair, model, dataset, item_id,
        a_kind, b_kind, a_answer, b_answer, a_verbalized, b_verbalized, diff, strings_differ`` (``strings_differ``:
        the two answers differ after normalization). Sorted by pair, model, dataset, item_id. The pooled bootstrap
        over these rows is analysis's job.

    Raises
    ------
    ValueError
        If a required column is missing, or a (model, dataset, item_id, kind) occurs twice.
    """
    import pandas as pd  # lazy: protocols/ loads no pandas at import (the model actors import it)

    need = {"model", "dataset", "item_id", "kind", "answer", "verbalized"}
    if any(p.own_correct is not None for p in pairs):
        need.add("own_correct")
    missing = sorted(need - set(table.columns))
    if missing:
        raise ValueError(f"probe_pairs: table lacks column(s) {missing}; has {sorted(table.columns)}")
    keys = ["model", "dataset", "item_id", "kind"]
    dup = table.duplicated(keys, keep=False)
    if dup.any():
        first = table.loc[dup, keys].iloc[0].to_dict()
        raise ValueError(f"probe_pairs: {int(dup.sum())} rows repeat a (model, dataset, item_id, kind), e.g. {first}")
    cols = ["pair", "model", "dataset", "item_id", "a_kind", "b_kind", "a_answer", "b_answer",
            "a_verbalized", "b_verbalized", "diff", "strings_differ"]
    frames = []
    for p in pairs:
        a = table[table["kind"] == p.a]
        b = table[table["kind"] == p.b]
        keep_a = ["model", "dataset", "item_id", "answer", "verbalized"] + (
            ["own_correct"] if p.own_correct is not None else []
        )
        m = a[keep_a].merge(
            b[["model", "dataset", "item_id", "answer", "verbalized"]],
            on=["model", "dataset", "item_id"],
            suffixes=("_a", "_b"),
        )
        if p.own_correct is not None:
            m = m[pd.to_numeric(m["own_correct"], errors="coerce") == p.own_correct]
        va = pd.to_numeric(m["verbalized_a"], errors="coerce")
        vb = pd.to_numeric(m["verbalized_b"], errors="coerce")
        m = m[va.notna() & vb.notna()]
        frames.append(
            pd.DataFrame(
                {
                    "pair": p.id,
                    "model": m["model"].to_numpy(),
                    "dataset": m["dataset"].to_numpy(),
                    "item_id": m["item_id"].to_numpy(),
                    "a_kind": p.a,
                    "b_kind": p.b,
                    "a_answer": m["answer_a"].to_numpy(),
                    "b_answer": m["answer_b"].to_numpy(),
                    "a_verbalized": va[m.index].to_numpy(dtype=float),
                    "b_verbalized": vb[m.index].to_numpy(dtype=float),
                    "diff": (va[m.index] - vb[m.index]).to_numpy(dtype=float),
                    "strings_differ": [
                        normalize(x) != normalize(y) for x, y in zip(m["answer_a"], m["answer_b"], strict=True)
                    ],
                },
                columns=cols,
            )
        )
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)
    return out.sort_values(["pair", "model", "dataset", "item_id"], kind="stable").reset_index(drop=True)
