"""The model stages as registry entries: what one stage is (:class:`Stage`), the registry, and what they share.

A stage is one kind of shard (``generate``, ``score``, ``probe``, the method stages ``sample``, ``rate``,
``next_token``, ``hidden``) or a driver step between them (``grade``: parse + grade). Its entry, in its own file
of this folder, owns everything that differs between stages (:class:`Stage`); what a method kind makes of its
rows is its reader (flows/stages/method_base.py ``READERS``). A duplicate name is an error, an unknown one lists
the choices (lm-evaluation-harness style).

Examples
--------
>>> from confgrid.flows.stages.base import get_stage
>>> get_stage("rate").engine, get_stage("generate").answers, get_stage("grade").engine
('generate', True, None)
>>> get_stage("scor")
Traceback (most recent call last):
    ...
confgrid.registry.UnknownNameError: unknown model stage 'scor'; allowed: generate, grade, hidden, next_token, \
probe, rate, sample, score
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import pandas as pd
import pyarrow as pa

from confgrid.actors.calls import CallParams, GenerateRequest
from confgrid.registry import Registry


__all__ = ["Stage", "UnitPart", "STAGES", "register_stage", "get_stage", "MethodRow", "relabel", "KEY_COLUMNS",
           "PARSED_COLUMNS"]

#: The label columns every stage table starts with, as Arrow types.
KEY_COLUMNS = [("model", pa.string()), ("dataset", pa.string()), ("answer_set", pa.string()),
               ("item_id", pa.string())]
#: The columns parsing adds (generations, probe rows).
PARSED_COLUMNS = [("answer", pa.string()), ("verbalized", pa.float64()), ("parse_status", pa.string()),
                  ("used_fallback", pa.bool_())]


@dataclass(frozen=True)
class MethodRow:
    """One request of a confidence method: a rendered method template (and the answer it rates, if any)."""

    item_id: str
    user_text: str
    rated_answer: str = ""
    assistant_prefix: str = ""


def prompted(row: Any) -> GenerateRequest:
    """The engine request of a row with a user turn and an assistant prefix (probe and method rows)."""
    return GenerateRequest(row.user_text, row.assistant_prefix)


def relabel(table: pd.DataFrame, **labels: object) -> pd.DataFrame:
    """A shard table with its label columns (model, dataset, answer_set, chunk, context_id) set to ``labels``;
    columns it lacks are not added. A shard is keyed by its inputs, not by grid names, so two models with one
    identity share a shard stored under the first name: every reader relabels it to the request it reads it for.
    """
    out = table.copy()
    for col, value in labels.items():
        if col in out.columns:
            out[col] = value
    return out


#: ``(plan, shard, outputs) -> DataFrame``: the stored rows of one shard from its outputs (one per request).
TableFn = Callable[[Any, Any, tuple[Any, ...]], pd.DataFrame]
#: ``(spec, unit, key) -> DataFrame or None``: a stage's signal rows (without unit labels) of one unit
#: (flows/tables/assemble.py ``Unit``) under one analysis key (flows/tables/signals.py ``unit_keys``).
SignalsFn = Callable[[Any, Any, dict[str, str]], Optional[pd.DataFrame]]
#: ``(method, spec, n_letters) -> (key parameters, CallParams)``: what a method stage puts in its shard key.
MethodCallFn = Callable[[Any, Any, int], tuple[dict[str, Any], CallParams]]


@dataclass(frozen=True)
class UnitPart:
    """What a stage contributes to an answer unit (flows/tables/assemble.py ``Unit``) and to its stage table.

    A stage that yields or grades the answers gives ``answer``: ``(planned unit, shard, its table) -> rows`` of
    its stage table for each done answer shard. A stage planned from the answers gives the rest: ``field``, the
    ``Unit`` attribute filled with ``rows(spec, the unit's shard tables done)`` (stored too when not empty);
    ``needed(spec, answer set)``, how many of its shards each answer shard plans that the unit's metrics need
    (0: the unit gets metrics without them); ``complete(plan, unit key, all planned done)``, the unit's
    ``<field>_complete``; ``graded(answer set, graded answers, rows)``, the graded answers the unit reads.
    """

    answer: Callable[[Any, Any, pd.DataFrame], pd.DataFrame] | None = None
    field: str | None = None
    rows: Callable[[Any, list[pd.DataFrame]], pd.DataFrame | None] = (
        lambda spec, frames: pd.concat(frames, ignore_index=True) if frames else None)
    needed: Callable[[Any, Any], int] = lambda spec, answer_set: 0
    complete: Callable[[Any, tuple[str, str, str], bool], bool] | None = None
    graded: Callable[[Any, pd.DataFrame, pd.DataFrame | None], pd.DataFrame] | None = None


@dataclass(frozen=True)
class Stage:
    """One model stage (or driver step) and everything that differs between stages."""

    name: str  # ShardRequest.stage, the manifest's stage, the shard key's prefix
    # the engine call a replica runs for its shards (actors/model_actor.py ENGINE_CALLS); None: a driver stage
    engine: str | None
    request: Callable[[Any], Any] | None = None  # row -> GenerateRequest | ScoreRequest
    table: TableFn | None = None  # the stored rows of a shard
    # its shards yield the answers the later stages are planned from (generate): graded, then the downstream
    # shards planned; a replica runs them first
    answers: bool = False
    table_name: str | None = None  # the stage table it writes (tables/<table_name>.parquet), if one of its own
    # (aggregations, rules) -> the columns of that table when no shard of it is complete
    schema: Callable[[tuple[str, ...], tuple[str, ...]], pa.Schema] | None = None
    # its rows of the one signal table (grade: the graded answers' scores; probe: the supplied answers); method
    # stages add theirs through their readers
    signals: SignalsFn | None = None
    method_call: MethodCallFn | None = None  # method stages: what goes in the shard key
    # method stages: the methods[] fields beyond the common ones (a grid that sets another is refused)
    fields: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("transformers", "vllm", "openai")  # the model backends that can run it
    part: UnitPart | None = None  # what it contributes to an answer unit (assembly)


#: Every stage, by name (registration order: generate, grade, score, probe, then the method stages).
STAGES: Registry[Stage] = Registry("model stage", value_type=Stage)


def register_stage(stage: Stage) -> Stage:
    """Register ``stage`` under its name. Raises ValueError if the name is taken."""
    return STAGES.register(stage.name, stage)


def get_stage(name: str) -> Stage:
    """The registry entry of a stage. Raises UnknownNameError (listing the stages) for an unknown name."""
    return STAGES.get(name)
