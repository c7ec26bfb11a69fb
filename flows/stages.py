"""The stage DAG's pure steps: building requests and turning outputs into tables.

Each function takes and returns pandas DataFrames with the columns documented
in README.md ("What each output file holds"). Model calls happen in
flows/runner.py through the actors; everything here is pure and cheap, so the
CPU stages (parse, grade, aggregate) rerun from stored tables in milliseconds.
"""

from __future__ import annotations

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
    "signal_table",
    "token_signal",
    "context_user_text",
]


#: Refusal policies (study 003 section 3.2): ``drop`` leaves unparsed rows out (counted), ``chance`` scores them
#: as a seeded random letter with confidence 1/k (``signal_table``).
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


def context_user_text(context_id: str, item: Item) -> tuple[str, str, str]:
    """(user text, assistant prefix, separator) of a scoring context for one item."""
    ctx = get_context(context_id)
    return ctx.item_text(item), ctx.assistant_prefix, ctx.separator


def score_requests(parsed: pd.DataFrame, items: list[Item], context_id: str) -> tuple[list[str], list[tuple[str, str, str, str]]]:
    """Forced-decoding requests for every row that has a non-empty parsed answer.

    Returns
    -------
    item_ids : list of str
    requests : list of (user_text, assistant_prefix, separator, answer)
    """
    by_id = {it.item_id: it for it in items}
    ids, reqs = [], []
    for item_id, answer in zip(parsed["item_id"], parsed["answer"], strict=True):
        if not isinstance(answer, str) or not answer.strip():
            continue
        user, prefix, sep = context_user_text(context_id, by_id[item_id])
        ids.append(item_id)
        reqs.append((user, prefix, sep, answer))
    return ids, reqs


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


