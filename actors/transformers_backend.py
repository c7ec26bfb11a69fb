"""Hugging Face transformers backend: generation (greedy or sampled), forced-decoding scoring,
next-token distributions and hidden states.

Implements :class:`confgrid.actors.backend.Backend` for any causal language model ``AutoModelForCausalLM`` can
load, on CPU or one GPU.

Sampling draws every sample from its own ``torch.Generator`` seeded by :func:`~confgrid.actors.backend.request_seed`
of ``(seed, prompt ids, sample index)``: the same seed gives the same samples whatever else shares the batch (on the
same hardware and versions). The draw happens in :class:`_SeededSampler`, a logits processor that turns each row's
scores into a one-hot choice, so Hugging Face's ``generate`` (its cache, padding and stopping) does the rest under
greedy search.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from .backend import (
    DEFAULT_TOP_LOGPROBS,
    FINISH_LENGTH,
    FINISH_STOP,
    Generation,
    NextToken,
    canonical_dtype,
    check_model_dir,
    check_prompts,
    check_requests,
    check_sampling,
    eos_token_ids,
    request_seed,
    revision_label,
)

__all__ = ["TransformersBackend"]

#: At most this many float32 log-probabilities (2**26: 256 MiB) are computed at once by
#: :meth:`TransformersBackend.score` (answer positions x vocabulary).
_SCORE_CHUNK_ELEMENTS = 1 << 26


def _padded(seqs: list[list[int]], pad: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of ``seqs`` padded with ``pad`` to the longest (right-padded unless ``left``)."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, x in enumerate(seqs):
        at = slice(width - len(x), width) if left else slice(0, len(x))
        ids[row, at] = torch.tensor(x, dtype=torch.long)
        mask[row, at] = 1
    return ids, mask


class TransformersBackend:
    """A causal LM loaded with ``from_pretrained``, used for greedy generation and scoring.

    ``model``: a local directory or hub name; ``dtype``: a name of :data:`~confgrid.actors.backend.DTYPES`
    (``"auto"``: the checkpoint's; log-softmax is always taken in float32); ``device``: ``"cuda"`` when available,
    else ``"cpu"``; ``batch_size``: most sequences per forward pass. The ``model`` attribute is in eval mode on
    ``device``; a ``tokenizer`` without a pad token gets its EOS token as pad (the model and its config unchanged).

    Raises ``ValueError`` if ``dtype`` is unknown, ``batch_size < 1``, or the tokenizer has neither a pad nor an EOS
    token.
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
        name = canonical_dtype(dtype)
        self._dtype = name if name == "auto" else getattr(torch, name)
        check_model_dir(self.model_name)
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
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        self.eos_token_ids = frozenset(eos_token_ids(gen_eos, self.tokenizer.eos_token_id, self.model_name))

    # ------------------------------------------------------------------ helpers
    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices sorted by length (stable), cut into batches of ``batch_size``."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        return [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]

    # --------------------------------------------------------------- generation
    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int = 32, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int | None = 0) -> list[Generation]:
        """Continuations of token-id prompts (used as given): greedy by default, sampled with ``temperature > 0``
        (:meth:`generate_samples` with ``n=1``).

        Prompts are sorted by length into batches of at most ``batch_size``, LEFT-padded with the pad token and
        passed with an attention mask. One Generation per prompt, in input order; ``token_ids`` end at the first EOS
        id (padding dropped). Raises ``ValueError`` if ``max_new_tokens < 1``, a prompt is empty (the message names
        its index) or a sampling parameter is out of range.
        """
        check_sampling(float(temperature), float(top_p), int(top_k), 1)
        if temperature > 0:
            return [s[0] for s in self.generate_samples(prompts, n=1, max_new_tokens=max_new_tokens,
                                                         temperature=temperature, top_p=top_p, top_k=top_k,
                                                         seed=seed)]
        check_prompts(prompts, max_new_tokens)
        return self._decode([list(p) for p in prompts], max_new_tokens, None)

    def _decode(self, prompts: list[list[int]], max_new_tokens: int,
                sampler: tuple[list[int], float, float, int] | None) -> list[Generation]:
        """Greedy search over batches; with ``sampler = (row seeds, temperature, top_p, top_k)`` each row
        draws its token from its own generator instead (see :class:`_SeededSampler`)."""
        gen_config = copy.deepcopy(self.model.generation_config)
        for k, v in dict(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None, min_p=None,
                         repetition_penalty=None, max_new_tokens=int(max_new_tokens), max_length=None,
                         min_new_tokens=None, min_length=0, pad_token_id=self.pad_token_id,
                         eos_token_id=sorted(self.eos_token_ids)).items():
            setattr(gen_config, k, v)

        out: list[Generation | None] = [None] * len(prompts)
        for batch in self._batches([len(p) for p in prompts]):
            ids, mask = _padded([prompts[i] for i in batch], self.pad_token_id, left=True)
            width = ids.shape[1]
            extra = {}
            if sampler is not None:
                seeds, temperature, top_p, top_k = sampler
                extra["logits_processor"] = transformers.LogitsProcessorList(
                    [_SeededSampler([seeds[i] for i in batch], temperature, top_p, top_k, self.device)])
                shared = self._shared_prefill(ids, mask, [tuple(prompts[i]) for i in batch])
                if shared is not None:
                    extra["past_key_values"] = shared
            seqs = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=gen_config,
                **extra,
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

    def _shared_prefill(self, ids: torch.Tensor, mask: torch.Tensor, rows: list[tuple[int, ...]]):
        """The key/value cache of a batch's prompts (all but their last token), each distinct prompt prefilled once
        and copied to its rows (``reorder_cache``), as vLLM shares one prefill for the n samples of a request. None
        when every row is distinct or the prompts are one token long."""
        first: dict[tuple[int, ...], int] = {}
        uniq = [first.setdefault(r, len(first)) for r in rows]
        if len(first) == len(rows) or ids.shape[1] < 2:
            return None
        keep = [rows.index(r) for r in first]
        u_ids, u_mask = ids[keep, :-1].to(self.device), mask[keep, :-1].to(self.device)
        pos = (u_mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.model(input_ids=u_ids, attention_mask=u_mask, position_ids=pos, use_cache=True).past_key_values
        cache.reorder_cache(torch.tensor(uniq, device=self.device))
        return cache

    @torch.inference_mode()
    def generate_samples(self, prompts: list[list[int]], *, n: int, max_new_tokens: int = 32,
                         temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                         seed: int | None = 0) -> list[list[Generation]]:
        """``n`` sampled continuations per token-id prompt, run as ``n`` rows of the same batches.

        Tokens are drawn from ``softmax(logits / temperature)`` (logits in float32, ``temperature > 0``), keeping the
        ``top_k`` most probable (0: off), then the nucleus of mass ``top_p`` in (0, 1], as vLLM does. Sample ``j`` of
        a prompt draws from a generator seeded with ``request_seed(seed, prompt, j)``; ``seed`` None draws a fresh
        seed (not reproducible). ``result[i][j]``: sample ``j`` of prompt ``i``.

        Raises ``ValueError`` if a parameter is out of range (:func:`~confgrid.actors.backend.check_sampling`),
        ``temperature`` is 0 (use :meth:`generate`), or a prompt is empty.
        """
        check_sampling(float(temperature), float(top_p), int(top_k), int(n))
        if temperature <= 0:
            raise ValueError("generate_samples needs temperature > 0; greedy decoding is generate()")
        check_prompts(prompts, max_new_tokens)
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        rows = [list(p) for p in prompts for _ in range(n)]
        seeds = [request_seed(seed, list(p), j) for p in prompts for j in range(n)]
        flat = self._decode(rows, max_new_tokens, (seeds, float(temperature), float(top_p), int(top_k)))
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    # ------------------------------------------------------ next-token distribution
    @torch.inference_mode()
    def _last_positions(self, prompts: list[list[int]], hidden: bool):
        """Yield (input index, logits at the last prompt token, hidden states or None) batch by batch."""
        lengths = [len(p) for p in prompts]
        for batch in self._batches(lengths):
            ids, mask = _padded([prompts[i] for i in batch], self.pad_token_id)
            out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                             output_hidden_states=hidden)
            for row, i in enumerate(batch):
                last = lengths[i] - 1
                hs = None
                if hidden:
                    hs = torch.stack([h[row, last] for h in out.hidden_states]).float().cpu().numpy()
                yield i, out.logits[row, last], hs

    @torch.inference_mode()
    def next_token(self, prompts: list[list[int]], *, top_k: int = DEFAULT_TOP_LOGPROBS) -> list[NextToken]:
        """The ``top_k`` (>= 1) most probable next tokens after each prompt, with their log-probs.

        One forward pass per batch (right-padded, so a prompt never sees padding); ``log_softmax`` of the last prompt
        position's logits in float32, without temperature or any processor: the same quantity as vLLM's raw log-probs.

        One NextToken per prompt, in input order; most probable first, ties by ascending id. Raises ``ValueError`` if
        a prompt is empty or ``top_k < 1``.
        """
        check_prompts(prompts, top_k=top_k)
        out: list[NextToken | None] = [None] * len(prompts)
        for i, logits, _ in self._last_positions(prompts, hidden=False):
            lp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy().astype(np.float64)
            order = np.lexsort((np.arange(lp.size), -lp))[: int(top_k)]
            out[i] = NextToken(token_ids=tuple(int(t) for t in order), logprobs=tuple(float(lp[t]) for t in order))
        return out  # type: ignore[return-value]

    @torch.inference_mode()
    def hidden_states(self, prompts: list[list[int]], *, layers: list[int] | None = None) -> list[np.ndarray]:
        """The last prompt token's hidden state at each layer: one float32 array of shape ``(len(layers),
        hidden_size)`` per prompt, in input order.

        ``layers``: indices into the model's ``hidden_states`` (0 is the embedding output, ``L`` the last layer;
        negative indices count from the end); None: all ``L + 1``. Raises ``ValueError`` if a prompt is empty or a
        layer index is out of range.
        """
        check_prompts(prompts)
        n_states = int(self.model.config.num_hidden_layers) + 1
        sel = list(range(n_states)) if layers is None else [int(x) for x in layers]
        for x in sel:
            if not -n_states <= x < n_states:
                raise ValueError(f"layers: index {x} is out of range for {n_states} hidden states (0 = embeddings)")
        out: list[np.ndarray | None] = [None] * len(prompts)
        for i, _, hs in self._last_positions(prompts, hidden=True):
            out[i] = np.ascontiguousarray(hs[sel], dtype=np.float32)
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def score(self, requests: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
        """Forced-decoding log-probabilities of answer tokens after a context.

        Each request's ids are ``context_ids + answer_ids``; requests are sorted by total length into batches of at
        most ``batch_size``, RIGHT-padded with an attention mask, and run in one forward pass per batch. The logits
        at positions ``len(ctx) - 1 ... len(ctx) + len(ans) - 2`` go through ``log_softmax`` in float32 and the
        answer ids are gathered. The real tokens never see the padding, so scores do not depend on batch
        composition (up to float rounding, ~1e-6 in float32). Returns and raises as
        :meth:`~confgrid.actors.backend.Backend.score`.
        """
        check_requests(requests)
        out: list[np.ndarray | None] = [None] * len(requests)
        lengths = [len(c) + len(a) for c, a in requests]
        for batch in self._batches(lengths):
            ids, mask = _padded([list(requests[i][0]) + list(requests[i][1]) for i in batch], self.pad_token_id)
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            # the answer positions of every row, gathered at once: one host copy per batch, not two per request
            rows, cols, targets = [], [], []
            for row, i in enumerate(batch):
                ctx, ans = requests[i]
                # extend, not +=: `list += ndarray` (or a tensor) adds elementwise instead of appending
                rows.extend([row] * len(ans))
                cols.extend(range(len(ctx) - 1, len(ctx) + len(ans) - 1))
                targets.extend(ans)
            rows_t = torch.tensor(rows, dtype=torch.long, device=logits.device)
            cols_t = torch.tensor(cols, dtype=torch.long, device=logits.device)
            target_t = torch.tensor(targets, dtype=torch.long, device=logits.device).unsqueeze(-1)
            step = max(1, int(_SCORE_CHUNK_ELEMENTS // logits.shape[-1]))  # float32 rows of the vocabulary per chunk
            parts = [torch.log_softmax(logits[rows_t[k : k + step], cols_t[k : k + step]].float(), dim=-1)
                     .gather(-1, target_t[k : k + step]).squeeze(-1) for k in range(0, len(rows), step)]
            flat = torch.cat(parts).cpu().numpy().astype(np.float64)
            at = 0
            for i in batch:
                a = len(requests[i][1])
                out[i] = flat[at : at + a]
                at += a
        return out  # type: ignore[return-value]

    # --------------------------------------------------------------- provenance
    def provenance(self) -> dict[str, str]:
        """Backend (``"transformers"``), versions, dtype of the loaded weights, device, model (as given), revision
        (:func:`~confgrid.actors.backend.revision_label`) and batch size."""
        return {
            "backend": "transformers",
            "backend_version": transformers.__version__,
            "torch_version": torch.__version__,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "device": str(self.device),
            "model": self.model_name,
            "revision": revision_label(self.model_name, self.revision,
                                       getattr(self.model.config, "_commit_hash", None)),
            "batch_size": str(self.batch_size),
        }

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"TransformersBackend({self.model_name!r}, dtype={self.model.dtype}, device={self.device})"


class _SeededSampler:
    """A logits processor that samples each row's next token from that row's own generator.

    Under greedy search, it returns scores that are 0 at the drawn token and ``-inf`` elsewhere, so ``generate``
    takes the draw. The draw: logits in float32 divided by ``temperature``, then top-k, then top-p (the token that
    crosses ``top_p`` included), then inverse-CDF sampling with one uniform per row and step from the row's
    generator. A finished row keeps drawing (its output is padding), so every row's draws depend only on its seed.
    """

    def __init__(self, seeds: list[int], temperature: float, top_p: float, top_k: int, device) -> None:
        self.gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
        self.temperature, self.top_p, self.top_k = float(temperature), float(top_p), int(top_k)
        self.device = device

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float() / self.temperature
        if self.top_k > 0 and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
            before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass strictly before each token
            drop = before >= self.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
        u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in self.gens]).to(probs.device)
        cdf = torch.cumsum(probs.double(), dim=-1)
        cdf[:, -1] = 1.0  # rounding: the last bucket closes the interval
        # the first token whose cumulative mass exceeds u: a zero-probability token has an empty interval
        token = torch.searchsorted(cdf, u.unsqueeze(-1), right=True).clamp_(max=probs.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(-1, token, 0.0)
        return out

