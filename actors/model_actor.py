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

__all__ = ["ModelConfig", "actor_options", "ModelActor", "ModelWorker"]


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


def actor_options(config: ModelConfig, cluster_resources: dict[str, float] | None = None) -> dict[str, Any]:
    """Ray resources of one model actor.

    A GPU actor reserves one GPU (``num_gpus=1``) and one CPU for its driver
    loop; without GPUs in the cluster the actor reserves the CPUs of one node
    (at most 8) and uses them as torch threads.

    Parameters
    ----------
    config : ModelConfig
    cluster_resources : dict, optional
        ``ray.cluster_resources()``; read from the running cluster when None.

    Returns
    -------
    dict
        Keyword arguments for ``ModelActor.options(...)``.
    """
    res = cluster_resources if cluster_resources is not None else ray.cluster_resources()
    if res.get("GPU", 0) >= 1:
        return {"num_gpus": 1, "num_cpus": 1}
    cpus = int(max(1, min(8, res.get("CPU", 1))))
    return {"num_cpus": cpus}


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

            self.backend = VLLMBackend(path, dtype=config.dtype, revision=config.revision)
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

    def generate(self, user_texts: list[str], max_new_tokens: int) -> list[dict[str, Any]]:
        """Greedy answers to rendered user turns.

        Returns one dict per input: ``text``, ``finish_reason``, ``n_tokens``,
        ``prompt_tokens``.
        """
        from confgrid.protocols.chat import render_prompt_ids

        prompts = [
            render_prompt_ids(self.tokenizer, t, use_chat_template=self.config.chat_template) for t in user_texts
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
        from confgrid.protocols.chat import answer_ids, render_prompt_ids

        pairs = []
        for user_text, prefix, sep, answer in requests:
            ctx = render_prompt_ids(
                self.tokenizer, user_text, use_chat_template=self.config.chat_template, assistant_prefix=prefix
            )
            pairs.append((ctx, answer_ids(self.tokenizer, answer, sep)))
        scores = self.backend.score(pairs)
        return [
            {"logprobs": [float(x) for x in s], "answer_token_ids": list(a), "context_tokens": len(c)}
            for s, (c, a) in zip(scores, pairs, strict=True)
        ]


ModelActor = ray.remote(ModelWorker)
