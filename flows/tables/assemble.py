"""Assembly: rows from model outputs, and the per-unit tables the metrics read.

:func:`shard_table` turns one shard's outputs into its stored rows (the
columns of docs/concepts/index.md); :func:`assemble` gathers, per
(model, dataset, answer set), the graded answers, the aggregated token scores
and the probe rows of a finished run. A unit with any shard missing (failed or
not run) gets no metrics and is named in the log.
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
from confgrid.flows.stages.score import aggregate_scores
from confgrid.protocols.items import Item

__all__ = ["shard_table", "Unit", "Assembly", "assemble", "verbalized_from_probe", "empty_schema"]

log = logging.getLogger("confgrid")


def shard_table(plan: GridPlan, shard: ShardRequest, outputs: tuple[Any, ...]) -> pd.DataFrame:
    """The stored rows of one shard, from its outputs (one per request, in request order; its stage's ``table``).

    Raises
    ------
    ValueError
        If the number of outputs differs from the number of requests.
    """
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
    """Everything the metrics of one (model, dataset, answer set) read."""

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


def _own(done: dict[str, pd.DataFrame], s: ShardRequest) -> pd.DataFrame:
    """The stored table of ``s``, labelled as ``s`` (a shard shared by two models carries the first's name)."""
    return relabel(done[s.key], model=s.model, dataset=s.dataset, answer_set=s.answer_set, chunk=s.chunk,
                   context_id=s.context)


def assemble(plan: GridPlan, done: dict[str, pd.DataFrame], shards: list[ShardRequest],
             only: Collection[tuple[str, str]] | None = None) -> Assembly:
    """Gather the finished units of a run.

    Parameters
    ----------
    plan : GridPlan
        The plan that was run (its graded answers per generate key).
    done : dict of str to DataFrame
        Every shard table that is done, by key (the executor's result).
    shards : list of ShardRequest
        Every shard the plan produced (twins included: coinciding contexts
        share one key and are read under each context id).
    only : collection of (model, dataset), optional
        Gather only these settings (early stopping evaluates one setting after each of its rounds).
    """
    spec = plan.spec
    by_unit: dict[tuple[str, str, str], dict[str, list[ShardRequest]]] = {}
    for sh in shards:
        by_unit.setdefault((sh.model, sh.dataset, sh.answer_set), {}).setdefault(sh.stage, []).append(sh)
    out = Assembly(stage_tables={st.table_name: [] for _, st in STAGES.items() if st.schema is not None})
    for m in spec.models:
        for d in spec.datasets:
            if only is not None and (m.name, d.name) not in only:
                continue
            for a in plan.sets:
                gen_planned = plan.units.get((m.name, d.name, a.id))
                if gen_planned is None or not gen_planned.shards:
                    continue
                stages = by_unit.get((m.name, d.name, a.id), {})
                g_sh, s_sh, p_sh = gen_planned.shards, stages.get("score", []), stages.get("probe", [])
                for s in g_sh:
                    if s.key in done:
                        out.stage_tables["generations"].append(pa.Table.from_pandas(_own(done, s), preserve_index=False))
                        out.stage_tables["graded"].append(
                            pa.Table.from_pandas(gen_planned.graded[s.label], preserve_index=False))
                probes = [_own(done, s) for s in p_sh if s.key in done]
                probe_df = pd.concat(probes, ignore_index=True) if probes else None
                if probe_df is not None and len(probe_df):
                    out.stage_tables["probe"].append(pa.Table.from_pandas(probe_df, preserve_index=False))
                # the metrics need the answers, their scores and (a set without a stated score) the own-answer
                # probe; the probe study (Table 17) needs every probe kind, the cross-model ones included
                needed = [*g_sh, *s_sh, *(p_sh if a.verbalized_by_probe else [])]
                missing = [s for s in needed if s.key not in done]
                if missing:
                    # shards never planned count too: the scores (and own-answer probe) of missing answers
                    per_gen = len(a.scoring_contexts(spec.scoring.contexts)) + a.verbalized_by_probe
                    unplanned = sum(per_gen for s in g_sh if s.key not in done)
                    log.warning("%s/%s [%s]: %d shard(s) missing (%d planned and not done, %d not planned because "
                                "the answers they read are missing); no metrics for it", m.name, d.name, a.id,
                                len(missing) + unplanned, len(missing), unplanned)
                    part = [_own(done, s) for s in s_sh if s.key in done]  # kept like the generations above
                    if part:
                        out.stage_tables["scores"].append(pa.Table.from_pandas(
                            aggregate_scores(pd.concat(part, ignore_index=True), spec.scoring.aggregations),
                            preserve_index=False))
                    continue
                probe_complete = all(s.key in done for s in p_sh) and not (
                    a.id == "main" and plan.expects_cross_for(m.name, d.name))
                if a.id == "main" and plan.spec.probe.enabled and not probe_complete:
                    log.warning("%s/%s: the supplied-answer probe is incomplete (failed shards or another model's "
                                "answers missing); left out of Table 17, the other results are complete",
                                m.name, d.name)
                graded = plan.answers(m.name, d.name, a.id)
                if a.verbalized_by_probe:
                    graded = verbalized_from_probe(graded, probe_df)
                sc = [_own(done, s) for s in s_sh]
                sc_df = pd.concat(sc, ignore_index=True) if sc else pd.DataFrame(
                    columns=["model", "dataset", "item_id", "context_id", "logprobs"])
                tokens = aggregate_scores(sc_df, spec.scoring.aggregations)
                if len(tokens):
                    out.stage_tables["scores"].append(pa.Table.from_pandas(tokens, preserve_index=False))
                out.units[(m.name, d.name, a.id)] = Unit(a, graded, tokens, probe_df, probe_complete,
                                                        list(plan.set_items[(a.id, d.name)]))
    return out
