"""The Ray actor that holds one model.

One actor per model replica: it loads the weights once and serves every
generate and score call of every shard routed to it. Prompts arrive as text
(user turn, assistant prefix, separator, answer); the actor renders them with
its own tokenizer and chat template (protocols/chat.py), so the driver never
needs the model's files.

Resources are decided in one place, :func:`actor_options`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray

__all__ = ["ModelConfig", "ReplicaResources", "replica_resources", "actor_options", "start_replica", "ModelActor", "ModelWorker"]


@dataclass(frozen=True)
class ModelConfig:
    """What an actor needs to load a model (a plain, picklable copy of ModelSpec)."""

    name: str
    model: str
    backend: str = "transformers"
    dtype: str = "float32"
    revision: str | None = None
    chat_template: bool = True
    batch_size: int = 16
    tensor_parallel_size: int = 1
    max_num_batched_tokens: int | None = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    gpu_memory_utilization: float = 0.85
    max_retries: int = 1
    generation_bos: bool | None = None
    scoring_bos: bool | None = None


@dataclass(frozen=True)
class ReplicaResources:
    """What one model replica reserves (the one place resources are computed).

    Attributes
    ----------
    actor : dict
        ``ModelActor.options(...)`` resources of the actor itself.
    bundles : list of dict or None
        Placement-group bundles (one GPU each, STRICT_PACK) for a
        tensor-parallel replica; None otherwise.
    threads : int or None
        torch threads for a CPU replica.
    """

    actor: dict[str, Any]
    bundles: list[dict[str, float]] | None
    threads: int | None


def replica_resources(config: ModelConfig, cluster_resources: dict[str, float] | None = None) -> ReplicaResources:
    """Ray resources of one model replica.

    * GPU cluster, ``tensor_parallel_size == 1``: the actor reserves one GPU
      (``num_gpus=1``) and one CPU.
    * GPU cluster, ``tensor_parallel_size == N > 1`` (vLLM): a placement group
      of N bundles ``{GPU: 1, CPU: 1}`` with strategy STRICT_PACK (one node);
      the actor runs in it with ``num_gpus=0`` and captures child tasks, so
      vLLM's Ray executor places its N workers in the same group instead of
      creating a nested one (nested placement groups deadlock).
    * No GPU: the actor reserves the CPUs of one node (at most 8) and uses
      them as torch threads.

    Parameters
    ----------
    config : ModelConfig
    cluster_resources : dict, optional
        ``ray.cluster_resources()``; read from the running cluster when None.

    Raises
    ------
    ValueError
        If ``tensor_parallel_size`` exceeds the cluster's GPUs, or is > 1 on a
        cluster without GPUs.
    """
    res = cluster_resources if cluster_resources is not None else ray.cluster_resources()
    gpus = res.get("GPU", 0)
    tp = config.tensor_parallel_size
    if tp > 1:
        if gpus < tp:
            raise ValueError(
                f"tensor_parallel_size={tp} for model {config.name!r} needs {tp} GPUs; the cluster has {gpus:g}"
            )
        return ReplicaResources(actor={"num_gpus": 0, "num_cpus": 0}, bundles=[{"GPU": 1, "CPU": 1}] * tp, threads=None)
    if gpus >= 1:
        return ReplicaResources(actor={"num_gpus": 1, "num_cpus": 1}, bundles=None, threads=None)
    cpus = int(max(1, min(8, res.get("CPU", 1))))
    return ReplicaResources(actor={"num_cpus": cpus}, bundles=None, threads=cpus)


def actor_options(config: ModelConfig, cluster_resources: dict[str, float] | None = None) -> dict[str, Any]:
    """``ModelActor.options(...)`` for a replica without a placement group (see :func:`replica_resources`)."""
    return dict(replica_resources(config, cluster_resources).actor)


def start_replica(config: ModelConfig, index: int = 0, cluster_resources: dict[str, float] | None = None):
    """Start one model replica; returns ``(actor handle, placement group or None)``.

    The actor restarts at most ``config.max_retries`` times after a crash and
    retries the calls that were in flight as often (transient errors); an
    actor killed on purpose (``ray.kill``) is not restarted.
    """
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    rr = replica_resources(config, cluster_resources)
    opts: dict[str, Any] = dict(rr.actor)
    opts.update(max_restarts=config.max_retries, max_task_retries=config.max_retries,
                name=f"confgrid-{config.name}-{index}-{os.getpid()}")
    pg = None
    if rr.bundles:
        pg = placement_group(rr.bundles, strategy="STRICT_PACK", name=f"confgrid-{config.name}-{index}")
        ray.get(pg.ready())
        opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True
        )
    handle = ModelActor.options(**opts).remote(config, rr.threads)
    return handle, pg


class ModelWorker:
    """The model-holding object; :data:`ModelActor` is its Ray actor class.

    Kept as a plain class so it can also run in-process (tests, debugging).
    """

    def __init__(self, config: ModelConfig, num_threads: int | None = None) -> None:
        import torch

        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.config = config
        path = config.model
        if path == "confgrid-fixture":
            from confgrid.actors.fixture import FIXTURE_MODEL_DIR

            path = str(FIXTURE_MODEL_DIR)
        if config.backend == "transformers":
            from confgrid.actors.transformers_backend import TransformersBackend

            self.backend = TransformersBackend(
                path, dtype=config.dtype, revision=config.revision, batch_size=config.batch_size
            )
        elif config.backend == "vllm":  # pragma: no cover - needs confgrid[gpu]
            from confgrid.actors.vllm_backend import VLLMBackend

            self.backend = VLLMBackend(
                path,
                dtype=config.dtype,
                revision=config.revision,
                tensor_parallel_size=config.tensor_parallel_size,
                max_num_batched_tokens=config.max_num_batched_tokens,
                enable_chunked_prefill=config.enable_chunked_prefill,
                enable_prefix_caching=config.enable_prefix_caching,
                gpu_memory_utilization=config.gpu_memory_utilization,
                distributed_executor_backend="ray" if config.tensor_parallel_size > 1 else None,
            )
        else:
            raise ValueError(f"backend: unknown backend {config.backend!r}; allowed: transformers, vllm")
        self.tokenizer = self.backend.tokenizer

    def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), **self.provenance()}

    def provenance(self) -> dict[str, str]:
        from confgrid.protocols.chat import default_system_prompt

        prov = dict(self.backend.provenance())
        prov["chat_template"] = str(self.config.chat_template)
        if self.config.chat_template and getattr(self.tokenizer, "chat_template", None):
            prov["system_prompt"] = default_system_prompt(self.tokenizer) or ""
        return prov

    def generate(self, user_texts: list[str], max_new_tokens: int,
                 assistant_prefixes: list[str] | None = None) -> list[dict[str, Any]]:
        """Greedy continuations of rendered user turns.

        Parameters
        ----------
        user_texts : list of str
            User turns, rendered with the chat template (or as plain text).
        max_new_tokens : int
        assistant_prefixes : list of str, optional
            Text opening each assistant turn (the supplied-answer probe's
            ``Guess: <answer>\nProbability:``); the model continues it.

        Returns
        -------
        list of dict
            One per input: ``text``, ``finish_reason``, ``n_tokens``, ``prompt_tokens``.
        """
        from confgrid.protocols.chat import render_prompt_ids

        prefixes = assistant_prefixes or [""] * len(user_texts)
        prompts = [
            render_prompt_ids(self.tokenizer, t, use_chat_template=self.config.chat_template, assistant_prefix=p,
                              add_bos=self.config.generation_bos)
            for t, p in zip(user_texts, prefixes, strict=True)
        ]
        gens = self.backend.generate(prompts, max_new_tokens=max_new_tokens)
        return [
            {
                "text": g.text,
                "finish_reason": g.finish_reason,
                "n_tokens": len(g.token_ids),
                "prompt_tokens": len(p),
            }
            for g, p in zip(gens, prompts, strict=True)
        ]

    def score(self, requests: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
        """Forced-decoding log-probs of fixed answers.

        Parameters
        ----------
        requests : list of (user_text, assistant_prefix, separator, answer)
            The context is the user turn rendered with the chat template, then
            ``assistant_prefix``; the answer is tokenized separately as
            ``separator + answer`` and the ids are joined (study 000 Appendix A).

        Returns
        -------
        list of dict
            ``logprobs`` (list of float, nats, one per answer token),
            ``answer_token_ids`` (list of int), ``context_tokens`` (int).
        """
        from confgrid.protocols.chat import answer_ids, effective_separator, render_prompt_ids

        pairs = []
        for user_text, prefix, sep, answer in requests:
            ctx = render_prompt_ids(
                self.tokenizer, user_text, use_chat_template=self.config.chat_template, assistant_prefix=prefix,
                add_bos=self.config.scoring_bos,
            )
            pairs.append((ctx, answer_ids(self.tokenizer, answer, effective_separator(sep, self.config.chat_template))))
        scores = self.backend.score(pairs)
        return [
            {"logprobs": [float(x) for x in s], "answer_token_ids": list(a), "context_tokens": len(c)}
            for s, (c, a) in zip(scores, pairs, strict=True)
        ]


ModelActor = ray.remote(ModelWorker)
