"""The ``api:`` section of a model served by an OpenAI-compatible server, and what such a model cannot run.

A model entry with ``backend: openai`` names the server's model in ``model`` and how to reach the server in ``api``
(:class:`ApiSpec`). Chat completions give generated text, the generated tokens' log-probs and the top of the first
token's distribution; they give no prompt log-probs and no hidden states. :func:`api_problems` finds, before any Ray
or model work, every part of a grid that an API model would need one of those for, naming the model, the stage and
what is allowed (docs "API models (OpenAI-compatible servers)").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, StrictBool, field_validator

from confgrid.actors.backends import api_backends
from confgrid.actors.openai_backend import ApiConfig
from confgrid.flows.spec.base import _Spec
from confgrid.flows.stages.base import get_stage

if TYPE_CHECKING:  # pragma: no cover
    from confgrid.flows.spec.grid import GridSpec, ModelSpec

__all__ = ["ApiSpec", "api_entry_problem", "api_problems", "API_BACKENDS"]

#: Backends that reach a model through an HTTP API (no local weights or tokenizer): read from the backend registry.
API_BACKENDS = api_backends()


class ApiSpec(_Spec):
    """How to reach an OpenAI-compatible chat-completions server (``models[].api``, backend ``openai``)."""

    base_url: str = Field(description="The server's API root, e.g. https://api.openai.com/v1 or "
                          "http://127.0.0.1:8000/v1 (vLLM's `vllm serve`). Part of every shard key of the model.")
    api_key_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="NAME of the environment variable that holds the API key (the key itself is never written "
        "to the grid, the manifest, a log or MLflow). None: the server needs no key.")
    max_concurrency: int = Field(8, ge=1, le=1024, description="Requests in flight at once per replica.")
    timeout_s: float = Field(60.0, gt=0.0, le=3600.0, description="Seconds one request may take, from the "
                             "moment it is sent to the last byte of the answer; past it the attempt is a time-out "
                             "(retried).")
    max_retries: int = Field(5, ge=0, le=100, description="Retries of a request after 429, 408, 409, 5xx, a "
                             "malformed reply, a connection error or a time-out; a request that still fails fails "
                             "its shard (the shard's other answers are kept in the answer cache).")
    backoff_s: float = Field(1.0, ge=0.0, le=600.0, description="Wait before retry a (0-based): backoff_s * 2**a "
                             "seconds, or the server's Retry-After; at most max_backoff_s.")
    max_backoff_s: float = Field(60.0, ge=0.0, le=3600.0, description="Longest wait between two attempts.")
    assistant_prefill: StrictBool = Field(
        False, description="The server continues a final assistant message (vLLM: continue_final_message), so "
        "assistant prefixes work (the probe, methods with assistant_prefix). Hosted OpenAI does not.")
    logprobs: StrictBool = Field(True, description="Ask for the log-prob of every generated token (recorded as "
                                 "token_logprobs; NaN with a logprobs_status when the server returns none).")
    max_top_logprobs: int = Field(20, ge=1, le=1000, description="Most top_logprobs the server serves (OpenAI: "
                                  "20; vLLM: its --max-logprobs, default 20).")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="Request field of the generation budget: max_tokens (most servers) or "
        "max_completion_tokens (OpenAI's reasoning models).")
    max_consecutive_failures: int | None = Field(
        20, ge=1, le=100000, description="Failed attempts in a row (over every request of a replica, retries "
        "included) that stop the model: its remaining requests and shards fail at once with the reason instead "
        "of spending the retry schedule in every shard. None: never. A 401, 403 or 404 stops it at once.")

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (received {v!r})")
        return v.rstrip("/")

    def config(self):
        """The actor's plain copy (actors/openai_backend.py ``ApiConfig``)."""
        return ApiConfig(**self.model_dump())


def api_entry_problem(m: ModelSpec) -> str | None:
    """What is wrong with one model entry's backend / api pairing, or None.

    An API backend needs ``api`` and refuses ``chat_template: false`` (the server renders its template) and
    ``revision`` (the server decides what the model is); ``api`` on another backend is an error.
    """
    if m.backend not in API_BACKENDS:
        return None if m.api is None else f"api is only for backend 'openai' (received backend {m.backend!r})"
    if m.api is None:
        return f"backend {m.backend!r} needs an api section (at least api.base_url)"
    if not m.chat_template:
        return ("chat_template: false is not possible with backend 'openai' (the server renders its chat template; "
                "plain-text prompts need a transformers or vllm entry)")
    if m.revision is not None:
        return (f"revision is not possible with backend 'openai' (the server decides what {m.model!r} is; received "
                f"{m.revision!r})")
    return None


