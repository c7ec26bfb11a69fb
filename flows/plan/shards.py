"""The plan's shard requests: one typed record per unit of model work, and the typed rows each stage asks.

A :class:`ShardRequest` has what every stage has (stage, model, dataset, answer set, chunk, content key,
rows, the shards it was planned from) and what names it within its setting (the scoring context of a score
shard, the part of a probe shard, the method of a method shard); its engine-call parameters are one
:class:`CallParams` record, set by the stage that needs them. Rows are typed per stage: :class:`GenerateRow`,
:class:`ScoreRow`, :class:`ProbeRow`, :class:`MethodRow`. Built by flows/plan/grid_plan.py; run by
flows/execute/executor.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Union

from confgrid.actors.calls import EngineCall, GenerateRequest, Sampling, ScoreRequest, ShardWork
from confgrid.protocols.method_kinds import STAGE_CALLS

__all__ = ["Stage", "GenerateRow", "ScoreRow", "ProbeRow", "MethodRow", "Row", "METHOD_STAGES", "CallParams",
           "ShardRequest"]

Stage = Literal["generate", "score", "probe", "sample", "rate", "next_token", "hidden"]

@dataclass(frozen=True)
class GenerateRow:
    """One generation of an answer: the item and its rendered user turn."""

    item_id: str
    user_text: str


@dataclass(frozen=True)
class ScoreRow:
    """One forced-decoding request: an answer after a scoring context (study 000 section 3.4)."""

    item_id: str
    user_text: str
    assistant_prefix: str
    separator: str
    answer: str


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


@dataclass(frozen=True)
class MethodRow:
    """One request of a confidence method: a rendered method template (and the answer it rates, if any)."""

    item_id: str
    user_text: str
    rated_answer: str = ""
    assistant_prefix: str = ""


Row = Union[GenerateRow, ScoreRow, ProbeRow, MethodRow]

#: Method stages -> the engine call that computes each (protocols/method_kinds.py: every kind's stage).
METHOD_STAGES = STAGE_CALLS


@dataclass(frozen=True)
class CallParams:
    """The engine-call parameters of a shard: what a replica needs beyond the requests (actors/calls.py
    ``EngineCall`` takes them as they are). Each stage sets its own, the rest keep their defaults.

    Attributes
    ----------
    max_new_tokens : int
        Generation budget in tokens (generate, probe, sample and rate shards; >= 1).
    sampling : Sampling or None
        Sampled decoding (sample shards, and answer sets with a temperature); None is greedy.
    top_logprobs : int
        Next-token distribution size (next_token shards).
    candidates, cases : tuple of str
        Candidate strings and their cases (next_token shards: P(True), letter probabilities).
    layers : tuple of int or None
        Hidden-state layers (hidden shards; None: every layer).
    """

    max_new_tokens: int = 32
    sampling: Sampling | None = None
    top_logprobs: int = 20
    candidates: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    layers: tuple[int, ...] | None = None

    def engine_call(self, kind: str, shards: tuple[ShardWork, ...]) -> EngineCall:
        """The engine call of ``shards`` (their requests, as the replica receives them) with these parameters."""
        return EngineCall(kind=kind, shards=shards, max_new_tokens=self.max_new_tokens, sampling=self.sampling,
                          top_logprobs=self.top_logprobs, candidates=self.candidates, candidate_cases=self.cases,
                          layers=self.layers)


@dataclass(frozen=True)
class ShardRequest:
    """One unit of model work: a chunk of one setting's requests in one stage.

    Attributes
    ----------
    stage : {"generate", "score", "probe"}
    model : str
        Model name in the grid.
    dataset : str
        Dataset name in the grid.
    answer_set : str
        ``main`` or an ``answer_sets[].id``.
    chunk : int
        Index of the chunk within its (model, dataset, answer set[, context]).
    key : str
        Content key (64 hex characters; flows/store/run_store.py ``shard_key``).
    rows : tuple
        The requests: :class:`GenerateRow`, :class:`ScoreRow` or :class:`ProbeRow`.
    context : str or None
        Scoring context (score shards).
    upstream : tuple of str
        Keys of the shards whose outputs this one was planned from (its
        dependencies for ``resubmit --failed``).
    part : str
        Probe shards: ``own`` (kinds needing only the model's answers) or
        ``cross`` (kinds needing other models' answers); ``""`` otherwise.
    method : str
        Method shards (stages sample, rate, next_token, hidden): the method id.
    call : CallParams
        The engine-call parameters the stage needs (the token budget; sampling; the next-token fields; the
        hidden layers); the defaults for the others.
    """

    stage: Stage
    model: str
    dataset: str
    answer_set: str
    chunk: int
    key: str
    rows: tuple[Row, ...]
    context: str | None = None
    upstream: tuple[str, ...] = ()
    part: str = ""
    method: str = ""
    call: CallParams = CallParams()

    @property
    def setting(self) -> str:
        return f"{self.model}/{self.dataset}"

    @property
    def label(self) -> str:
        """Unique name in the manifest: ``model/dataset[set]/context/part/method#chunk``."""
        aset = f"[{self.answer_set}]" if self.answer_set != "main" else ""
        ctx = f"/{self.context}" if self.context else ""
        part = f"/{self.part}" if self.part else ""
        method = f"/{self.method}" if self.method else ""
        return f"{self.setting}{aset}{ctx}{part}{method}#{self.chunk}"

    @property
    def item_ids(self) -> list[str]:
        return [r.item_id for r in self.rows]

    @property
    def grid_entries(self) -> dict[str, str]:
        """The grid entries the shard belongs to, as the manifest records them (RunStore ``begin``/``reuse``):
        ``model``, ``dataset``, ``answer_set``."""
        return {"model": self.model, "dataset": self.dataset, "answer_set": self.answer_set}

    @property
    def engine_kind(self) -> str:
        """What the replica runs: ``generate`` (generate, probe, sample, rate), ``score``, ``next_token``,
        ``hidden_states``."""
        if self.stage == "score":
            return "score"
        return METHOD_STAGES.get(self.stage, "generate")

    def call_key(self) -> tuple:
        """Shards with equal call keys can share one engine call."""
        return (self.engine_kind, self.call)

    def work(self) -> ShardWork:
        """The shard's requests as the replica receives them."""
        if self.stage == "score":
            reqs: tuple[Any, ...] = tuple(ScoreRequest(r.user_text, r.assistant_prefix, r.separator, r.answer)
                                          for r in self.rows)
        elif self.stage in ("probe", *METHOD_STAGES):
            reqs = tuple(GenerateRequest(r.user_text, r.assistant_prefix) for r in self.rows)
        else:
            reqs = tuple(GenerateRequest(r.user_text) for r in self.rows)
        return ShardWork(key=self.key, requests=reqs)
