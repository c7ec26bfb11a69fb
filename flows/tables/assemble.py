"""Assembly: rows from model outputs, and the per-unit tables the metrics read.

:func:`shard_table` turns one shard's outputs into its stored rows (the columns of docs/concepts/index.md);
:func:`assemble` gathers, per (model, dataset, answer set), what each stage contributes to the unit (its
registry entry's ``part``: the graded answers, the aggregated token scores, the probe rows). A unit with any
needed shard missing (failed or not run) gets no metrics and is named in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Collection

import pandas as pd
import pyarrow as pa

from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.answers import AnswerSetSpec
from confgrid.flows.stages.base import STAGES, get_stage, relabel
from confgrid.protocols.items import Item

__all__ = ["shard_table", "Unit", "Assembly", "assemble", "empty_schema"]

log = logging.getLogger("confgrid")


def shard_table(plan: GridPlan, shard: ShardRequest, outputs: tuple[Any, ...]) -> pd.DataFrame:
    """The stored rows of one shard, from its outputs (one per request, in request order; its stage's ``table``).
    Raises ValueError if the number of outputs differs from the number of requests."""
    if len(outputs) != len(shard.rows):
        raise ValueError(f"shard {shard.label}: {len(outputs)} outputs for {len(shard.rows)} requests")
    return get_stage(shard.stage).table(plan, shard, outputs)


def empty_schema(stage: str, aggregations: tuple[str, ...] = (), rules: tuple[str, ...] = ()) -> pa.Schema:
    """The columns a stage table has when no shard of it is complete (``tables/<stage>.parquet`` keeps them).

    ``stage`` is a stage's table name (``generations``, ``graded``, ``scores``, ``probe``); ``aggregations`` (the
    grid's token aggregations, the primary first) name the scores' ``token_score__<name>`` columns and ``rules``
    the graded table's ``correct_<rule>`` ones. Raises ValueError for another name, naming the allowed ones.
    """
    owners = {st.table_name: st for _, st in STAGES.items() if st.schema is not None}
    if stage not in owners:
        raise ValueError(f"empty_schema: stage {stage!r}; allowed: {', '.join(owners)}")
    return owners[stage].schema(aggregations, rules)


@dataclass
class Unit:
    """Everything the metrics of one (model, dataset, answer set) read (the fields the stages' parts fill)."""

    answer_set: AnswerSetSpec
    graded: pd.DataFrame
    tokens: pd.DataFrame
    probe: pd.DataFrame | None
    probe_complete: bool = False  # every planned probe shard done, the cross-model kinds included
    items: list[Item] = field(default_factory=list)  # the items the answer set asked (options, metadata)


@dataclass
class Assembly:
    """The units with every shard done, and the stage tables of the run (``tables/<stage>.parquet``)."""

    units: dict[tuple[str, str, str], Unit] = field(default_factory=dict)
    stage_tables: dict[str, list[pa.Table]] = field(default_factory=dict)


def _own(done: dict[str, pd.DataFrame], s: ShardRequest) -> pd.DataFrame:
    """The stored table of ``s``, labelled as ``s`` (a shard shared by two models carries the first's name)."""
    return relabel(done[s.key], model=s.model, dataset=s.dataset, answer_set=s.answer_set, chunk=s.chunk,
                   context_id=s.context)


def _arrow(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(df, preserve_index=False)


def assemble(plan: GridPlan, done: dict[str, pd.DataFrame], shards: list[ShardRequest],
             only: Collection[tuple[str, str]] | None = None) -> Assembly:
    """Gather the finished units of a run.

    ``done``: every shard table that is done, by key (the executor's result); ``shards``: every shard the plan
    produced (twins included: coinciding contexts share one key and are read under each context id); ``only``:
    gather only these (model, dataset) settings (early stopping evaluates one setting after each of its rounds).
    """
    spec = plan.spec
    by_unit: dict[tuple[str, str, str], dict[str, list[ShardRequest]]] = {}
    for sh in shards:
        by_unit.setdefault((sh.model, sh.dataset, sh.answer_set), {}).setdefault(sh.stage, []).append(sh)
    out = Assembly(stage_tables={st.table_name: [] for _, st in STAGES.items() if st.schema is not None})
    parts = [st for _, st in STAGES.items() if st.part is not None]
    of_answers = [st for st in parts if st.part.answer is not None]
    downstream = [st for st in parts if st.part.field is not None]
    for m in spec.models:
        for d in spec.datasets:
            if only is not None and (m.name, d.name) not in only:
                continue
            for a in plan.sets:
                key = (m.name, d.name, a.id)
                planned = plan.units.get(key)
                if planned is None or not planned.shards:
                    continue
                stages = by_unit.get(key, {})
                for s in planned.shards:
                    if s.key in done:
                        table = _own(done, s)
                        for st in of_answers:
                            out.stage_tables[st.table_name].append(_arrow(st.part.answer(planned, s, table)))
                rows, needed = {}, list(planned.shards)
                for st in downstream:
                    sh = stages.get(st.name, [])
                    rows[st.name] = st.part.rows(spec, [_own(done, s) for s in sh if s.key in done])
                    if rows[st.name] is not None and len(rows[st.name]):
                        out.stage_tables[st.table_name].append(_arrow(rows[st.name]))
                    if st.part.needed(spec, a):
                        needed += sh
                missing = [s for s in needed if s.key not in done]
                if missing:
                    # shards never planned count too: the ones each missing answer shard would have planned
                    per_answer = sum(st.part.needed(spec, a) for st in downstream)
                    unplanned = sum(per_answer for s in planned.shards if s.key not in done)
                    log.warning("%s/%s [%s]: %d shard(s) missing (%d planned and not done, %d not planned because "
                                "the answers they read are missing); no metrics for it", m.name, d.name, a.id,
                                len(missing) + unplanned, len(missing), unplanned)
                    continue
                graded = plan.answers(m.name, d.name, a.id)
                fields = {}
                for st in downstream:
                    fields[st.part.field] = rows[st.name]
                    if st.part.complete is not None:
                        fields[f"{st.part.field}_complete"] = st.part.complete(
                            plan, key, all(s.key in done for s in stages.get(st.name, [])))
                    if st.part.graded is not None:
                        graded = st.part.graded(a, graded, rows[st.name])
                out.units[key] = Unit(a, graded, items=list(plan.set_items[(a.id, d.name)]), **fields)
    return out
