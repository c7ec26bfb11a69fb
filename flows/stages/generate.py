"""Stage ``generate``: one answer per item to the answer set's prompt (study 000 section 3.1).

Rows: :class:`GenerateRow` (the item and its rendered user turn); engine call ``generate``; table
``tables/generations.parquet`` (model, dataset, answer_set, item_id, prompt_id, sample_idx, chunk, raw_output,
finish_reason, n_new_tokens; an API model adds token_logprobs, sum_logprob, logprobs_status).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from confgrid.actors.calls import GenerateRequest, GenerationOutput, SamplesOutput
from confgrid.flows.stages.base import KEY_COLUMNS, Stage, UnitPart, register_stage

__all__ = ["GenerateRow", "GENERATION_COLUMNS"]

#: The columns of ``tables/generations.parquet`` (local backends).
GENERATION_COLUMNS = [*KEY_COLUMNS, ("prompt_id", pa.string()), ("sample_idx", pa.int64()), ("chunk", pa.int64()),
                      ("raw_output", pa.string()), ("finish_reason", pa.string()), ("n_new_tokens", pa.int64())]


@dataclass(frozen=True)
class GenerateRow:
    """One generation of an answer: the item and its rendered user turn."""

    item_id: str
    user_text: str


def _generation_logprobs(gens: tuple[GenerationOutput, ...]) -> dict[str, list]:
    """An API model's columns of its generated tokens' log-probs (nats; ``{}`` for local backends):
    ``token_logprobs`` (``[]`` when none came back), ``sum_logprob`` (NaN when none, never 0) and
    ``logprobs_status`` (``ok`` or why they are missing, actors/openai_backend.py ``generation_logprobs``)."""
    if not any(o.logprobs_status for o in gens):
        return {}
    return {"token_logprobs": [list(o.token_logprobs or ()) for o in gens],
            "sum_logprob": [float(sum(o.token_logprobs)) if o.token_logprobs is not None else float("nan")
                            for o in gens],
            "logprobs_status": [o.logprobs_status for o in gens]}


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    # a sampled answer set (temperature > 0) gets one SamplesOutput of n = 1 per request
    gens: tuple[GenerationOutput, ...] = tuple(o.samples[0] if isinstance(o, SamplesOutput) else o for o in outputs)
    return pd.DataFrame({
        "model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids,
        "prompt_id": plan.set_of[shard.answer_set].prompt, "sample_idx": 0, "chunk": shard.chunk,
        "raw_output": [o.text for o in gens], "finish_reason": [o.finish_reason for o in gens],
        "n_new_tokens": [o.n_tokens for o in gens], **_generation_logprobs(gens)})


register_stage(Stage("generate", "generate", request=lambda r: GenerateRequest(r.user_text), table=_table, answers=True,
                     table_name="generations", schema=lambda aggregations, rules: pa.schema(GENERATION_COLUMNS),
                     part=UnitPart(answer=lambda unit, shard, table: table)))
