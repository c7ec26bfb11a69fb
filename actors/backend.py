"""The model-backend interface every backend implements.

A backend does two things with a causal language model, both on token ids the caller has already built:
``generate`` (a continuation of each prompt) and ``score`` (forced decoding: the log-probability of each token of a
given answer after a given context). :class:`~confgrid.actors.transformers_backend.TransformersBackend` and
:class:`~confgrid.actors.vllm_backend.VLLMBackend` implement it; callers type against :class:`Backend` only. An API
model (:class:`~confgrid.actors.openai_backend.OpenAIBackend`) has no token ids and is not a :class:`Backend`: the
model actor calls it on text. The checks and helpers the local backends share live here too.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from confgrid.errors import FieldsPickle

__all__ = ["model_dir_problem", "check_model_dir", "Generation", "NextToken", "Backend", "FINISH_STOP", "FINISH_LENGTH",
           "check_prompts", "check_requests", "check_sampling", "request_seed", "text_request_seed", "eos_token_ids",
           "DEFAULT_TOP_LOGPROBS", "EngineDied", "engine_died", "DTYPES", "canonical_dtype", "revision_label"]

#: Next-token log-probs returned per prompt by default (study 001 D.3 requests logprobs=20).
DEFAULT_TOP_LOGPROBS = 20

#: ``finish_reason`` when the model produced an end-of-sequence token.
FINISH_STOP = "stop"
#: ``finish_reason`` when generation hit ``max_new_tokens`` without EOS.
FINISH_LENGTH = "length"
#: The dtype names a local backend accepts (aliases included) -> the canonical name.
DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16", "fp16": "float16",
          "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16", "auto": "auto"}


def canonical_dtype(dtype: Any) -> str:
    """The canonical name of a dtype name, alias or ``torch.dtype`` (``"auto"``: the checkpoint's).

    Raises ``ValueError`` (listing them) if it is none of :data:`DTYPES`.

    >>> canonical_dtype("bf16"), canonical_dtype("torch.float32")
    ('bfloat16', 'float32')
    """
    try:
        return DTYPES[str(dtype).lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"dtype: unknown dtype {dtype!r}; allowed: {sorted(DTYPES)}") from None


class EngineDied(FieldsPickle, RuntimeError):
    """A replica's engine is gone: one of its processes died (a tensor-parallel rank, vLLM's engine core).

    The replica cannot compute any more; the driver restarts it (within ``execution.max_retries``) and puts the
    call's shards back in the queue (flows/execute/liveness.py). Pickles with its fields (it crosses Ray).

    ``process``: which process ended first, e.g. ``"rank 1 of 2 (pid 1234)"``; ``""`` when no process of the engine
    was seen to end (the engine reported itself dead). ``incarnation``: the replica incarnation whose engine died
    (``ReplicaInfo.incarnation``; "" until the worker sets it).
    """

    def __init__(self, message: str, process: str = "", incarnation: str = "") -> None:
        super().__init__(message)
        self.process, self.incarnation = process, incarnation


def engine_died(exc: BaseException) -> EngineDied | None:
    """The :class:`EngineDied` an exception is or carries (Ray wraps an actor's exception as its ``cause``), or None.

    >>> engine_died(RuntimeError("x")) is None
    True
    >>> engine_died(EngineDied("gone", "rank 1 of 2 (pid 7)")).process
    'rank 1 of 2 (pid 7)'
    """
    for e in (exc, getattr(exc, "cause", None)):
        if isinstance(e, EngineDied):
            return e
    return None


@dataclass(frozen=True)
class Generation:
    """One continuation of one prompt.

    ``text``: the new tokens decoded with special tokens skipped (never the prompt). ``token_ids``: the new token ids,
    ending with the EOS id when ``finish_reason == "stop"``, never padding. ``finish_reason``: ``"stop"`` if an
    end-of-sequence token was produced, ``"length"`` if ``max_new_tokens`` tokens were produced without one.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str


@dataclass(frozen=True)
class NextToken:
    """The top of one next-token distribution (raw log-softmax of the logits, no temperature): the ``k`` most
    probable next token ids, most probable first (ties by ascending id), and their log-probabilities in nats (<= 0),
    same order."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


def check_prompts(prompts: list[list[int]], max_new_tokens: int = 1, top_k: int = 1) -> None:
    """Refuse an engine call's prompts and budget before any model work: ``ValueError`` if ``max_new_tokens < 1``,
    ``top_k < 1`` (next-token calls) or a prompt is empty (naming its index)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if int(top_k) < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty")


def check_requests(requests: list[tuple[list[int], list[int]]]) -> None:
    """Refuse a score call's ``(context_ids, answer_ids)`` pairs with an empty side (ValueError naming its index)."""
    for i, (ctx, ans) in enumerate(requests):
        if len(ctx) == 0:
            raise ValueError(f"request {i}: context_ids is empty")
        if len(ans) == 0:
            raise ValueError(f"request {i}: answer_ids is empty")


def check_sampling(temperature: float, top_p: float, top_k: int, n: int) -> None:
    """Refuse decoding parameters that are out of range or contradict each other (never rewrite them).

    ``ValueError`` if ``temperature < 0``, ``top_p`` is outside (0, 1], ``top_k < 0``, ``n < 1``, or greedy decoding
    (``temperature == 0``) is asked with ``top_p != 1``, ``top_k != 0`` or ``n != 1`` (vLLM would silently drop them).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 is off), got {top_k}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if temperature == 0:
        if top_p != 1.0:
            raise ValueError(f"top_p must be 1.0 with temperature=0 (greedy), got top_p={top_p}")
        if top_k != 0:
            raise ValueError(f"top_k must be 0 with temperature=0 (greedy), got top_k={top_k}")
        if n != 1:
            raise ValueError(f"n must be 1 with temperature=0 (greedy samples are identical), got n={n}")


def request_seed(seed: int, prompt: list[int], index: int | None = None) -> int:
    """A 32-bit seed of one request (and sample ``index``) from ``seed`` and the prompt's ids.

    Depends only on its arguments, not on the prompt's position in a call or on which other prompts share it, so a
    shard rerun or cut differently draws the same samples (on the same backend and hardware).
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(int(seed).to_bytes(8, "little", signed=True))
    h.update(np.asarray(prompt, dtype=np.int64).tobytes())
    if index is not None:
        h.update(int(index).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest()[:4], "little")


def text_request_seed(seed: int, user_text: str, assistant_prefix: str = "", index: int | None = None) -> int:
    """A 32-bit seed of one text request (an API model: no token ids), like :func:`request_seed`.

    Hashes ``seed``, the UTF-8 bytes of ``user_text`` and ``assistant_prefix`` (each length-prefixed, so no two
    splits of one string collide) and ``index``.
    """
    h = hashlib.blake2b(digest_size=8, person=b"confgrid-text")
    h.update(int(seed).to_bytes(8, "little", signed=True))
    for part in (user_text, assistant_prefix):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    if index is not None:
        h.update(int(index).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest()[:4], "little")


@runtime_checkable
class Backend(Protocol):
    """What a model backend offers the pipeline; callers build prompts and tokenize answers with its Hugging Face
    ``tokenizer``."""

    tokenizer: Any

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int = 32) -> list[Generation]:
        """Greedily continue each prompt (token ids, special tokens included as the caller wants them; nothing is
        added) by at most ``max_new_tokens``: one Generation per prompt, in input order. Raises ``ValueError`` if a
        prompt is empty or ``max_new_tokens < 1``.
        """
        ...

    def score(self, requests: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
        """Log-probabilities of forced answer tokens.

        ``requests``: ``(context_ids, answer_ids)`` pairs, both non-empty, joined as ``context_ids + answer_ids``
        (no token is added or removed at the seam).

        Returns
        -------
        list of numpy.ndarray
            One float64 array of shape ``(len(answer_ids),)`` per request, in input order: entry ``j`` is
            ``log p(answer_ids[j] | context_ids + answer_ids[:j])`` in nats (natural log), so every entry is <= 0.
            Values do not depend on which other requests share a batch.

        Raises ``ValueError`` (naming the request index) if a request has empty ``context_ids`` or ``answer_ids``.
        """
        ...

    def provenance(self) -> dict[str, str]:
        """Where the numbers come from: at least ``backend``, ``backend_version``, ``dtype``, ``device``, ``model``
        (path or hub name) and ``revision``."""
        ...


def eos_token_ids(generation_eos: Any, tokenizer_eos: Any, model_name: str) -> set[int]:
    """The union of the generation config's and the tokenizer's EOS ids (each an int, a list, or None); ValueError if
    neither names one."""
    ids: set[int] = set()
    for source in (generation_eos, tokenizer_eos):
        if source is None:
            continue
        if isinstance(source, int):
            ids.add(int(source))
        else:
            ids.update(int(i) for i in source)
    if not ids:
        raise ValueError(f"no EOS token id known for {model_name!r}")
    return ids


def model_dir_problem(path: str | Path) -> str | None:
    """What is wrong with a local model directory, or None if it looks loadable.

    A directory written by ``save_pretrained`` holds ``config.json``. Used by the grid check and by both backends,
    so that an empty or wrong directory reads "no model files in DIR" rather than a tokenizer error. Paths that do
    not exist locally (hub ids) give None.
    """
    p = Path(path).expanduser()
    if not p.exists():
        return None
    if not p.is_dir():
        return f"{str(p)!r} is a file; a local model is a directory written by save_pretrained"
    if not (p / "config.json").is_file():
        present = sorted(x.name for x in p.iterdir())[:5]
        return (f"no model files in {str(p)!r} (no config.json; "
                + (f"it holds {', '.join(present)}" if present else "the directory is empty")
                + "); a local model is a directory written by save_pretrained")
    return None


def revision_label(model: str, revision: str | None, commit: str | None = None) -> str:
    """A provenance's ``revision``: the resolved hub commit, else the requested revision, else ``"local"`` for a
    directory, else ``"unknown"``."""
    if commit or revision:
        return str(commit or revision)
    return "local" if os.path.isdir(model) else "unknown"


def check_model_dir(path: str) -> None:
    """Raise FileNotFoundError with :func:`model_dir_problem`'s message if a local model directory is unusable."""
    why = model_dir_problem(path)
    if why is not None:
        raise FileNotFoundError(why)
