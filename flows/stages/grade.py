"""Driver stage ``grade``: parse every generation the way its prompt asks, then grade it under every rule.

Pure and cheap (no model): it reruns from stored generations in milliseconds. Table
``tables/graded.parquet``: the generations plus answer, verbalized, parse_status, used_fallback, reasoning_status,
``correct_<rule>`` for every rule, correct (primary rule), correct_rule. Study 000 Appendix A ("Parsing").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.flows.stages.base import PARSED_COLUMNS, Stage, UnitPart, register_stage
from confgrid.flows.stages.generate import GENERATION_COLUMNS
from confgrid.protocols.correctness import ANSWER_FREE_RULES, get_rule
from confgrid.protocols.item_formats import item_format
from confgrid.protocols.items import Item
from confgrid.protocols.json_output import chance_answer
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.parsing import ParseResult, apply_parse_policy
from confgrid.protocols.prompts import get_prompt
from confgrid.protocols.reasoning import strip_reasoning

__all__ = ["REFUSAL_POLICIES", "ANSWER_ALIGN", "parse_generations", "grade_answers", "answer_rows", "token_signal"]

#: Refusal policies (study 003 section 3.2): ``drop`` leaves unparsed rows out (counted), ``chance`` scores them
#: as a seeded random letter with confidence 1/k (:func:`answer_rows`).
REFUSAL_POLICIES = ("drop", "chance")

#: The ``align`` label of the signals of one answer (verbalized and token scores).
ANSWER_ALIGN = "answer"


def parse_generations(gen: pd.DataFrame, prompt_id: str = "confidence",
                      reasoning_end: str | None = None, items: list[Item] | None = None,
                      fmt: str = "open") -> pd.DataFrame:
    """Add ``answer``, ``verbalized``, ``parse_status``, ``used_fallback``, ``reasoning_status`` to generations.

    Parsed the way the prompt asks (protocols/output_formats.py ``parse_for_prompt``; a 0-100 prompt is scaled to
    [0, 1]), after a thinking model's reasoning block is removed (``reasoning_end``: its declared marker).
    Unparseable output is a recorded status, never an exception (study 000 Appendix A "Parsing"); a reasoning
    block that never ended is ``reasoning_unterminated``. ``items`` gives each row, when the options were shown
    (``fmt="mc"``), its number of options and, for a prompt that asks a probability only, the answer it rates
    (the item's ``metadata["given_answer"]``, e.g. HaluEval's).
    """
    prompt = get_prompt(prompt_id)
    shown = item_format(fmt).options
    by_id = {it.item_id: it for it in items or ()}
    out = gen.copy()
    visible = [strip_reasoning(t, reasoning_end) for t in out["raw_output"].tolist()]
    parsed = []
    for v, item_id in zip(visible, out["item_id"], strict=True):
        item = by_id.get(item_id)
        if v.status == "unterminated":
            parsed.append(ParseResult(None, None, "reasoning_unterminated", False))
            continue
        k = len(item.options) if shown and item is not None and item.options else None
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
    """Label every parsed answer under every rule: a float column ``correct_<rule>`` each (NaN where there is no
    answer, except under a rule in ``ANSWER_FREE_RULES``) and ``correct``, the primary rule's label."""
    by_id = {it.item_id: it for it in items}
    out = parsed.copy()
    for rule in rules:
        fn = get_rule(rule)
        answer_free = rule in ANSWER_FREE_RULES
        out[f"correct_{rule}"] = [float(fn(a, by_id[i])) if answer_free or (isinstance(a, str) and a.strip())
                                  else np.nan for a, i in zip(out["answer"], out["item_id"], strict=True)]
    out["correct"] = out[f"correct_{primary}"]
    out["correct_rule"] = primary
    return out


def _schema(aggregations: tuple[str, ...], rules: tuple[str, ...]) -> pa.Schema:
    return pa.schema([*GENERATION_COLUMNS, *PARSED_COLUMNS, *((f"correct_{r}", pa.float64()) for r in rules),
                      ("correct", pa.float64()), ("correct_rule", pa.string())])


