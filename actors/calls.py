"""Typed payloads between the driver and a model replica.

The driver packs the requests of one or more shards into one :class:`EngineCall` (``ModelSpec.prompts_per_call``);
the replica answers with one :class:`CallResult` that keeps each shard's outputs apart, so the shard stays the unit
of storage, keys and failure. Every call result names the replica process that computed it (:class:`ReplicaInfo`):
a new ``incarnation`` on a known replica means Ray restarted the actor, which the driver records in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, Union

__all__ = [
    "GenerateRequest",
    "ScoreRequest",
    "ShardWork",
    "CallParams",
    "EngineCall",
    "Sampling",
    "GenerationOutput",
    "SamplesOutput",
    "NextTokenOutput",
    "HiddenStatesOutput",
    "ScoreOutput",
    "ReplicaInfo",
    "CallResult",
    "ReplicaReady",
    "RequestCounts",
    "RETRY_CAUSES",
]


@dataclass(frozen=True)
class GenerateRequest:
    """One prompt: the user turn (rendered by the replica with the model's chat template, or plain text for a base
    model) and the text that opens the assistant turn and that the model continues (the supplied-answer probe's
    ``Guess: <answer>\\nProbability:``; ``""`` for a plain generation)."""

    user_text: str
    assistant_prefix: str = ""


@dataclass(frozen=True)
class ScoreRequest:
    """One forced-decoding request: the log-probs of ``answer`` after a context (actors/model_actor.py,
    ``ModelWorker.score``)."""

    user_text: str
    assistant_prefix: str
    separator: str
    answer: str


@dataclass(frozen=True)
class Sampling:
    """Decoding parameters of a generation call, exactly as the backend receives them.

    Attributes
    ----------
    temperature : float
        >= 0; 0 is greedy decoding.
    top_p : float
        Nucleus mass in (0, 1] (1: off).
    top_k : int
        Most probable tokens kept (0: off).
    n : int
        Samples per prompt (>= 1; 1 when greedy).
    seed : int or None
        Base seed; each request (and sample) derives its own (:func:`~confgrid.actors.backend.request_seed`).
        None: not reproducible.
    from_model : bool
        Take temperature, top_p and top_k from the model's ``generation_config`` (``temperature: model_default``);
        the replica returns the values it used in :attr:`SamplesOutput.sampling`.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    seed: int | None = 0
    from_model: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 and not self.from_model


@dataclass(frozen=True)
class ShardWork:
    """The requests of one shard inside an engine call (all of the call's kind), under the shard's content key
    (flows/store/run_store.py), which its outputs come back under."""

    key: str
    requests: tuple[Union[GenerateRequest, ScoreRequest], ...]


@dataclass(frozen=True, kw_only=True)
class CallParams:
    """The engine-call parameters of a shard: what a replica needs beyond the requests. Each stage sets its own
    (flows/stages), the rest keep their defaults; every shard of one :class:`EngineCall` shares them.

    Attributes
    ----------
    max_new_tokens : int
        ``generate``: the budget in new tokens (>= 1).
    sampling : Sampling or None
        ``generate``: None or greedy: one :class:`GenerationOutput` per request; otherwise one :class:`SamplesOutput`.
    top_logprobs : int
        ``next_token``: tokens returned per prompt.
    candidates, cases : tuple of str
        ``next_token``: candidate strings whose variant token ids the replica looks up in its tokenizer
        (protocols/candidates.py), and their case variants.
    layers : tuple of int or None
        ``hidden_states``: layer indices (0 = embeddings); None = all.
    """

    max_new_tokens: int = 32
    sampling: Sampling | None = None
    top_logprobs: int = 20
    candidates: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    layers: tuple[int, ...] | None = None

    def engine_call(self, kind: str, shards: tuple[ShardWork, ...]) -> EngineCall:
        """The engine call of ``shards`` (their requests, as the replica receives them) with these parameters."""
        return EngineCall(kind, shards, **{f.name: getattr(self, f.name) for f in fields(CallParams)})


@dataclass(frozen=True)
class EngineCall(CallParams):
    """One call of a replica: every request of one or more shards, run in one engine pass, with the
    :class:`CallParams` (keywords) they share. ``score`` takes :class:`ScoreRequest` items, the other kinds
    :class:`GenerateRequest` items."""

    kind: Literal["generate", "score", "next_token", "hidden_states"]
    shards: tuple[ShardWork, ...]


