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
from confgrid.protocols.correctness import get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.parsing import parse_output
from confgrid.protocols.prompts import get_prompt

__all__ = [
    "generation_requests",
    "parse_generations",
    "grade_answers",
    "score_requests",
    "aggregate_scores",
    "signal_table",
    "context_user_text",
]


def generation_requests(items: list[Item], prompt_id: str) -> list[str]:
    """User turns of the elicitation prompt, one per item (in item order)."""
    prompt = get_prompt(prompt_id)
    return [prompt.render(it.question) for it in items]


def parse_generations(gen: pd.DataFrame) -> pd.DataFrame:
    """Add ``answer``, ``verbalized``, ``parse_status``, ``used_fallback`` to generations.

    Unparseable output is a recorded status, never an exception
    (protocols/parsing.py, study 000 Appendix A "Parsing").
    """
    out = gen.copy()
    parsed = [parse_output(t) for t in out["raw_output"].tolist()]
    out["answer"] = [p.answer for p in parsed]
    out["verbalized"] = pd.array([p.verbalized for p in parsed], dtype="Float64")
    out["parse_status"] = [p.status for p in parsed]
    out["used_fallback"] = [bool(p.used_fallback) for p in parsed]
    return out


def grade_answers(parsed: pd.DataFrame, items: list[Item], rules: tuple[str, ...], primary: str) -> pd.DataFrame:
    """Label every parsed answer under every requested correctness rule.

    Adds one float column ``correct_<rule>`` per rule (NaN where there is no
    answer) and ``correct`` = the primary rule's label.
    """
    by_id = {it.item_id: it for it in items}
    out = parsed.copy()
    for rule in rules:
        fn = get_rule(rule)
        out[f"correct_{rule}"] = [
            float(fn(a, by_id[i])) if isinstance(a, str) and a.strip() else np.nan
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


def aggregate_scores(scores: pd.DataFrame, aggregation: str) -> pd.DataFrame:
    """Token score per (item, context) from the stored per-token log-probs.

    Aggregation happens here, on stored log-probs, so changing it reruns no
    model. Adds ``token_score`` (probability in [0, 1]) and ``aggregation``.
    """
    fn = get_aggregation(aggregation)
    out = scores.copy()
    out["token_score"] = [float(fn(np.asarray(lp, dtype=np.float64))) for lp in out["logprobs"]]
    out["aggregation"] = aggregation
    return out


def signal_table(graded: pd.DataFrame, tokens: pd.DataFrame, contexts: tuple[str, ...]) -> tuple[pd.DataFrame, dict[str, int]]:
    """Long table of (item_id, signal, confidence, correct) on the instance-aligned rows.

    A row enters the metrics only if it parsed (answer and verbalized score),
    has a correctness label and a finite token score in every context; so every
    signal of a setting is evaluated on the same answers (the alignment rule,
    study 000 section 3.1).

    Returns
    -------
    table : DataFrame
        Columns item_id, signal, context, confidence, correct.
    dropped : dict
        Rows left out, by reason.
    """
    dropped: dict[str, int] = {}
    g = graded.set_index("item_id")
    ok = g["parse_status"] == "ok"
    for status, cnt in g.loc[~ok, "parse_status"].value_counts().items():
        dropped[f"parse:{status}"] = int(cnt)
    keep = g.index[ok & g["correct"].notna()]
    wide = {}
    for ctx in contexts:
        t = tokens[tokens["context_id"] == ctx].set_index("item_id")["token_score"]
        wide[ctx] = t.reindex(keep)
    finite = np.ones(len(keep), dtype=bool)
    for ctx in contexts:
        finite &= np.isfinite(wide[ctx].to_numpy(dtype=float, na_value=np.nan))
    if (~finite).sum():
        dropped["token_score_missing"] = int((~finite).sum())
    keep = keep[finite]
    rows = []
    corr = g.loc[keep, "correct"].to_numpy(dtype=float)
    verb = g.loc[keep, "verbalized"].to_numpy(dtype=float)
    rows.append(pd.DataFrame({"item_id": keep, "signal": "verbalized", "context": "", "confidence": verb, "correct": corr}))
    for ctx in contexts:
        rows.append(
            pd.DataFrame(
                {
                    "item_id": keep,
                    "signal": f"token_{ctx}",
                    "context": ctx,
                    "confidence": wide[ctx].reindex(keep).to_numpy(dtype=float),
                    "correct": corr,
                }
            )
        )
    return pd.concat(rows, ignore_index=True), dropped