def token_signal(context: str, aggregation: str, primary: str) -> str:
    """Signal name of the token score in ``context``: ``token_<context>``, with ``__<aggregation>``
    appended for an aggregation other than the primary one."""
    return f"token_{context}" if aggregation == primary else f"token_{context}__{aggregation}"


def _item_status(g: pd.DataFrame, policy: str, verbalized: bool) -> pd.Series:
    """Each graded row's status under the parse policy (``ok``: an answer and, when ``verbalized``, a score)."""
    status = []
    for ans, verb, st, fb in zip(g["answer"], g["verbalized"], g["parse_status"], g["used_fallback"], strict=True):
        r = apply_parse_policy(ParseResult(ans if isinstance(ans, str) else None,
                                           None if pd.isna(verb) else float(verb), st, bool(fb)), policy)
        status.append("ok" if (not verbalized and r.answer is not None and r.answer.strip()) else r.status)
    return pd.Series(status, index=g.index, dtype=object)


def _chance(g: pd.DataFrame, status: pd.Series, items: list[Item], rule: str, seed: int, run: str) -> pd.DataFrame:
    """Rows whose parse failed answered by chance (study 003 section 3.2), indexed like ``g``: ``confidence``
    (1/k, NaN if not replaced) and ``target`` (the random letter's correctness)."""
    by_id = {it.item_id: it for it in items}
    fn = get_rule(rule)
    out = pd.DataFrame({"confidence": np.nan, "target": np.nan}, index=g.index)
    for idx in status.index[status != "ok"]:
        item = by_id.get(g.at[idx, "item_id"])
        if item is None or not item.options:
            continue
        k = len(item.options)
        letter = chance_answer(seed, item.item_id, k, run)
        out.loc[idx] = (1.0 / k, float(fn(letter, item)))
    return out


