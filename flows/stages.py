"""The stage DAG's pure steps: building requests and turning outputs into tables.

Each function takes and returns pandas DataFrames with the columns documented
in README.md ("What each output file holds"). Model calls happen in
flows/runner.py through the actors; everything here is pure and cheap, so the
CPU stages (parse, grade, aggregate) rerun from stored tables in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from confgrid.protocols.aggregation import get_aggregation
from confgrid.protocols.contexts import get_context
from confgrid.protocols.correctness import ANSWER_FREE_RULES, get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.prompts import get_prompt

__all__ = [
    "REFUSAL_POLICIES",
    "relabel",
    "question_text",
    "generation_requests",
    "parse_generations",
    "grade_answers",
    "score_requests",
    "aggregate_scores",
    "token_signal",
    "ContextText",
    "ScoreText",
    "context_user_text",
]


#: Refusal policies (study 003 section 3.2): ``drop`` leaves unparsed rows out (counted), ``chance`` scores them
#: as a seeded random letter with confidence 1/k (flows/tables/signals.py ``answer_rows``).
REFUSAL_POLICIES = ("drop", "chance")


def relabel(table: pd.DataFrame, **labels: object) -> pd.DataFrame:
    """A shard table with its label columns (model, dataset, answer_set, chunk, context_id) set to ``labels``.

    A shard is keyed by its inputs, not by the names of the grid: two models with the same identity under
    different names (or a model renamed between runs) share a shard, which was stored under the first name.
    Every reader relabels it to the shard request it reads it for. Columns the table lacks are not added.
    """
    out = table.copy()
    for col, value in labels.items():
        if col in out.columns:
            out[col] = value
    return out


def question_text(item: Item, fmt: str = "open") -> str:
    """What replaces ``{question}``: the question alone (``open``) or with lettered options (``mc``)."""
    from confgrid.protocols.mc import mc_question

    return mc_question(item) if fmt == "mc" else item.question


def generation_requests(items: list[Item], prompt_id: str, fmt: str = "open") -> list[str]:
    """User turns of a generation prompt, one per item (in item order)."""
    prompt = get_prompt(prompt_id)
    return [prompt.render(question_text(it, fmt)) for it in items]


def parse_generations(gen: pd.DataFrame, prompt_id: str = "confidence",
                      reasoning_end: str | None = None, items: list[Item] | None = None,
                      fmt: str = "open") -> pd.DataFrame:
    """Add ``answer``, ``verbalized``, ``parse_status``, ``used_fallback``, ``reasoning_status`` to generations.

    Parsed the way the prompt that generated them asks (protocols/parsing.py
    ``parse_for_prompt``: labels, a JSON answer and probability, or option
    probabilities; a 0-100 prompt is scaled to [0, 1]), after the reasoning
    block of a thinking model is removed (protocols/reasoning.py;
    ``reasoning_end`` is the model's declared marker). Unparseable output is
    a recorded status, never an exception (study 000 Appendix A "Parsing");
    a reasoning block that never ended is ``reasoning_unterminated``.

    ``items`` (the generated rows' items, in any order) gives, when the
    options were shown (``fmt="mc"``), each row its number of options (a
    JSON letter must be one of them, option probabilities need it) and, for
    a prompt that asks a probability only, the answer it rates: the item's
    supplied answer (``metadata["given_answer"]``, e.g. HaluEval's).
    """
    from confgrid.protocols.parsing import ParseResult, parse_for_prompt
    from confgrid.protocols.reasoning import strip_reasoning

    prompt = get_prompt(prompt_id)
    by_id = {it.item_id: it for it in items or ()}
    out = gen.copy()
    visible = [strip_reasoning(t, reasoning_end) for t in out["raw_output"].tolist()]
    parsed = []
    for v, item_id in zip(visible, out["item_id"], strict=True):
        item = by_id.get(item_id)
        if v.status == "unterminated":
            parsed.append(ParseResult(None, None, "reasoning_unterminated", False))
            continue
        k = len(item.options) if fmt == "mc" and item is not None and item.options else None
        r = parse_for_prompt(v.text, prompt, k)
        if not prompt.asks_answer:
            r = r._replace(answer=(item.metadata.get("given_answer") or None) if item is not None else None)
        parsed.append(r)
    out["reasoning_status"] = [v.status for v in visible]
    out["answer"] = [p.answer for p in parsed]
    out["verbalized"] = pd.array([p.verbalized for p in parsed], dtype="Float64")
    out["parse_status"] = [p.status for p in parsed]
    out["used_fallback"] = [bool(p.used_fallback) for p in parsed]
    return out


def grade_answers(parsed: pd.DataFrame, items: list[Item], rules: tuple[str, ...], primary: str) -> pd.DataFrame:
    """Label every parsed answer under every requested correctness rule.

    Adds one float column ``correct_<rule>`` per rule (NaN where there is no
    answer, except under a rule in ``ANSWER_FREE_RULES``, which reads only the
    item) and ``correct`` = the primary rule's label.
    """
    by_id = {it.item_id: it for it in items}
    out = parsed.copy()
    for rule in rules:
        fn = get_rule(rule)
        answer_free = rule in ANSWER_FREE_RULES
        out[f"correct_{rule}"] = [
            float(fn(a, by_id[i])) if answer_free or (isinstance(a, str) and a.strip()) else np.nan
            for a, i in zip(out["answer"], out["item_id"], strict=True)
        ]
    out["correct"] = out[f"correct_{primary}"]
    out["correct_rule"] = primary
    return out


@dataclass(frozen=True)
class ContextText:
    """A scoring context rendered for one item (study 000 section 3.4): the user turn, the assistant turn's
    prefix before the answer, and the separator between them and the answer."""

    user_text: str
    assistant_prefix: str
    separator: str


@dataclass(frozen=True)
class ScoreText:
    """One forced-decoding request of an item's parsed answer in a scoring context."""

    item_id: str
    user_text: str
    assistant_prefix: str
    separator: str
    answer: str


def context_user_text(context_id: str, item: Item) -> ContextText:
    """The scoring context ``context_id`` rendered for ``item``."""
    ctx = get_context(context_id)
    return ContextText(ctx.item_text(item), ctx.assistant_prefix, ctx.separator)


def score_requests(parsed: pd.DataFrame, items: list[Item], context_id: str) -> list[ScoreText]:
    """Forced-decoding requests for every row that has a non-empty parsed answer, in the rows' order.

    Parameters
    ----------
    parsed : DataFrame
        Rows with ``item_id`` and ``answer`` (str; empty, None or NaN rows are skipped).
    items : list of Item
        The items the rows refer to.
    context_id : str
        A registered scoring context.

    Returns
    -------
    list of ScoreText
    """
    by_id = {it.item_id: it for it in items}
    out = []
    for item_id, answer in zip(parsed["item_id"], parsed["answer"], strict=True):
        if not isinstance(answer, str) or not answer.strip():
            continue
        c = context_user_text(context_id, by_id[item_id])
        out.append(ScoreText(item_id, c.user_text, c.assistant_prefix, c.separator, answer))
    return out


def token_signal(context: str, aggregation: str, primary: str) -> str:
    """Signal name of the token score in ``context``: ``token_<context>``, with ``__<aggregation>``
    appended for an aggregation other than the primary one."""
    return f"token_{context}" if aggregation == primary else f"token_{context}__{aggregation}"


def aggregate_scores(scores: pd.DataFrame, aggregations: tuple[str, ...] | str) -> pd.DataFrame:
    """Token scores per (item, context) from the stored per-token log-probs.

    Aggregation happens here, on stored log-probs, so changing it reruns no
    model. Adds ``token_score`` (the first, primary aggregation; probability in
    [0, 1]), ``token_score__<name>`` for every aggregation, and ``aggregation``
    (the primary one's name).
    """
    aggs = (aggregations,) if isinstance(aggregations, str) else tuple(aggregations)
    out = scores.copy()
    lps = [np.asarray(lp, dtype=np.float64) for lp in out["logprobs"]]
    for name in aggs:
        fn = get_aggregation(name)
        out[f"token_score__{name}"] = [float(fn(lp)) for lp in lps]
    out["token_score"] = out[f"token_score__{aggs[0]}"]
    out["aggregation"] = aggs[0]
    return out
