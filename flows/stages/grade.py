"""Driver stage ``grade``: parse every generation the way its prompt asks, then grade it under every rule.

Pure and cheap (no model): it reruns from stored generations in milliseconds. Table
``tables/graded.parquet``: the generations plus answer, verbalized, parse_status, used_fallback, reasoning_status,
``correct_<rule>`` for every rule, correct (primary rule), correct_rule. Study 000 Appendix A ("Parsing").
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.flows.stages.base import PARSED_COLUMNS, Stage, register_stage
from confgrid.flows.stages.generate import GENERATION_COLUMNS
from confgrid.protocols.correctness import ANSWER_FREE_RULES, get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.parsing import ParseResult
from confgrid.protocols.prompts import get_prompt
from confgrid.protocols.reasoning import strip_reasoning

__all__ = ["REFUSAL_POLICIES", "parse_generations", "grade_answers"]

#: Refusal policies (study 003 section 3.2): ``drop`` leaves unparsed rows out (counted), ``chance`` scores them
#: as a seeded random letter with confidence 1/k (flows/tables/signals.py ``answer_rows``).
REFUSAL_POLICIES = ("drop", "chance")


def parse_generations(gen: pd.DataFrame, prompt_id: str = "confidence",
                      reasoning_end: str | None = None, items: list[Item] | None = None,
                      fmt: str = "open") -> pd.DataFrame:
    """Add ``answer``, ``verbalized``, ``parse_status``, ``used_fallback``, ``reasoning_status`` to generations.

    Parsed the way the prompt that generated them asks (protocols/output_formats.py
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


def _schema(aggregations: tuple[str, ...], rules: tuple[str, ...]) -> pa.Schema:
    return pa.schema([*GENERATION_COLUMNS, *PARSED_COLUMNS, *((f"correct_{r}", pa.float64()) for r in rules),
                      ("correct", pa.float64()), ("correct_rule", pa.string())])


register_stage(Stage("grade", None, table_name="graded", schema=_schema))