def answer_rows(graded: pd.DataFrame, tokens: pd.DataFrame, contexts: tuple[str, ...], *,
                aggregations: tuple[str, ...] = ("geometric_mean",), policy: str = "label_or_fallback",
                rule: str, verbalized: bool = True, refusal: str = "drop", items: list[Item] | None = None,
                chance_seed: int = 0, chance_run: str = "") -> pd.DataFrame:
    """Signal rows of one answer set's graded answers: the verbalized score and every token score.

    ``graded``: ``tables/graded`` rows of one unit; ``tokens``: its aggregated token scores (score.py
    ``aggregate_scores``); the first aggregation is the primary one (signal ``token_<context>``, the others
    ``token_<context>__<aggregation>``); ``policy``: protocols/parsing.py ``apply_parse_policy``; the target is
    ``correct_<rule>`` (0/1 or graded in [0, 1]); ``verbalized``: the set states a confidence (else no verbalized
    row, and an answer alone is ``ok``); ``refusal`` ``chance`` (study 003 section 3.2): a row of an item with
    options whose parse failed is answered by a seeded random letter
    (:func:`~confgrid.protocols.json_output.chance_answer` of ``chance_seed``, the item and ``chance_run``) with
    confidence 1/k in every signal (``replaced``).

    Returns signal-table rows without unit labels: item_id, signal, kind, context, aggregation, confidence,
    target, status (``ok``, the parse status under the policy, ``rule_undefined``, ``token_score_missing``),
    replaced, rated (``own_answer``), target_rule, align (``answer``). Raises ValueError for ``refusal`` outside
    :data:`REFUSAL_POLICIES`.
    """
    if refusal not in REFUSAL_POLICIES:
        raise ValueError(f"refusal={refusal!r}; allowed: {list(REFUSAL_POLICIES)}")
    if graded.empty:
        return pd.DataFrame(columns=["item_id", "signal"])
    g = graded.reset_index(drop=True)
    status = _item_status(g, policy, verbalized)
    target = g[f"correct_{rule}"].astype(float)
    replaced = pd.Series(False, index=g.index)
    chance = None
    if refusal == "chance":
        chance = _chance(g, status, items or [], rule, chance_seed, chance_run)
        replaced = chance["confidence"].notna()
        status = status.where(~replaced, "ok")
        target = target.where(~replaced, chance["target"])
    answered = (g["answer"].map(lambda a: isinstance(a, str) and bool(a.strip())) | replaced).to_numpy(bool)
    target_v = target.to_numpy(np.float64)
    base_status = status.where(status != "ok", np.where(np.isnan(target_v), "rule_undefined", "ok")).to_numpy(object)
    n = len(g)
    item_ids, replaced_v = g["item_id"].to_numpy(object), replaced.to_numpy(bool)
    # one block of n rows per signal, stacked column by column into one frame (a frame per signal is slow)
    blocks: dict[str, list] = {c: [] for c in ("signal", "kind", "context", "aggregation", "confidence", "status")}

    def add(signal: str, kind: str, context: str, aggregation: str, confidence: np.ndarray, st: np.ndarray) -> None:
        for col, v in (("signal", signal), ("kind", kind), ("context", context), ("aggregation", aggregation)):
            blocks[col].append(np.full(n, v, dtype=object))
        blocks["confidence"].append(np.asarray(confidence, dtype=np.float64))
        blocks["status"].append(np.asarray(st, dtype=object))

    chance_conf = chance["confidence"].to_numpy(np.float64) if chance is not None else None
    if verbalized:
        conf = g["verbalized"].astype(float).to_numpy(np.float64)
        add("verbalized", "verbalized", "", "", np.where(replaced_v, chance_conf, conf) if chance is not None
            else np.where(replaced_v, np.nan, conf), base_status)
    primary = aggregations[0]
    by_ctx = ({c: t.set_index("item_id") for c, t in tokens.drop_duplicates(["context_id", "item_id"])
               .groupby("context_id", sort=False)} if len(tokens) else {})
    status_v = status.to_numpy(object)
    for ctx in contexts:
        t = by_ctx.get(ctx, pd.DataFrame())
        for agg in aggregations:
            col = f"token_score__{agg}"
            score = (g["item_id"].map(t[col]).astype(float).to_numpy(np.float64) if col in t
                     else np.full(n, np.nan))
            if chance is not None:
                score = np.where(replaced_v, chance_conf, score)
            st = np.where(~answered, status_v, np.where(np.isnan(target_v), "rule_undefined",
                                                        np.where(np.isfinite(score), "ok", "token_score_missing")))
            add(token_signal(ctx, agg, primary), "token", ctx, agg, score, st)
    k = len(blocks["signal"])
    if not k:
        return pd.DataFrame(columns=["item_id", "signal"])
    out = pd.DataFrame({c: np.concatenate(v) for c, v in blocks.items()})
    out.insert(0, "item_id", np.tile(item_ids, k))
    return out.assign(target=np.tile(target_v, k), replaced=np.tile(replaced_v, k), rated="own_answer",
                      target_rule=rule, align=ANSWER_ALIGN)


def _signals(spec: Any, unit: Any, key: dict[str, str]) -> pd.DataFrame:
    """The signal rows of a unit's graded answers under one analysis key (:func:`answer_rows`)."""
    a = unit.answer_set
    return answer_rows(unit.graded, unit.tokens, a.scoring_contexts(spec.scoring.contexts),
                       aggregations=spec.scoring.aggregations, policy=key["parse_policy"], rule=key["rule"],
                       verbalized=a.verbalized_source() != "none", refusal=key["refusal"], items=unit.items,
                       chance_seed=spec.parsing.chance_seed, chance_run=key["answer_set"])


register_stage(Stage("grade", None, table_name="graded", schema=_schema, signals=_signals,
                     part=UnitPart(answer=lambda unit, shard, table: unit.graded[shard.label])))