def api_problems(spec: GridSpec) -> list[tuple[str, str]]:
    """What the grid asks of its API models that chat completions cannot do (pure; before any work).

    Refused for a model with backend ``openai``:

    * scoring contexts (stage ``score``): forced scoring of a given answer needs prompt log-probs;
    * an assistant prefix without ``api.assistant_prefill`` (stage ``probe`` of the supplied-answer probe and of
      answer sets whose score comes from it; methods with ``assistant_prefix``);
    * methods of kind ``hidden_states``; ``temperature: model_default`` (a server's generation defaults are not
      visible); ``top_logprobs`` above ``api.max_top_logprobs``.

    Returns ``(field, message)`` problems, empty when the grid can run (the caller raises
    :class:`~confgrid.flows.spec.base.GridSpecError`).
    """
    problems: list[tuple[str, str]] = []
    for i, m in enumerate(spec.models):
        if m.backend not in API_BACKENDS:
            continue
        who = f"model {m.name!r} (backend {m.backend})"
        scored: dict[str, tuple[list[str], tuple[str, ...]]] = {}  # field -> (answer sets, contexts)
        for a_i, a in enumerate(spec.all_answer_sets()):
            ctxs = a.scoring_contexts(spec.scoring.contexts)
            if ctxs:
                where = "scoring.contexts" if a.id == "main" or a.contexts is None else f"answer_sets[{a_i - 1}].contexts"
                scored.setdefault(where, ([], ctxs))[0].append(a.id)
            if a.verbalized_by_probe and not m.api.assistant_prefill:
                problems.append((f"models[{i}].api.assistant_prefill", f"{who} cannot run stage 'probe' of answer set "
                                 f"{a.id!r} (its score is asked after the supplied answer in the assistant turn): "
                                 "needs a server that continues an assistant message; allowed: "
                                 "api.assistant_prefill: true (vLLM), or verbalized: none / a prompt that states a "
                                 "probability"))
        for where, (sets, ctxs) in scored.items():
            problems.append((where, f"{who} cannot run stage 'score' of answer set(s) {', '.join(sets)}: contexts "
                             f"{', '.join(ctxs)} force-score a given answer, which needs prompt log-probs that chat "
                             "completions do not return; allowed for an API model: no scoring contexts "
                             f"({where}: []), or a transformers/vllm entry of the model"))
        if spec.probe.enabled and not m.api.assistant_prefill:
            problems.append(("probe.enabled", f"{who} cannot run stage 'probe' (the supplied answer opens the "
                             "assistant turn): allowed: api.assistant_prefill: true (a server that continues an "
                             "assistant message, e.g. vLLM), or probe.enabled: false"))
        for j, x in enumerate(spec.methods):
            if m.name not in {mm.name for mm in spec.method_models(x)}:
                continue
            where = f"methods[{j}]"
            stage = get_stage(x.kind_entry.stage)
            if "openai" not in stage.backends:
                problems.append((where, f"{who} cannot run method {x.id!r} (stage {stage.name!r}): chat completions "
                                 "return no hidden states; allowed: list only local models in this method's models"))
            if x.temperature == "model_default" and "temperature" in stage.fields:
                problems.append((f"{where}.temperature", f"{who} cannot run method {x.id!r} with temperature "
                                 "model_default: a server's generation defaults are not visible; allowed: a "
                                 "temperature > 0"))
            if "top_logprobs" in stage.fields and x.top_logprobs > m.api.max_top_logprobs:
                problems.append((f"{where}.top_logprobs", f"{who}: method {x.id!r} asks top_logprobs="
                                 f"{x.top_logprobs}; allowed: 1..{m.api.max_top_logprobs} (api.max_top_logprobs)"))
            if x.assistant_prefix and not m.api.assistant_prefill:
                problems.append((f"{where}.assistant_prefix", f"{who} cannot run method {x.id!r} with an assistant "
                                 "prefix: allowed: api.assistant_prefill: true (vLLM), or assistant_prefix: ''"))
    return problems