def signal_table(
    graded: pd.DataFrame,
    tokens: pd.DataFrame,
    contexts: tuple[str, ...],
    *,
    aggregations: tuple[str, ...] = ("geometric_mean",),
    policy: str = "label_or_fallback",
    rule: str | None = None,
    verbalized: bool = True,
    refusal: str = "drop",
    items: list[Item] | None = None,
    chance_seed: int = 0,
    chance_run: str = "",
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Long table of (item_id, signal, confidence, correct) on the instance-aligned rows.

    A row enters the metrics only if, under the parse ``policy``, it parsed
    (answer and, when ``verbalized``, a verbalized score), has a label under
    ``rule`` and a finite token score in every context and aggregation; so every
    signal of a unit is evaluated on the same answers (the alignment rule, study
    000 section 3.1).

    Refusal policy (study 003 section 3.2): ``drop`` leaves every row that
    did not parse out (counted by status); ``chance`` keeps the rows of items
    with options (``items``) whose parse failed, scored as a seeded uniformly
    random letter (:func:`confgrid.protocols.json_output.chance_answer`,
    seeded by ``chance_seed``, the item and ``chance_run``: each run draws its own) with confidence ``1/k`` in every
    signal (the verbalized one and each token score), so a model cannot
    improve its score by refusing; such rows have ``replaced = True``. Items
    without options cannot be replaced and are dropped as under ``drop``.

    Returns
    -------
    table : DataFrame
        Columns item_id, signal, context, aggregation, confidence, correct, replaced.
    dropped : dict
        Rows left out, by reason (``parse:<status>``, ``rule:<rule>:undefined``,
        ``token_score_missing``).
    """
    from confgrid.protocols.parsing import ParseResult, apply_parse_policy

    if refusal not in REFUSAL_POLICIES:
        raise ValueError(f"refusal={refusal!r}; allowed: {list(REFUSAL_POLICIES)}")
    columns = ["item_id", "signal", "context", "aggregation", "confidence", "correct", "replaced"]
    dropped: dict[str, int] = {}
    g = graded.set_index("item_id")
    if g.empty:
        return pd.DataFrame(columns=columns), dropped
    status = []
    for ans, verb, st, fb in zip(g["answer"], g["verbalized"], g["parse_status"], g["used_fallback"], strict=True):
        r = apply_parse_policy(ParseResult(ans if isinstance(ans, str) else None,
                                           None if pd.isna(verb) else float(verb), st, bool(fb)), policy)
        if not verbalized and r.answer is not None and r.answer.strip():
            status.append("ok")
        else:
            status.append(r.status)
    status = pd.Series(status, index=g.index)
    corr_col = f"correct_{rule}" if rule else "correct"
    chance = pd.Series(np.nan, index=g.index)  # 1/k of a replaced row
    if refusal == "chance":
        g, chance = _chance_rows(g, status, items or [], corr_col, rule, chance_seed, chance_run)
        status = status.where(chance.isna(), "ok")
    ok = status == "ok"
    for st, cnt in status[~ok].value_counts().items():
        dropped[f"parse:{st}"] = int(cnt)
    labelled = g[corr_col].notna()
    if (ok & ~labelled).sum():
        dropped[f"rule:{rule}:undefined"] = int((ok & ~labelled).sum())
    keep = g.index[ok & labelled]
    wide = {}
    primary = aggregations[0]
    for ctx in contexts:
        t = tokens[tokens["context_id"] == ctx].set_index("item_id") if len(tokens) else pd.DataFrame()
        for agg in aggregations:
            col = f"token_score__{agg}"
            v = (t[col] if col in t else pd.Series(dtype=float)).reindex(keep).astype(float)
            wide[(ctx, agg)] = v.where(chance.reindex(keep).isna(), chance.reindex(keep))
    finite = np.ones(len(keep), dtype=bool)
    for v in wide.values():
        finite &= np.isfinite(v.to_numpy(dtype=float, na_value=np.nan))
    if (~finite).sum():
        dropped["token_score_missing"] = int((~finite).sum())
    keep = keep[finite]
    corr = g.loc[keep, corr_col].to_numpy(dtype=float)
    replaced = chance.reindex(keep).notna().to_numpy()
    rows = []
    if verbalized:
        verb = g.loc[keep, "verbalized"].to_numpy(dtype=float, na_value=np.nan)
        rows.append(pd.DataFrame({"item_id": keep, "signal": "verbalized", "context": "", "aggregation": "",
                                  "confidence": verb, "correct": corr, "replaced": replaced}))
    for (ctx, agg), v in wide.items():
        rows.append(pd.DataFrame({"item_id": keep, "signal": token_signal(ctx, agg, primary), "context": ctx,
                                  "aggregation": agg, "confidence": v.reindex(keep).to_numpy(dtype=float),
                                  "correct": corr, "replaced": replaced}))
    return (pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)), dropped


def _chance_rows(g: pd.DataFrame, status: pd.Series, items: list[Item], corr_col: str, rule: str | None,
                 seed: int, run: str) -> tuple[pd.DataFrame, pd.Series]:
    """Rows of ``g`` (indexed by item_id) whose parse failed, answered by chance: letter, 1/k, its correctness."""
    from confgrid.protocols.json_output import chance_answer

    by_id = {it.item_id: it for it in items}
    rule_name = rule or (str(g["correct_rule"].iloc[0]) if "correct_rule" in g and len(g) else None)
    fn = get_rule(rule_name) if rule_name else None
    g = g.copy()
    chance = pd.Series(np.nan, index=g.index)
    for item_id in status.index[status != "ok"]:
        item = by_id.get(item_id)
        if item is None or not item.options or fn is None:
            continue
        k = len(item.options)
        letter = chance_answer(seed, item_id, k, run)
        g.loc[item_id, "answer"] = letter
        g.loc[item_id, "verbalized"] = 1.0 / k
        g.loc[item_id, corr_col] = float(fn(letter, item))
        chance[item_id] = 1.0 / k
    return g, chance
