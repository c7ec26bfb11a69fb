"""The plan's shard requests: one typed record per unit of model work, and the typed rows each stage asks.

Rows are typed per stage (:class:`GenerateRow`, :class:`ScoreRow`, :class:`ProbeRow`, :class:`MethodRow`, each from
its stage's file in flows/stages). Built by flows/plan/grid_plan.py; run by flows/execute/executor.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from confgrid.actors.calls import CallParams, ShardWork
from confgrid.flows.stages.base import MethodRow, get_stage
from confgrid.flows.stages.generate import GenerateRow
from confgrid.flows.stages.probe import ProbeRow
from confgrid.flows.stages.score import ScoreRow

__all__ = ["Row", "ShardRequest"]

Row = Union[GenerateRow, ScoreRow, ProbeRow, MethodRow]


@dataclass(frozen=True)
class ShardRequest:
    """One unit of model work: a chunk of one setting's requests in one stage.

    Attributes
    ----------
    stage : str
        A registered stage (flows/stages: generate, score, probe, sample, rate, next_token, hidden).
    model, dataset, answer_set : str
        Names in the grid (answer set ``main`` or an ``answer_sets[].id``).
    chunk : int
        Index of the chunk within its (model, dataset, answer set[, context]).
    key : str
        Content key (64 hex characters; flows/store/run_store.py ``shard_key``).
    rows : tuple
        The requests: :class:`GenerateRow`, :class:`ScoreRow` or :class:`ProbeRow`.
    context : str or None
        Scoring context (score shards).
    upstream : tuple of str
        Keys of the shards whose outputs this one was planned from (its dependencies for ``resubmit --failed``).
    part : str
        Probe shards: ``own`` (kinds needing only the model's answers) or ``cross`` (kinds needing other models'
        answers); ``""`` otherwise.
    method : str
        Method shards (stages sample, rate, next_token, hidden): the method id.
    call : CallParams
        The engine-call parameters the stage needs (the token budget; sampling; the next-token fields; the hidden
        layers); the defaults for the others.
    """

    stage: str
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
        """What the replica runs: its stage's engine call (``generate``, ``score``, ``next_token``,
        ``hidden_states``)."""
        return get_stage(self.stage).engine

    @property
    def answers(self) -> bool:
        """Its stage yields the answers the later stages are planned from (generate)."""
        return get_stage(self.stage).answers

    @property
    def rank(self) -> int:
        """Queue order on its model's replicas: the answers the later stages read first (0), then the rest (1)."""
        return 0 if self.answers else 1

    def call_key(self) -> tuple:
        """Shards with equal call keys can share one engine call."""
        return (self.engine_kind, self.call)

    def work(self) -> ShardWork:
        """The shard's requests as the replica receives them."""
        request = get_stage(self.stage).request
        return ShardWork(key=self.key, requests=tuple(request(r) for r in self.rows))