@dataclass(frozen=True)
class GenerationOutput:
    """One generated continuation.

    Attributes
    ----------
    text : str
        The decoded continuation (special tokens dropped).
    finish_reason : str
        ``"stop"`` (an EOS id) or ``"length"`` (the budget ran out).
    prompt_tokens : int
        Tokens of the rendered prompt (an API model: the server's usage count, -1 when absent).
    token_logprobs : tuple of float or None
        An API model: the log-prob (nats, <= 0) of each generated token as the server returned it; None when it
        returned none, and for a local backend (which does not record them here).
    logprobs_status : str
        ``""`` (local backends), ``"ok"``, or why ``token_logprobs`` is None (``"no_logprobs"``,
        ``"no_logprob_content"``, ``"not_requested"``; actors/openai_backend.py).
    """

    text: str
    finish_reason: str
    n_tokens: int
    prompt_tokens: int
    token_logprobs: tuple[float, ...] | None = None
    logprobs_status: str = ""


@dataclass(frozen=True)
class SamplesOutput:
    """The ``n`` sampled continuations of one request, in sample order, and the parameters actually used."""

    samples: tuple[GenerationOutput, ...]
    sampling: Sampling | None = None


@dataclass(frozen=True)
class NextTokenOutput:
    """The top of the next-token distribution after one prompt.

    ``token_ids`` most probable first (ties by ascending id; an API model's are ``-1 - rank``: it returns strings),
    ``logprobs`` the raw log-softmax values in nats (no temperature), same order. ``candidate_tokens``: each requested
    candidate -> ``{token id: decoded string}`` of its variants. ``logprobs_status``: ``"ok"``, or (an API model) why
    no distribution came back (``"no_logprobs"``, ``"no_logprob_content"``, ``"no_top_logprobs"``; tuples empty).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    prompt_tokens: int
    candidate_tokens: dict[str, dict[int, str]] = field(default_factory=dict)
    logprobs_status: str = "ok"


@dataclass(frozen=True)
class HiddenStatesOutput:
    """The last prompt token's hidden states: ``states``, float32 of shape ``(n_layers, hidden_size)``, one row per
    requested layer (all: embedding output first, then every layer), ``layers`` the layer index of each row."""

    states: Any
    layers: tuple[int, ...]
    prompt_tokens: int


@dataclass(frozen=True)
class ScoreOutput:
    """The forced-decoding log-probs of one answer: one per answer token, in nats (<= 0), with the answer's token
    ids (tokenized apart from the context) and the rendered context's length in tokens."""

    logprobs: tuple[float, ...]
    answer_token_ids: tuple[int, ...]
    context_tokens: int


@dataclass(frozen=True)
class ReplicaInfo:
    """The process that answered a call.

    Attributes
    ----------
    incarnation : str
        Random id drawn when the actor process loaded the model; a restarted actor (same Ray actor, new process) has
        a new one.
    load_seconds : float
        Seconds the model load of this incarnation took (wall clock, >= 0).
    node_id, node_ip : str
        The Ray node the process runs on ("" outside Ray).
    load_started : float
        Wall-clock time (``time.time()`` on the replica) the model load began; 0.0 when unknown.
    gpu_ids : tuple of str
        The GPUs Ray assigned to the actor (``CUDA_VISIBLE_DEVICES``): N for a tensor-parallel replica with the
        multiprocessing executor, none in a placement group (vLLM's Ray workers hold them) or on CPU.
    cpu_bind : str
        A tensor-parallel vLLM replica computing on CPU: the per-rank core lists it gave vLLM
        (``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``"0|1"``); "" otherwise.
    ranks : tuple of (str, int)
        The engine's processes this incarnation started, ``(name, pid)``: vLLM's engine core and, with its
        multiprocessing executor, one worker per rank; empty for other backends.
    """

    pid: int
    host: str
    incarnation: str
    load_seconds: float
    node_id: str = ""
    node_ip: str = ""
    load_started: float = 0.0
    gpu_ids: tuple[str, ...] = ()
    cpu_bind: str = ""
    ranks: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class CallResult:
    """What a replica returns for one :class:`EngineCall`.

    ``outputs``: shard key -> one output per request, in request order. ``started`` (``time.time()`` on the replica),
    ``seconds``: when the call started and how long it ran. ``failed``: shard key -> why the shard failed (an API
    model: a request that still failed after its retries); such a shard has no ``outputs`` entry, the other shards of
    the call are kept. ``requests``: shard key -> its HTTP requests (API models only).
    """

    outputs: dict[str, tuple[Any, ...]]
    replica: ReplicaInfo
    started: float
    seconds: float
    failed: dict[str, BaseException] = field(default_factory=dict)
    requests: dict[str, RequestCounts] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaReady:
    """A replica's answer to ``ping``: it has loaded its model; its provenance (backend, versions, dtype, chat
    template and default system prompt) is recorded with every run."""

    replica: ReplicaInfo
    provenance: dict[str, str] = field(default_factory=dict)


