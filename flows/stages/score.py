"""Stage ``score``: forced decoding of each parsed answer after a scoring context (study 000 sections 3.4-3.5).

Rows: :class:`ScoreRow`; engine call ``score``; table ``tables/scores.parquet``: per (answer set, item, scoring
context) the parsed answer, its per-token log-probs (nats), answer_token_ids, n_tokens, context_tokens, backend,
dtype, and after aggregation (on the driver, from the stored log-probs) token_score (primary aggregation),
``token_score__<aggregation>`` for each, aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.actors.calls import ScoreOutput, ScoreRequest
from confgrid.flows.stages.base import KEY_COLUMNS, Stage, UnitPart, register_stage
from confgrid.protocols.aggregation import get_aggregation
from confgrid.protocols.contexts import get_context
from confgrid.protocols.items import Item

__all__ = ["ScoreRow", "score_requests", "aggregate_scores"]


@dataclass(frozen=True)
class ScoreRow:
    """One forced-decoding request: an answer after a scoring context (study 000 section 3.4)."""

    item_id: str
    user_text: str
    assistant_prefix: str
    separator: str
    answer: str


def score_requests(parsed: pd.DataFrame, items: list[Item], context_id: str) -> list[ScoreRow]:
    """Forced-decoding requests for every row of ``parsed`` with a non-empty ``answer``, in the rows' order: the
    scoring context's user turn (rendered for the item), assistant prefix and separator, then the answer."""
    by_id = {it.item_id: it for it in items}
    ctx = get_context(context_id)
    return [ScoreRow(item_id, ctx.item_text(by_id[item_id]), ctx.assistant_prefix, ctx.separator, answer)
            for item_id, answer in zip(parsed["item_id"], parsed["answer"], strict=True)
            if isinstance(answer, str) and answer.strip()]


def aggregate_scores(scores: pd.DataFrame, aggregations: tuple[str, ...] | str) -> pd.DataFrame:
    """Token scores per (item, context) from the stored per-token log-probs (so changing the aggregation reruns
    no model): ``token_score__<name>`` for every aggregation, ``token_score`` (the first, primary one;
    probability in [0, 1]) and ``aggregation`` (its name)."""
    aggs = (aggregations,) if isinstance(aggregations, str) else tuple(aggregations)
    out = scores.copy()
    lps = [np.asarray(lp, dtype=np.float64) for lp in out["logprobs"]]
    for name in aggs:
        fn = get_aggregation(name)
        out[f"token_score__{name}"] = [float(fn(lp)) for lp in lps]
    out["token_score"] = out[f"token_score__{aggs[0]}"]
    out["aggregation"] = aggs[0]
    return out


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    m = plan.models[shard.model]
    sc: tuple[ScoreOutput, ...] = outputs
    return pd.DataFrame({
        "model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids,
        "context_id": shard.context, "chunk": shard.chunk, "answer_source": "generated",
        "answer": [r.answer for r in shard.rows],
        "logprobs": [list(o.logprobs) for o in sc], "answer_token_ids": [list(o.answer_token_ids) for o in sc],
        "n_tokens": [len(o.logprobs) for o in sc], "context_tokens": [o.context_tokens for o in sc],
        "backend": m.backend, "dtype": m.dtype})


def _schema(aggregations: tuple[str, ...], rules: tuple[str, ...]) -> pa.Schema:
    return pa.schema([*KEY_COLUMNS, ("context_id", pa.string()), ("chunk", pa.int64()), ("answer_source", pa.string()),
                      ("answer", pa.string()), ("logprobs", pa.list_(pa.float64())),
                      ("answer_token_ids", pa.list_(pa.int64())), ("n_tokens", pa.int64()),
                      ("context_tokens", pa.int64()), ("backend", pa.string()), ("dtype", pa.string()),
                      *((f"token_score__{a}", pa.float64()) for a in aggregations),
                      ("token_score", pa.float64()), ("aggregation", pa.string())])


def _tokens(spec: Any, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """A unit's token scores (aggregated) from its score shards done."""
    sc = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["model", "dataset", "item_id", "context_id", "logprobs"])
    return aggregate_scores(sc, spec.scoring.aggregations)


register_stage(Stage("score", "score", request=lambda r: ScoreRequest(r.user_text, r.assistant_prefix, r.separator,
                                                                      r.answer),
                     table=_table, table_name="scores", schema=_schema,
                     part=UnitPart(field="tokens", rows=_tokens,
                                   needed=lambda spec, a: len(a.scoring_contexts(spec.scoring.contexts)))))
