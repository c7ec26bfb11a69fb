"""Assembly: rows from model outputs, and the per-unit tables the metrics read.

:func:`shard_table` turns one shard's outputs into its stored rows (the
columns of README.md "What a run does"); :func:`assemble` gathers, per
(model, dataset, answer set), the graded answers, the aggregated token scores
and the probe rows of a finished run. A unit with any shard missing (failed or
not run) gets no metrics and is named in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Collection

import numpy as np
import pandas as pd
import pyarrow as pa

from confgrid.actors.calls import GenerationOutput, SamplesOutput, ScoreOutput
from confgrid.flows.plan.grid_plan import GridPlan
from confgrid.flows.plan.shards import ShardRequest
from confgrid.flows.spec.answers import AnswerSetSpec
from confgrid.flows.stages import aggregate_scores, relabel
from confgrid.protocols.items import Item

__all__ = ["shard_table", "Unit", "Assembly", "assemble", "verbalized_from_probe", "empty_schema"]

log = logging.getLogger("confgrid")


def shard_table(plan: GridPlan, shard: ShardRequest, outputs: tuple[Any, ...]) -> pd.DataFrame:
    """The stored rows of one shard, from its outputs (one per request, in request order).

    Raises
    ------
    ValueError
        If the number of outputs differs from the number of requests.
    """
    if len(outputs) != len(shard.rows):
        raise ValueError(f"shard {shard.label}: {len(outputs)} outputs for {len(shard.rows)} requests")
    base = {"model": shard.model, "dataset": shard.dataset, "answer_set": shard.answer_set, "item_id": shard.item_ids}
    if shard.stage == "generate":
        # a sampled answer set (temperature > 0) gets one SamplesOutput of n = 1 per request
        gens: tuple[GenerationOutput, ...] = tuple(o.samples[0] if isinstance(o, SamplesOutput) else o
                                                   for o in outputs)
        return pd.DataFrame({
            **base, "prompt_id": plan.set_of[shard.answer_set].prompt, "sample_idx": 0, "chunk": shard.chunk,
            "raw_output": [o.text for o in gens], "finish_reason": [o.finish_reason for o in gens],
            "n_new_tokens": [o.n_tokens for o in gens], **_generation_logprobs(gens),
        })
    if shard.stage == "score":
        m = plan.models[shard.model]
        sc: tuple[ScoreOutput, ...] = outputs
        return pd.DataFrame({
            **base, "context_id": shard.context, "chunk": shard.chunk, "answer_source": "generated",
            "answer": [r.answer for r in shard.rows],
            "logprobs": [list(o.logprobs) for o in sc], "answer_token_ids": [list(o.answer_token_ids) for o in sc],
            "n_tokens": [len(o.logprobs) for o in sc], "context_tokens": [o.context_tokens for o in sc],
            "backend": m.backend, "dtype": m.dtype,
        })
    if shard.stage in ("sample", "rate", "next_token", "hidden"):
        return _method_table(shard, outputs, base)
    from confgrid.protocols.probe import parse_probe_output

    gens = outputs
    parsed = [parse_probe_output(o.text, r.answer, r.prompt_id) for o, r in zip(gens, shard.rows, strict=True)]
    return pd.DataFrame({
        **base, "kind": [r.kind for r in shard.rows], "answer": [r.answer for r in shard.rows],
        "source": [r.source for r in shard.rows], "raw_output": [o.text for o in gens],
        "verbalized": pd.array([p.verbalized for p in parsed], dtype="Float64"),
        "parse_status": [p.status for p in parsed], "used_fallback": [bool(p.used_fallback) for p in parsed],
    })


_KEYS = [("model", pa.string()), ("dataset", pa.string()), ("answer_set", pa.string()), ("item_id", pa.string())]
_GENERATIONS = [*_KEYS, ("prompt_id", pa.string()), ("sample_idx", pa.int64()), ("chunk", pa.int64()),
                ("raw_output", pa.string()), ("finish_reason", pa.string()), ("n_new_tokens", pa.int64())]
_PARSED = [("answer", pa.string()), ("verbalized", pa.float64()), ("parse_status", pa.string()),
           ("used_fallback", pa.bool_())]


def empty_schema(stage: str, aggregations: tuple[str, ...] = (), rules: tuple[str, ...] = ()) -> pa.Schema:
    """The columns a stage table has when no shard of it is complete (``tables/<stage>.parquet`` keeps them).

    ``stage`` is ``generations``, ``graded``, ``scores`` or ``probe``; ``aggregations`` (the grid's token
    aggregations, the primary first) name the scores' ``token_score__<name>`` columns and ``rules`` the graded
    table's ``correct_<rule>`` ones. Raises ValueError for another stage, naming the allowed ones.
    """
    if stage == "generations":
        return pa.schema(_GENERATIONS)
    if stage == "graded":
        return pa.schema([*_GENERATIONS, *_PARSED, *((f"correct_{r}", pa.float64()) for r in rules),
                          ("correct", pa.float64()), ("correct_rule", pa.string())])
    if stage == "scores":
        return pa.schema([*_KEYS, ("context_id", pa.string()), ("chunk", pa.int64()), ("answer_source", pa.string()),
                          ("answer", pa.string()), ("logprobs", pa.list_(pa.float64())),
                          ("answer_token_ids", pa.list_(pa.int64())), ("n_tokens", pa.int64()),
                          ("context_tokens", pa.int64()), ("backend", pa.string()), ("dtype", pa.string()),
                          *((f"token_score__{a}", pa.float64()) for a in aggregations),
                          ("token_score", pa.float64()), ("aggregation", pa.string())])
    if stage == "probe":
        return pa.schema([*_KEYS, ("kind", pa.string()), ("answer", pa.string()), ("source", pa.string()),
                          ("raw_output", pa.string()), *_PARSED[1:]])
    raise ValueError(f"empty_schema: stage {stage!r}; allowed: generations, graded, scores, probe")


def _generation_logprobs(gens: tuple[GenerationOutput, ...]) -> dict[str, list]:
    """An API model's columns of its generated tokens' log-probs (nats); ``{}`` for local backends.

    ``token_logprobs``: one float per generated token (``[]`` when the server
    returned none); ``sum_logprob``: their sum, NaN when none came back (never
    0); ``logprobs_status``: ``ok`` or why they are missing
    (actors/openai_backend.py ``generation_logprobs``).
    """
    if not any(o.logprobs_status for o in gens):
        return {}
    return {"token_logprobs": [list(o.token_logprobs or ()) for o in gens],
            "sum_logprob": [float(sum(o.token_logprobs)) if o.token_logprobs is not None else float("nan")
                            for o in gens],
            "logprobs_status": [o.logprobs_status for o in gens]}


def _method_table(shard: ShardRequest, outputs: tuple[Any, ...], base: dict[str, Any]) -> pd.DataFrame:
    """Rows of a method shard: one per sample (sample), per item (rate, next_token, hidden)."""
    import json

    rated = [getattr(r, "rated_answer", "") for r in shard.rows]
    if shard.stage == "sample":
        rows = []
        for item_id, out, ans in zip(shard.item_ids, outputs, rated, strict=True):
            used = out.sampling
            for j, g in enumerate(out.samples):
                rows.append({"item_id": item_id, "sample_idx": j, "raw_output": g.text,
                             "finish_reason": g.finish_reason, "n_new_tokens": g.n_tokens,
                             "temperature": used.temperature, "top_p": used.top_p, "top_k": used.top_k,
                             "n": used.n, "seed": used.seed})
        df = pd.DataFrame(rows, columns=["item_id", "sample_idx", "raw_output", "finish_reason", "n_new_tokens",
                                         "temperature", "top_p", "top_k", "n", "seed"])
        return df.assign(model=shard.model, dataset=shard.dataset, answer_set=shard.answer_set, method=shard.method,
                         chunk=shard.chunk)[["model", "dataset", "answer_set", "method", "chunk", *df.columns]]
    common = {**base, "method": shard.method, "chunk": shard.chunk, "rated_answer": rated}
    if shard.stage == "rate":
        return pd.DataFrame({**common, "raw_output": [o.text for o in outputs],
                             "finish_reason": [o.finish_reason for o in outputs],
                             "n_new_tokens": [o.n_tokens for o in outputs]})
    if shard.stage == "next_token":
        return pd.DataFrame({**common, "top_token_ids": [list(o.token_ids) for o in outputs],
                             "top_logprobs": [list(o.logprobs) for o in outputs],
                             "candidate_tokens": [json.dumps({c: {str(t): v for t, v in ids.items()}
                                                              for c, ids in o.candidate_tokens.items()},
                                                             sort_keys=True) for o in outputs],
                             "prompt_tokens": [o.prompt_tokens for o in outputs],
                             "logprobs_status": [o.logprobs_status for o in outputs]})
    return pd.DataFrame({**common, "layers": [list(o.layers) for o in outputs],
                         "hidden_size": [int(o.states.shape[1]) for o in outputs],
                         "states": [np.ascontiguousarray(o.states, dtype=np.float32).ravel() for o in outputs],
                         "mean_state": [np.asarray(o.states, dtype=np.float32).mean(axis=0) for o in outputs],
                         "prompt_tokens": [o.prompt_tokens for o in outputs]})


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
    labels: dict[str, Any] = {"model": s.model, "dataset": s.dataset, "answer_set": s.answer_set, "chunk": s.chunk}
    if s.stage == "score":
        labels["context_id"] = s.context
    return relabel(done[s.key], **labels)


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
    out = Assembly(stage_tables={k: [] for k in ("generations", "graded", "scores", "probe", "signals")})
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
                            pa.Table.from_pandas(plan.graded[s.label], preserve_index=False))
                probes = [_own(done, s) for s in p_sh if s.key in done]
                probe_df = pd.concat(probes, ignore_index=True) if probes else None
                if probe_df is not None and len(probe_df):
                    out.stage_tables["probe"].append(pa.Table.from_pandas(probe_df, preserve_index=False))
                # the metrics need the answers, their scores and (a set without a stated score) the own-answer
                # probe; the probe study (Table 17) needs every probe kind, the cross-model ones included
                needed = [*g_sh, *s_sh, *(p_sh if a.verbalized_source() == "probe" else [])]
                missing = [s for s in needed if s.key not in done]
                if missing:
                    # shards never planned count too: the scores (and own-answer probe) of missing answers
                    per_gen = len(a.scoring_contexts(spec.scoring.contexts)) + (a.verbalized_source() == "probe")
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
                graded = pd.concat([plan.graded[s.label] for s in g_sh], ignore_index=True)
                if a.verbalized_source() == "probe":
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
