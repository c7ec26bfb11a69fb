"""Typed payloads between the driver and a model replica.

The driver packs the requests of one or more shards into one :class:`EngineCall`
(a replica's engine sees many shards at once, see ``ModelSpec.prompts_per_call``);
the replica answers with one :class:`CallResult` that keeps each shard's
outputs apart, so the shard stays the unit of storage, keys and failure.

Every call result names the replica process that computed it
(:class:`ReplicaInfo`): a new ``incarnation`` on a replica the driver already
knows means Ray restarted the actor (and retried the calls that were in
flight), which the driver records in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

__all__ = [
    "GenerateRequest",
    "ScoreRequest",
    "ShardWork",
    "EngineCall",
    "GenerationOutput",
    "ScoreOutput",
    "ReplicaInfo",
    "CallResult",
    "ReplicaReady",
]


@dataclass(frozen=True)
class GenerateRequest:
    """One greedy continuation.

    Attributes
    ----------
    user_text : str
        The user turn, rendered by the replica with the model's chat template
        (or used as plain text for a base model).
    assistant_prefix : str
        Text that opens the assistant turn and that the model continues (the
        supplied-answer probe's ``Guess: <answer>\\nProbability:``); ``""``
        for a plain generation.
    """

    user_text: str
    assistant_prefix: str = ""


@dataclass(frozen=True)
class ScoreRequest:
    """One forced-decoding request: the log-probs of ``answer`` after a context.

    The context is ``user_text`` rendered with the chat template, then
    ``assistant_prefix``; the answer is tokenized separately as
    ``separator + answer`` and the ids joined (study 000 Appendix A).
    """

    user_text: str
    assistant_prefix: str
    separator: str
    answer: str


@dataclass(frozen=True)
class ShardWork:
    """The requests of one shard inside an engine call.

    Attributes
    ----------
    key : str
        The shard's content key (flows/store.py); outputs come back under it.
    requests : tuple
        :class:`GenerateRequest` or :class:`ScoreRequest` items, all of the
        call's kind.
    """

    key: str
    requests: tuple[Union[GenerateRequest, ScoreRequest], ...]


@dataclass(frozen=True)
class EngineCall:
    """One call of a replica: every request of one or more shards, run in one engine pass.

    Attributes
    ----------
    kind : {"generate", "score"}
        Greedy generation or forced-decoding scoring.
    shards : tuple of ShardWork
        The shards of the call, in order.
    max_new_tokens : int
        Generation budget in new tokens (``generate`` only; every shard of a
        call shares it).
    """

    kind: Literal["generate", "score"]
    shards: tuple[ShardWork, ...]
    max_new_tokens: int = 32

    @property
    def n_requests(self) -> int:
        return sum(len(s.requests) for s in self.shards)


@dataclass(frozen=True)
class GenerationOutput:
    """One generated continuation.

    Attributes
    ----------
    text : str
        The decoded continuation (special tokens dropped).
    finish_reason : str
        ``"stop"`` (an EOS id) or ``"length"`` (the budget ran out).
    n_tokens : int
        New tokens generated (>= 0).
    prompt_tokens : int
        Tokens of the rendered prompt.
    """

    text: str
    finish_reason: str
    n_tokens: int
    prompt_tokens: int


@dataclass(frozen=True)
class ScoreOutput:
    """The forced-decoding log-probs of one answer.

    Attributes
    ----------
    logprobs : tuple of float
        One log-probability per answer token, in nats (<= 0).
    answer_token_ids : tuple of int
        The answer's token ids (tokenized apart from the context).
    context_tokens : int
        Tokens of the rendered context.
    """

    logprobs: tuple[float, ...]
    answer_token_ids: tuple[int, ...]
    context_tokens: int


@dataclass(frozen=True)
class ReplicaInfo:
    """The process that answered a call.

    Attributes
    ----------
    pid : int
        Operating-system process id of the actor.
    host : str
        Host name of the actor's node.
    incarnation : str
        Random id drawn when the actor process loaded the model; a restarted
        actor (same Ray actor, new process) has a new one.
    load_seconds : float
        Seconds the model load of this incarnation took (wall clock, >= 0).
    """

    pid: int
    host: str
    incarnation: str
    load_seconds: float


@dataclass(frozen=True)
class CallResult:
    """What a replica returns for one :class:`EngineCall`.

    Attributes
    ----------
    outputs : dict of str to tuple
        Shard key -> one output per request, in request order
        (:class:`GenerationOutput` or :class:`ScoreOutput`).
    replica : ReplicaInfo
        Who computed it.
    started : float
        Wall-clock time (``time.time()`` on the replica) the call started.
    seconds : float
        Wall-clock seconds the call ran on the replica.
    """

    outputs: dict[str, tuple[Union[GenerationOutput, ScoreOutput], ...]]
    replica: ReplicaInfo
    started: float
    seconds: float


@dataclass(frozen=True)
class ReplicaReady:
    """A replica's answer to ``ping``: it has loaded its model.

    Attributes
    ----------
    replica : ReplicaInfo
    provenance : dict of str to str
        Backend, versions, dtype, chat template and default system prompt
        (recorded with every run).
    """

    replica: ReplicaInfo
    provenance: dict[str, str] = field(default_factory=dict)
