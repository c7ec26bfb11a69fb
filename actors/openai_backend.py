"""A backend for OpenAI-compatible chat-completions servers (hosted APIs, vLLM's ``vllm serve``, other local servers).

An API model has no local weights or tokenizer: each request is a chat message
list (the user turn, and an assistant turn that the server continues when the
grid asks for an assistant prefix), and the server renders its own chat
template. What such a server offers, and what this backend asks of it
(``POST {base_url}/chat/completions`` through the ``openai`` package):

* generation: greedy (``temperature=0``) or ``n`` samples at ``temperature``,
  ``top_p`` (``top_k`` is sent as an extra field, which vLLM reads and hosted
  OpenAI refuses), and a per-request ``seed`` derived from the grid's seed and
  the request text (:func:`~confgrid.actors.backend.text_request_seed`);
  whether the server honoured it cannot be seen from the response, so what was
  requested is recorded (the samples' ``seed`` column: the base seed), and
  :meth:`OpenAIBackend.request_stats` lists the ``system_fingerprint`` values
  the server answered with (OpenAI's marker of a changed backend);
* the log-prob of every generated token (``logprobs=true``), in nats; a server
  that returns none gives ``token_logprobs = None`` and a ``logprobs_status``
  naming what was missing, never 0;
* next-token distributions (P(True), letter probabilities): ``max_tokens=1,
  logprobs=true, top_logprobs=K``, greedy.

What chat completions cannot give: prompt log-probs (so no forced scoring of
a given answer) and hidden states; the grid check refuses both before any
work starts (flows/spec_api.py).

Requests run ``max_concurrency`` at a time on a thread pool. A request that
gets 429, a 5xx status, a connection error or a time-out is retried up to
``max_retries`` times, waiting ``backoff_s * 2**attempt`` seconds (at most
``max_backoff_s``) or the server's ``Retry-After`` (capped the same way); one
that still fails raises :class:`ApiRequestError`, which fails its shard. The
API key is read from the environment variable the grid names, on the
replica, and never enters a record, a log line or an error message.

Definitions: OpenAI API reference, "Create chat completion" (``logprobs``,
``top_logprobs``, ``seed``, ``n``); vLLM docs, "OpenAI-Compatible Server"
(extra parameters ``top_k``, ``continue_final_message``,
``add_generation_prompt``, ``chat_template_kwargs``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from confgrid.actors.backend import check_sampling, text_request_seed
from confgrid.actors.calls import GenerationOutput, NextTokenOutput, Sampling, SamplesOutput

__all__ = ["ApiConfig", "ApiRequestError", "OpenAIBackend", "generation_logprobs", "next_token_logprobs",
           "LOGPROB_FLOOR", "LOGPROBS_OK"]

#: OpenAI's stand-in for an impossible token's log-prob ("-9999.0 signifies that the token is very unlikely");
#: values at or below it are stored as -inf.
LOGPROB_FLOOR = -9999.0
#: ``logprobs_status`` of an output whose log-probs the server returned.
LOGPROBS_OK = "ok"
#: Statuses below 500 that are retried (rate limits); every 5xx is retried too. ``finish_reason`` is stored as the
#: server names it ("stop", "length"; "content_filter", ... kept as is).
_RETRY_STATUS = (429,)


@dataclass(frozen=True)
class ApiConfig:
    """How to reach one OpenAI-compatible server (a plain copy of the grid's ``models[].api``).

    Attributes
    ----------
    base_url : str
        The server's API root, e.g. ``http://127.0.0.1:8000/v1``.
    api_key_env : str or None
        NAME of the environment variable holding the key (None: the server
        needs none; the placeholder ``EMPTY`` is sent).
    max_concurrency : int
        Requests in flight at once per replica (>= 1).
    timeout_s : float
        Seconds one HTTP request may take before it counts as failed (> 0).
    max_retries : int
        Retries of one request after 429, 5xx, a connection error or a time-out (>= 0).
    backoff_s, max_backoff_s : float
        Wait before retry ``a`` (0-based): ``min(max_backoff_s, backoff_s * 2**a)``,
        or the server's ``Retry-After`` capped at ``max_backoff_s``.
    assistant_prefill : bool
        The server continues a final assistant message (vLLM's
        ``continue_final_message``); needed for assistant prefixes.
    logprobs : bool
        Ask for the generated tokens' log-probs in generation requests.
    max_top_logprobs : int
        Most ``top_logprobs`` the server serves (OpenAI and vLLM's default: 20).
    max_tokens_field : str
        Request field of the generation budget: ``max_tokens`` (most servers)
        or ``max_completion_tokens`` (OpenAI's newer models).
    """

    base_url: str
    api_key_env: str | None = None
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    assistant_prefill: bool = False
    logprobs: bool = True
    max_top_logprobs: int = 20
    max_tokens_field: str = "max_tokens"


class ApiRequestError(RuntimeError):
    """A request that failed after every retry (or with a status that is not retried, e.g. 400 or 401).

    Attributes
    ----------
    status : int or None
        The last HTTP status (None: no response, e.g. connection refused or a time-out).
    attempts : int
        Requests sent for it (1 + retries).
    """

    def __init__(self, message: str, status: int | None, attempts: int) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


def _logprob(x: float) -> float:
    return -math.inf if x <= LOGPROB_FLOOR else float(x)


def generation_logprobs(choice: Any) -> tuple[tuple[float, ...] | None, str]:
    """The log-prob (nats, <= 0) of every generated token of one choice, and a status.

    Parameters
    ----------
    choice : openai ``Choice``
        One entry of ``ChatCompletion.choices``.

    Returns
    -------
    (tuple of float or None, str)
        The log-probs in generation order (``-9999.0`` read as ``-inf``) and
        ``"ok"``; or None and ``"no_logprobs"`` (the choice has no
        ``logprobs``) / ``"no_logprob_content"`` (``logprobs.content`` is null).
        An empty generation with content ``[]`` is ``((), "ok")``.
    """
    lp = getattr(choice, "logprobs", None)
    if lp is None:
        return None, "no_logprobs"
    content = getattr(lp, "content", None)
    if content is None:
        return None, "no_logprob_content"
    return tuple(_logprob(t.logprob) for t in content), LOGPROBS_OK


def next_token_logprobs(choice: Any) -> tuple[tuple[str, ...], tuple[float, ...], str]:
    """The returned top of the first token's distribution: token strings, log-probs (nats), status.

    Returns
    -------
    (tuple of str, tuple of float, str)
        Most probable first, as the server ordered them (stable-sorted by
        descending log-prob, so ties keep the server's order); status
        ``"ok"``, or empty tuples and ``"no_logprobs"``,
        ``"no_logprob_content"`` or ``"no_top_logprobs"`` (no first token, or
        it carries no ``top_logprobs``).
    """
    lp = getattr(choice, "logprobs", None)
    if lp is None:
        return (), (), "no_logprobs"
    content = getattr(lp, "content", None)
    if content is None:
        return (), (), "no_logprob_content"
    if not content or not getattr(content[0], "top_logprobs", None):
        return (), (), "no_top_logprobs"
    top = sorted(((t.token, _logprob(t.logprob)) for t in content[0].top_logprobs), key=lambda p: -p[1])
    return tuple(t for t, _ in top), tuple(v for _, v in top), LOGPROBS_OK


@dataclass
class _Stats:
    requests: int = 0
    retries: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, request: bool = False, retry: bool = False, status: str | None = None) -> None:
        with self.lock:
            self.requests += int(request)
            self.retries += int(retry)
            if status is not None:
                self.by_status[status] = self.by_status.get(status, 0) + 1


class OpenAIBackend:
    """Chat completions of one model on one OpenAI-compatible server.

    Parameters
    ----------
    model : str
        The server's model name (``model`` of every request).
    config : ApiConfig
    chat_template_kwargs : dict, optional
        Sent as ``chat_template_kwargs`` (a vLLM extra field) when not empty.
    sleep : callable, optional
        The wait between retries (tests pass a recorder).

    Raises
    ------
    ValueError
        If ``config.api_key_env`` names a variable that is not set (the
        message names the variable, never a value).
    ImportError
        If the ``openai`` package is missing (``pip install 'confgrid[api]'``).
    """

    tokenizer = None  # no local tokenizer: the server renders the chat template

    def __init__(self, model: str, config: ApiConfig, chat_template_kwargs: dict[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - the extra is in the test environments
            raise ImportError("backend 'openai' needs the openai package: pip install 'confgrid[api]'") from exc
        key = "EMPTY"
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise ValueError(f"api.api_key_env: environment variable {config.api_key_env!r} is not set (or empty) "
                                 "in the replica's process; set it where the run starts (Ray workers inherit it)")
        self._secret = key if config.api_key_env else None
        self.model_name = model
        self.config = config
        self.template_kwargs = dict(chat_template_kwargs or {})
        self.stats = _Stats()
        self._sleep = sleep
        self._openai = openai
        # the client's own retries are off: this backend retries, counts and honours Retry-After itself
        self._client = openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=0)
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="confgrid-api")
        self._fingerprints: set[str] = set()

    # -- requests -----------------------------------------------------------------------
    def _messages(self, user_text: str, assistant_prefix: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
        msgs = [{"role": "user", "content": user_text}]
        extra: dict[str, Any] = {}
        if assistant_prefix:
            if not self.config.assistant_prefill:
                raise ValueError(f"model {self.model_name!r}: an assistant prefix ({assistant_prefix[:40]!r}) needs "
                                 "api.assistant_prefill: true (a server that continues a final assistant message)")
            msgs.append({"role": "assistant", "content": assistant_prefix})
            extra.update(continue_final_message=True, add_generation_prompt=False)
        if self.template_kwargs:
            extra["chat_template_kwargs"] = self.template_kwargs
        return msgs, extra

    def _retry_wait(self, attempt: int, exc: Exception) -> float:
        cap = self.config.max_backoff_s
        response = getattr(exc, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        if header is not None:
            try:
                return min(cap, max(0.0, float(header)))
            except ValueError:
                pass  # an HTTP date: fall back to the exponential wait
        return min(cap, self.config.backoff_s * 2 ** attempt)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _create(self, **kwargs: Any) -> Any:
        """One chat completion with retries; raises :class:`ApiRequestError` when it still fails."""
        o = self._openai
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            self.stats.add(request=True, retry=attempt > 0)
            try:
                resp = self._client.chat.completions.create(model=self.model_name, **kwargs)
            except o.APIStatusError as exc:
                status: int | None = exc.status_code
                self.stats.add(status=str(status))
                retry = status in _RETRY_STATUS or (status is not None and status >= 500)
                err: Exception = exc
            except o.APIConnectionError as exc:  # includes APITimeoutError
                status = None
                self.stats.add(status="timeout" if isinstance(exc, o.APITimeoutError) else "connection")
                retry, err = True, exc
            else:
                fp = getattr(resp, "system_fingerprint", None)
                if fp:
                    self._fingerprints.add(str(fp))
                return resp
            if not retry or attempt == attempts - 1:
                what = f"HTTP {status}" if status is not None else type(err).__name__
                raise ApiRequestError(self._scrub(
                    f"model {self.model_name!r} at {self.config.base_url}: request failed after {attempt + 1} "
                    f"attempt(s) ({what}): {err}"), status, attempt + 1) from None
            self._sleep(self._retry_wait(attempt, err))
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn`` over ``items``, ``max_concurrency`` at a time, in input order; the first failure cancels the rest."""
        if not items:
            return []
        futures = [self._pool.submit(fn, x) for x in items]
        done, _ = wait(futures, return_when="FIRST_EXCEPTION")
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            for f in futures:
                f.cancel()
            wait(futures)
            raise failed[0].exception()
        return [f.result() for f in futures]

    # -- what the worker calls ----------------------------------------------------------
    def generate(self, user_texts: list[str], assistant_prefixes: list[str], max_new_tokens: int,
                 sampling: Sampling | None = None) -> list[GenerationOutput] | list[SamplesOutput]:
        """Continuations of each user turn (and assistant prefix): greedy, or ``sampling.n`` samples.

        Parameters
        ----------
        user_texts, assistant_prefixes : list of str
            Same length; a prefix ``""`` opens no assistant turn.
        max_new_tokens : int
            Sent as ``max_tokens`` (or ``max_completion_tokens``), >= 1.
        sampling : Sampling, optional
            None or greedy: ``temperature=0``, ``n=1``, no seed. Otherwise
            ``temperature``, ``top_p``, ``top_k`` (extra field, sent when
            > 0), ``n`` and ``seed = text_request_seed(sampling.seed, text)``
            (not sent when ``sampling.seed`` is None).

        Returns
        -------
        list of GenerationOutput (greedy) or list of SamplesOutput (sampled)
            One per input, in order. ``n_tokens``: the generated tokens (the
            log-prob entries; without them the usage count, ``-1`` when
            unknown: ``n > 1`` without log-probs); ``prompt_tokens``: the
            server's usage count (``-1`` when absent). ``token_logprobs`` /
            ``logprobs_status`` as :func:`generation_logprobs`
            (``"not_requested"`` with ``api.logprobs: false``).

        Raises
        ------
        ValueError
            On invalid sampling (:func:`check_sampling`), ``max_new_tokens < 1``,
            ``from_model`` sampling (a server's defaults are not visible), or an
            assistant prefix without ``assistant_prefill``.
        ApiRequestError
            If a request still fails after its retries.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        greedy = sampling is None or sampling.greedy
        if sampling is not None and sampling.from_model:
            raise ValueError(f"model {self.model_name!r}: temperature model_default needs the model's "
                             "generation_config, which an API model does not expose; give a temperature")
        if not greedy:
            check_sampling(sampling.temperature, sampling.top_p, sampling.top_k, sampling.n)
        base: dict[str, Any] = {self.config.max_tokens_field: int(max_new_tokens)}
        if self.config.logprobs:
            base["logprobs"] = True
        if greedy:
            base["temperature"] = 0.0
        else:
            base.update(temperature=float(sampling.temperature), top_p=float(sampling.top_p), n=int(sampling.n))

        def one(args: tuple[str, str]) -> Any:
            text, prefix = args
            msgs, extra = self._messages(text, prefix)
            kw = dict(base)
            if not greedy and sampling.top_k:
                extra["top_k"] = int(sampling.top_k)
            if not greedy and sampling.seed is not None:
                kw["seed"] = text_request_seed(sampling.seed, text, prefix)
            resp = self._create(messages=msgs, extra_body=extra or None, **kw)
            outs = tuple(self._output(c, resp, len(resp.choices)) for c in sorted(resp.choices, key=lambda c: c.index))
            want = 1 if greedy else sampling.n
            if len(outs) != want:
                raise ApiRequestError(f"model {self.model_name!r} at {self.config.base_url}: asked n={want}, the "
                                      f"server returned {len(outs)} choice(s)", None, 1)
            return outs[0] if greedy else SamplesOutput(samples=outs, sampling=sampling)

        return self._run(one, list(zip(user_texts, assistant_prefixes, strict=True)))

    def _output(self, choice: Any, resp: Any, n_choices: int) -> GenerationOutput:
        if self.config.logprobs:
            lps, status = generation_logprobs(choice)
        else:
            lps, status = None, "not_requested"
        usage = getattr(resp, "usage", None)
        completion = getattr(usage, "completion_tokens", None)
        n_tokens = len(lps) if lps is not None else (int(completion) if completion is not None and n_choices == 1
                                                    else -1)
        prompt = getattr(usage, "prompt_tokens", None)
        return GenerationOutput(text=choice.message.content or "", finish_reason=str(choice.finish_reason),
                                n_tokens=n_tokens, prompt_tokens=int(prompt) if prompt is not None else -1,
                                token_logprobs=lps, logprobs_status=status)

    def next_token(self, user_texts: list[str], assistant_prefixes: list[str], top_k: int,
                   candidates: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> list[NextTokenOutput]:
        """The returned top ``top_k`` of the first response token's distribution after each prompt.

        One greedy request per prompt with ``max_tokens=1, logprobs=true,
        top_logprobs=top_k``. A server returns token strings, not ids, so each
        row's tokens get the ids ``-1, -2, ...`` (-1 - rank; negative: no
        vocabulary ids) and ``candidate_tokens`` maps each candidate to the ids
        of the returned tokens that are one of its forms
        (:func:`~confgrid.protocols.candidates.candidate_tokens_from_strings`).

        Returns
        -------
        list of NextTokenOutput
            Log-probs in nats, most probable first; ``logprobs_status`` as
            :func:`next_token_logprobs` (empty tuples when not ``"ok"``:
            the downstream P(True) is then NaN with that status).

        Raises
        ------
        ValueError
            If ``top_k`` is outside [1, ``api.max_top_logprobs``].
        ApiRequestError
            If a request still fails after its retries.
        """
        from confgrid.protocols.candidates import candidate_tokens_from_strings

        if not 1 <= top_k <= self.config.max_top_logprobs:
            raise ValueError(f"top_logprobs={top_k}: allowed 1..{self.config.max_top_logprobs} "
                             "(api.max_top_logprobs) for an API model")

        def one(args: tuple[str, str]) -> NextTokenOutput:
            text, prefix = args
            msgs, extra = self._messages(text, prefix)
            resp = self._create(messages=msgs, extra_body=extra or None, temperature=0.0, logprobs=True,
                                top_logprobs=int(top_k), **{self.config.max_tokens_field: 1})
            tokens, lps, status = next_token_logprobs(resp.choices[0])
            ids = tuple(-1 - r for r in range(len(tokens)))
            prompt = getattr(getattr(resp, "usage", None), "prompt_tokens", None)
            cand = candidate_tokens_from_strings(dict(zip(ids, tokens, strict=True)), candidates, cases) \
                if candidates else {}
            return NextTokenOutput(token_ids=ids, logprobs=lps, prompt_tokens=int(prompt) if prompt is not None else -1,
                                   candidate_tokens=cand, logprobs_status=status)

        return self._run(one, list(zip(user_texts, assistant_prefixes, strict=True)))

    def provenance(self) -> dict[str, str]:
        """Backend, client version, server and model name, the key's variable name (never the key)."""
        return {"backend": "openai", "backend_version": f"openai {self._openai.__version__}",
                "dtype": "server", "device": "api", "model": self.model_name, "revision": "",
                "base_url": self.config.base_url, "api_key_env": self.config.api_key_env or ""}

    def request_stats(self) -> dict[str, Any]:
        """Requests sent, retries among them, failures by status (``"429"``, ``"500"``, ``"timeout"``...) and
        the ``system_fingerprint`` values the server answered with (a changed one: the server changed)."""
        with self.stats.lock:
            return {"requests": self.stats.requests, "retries": self.stats.retries,
                    "failures": dict(self.stats.by_status), "system_fingerprints": sorted(self._fingerprints)}

    def shutdown(self) -> None:
        """Stop the thread pool and close the HTTP client (idempotent)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
