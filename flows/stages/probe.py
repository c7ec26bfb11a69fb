"""Stage ``probe``: the supplied-answer probe (study 000 section 3.6, Appendix I).

Rows: :class:`ProbeRow` (a supplied answer after ``Guess:``); engine call ``generate``; table
``tables/probe.parquet``: per supplied answer kind, answer, source, raw_output, verbalized, parse_status,
used_fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from confgrid.flows.stages.base import KEY_COLUMNS, PARSED_COLUMNS, Stage, prompted, register_stage
from confgrid.protocols.probe import parse_probe_output

__all__ = ["ProbeRow"]


@dataclass(frozen=True)
class ProbeRow:
    """One supplied-answer probe request (study 000 section 3.6).

    Attributes
    ----------
    kind : str
        Kind of supplied answer (protocols/probe.py ``SUPPLIED_KINDS``).
    answer : str
        The supplied answer placed after ``Guess:``.
    prompt_id : str
        The confidence prompt the probe is asked in.
    source : str
        The other model (``plausible_wrong``) or item (``off_type``) it came from; ``""`` otherwise.
    """

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
        "parse_status": [p.status for p in parsed], "used_fallback": [bool(p.used_fallback) for p in parsed],
    })


register_stage(Stage("probe", "generate", request=prompted, table=_table, table_name="probe",
                     schema=lambda aggregations, rules: pa.schema(
                         [*KEY_COLUMNS, ("kind", pa.string()), ("answer", pa.string()), ("source", pa.string()),
                          ("raw_output", pa.string()), *PARSED_COLUMNS[1:]])))
