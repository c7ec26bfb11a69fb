"""What the method stages (sample, rate, next_token, hidden) share: their rows' protocol columns, the greedy
answer they rate, and the signal rows of a method that rates it.

Which answer a signal rates (seed 001 D.3, seed 004): self-consistency the first sample; its ``__majority``
signal the majority answer; P(True), the rating and verbalized-before the model's own greedy answer (the main
answer set), graded under the method's rule.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from confgrid.flows.stages.base import get_stage


__all__ = ["RatedValue", "protocol", "greedy_correct", "rated_signals", "method_columns"]


class RatedValue(NamedTuple):
    """One rating read from a method shard's row: the confidence of one item, before it meets its target."""

    item_id: str
    #: the answer rated (P(True), the rating: the proposed answer shown in the template); None for kinds that rate
    #: no shown answer
    rated_answer: str | None
    #: confidence in [0, 1], or None (with its status)
    confidence: float | None
    status: str
    #: the formula's detail (P(True): the candidates' probability mass), or None
    detail: Any = None


def protocol(method: Any, spec: Any, used: dict[str, Any] | None = None) -> dict[str, Any]:
    """The protocol columns of a method's signal rows (``tables/method_signals.parquet``); ``used``: the sampling
    parameters a sample shard actually used (a model's own defaults)."""
    used = used or {}
    entry = method.kind_entry
    fields = get_stage(entry.stage).fields
    return {"method": method.id, "kind": method.kind, "template": method.template_id(spec.elicitation.prompt),
            "k": method.n_samples if "k" in fields else None,
            "temperature": used.get("temperature", method.temperature if method.temperature != "model_default"
                                    else None),
            "top_p": used.get("top_p", method.top_p), "top_k": used.get("top_k", method.top_k),
            "seed": method.seed, "merge": method.merge if "merge" in fields else None,
            "renormalize": (True if entry.letters else method.renormalize if "renormalize" in fields
                            else None)}


def greedy_correct(plan: Any, model: str, dataset: str, rule: str) -> dict[str, float]:
    """item -> correctness of the model's greedy answer (main set) under ``rule``."""
    g = plan.answers(model, dataset, "main")
    return dict(zip(g["item_id"], g[f"correct_{rule}"], strict=True)) if g is not None else {}


def rated_signals(plan: Any, method: Any, model: str, dataset: str, values: list[RatedValue],
                  out: dict[str, list]) -> None:
    """Signal rows of a method that rates the model's greedy answer (graded under the method's rule)."""
    rule = method.agreement_rule(plan.spec.correctness.primary)
    greedy = greedy_correct(plan, model, dataset, rule)
    proto = protocol(method, plan.spec)
    for v in values:
        out["signals"].append({"model": model, "dataset": dataset, "signal": method.id, "item_id": v.item_id,
                               "confidence": v.confidence, "status": v.status, "rated": method.kind_entry.rated,
                               "rated_answer": v.rated_answer, "correct": greedy.get(v.item_id, np.nan),
                               "rule": rule, "detail": v.detail, **proto})


def method_columns(shard: Any) -> dict[str, Any]:
    """The leading columns of a rate, next_token or hidden shard's rows (one row per request)."""
    return {"model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set,
            "item_id": shard.item_ids, "method": shard.method, "chunk": shard.chunk,
            "rated_answer": [getattr(r, "rated_answer", "") for r in shard.rows]}


def frame(rows: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of one bucket of the method tables as one frame (an empty frame for none)."""
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
