"""Hugging Face transformers backend: greedy generation and forced-decoding scoring.

Runs any causal language model ``AutoModelForCausalLM`` can load (a local
directory or a hub name) on CPU or one GPU. It implements
:class:`confgrid.actors.backend.Backend`.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from .backend import FINISH_LENGTH, FINISH_STOP, Generation

__all__ = ["TransformersBackend"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return "auto"
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)} or 'auto'") from None


class TransformersBackend:
    """A causal LM loaded with ``from_pretrained``, used for greedy generation and scoring.

    Parameters
    ----------
    model : str
        Local directory or Hugging Face hub name, passed to
        ``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained``.
    dtype : str or torch.dtype, default "float32"
        Weight and compute dtype: ``"float32"``, ``"bfloat16"``, ``"float16"``
        or ``"auto"`` (the checkpoint's dtype). Log-softmax is always taken in
        float32.
    revision : str, optional
        Hub revision (branch, tag or commit) to load.
    device : str, optional
        Torch device; ``"cuda"`` when available, else ``"cpu"``.
    batch_size : int, default 16
        Most sequences per forward pass (generation and scoring).
    trust_remote_code : bool, default False
        Passed to both ``from_pretrained`` calls.

    Attributes
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        The model's tokenizer. If it has no pad token, its pad token is set to
        its EOS token (the model and its config are not changed).
    model : transformers.PreTrainedModel
        The model, in eval mode on ``device``.

    Raises
    ------
    ValueError
        If ``dtype`` is unknown, ``batch_size < 1``, or the tokenizer has
        neither a pad nor an EOS token.
    """

    def __init__(
        self,
        model: str,
        *,
        dtype: str | torch.dtype = "float32",
        revision: str | None = None,
        device: str | None = None,
        batch_size: int = 16,
        trust_remote_code: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = str(model)
        self.revision = revision
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.batch_size = int(batch_size)
        self._dtype = _resolve_dtype(dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(
            self.model_name, revision=revision, trust_remote_code=trust_remote_code
        )
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_name, revision=revision, dtype=self._dtype, trust_remote_code=trust_remote_code
        )
        self.model.to(self.device)
        self.model.eval()
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError(f"tokenizer of {model!r} has neither a pad nor an EOS token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_token_id: int = int(self.tokenizer.pad_token_id)
        self.eos_token_ids: frozenset[int] = frozenset(self._eos_ids())

    # ------------------------------------------------------------------ helpers
    def _eos_ids(self) -> set[int]:
        from confgrid.actors.backend import eos_token_ids

        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        return eos_token_ids(gen_eos, self.tokenizer.eos_token_id, self.model_name)

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices sorted by length (stable), cut into batches of ``batch_size``."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        return [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]

    # --------------------------------------------------------------- generation
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int = 32) -> list[Generation]:
        """Greedy continuations of token-id prompts.

        Prompts are sorted by length into batches of at most ``batch_size``,
        LEFT-padded with the pad token and passed with an attention mask.

        Parameters
        ----------
        prompts : list of list of int
            Token ids of each prompt; used as given (no BOS or template is added).
        max_new_tokens : int, default 32
            Most new tokens per prompt.

        Returns
        -------
        list of Generation
            One per prompt, in input order. ``token_ids`` are the new tokens up
            to and including the first EOS id (padding dropped); ``text`` is
            ``token_ids`` decoded with ``skip_special_tokens=True``;
            ``finish_reason`` is ``"stop"`` if an EOS id was produced, else
            ``"length"``.

        Raises
        ------
        ValueError
            If ``max_new_tokens < 1`` or a prompt is empty (the message names
            its index).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
        gen_config = copy.deepcopy(self.model.generation_config)
        gen_config.do_sample = False
        gen_config.num_beams = 1
        gen_config.temperature = None
        gen_config.top_p = None
        gen_config.top_k = None
        gen_config.min_p = None
        gen_config.repetition_penalty = None
        gen_config.max_new_tokens = int(max_new_tokens)
        gen_config.max_length = None
        gen_config.min_new_tokens = None
        gen_config.min_length = 0
        gen_config.pad_token_id = self.pad_token_id
        gen_config.eos_token_id = sorted(self.eos_token_ids)

        out: list[Generation | None] = [None] * len(prompts)
        for batch in self._batches([len(p) for p in prompts]):
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                p = prompts[i]
                ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                mask[row, width - len(p) :] = 1
            seqs = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gen_config,
            )
            new = seqs[:, width:].tolist()
            for row, i in enumerate(batch):
                toks = new[row]
                stop = next((k for k, t in enumerate(toks) if t in self.eos_token_ids), None)
                if stop is None:
                    toks = toks[:max_new_tokens]
                    reason = FINISH_LENGTH
                else:
                    toks = toks[: stop + 1]
                    reason = FINISH_STOP
                text = self.tokenizer.decode(toks, skip_special_tokens=True)
                out[i] = Generation(text=text, token_ids=tuple(int(t) for t in toks), finish_reason=reason)
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def score(self, requests: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
        """Forced-decoding log-probabilities of answer tokens after a context.

        Each request's ids are ``context_ids + answer_ids``; requests are sorted
        by total length into batches of at most ``batch_size``, RIGHT-padded
        with an attention mask, and run in one forward pass per batch. The
        logits at positions ``len(ctx) - 1 ... len(ctx) + len(ans) - 2`` go
        through ``log_softmax`` in float32 and the answer ids are gathered.
        With right padding and causal attention the real tokens never see the
        padding, so scores do not depend on batch composition (up to float
        rounding, ~1e-6 in float32).

        Parameters
        ----------
        requests : list of (list of int, list of int)
            ``(context_ids, answer_ids)`` pairs, both non-empty.

        Returns
        -------
        list of numpy.ndarray
            One float64 array of shape ``(len(answer_ids),)`` per request, in
            input order; entry ``j`` is ``log p(answer_ids[j] | context_ids +
            answer_ids[:j])`` in nats.

        Raises
        ------
        ValueError
            If a request's ``context_ids`` or ``answer_ids`` is empty (the
            message names the request index).
        """
        for i, (ctx, ans) in enumerate(requests):
            if len(ctx) == 0:
                raise ValueError(f"request {i}: context_ids is empty")
            if len(ans) == 0:
                raise ValueError(f"request {i}: answer_ids is empty")
        out: list[np.ndarray | None] = [None] * len(requests)
        lengths = [len(c) + len(a) for c, a in requests]
        for batch in self._batches(lengths):
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                ctx, ans = requests[i]
                seq = list(ctx) + list(ans)
                ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[row, : len(seq)] = 1
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            for row, i in enumerate(batch):
                ctx, ans = requests[i]
                c, a = len(ctx), len(ans)
                logp = torch.log_softmax(logits[row, c - 1 : c + a - 1].float(), dim=-1)
                target = torch.tensor(ans, dtype=torch.long, device=logp.device).unsqueeze(-1)
                out[i] = logp.gather(-1, target).squeeze(-1).cpu().numpy().astype(np.float64)
        return out  # type: ignore[return-value]

    # --------------------------------------------------------------- provenance
    def provenance(self) -> dict[str, str]:
        """Backend name and version, dtype, device, model and revision.

        Returns
        -------
        dict of str to str
            ``backend`` ("transformers"), ``backend_version``, ``torch_version``,
            ``dtype`` (of the loaded weights), ``device``, ``model`` (as
            given), ``revision`` (the resolved hub commit when known, else the
            requested revision, else ``"local"`` for a directory or ``"unknown"``)
            and ``batch_size``.
        """
        commit = getattr(self.model.config, "_commit_hash", None)
        if commit:
            revision = str(commit)
        elif self.revision:
            revision = str(self.revision)
        else:
            revision = "local" if os.path.isdir(self.model_name) else "unknown"
        return {
            "backend": "transformers",
            "backend_version": transformers.__version__,
            "torch_version": torch.__version__,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "device": str(self.device),
            "model": self.model_name,
            "revision": revision,
            "batch_size": str(self.batch_size),
        }

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"TransformersBackend({self.model_name!r}, dtype={self.model.dtype}, device={self.device})"

