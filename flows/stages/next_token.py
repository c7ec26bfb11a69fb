"""Method stage ``next_token``: the next-token distribution after a template, read at candidate tokens
(P(True), study 001 Appendix D.3 and study 004; letter probabilities, study 002 Appendix E.1).

Rows: ``MethodRow``; engine call ``next_token``; table ``tables/next_token.parquet`` (top token ids and
log-probs, each candidate's token ids in this model's tokenizer, prompt_tokens, logprobs_status); signal rows:
P(True) of the model's greedy answer, or the favoured option letter's renormalized probability.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from confgrid.actors.calls import CallParams
from confgrid.flows.stages.base import Stage, prompted, register_stage
from confgrid.flows.stages.method_base import (CapabilityRole, MethodReader, RatedValue, method_columns, protocol,
                                              rated_signals, register_reader)
from confgrid.protocols.json_output import TIE_SEPARATOR, favoured_score, letter_distribution
from confgrid.protocols.mc import LETTERS
from confgrid.protocols.methods import candidate_probability, p_true

__all__ = ["next_token_values"]


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    return pd.DataFrame({**method_columns(shard), "top_token_ids": [list(o.token_ids) for o in outputs],
                         "top_logprobs": [list(o.logprobs) for o in outputs],
                         "candidate_tokens": [json.dumps({c: {str(t): v for t, v in ids.items()}
                                                          for c, ids in o.candidate_tokens.items()},
                                                         sort_keys=True) for o in outputs],
                         "prompt_tokens": [o.prompt_tokens for o in outputs],
                         "logprobs_status": [o.logprobs_status for o in outputs]})


def _method_call(method: Any, spec: Any, n_letters: int) -> tuple[dict[str, Any], CallParams]:
    candidates = method.candidate_strings(n_letters)
    return ({"top_logprobs": method.top_logprobs, "candidates": list(candidates), "cases": list(method.cases)},
            CallParams(max_new_tokens=1, top_logprobs=method.top_logprobs, candidates=candidates,
                       cases=tuple(method.cases)))


def _distribution(r: Any) -> tuple[dict[int, float], dict[str, dict[int, str]]]:
    """A row's top next tokens (id -> log-prob) and each candidate's token ids (id -> token string)."""
    top = dict(zip((int(t) for t in r.top_token_ids), (float(v) for v in r.top_logprobs), strict=True))
    ids = {c: {int(t): s for t, s in m.items()} for c, m in json.loads(r.candidate_tokens).items()}
    return top, ids


def next_token_values(method: Any, table: pd.DataFrame) -> list[RatedValue]:
    """The P(True) of every row of a next-token method table (the answer it rates: the one its template shows,
    None for a template that shows none)."""
    cands = method.candidate_strings()
    out = []
    for r in table.itertuples(index=False):
        status = getattr(r, "logprobs_status", "ok")  # absent from tables stored before it existed
        if status != "ok":  # an API server returned no distribution: NaN with its reason, never 0
            out.append(RatedValue(r.item_id, r.rated_answer or None, None, str(status)))
            continue
        top, ids = _distribution(r)
        probs = {c: candidate_probability(ids.get(c, {}), top, c, method.merge) for c in cands}
        c = p_true(probs, cands[0], method.renormalize)
        out.append(RatedValue(r.item_id, r.rated_answer or None, c.value, c.status, c.detail))
    return out


def _option_letters(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame,
                    out: dict[str, list]) -> None:
    """Letter token probabilities (study 002 Appendix E.1): the next-token distribution restricted to the item's
    option letters and renormalized; the favoured letter(s) scored with proportional ties against the gold letter;
    ``detail`` = how many option letters were absent from the returned top k (counted as 0, E.3)."""
    out["next_token"].append(table)
    items = {i.item_id: i for i in plan.set_items[("main", dataset)]}
    proto = protocol(method, plan.spec)
    for r in table.itertuples(index=False):
        item = items[r.item_id]
        top, ids = _distribution(r)
        letters = LETTERS[:len(item.options)]
        d = letter_distribution({c: candidate_probability(ids.get(c, {}), top, c, method.merge) for c in letters})
        gold = item.gold_letter.strip().upper() if item.gold_letter else None
        out["signals"].append({"model": model, "dataset": dataset, "signal": method.id, "item_id": r.item_id,
                               "confidence": d.confidence, "status": d.status, "rated": method.reader.rated,
                               "rated_answer": TIE_SEPARATOR.join(d.favoured) or None,
                               "correct": favoured_score(d.favoured, gold) if d.favoured else np.nan,
                               "rule": "mc_favoured", "detail": d.n_absent, **proto})


def _p_true(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame, out: dict[str, list]) -> None:
    """P(True) (study 001 Appendix D.3, study 004): the first candidate's probability, rating the model's greedy
    answer."""
    out["next_token"].append(table)
    rated_signals(plan, method, model, dataset, next_token_values(method, table), out)


register_stage(Stage("next_token", "next_token", request=prompted, table=_table, method_call=_method_call,
                     fields=("candidates", "cases", "merge", "renormalize", "top_logprobs", "assistant_prefix")))
register_reader(MethodReader("p_true", "next_token", _p_true, capability=CapabilityRole("p_true"),
                             rated_values=lambda plan, method, model, table: next_token_values(method, table)))
register_reader(MethodReader("option_letters", "next_token", _option_letters, rated="favoured_letter", options=True))
