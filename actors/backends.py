"""The model backends by name: one :class:`~confgrid.registry.Registry` entry each (issue 20).

A grid's ``models[].backend`` names an entry; the replica builds its engine through the entry
(:meth:`BackendEntry.build`), and the grid check reads what the entry says: whether the model is reached over
HTTP (``api``: no local weights, tokenizer, prompt log-probs or hidden states), and which extra installs it.

>>> sorted(BACKENDS.names())
['openai', 'transformers', 'vllm']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from confgrid.actors.openai_backend import OpenAIBackend
from confgrid.actors.vllm_backend import VLLMBackend
from confgrid.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from confgrid.actors.model_actor import ModelConfig

__all__ = ["BackendEntry", "BACKENDS", "api_backends"]


@dataclass(frozen=True)
class BackendEntry:
    """One backend.

    ``api``: the model is reached through an HTTP API (the ``api`` section), not loaded from local files. ``extra``:
    the ``pip install 'confgrid[EXTRA]'`` extra it needs ("" for none). ``builder(config, path) -> backend``: ``path``
    is what ``from_pretrained`` loads (ignored by API backends).
    """

    name: str
    api: bool
    extra: str
    builder: Callable[["ModelConfig", str], Any]

    def build(self, config: "ModelConfig", path: str) -> Any:
        """The backend object of one replica (imports its library only now)."""
        return self.builder(config, path)


BACKENDS: Registry[BackendEntry] = Registry("backend", value_type=BackendEntry)


def _transformers(config: "ModelConfig", path: str) -> Any:
    from confgrid.actors.transformers_backend import TransformersBackend  # lazy: it imports torch and transformers

    return TransformersBackend(path, dtype=config.dtype, revision=config.revision, batch_size=config.batch_size)


def _vllm(config: "ModelConfig", path: str) -> Any:  # pragma: no cover - needs confgrid[gpu] (tests/vllm_cpu)
    extra = {"max_num_seqs": config.max_num_seqs} if config.max_num_seqs is not None else {}
    return VLLMBackend(path, dtype=config.dtype, revision=config.revision,
                       tensor_parallel_size=config.tensor_parallel_size,
                       max_num_batched_tokens=config.max_num_batched_tokens,
                       enable_chunked_prefill=config.enable_chunked_prefill,
                       enable_prefix_caching=config.enable_prefix_caching,
                       gpu_memory_utilization=config.gpu_memory_utilization,
                       distributed_executor_backend=(config.executor or "mp") if config.tensor_parallel_size > 1
                       else None,
                       **extra)


def _openai(config: "ModelConfig", path: str) -> Any:
    return OpenAIBackend(config.model, config.api, config.template_kwargs(), name=config.name)


BACKENDS.register("transformers", BackendEntry("transformers", api=False, extra="", builder=_transformers))
BACKENDS.register("vllm", BackendEntry("vllm", api=False, extra="gpu", builder=_vllm))
BACKENDS.register("openai", BackendEntry("openai", api=True, extra="api", builder=_openai))


def api_backends() -> tuple[str, ...]:
    """Names of the backends that reach a model through an HTTP API (sorted)."""
    return tuple(sorted(n for n in BACKENDS.names() if BACKENDS.get(n).api))
