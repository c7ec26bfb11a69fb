"""Method stage ``rate``: one greedy generation that states a confidence (the 0-100 rating of the model's own
answer, study 001 Table 5; verbalized-before, study 004).

Rows: ``MethodRow``; engine call ``generate``; stored rows: raw_output, finish_reason, n_new_tokens per item;
signal rows: the stated confidence, rating the model's greedy answer; costs: generated tokens per item.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from confgrid.actors.calls import CallParams
from confgrid.flows.stages.base import Stage, prompted, register_stage
from confgrid.flows.stages.method_base import (CapabilityRole, MethodReader, RatedValue, method_columns, rated_signals,
                                              register_reader)
from confgrid.protocols.methods import Confidence, parse_boxed
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.prompts import get_prompt
from confgrid.protocols.reasoning import strip_reasoning

__all__ = ["PARSERS"]


def _boxed_rating(text: str | None, template: str) -> Confidence:
    """The 0-100 rating: the last ``\\boxed{N}`` / 100 (``parse_boxed``); statuses ``ok``, ``missing``,
    ``unparsed_number``, ``out_of_range``."""
    return parse_boxed(text, decimal_comma=get_prompt(template).decimal_comma)


def _stated_probability(text: str | None, template: str) -> Confidence:
    """The stated confidence of ``template`` (``parse_for_prompt``): ``ok``, ``out_of_range``,
    ``unparsed_number``, or ``missing`` for every other parse status."""
    p = parse_for_prompt(text, template)
    if p.verbalized is not None:
        return Confidence(p.verbalized, "ok")
    return Confidence(None, p.status if p.status in ("out_of_range", "unparsed_number") else "missing")


#: How each reader of this stage reads a reply (after its reasoning block) as a confidence in [0, 1] (or None)
#: with its status: reader ``boxed_rating`` (the 0-100 rating), ``stated_probability`` (verbalized-before).
PARSERS = {"boxed_rating": _boxed_rating, "stated_probability": _stated_probability}


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    return pd.DataFrame({**method_columns(shard), "raw_output": [o.text for o in outputs],
                         "finish_reason": [o.finish_reason for o in outputs],
                         "n_new_tokens": [o.n_tokens for o in outputs]})


def _method_call(method: Any, spec: Any, n_letters: int) -> tuple[dict[str, Any], CallParams]:
    budget = method.new_tokens(spec.elicitation.max_new_tokens)
    return ({"max_new_tokens": budget, "decoding": "greedy"},
            CallParams(max_new_tokens=budget, top_logprobs=method.top_logprobs))


def rate_values(plan: Any, method: Any, model: str, table: pd.DataFrame) -> list[RatedValue]:
    """The stated rating of every row of a rate-stage method table."""
    template = method.template_id(plan.spec.elicitation.prompt)
    out = []
    for r in table.itertuples(index=False):
        v = strip_reasoning(r.raw_output, plan.models[model].reasoning_end)
        c = (Confidence(None, "reasoning_unterminated") if v.status == "unterminated"
             else PARSERS[method.kind_entry.reader](v.text, template))
        out.append(RatedValue(r.item_id, r.rated_answer or None, c.value, c.status))
    return out


def _collect(plan: Any, method: Any, model: str, dataset: str, table: pd.DataFrame, out: dict[str, list]) -> None:
    rated_signals(plan, method, model, dataset, rate_values(plan, method, model, table), out)
    out["costs"].append(table[["model", "dataset", "method", "item_id", "n_new_tokens"]].rename(
        columns={"n_new_tokens": "generated_tokens"}))


register_stage(Stage("rate", "generate", request=prompted, table=_table, method_call=_method_call,
                     fields=("assistant_prefix",)))
for _name in PARSERS:
    register_reader(MethodReader(_name, "rate", _collect, capability=CapabilityRole("verbalized"),
                                 rated_values=rate_values))