#: Causes of a failed attempt of an API request, as counted in :attr:`RequestCounts.failures`: 429, a 5xx
#: status, 408 and 409 (retried, like the openai client does), a time-out (``api.timeout_s`` passed), no
#: connection, a 200 whose body is unusable (``malformed``), and the statuses that are not retried
#: (``4xx``: 400, 401, 403, 404, 422...).
RETRY_CAUSES = ("429", "5xx", "408", "409", "timeout", "connection", "malformed", "4xx")
#: The integer counts of :class:`RequestCounts`, in the order they are written.
_COUNTS = ("requests", "answered", "cached", "attempts", "retries")


@dataclass
class RequestCounts:
    """The API requests behind one shard (or a sum of shards): what was asked, sent and answered.

    ``requests`` the shard needed (one per prompt; ``n`` samples are one request); of those, ``answered`` with a
    usable answer (sent now or read from the answer cache), ``cached`` read from the run's answer cache
    (actors/api_cache.py, no HTTP request sent). ``attempts``: HTTP requests sent (first tries and retries);
    ``retries``: the attempts after a request's first. ``failures``: failed attempts by cause (:data:`RETRY_CAUSES`;
    every one but a request's last is a retry). ``system_fingerprints``: the distinct values of the answers, sorted.
    """

    requests: int = 0
    answered: int = 0
    cached: int = 0
    attempts: int = 0
    retries: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    system_fingerprints: list[str] = field(default_factory=list)

    def add(self, other: RequestCounts) -> None:
        """Add ``other``'s counts to these (fingerprints: the union)."""
        for k in _COUNTS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for k, v in other.failures.items():
            self.failures[k] = self.failures.get(k, 0) + v
        self.system_fingerprints = sorted(set(self.system_fingerprints) | set(other.system_fingerprints))

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON for the manifest (and :meth:`from_dict`'s input)."""
        return {**{k: getattr(self, k) for k in _COUNTS}, "failures": dict(sorted(self.failures.items())),
                "system_fingerprints": list(self.system_fingerprints)}

    def line(self) -> str:
        """One line for the console: ``5 answered of 8 requests (2 from the answer cache); 9 HTTP attempts,
        3 retries; failed attempts: 429 x2, timeout x1``."""
        text = f"{self.answered} answered of {self.requests} requests"
        if self.cached:
            text += f" ({self.cached} from the answer cache)"
        text += f"; {self.attempts} HTTP attempts, {self.retries} retries"
        if self.failures:
            text += "; failed attempts: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.failures.items()))
        return text

    def metrics(self, prefix: str = "api_") -> dict[str, float]:
        """Flat numeric metrics (MLflow): requests, answered, cached, attempts, retries and ``failed_<cause>`` for
        every cause of :data:`RETRY_CAUSES` (0 when none)."""
        out = {f"{prefix}{k}": float(getattr(self, k)) for k in _COUNTS}
        for cause in RETRY_CAUSES:
            out[f"{prefix}failed_{cause}"] = float(self.failures.get(cause, 0))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestCounts:
        """The inverse of :meth:`as_dict` (a manifest entry)."""
        return cls(**{k: int(d.get(k, 0)) for k in _COUNTS},
                   failures={str(k): int(v) for k, v in (d.get("failures") or {}).items()},
                   system_fingerprints=sorted(d.get("system_fingerprints") or []))
