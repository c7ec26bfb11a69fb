"""Stage ``probe``: the supplied-answer probe (study 000 section 3.6, Appendix I).

Rows: :class:`ProbeRow` (a supplied answer after ``Guess:``); engine call ``generate``; table
``tables/probe.parquet``: per supplied answer kind, answer, source, raw_output, verbalized, parse_status,
used_fallback.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.flows.stages.base import KEY_COLUMNS, PARSED_COLUMNS, Stage, UnitPart, prompted, register_stage
from confgrid.protocols.correctness import get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.probe import parse_probe_output

__all__ = ["ProbeRow", "probe_rows", "verbalized_from_probe"]

log = logging.getLogger("confgrid")


@dataclass(frozen=True)
class ProbeRow:
    """One supplied-answer probe request (study 000 section 3.6): the ``kind`` of supplied answer
    (protocols/probe.py ``SUPPLIED_KINDS``), the ``answer`` after ``Guess:``, the confidence prompt, and the other
    model (``plausible_wrong``) or item (``off_type``) it came from (``""`` otherwise)."""

    item_id: str
    user_text: str
    assistant_prefix: str
    kind: str
    answer: str
    prompt_id: str
    source: str


def _table(plan: Any, shard: Any, outputs: tuple[Any, ...]) -> pd.DataFrame:
    parsed = [parse_probe_output(o.text, r.answer, r.prompt_id) for o, r in zip(outputs, shard.rows, strict=True)]
    return pd.DataFrame({
        "model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids,
        "kind": [r.kind for r in shard.rows], "answer": [r.answer for r in shard.rows],
        "source": [r.source for r in shard.rows], "raw_output": [o.text for o in outputs],
        "verbalized": pd.array([p.verbalized for p in parsed], dtype="Float64"),
        "parse_status": [p.status for p in parsed], "used_fallback": [bool(p.used_fallback) for p in parsed]})


def probe_rows(probe: pd.DataFrame, items: list[Item], rule: str) -> pd.DataFrame:
    """Signal-table rows of the supplied-answer probe of one answer set (study 000 section 3.6, Appendix I).

    ``probe``: ``tables/probe`` rows of one unit (verbalized: the stated probability, NaN if none); the target
    is the supplied answer's correctness under ``rule``. Returns rows without unit labels: item_id, signal
    ``probe_<kind>``, kind ``probe``, rated ``supplied``, target_rule, confidence, target, status (the parse
    status; ``rule_undefined`` where the rule cannot grade the item), align empty (each kind on its own items);
    the first row of an (item, kind) is kept.
    """
    if probe is None or probe.empty:
        return pd.DataFrame(columns=["item_id", "signal"])
    p = probe.drop_duplicates(["item_id", "kind"]).reset_index(drop=True)
    by_id = {it.item_id: it for it in items}
    fn = get_rule(rule)
    target = np.array([float(fn(a, by_id[i])) if i in by_id and isinstance(a, str) else np.nan
                       for i, a in zip(p["item_id"], p["answer"], strict=True)], dtype=np.float64)
    conf = pd.to_numeric(p["verbalized"], errors="coerce").to_numpy(np.float64)
    status = np.where(p["parse_status"].astype(str) != "ok", p["parse_status"].astype(str),
                      np.where(np.isnan(target), "rule_undefined", "ok"))
    return pd.DataFrame({"item_id": p["item_id"], "signal": "probe_" + p["kind"].astype(str), "kind": "probe",
                         "rated": "supplied", "target_rule": rule, "confidence": conf, "target": target,
                         "status": status, "align": ""})


def _signals(spec: Any, unit: Any, key: dict[str, str]) -> pd.DataFrame | None:
    """The probe's signal rows of a unit under one analysis key; none where the probe's own-answer kind is the
    set's verbalized score (it is not an extra signal there)."""
    if unit.probe is None or not len(unit.probe) or unit.answer_set.verbalized_by_probe:
        return None
    return probe_rows(unit.probe, unit.items, key["rule"])


def verbalized_from_probe(graded: pd.DataFrame, probe: pd.DataFrame | None) -> pd.DataFrame:
    """For a set without a stated score: the verbalized score of the answer re-supplied (kind ``own``)."""
    out = graded.copy()
    own = probe[probe["kind"] == "own"].set_index("item_id") if probe is not None and len(probe) else None
    if own is None:
        out["verbalized"] = pd.array([None] * len(out), dtype="Float64")
        out["parse_status"] = out["parse_status"].where(out["answer"].isna(), "missing_confidence")
        return out
    out["verbalized"] = out["item_id"].map(own["verbalized"]).astype("Float64")
    st = out["item_id"].map(own["parse_status"])
    has_answer = out["answer"].notna() & (out["answer"].astype(str).str.strip() != "")
    out["parse_status"] = st.where(has_answer, "missing_answer").fillna("missing_confidence")
    out["used_fallback"] = out["item_id"].map(own["used_fallback"]).fillna(False).astype(bool)
    out["verbalized_source"] = "probe"
    return out


def _complete(plan: Any, key: tuple[str, str, str], all_done: bool) -> bool:
    """Whether every planned probe shard of a unit is done, the cross-model kinds included (Table 17 needs them)."""
    model, dataset, answer_set = key
    if answer_set != "main":
        return all_done
    ok = all_done and not plan.expects_cross_for(model, dataset)
    if plan.spec.probe.enabled and not ok:
        log.warning("%s/%s: the supplied-answer probe is incomplete (failed shards or another model's answers "
                    "missing); left out of Table 17, the other results are complete", model, dataset)
    return ok


register_stage(Stage("probe", "generate", request=prompted, table=_table, table_name="probe", signals=_signals,
                     schema=lambda aggregations, rules: pa.schema(
                         [*KEY_COLUMNS, ("kind", pa.string()), ("answer", pa.string()), ("source", pa.string()),
                          ("raw_output", pa.string()), *PARSED_COLUMNS[1:]]),
                     part=UnitPart(field="probe", needed=lambda spec, a: int(a.verbalized_by_probe), complete=_complete,
                                   graded=lambda a, graded, rows: (verbalized_from_probe(graded, rows)
                                                                   if a.verbalized_by_probe else graded))))
