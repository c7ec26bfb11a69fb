"""A backend for OpenAI-compatible chat-completions servers (hosted APIs, vLLM's ``vllm serve``, other local servers).

An API model has no local weights or tokenizer: each request is a chat message list (the user turn, and an assistant
turn that the server continues when the grid asks for an assistant prefix), sent as ``POST
{base_url}/chat/completions`` through the ``openai`` package, and the server renders its own chat template. What is
sent for generation (greedy or ``n`` samples, per-request seeds from
:func:`~confgrid.actors.backend.text_request_seed`, token log-probs in nats) and for next-token distributions, what
chat completions cannot give (prompt log-probs, hidden states: refused by the grid check, flows/spec/api.py), and how
attempts are retried, counted (:class:`~confgrid.actors.calls.RequestCounts`), stop the model (``fatal``) and are kept
in the run's answer cache (actors/api_cache.py): docs/guides/api-models.md. A failed request gives an
:class:`ApiRequestError` for its shard alone. The API key is read on the replica from the variable the grid names and
never enters a record, a log line or an error message.

Definitions: OpenAI API reference, "Create chat completion" (``logprobs``, ``top_logprobs``, ``seed``, ``n``); vLLM
docs, "OpenAI-Compatible Server" (extra parameters ``top_k``, ``continue_final_message``, ``add_generation_prompt``,
``chat_template_kwargs``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

from confgrid.actors.api_cache import AnswerCache, request_key
from confgrid.actors.backend import check_sampling, text_request_seed
from confgrid.actors.http_deadline import deadline_client, request_deadline
from confgrid.actors.calls import GenerationOutput, NextTokenOutput, RequestCounts, Sampling, SamplesOutput
from confgrid.errors import FieldsPickle
from confgrid.protocols.candidates import candidate_tokens_from_strings

__all__ = ["ApiConfig", "ApiRequestError", "ApiOutcome", "OpenAIBackend", "generation_logprobs",
           "next_token_logprobs", "check_reply", "unwrap", "LOGPROB_FLOOR", "LOGPROBS_OK", "FATAL_STATUS", "BODY_EXCERPT"]

#: OpenAI's stand-in for an impossible token's log-prob ("-9999.0 signifies that the token is very unlikely");
#: values at or below it are stored as -inf.
LOGPROB_FLOOR = -9999.0
#: ``logprobs_status`` of an output whose log-probs the server returned.
LOGPROBS_OK = "ok"
#: Statuses below 500 that are retried (rate limit, request time-out, conflict: the ones the openai client itself
#: retries); every 5xx is retried too. ``finish_reason`` is stored as the server names it ("stop", "length";
#: "content_filter", ... kept as is).
_RETRY_STATUS = (408, 409, 429)
#: Statuses that stop the model at once (a wrong key, no access, an unknown model): every further request of the
#: model would get the same answer, so its remaining requests and shards fail with the reason, unsent.
FATAL_STATUS = (401, 403, 404)
#: Characters of a malformed body quoted in the error.
BODY_EXCERPT = 200


@dataclass(frozen=True)
class ApiConfig:
    """How to reach one OpenAI-compatible server: a plain copy of the grid's ``models[].api``, each field as
    :class:`~confgrid.flows.spec.api.ApiSpec` documents it (``api_key_env`` None: the placeholder ``EMPTY`` is
    sent), and ``cache_dir``, the run's answer cache (actors/api_cache.py; set by the executor, not a grid field;
    None: no cache)."""

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
    max_consecutive_failures: int | None = 20
    cache_dir: str | None = None


class ApiRequestError(FieldsPickle, RuntimeError):
    """A request that failed after every retry (or with a status that is not retried, e.g. 400 or 401).

    Pickles with its fields (it crosses Ray); its message reads ``model 'NAME' at URL: failed after N attempt(s)
    (HTTP 500): <server text>``, with the key scrubbed.

    ``status``: the last HTTP status (None: no response, e.g. connection refused or a time-out). ``attempts``:
    requests sent for it (1 + retries; 0: not sent, the model was stopped). ``failure``: the last failure's cause
    (:data:`~confgrid.actors.calls.RETRY_CAUSES`, or ``"stopped"``; not named ``cause``: Ray's error wrapper keeps the
    original exception under that name). ``fatal``: the model is stopped (401, 403, 404 or
    ``max_consecutive_failures``), its other requests fail unsent. ``counts``: the request's attempts by cause.
    """

    def __init__(self, message: str, status: int | None, attempts: int, failure: str | None = None,
                 fatal: bool = False, counts: RequestCounts | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.failure = failure
        self.fatal = fatal
        self.counts = counts

    #: the driver shows the message as is, without the class name (flows/execute/queue.py ``error_text``)
    names_itself = True


@dataclass(frozen=True)
class ApiOutcome:
    """One request's result: its output, or the error it failed with, and its counts."""

    output: Any
    error: ApiRequestError | None
    counts: RequestCounts


class _Failed(Exception):
    """One failed attempt: its cause, status, a one-line description and the response (for Retry-After)."""

    def __init__(self, cause: str, status: int | None, what: str, detail: str, response: Any = None) -> None:
        super().__init__(detail)
        self.cause, self.status, self.what, self.detail, self.response = cause, status, what, detail, response


def unwrap(outcomes: list[ApiOutcome]) -> list[Any]:
    """The outputs of ``outcomes``, in order; raises the first failed request's ``ApiRequestError``, a fatal one
    first (it names why the others failed unsent)."""
    errors = [o.error for o in outcomes if o.error is not None]
    if errors:
        raise next((e for e in errors if e.fatal and e.failure != "stopped"), errors[0])
    return [o.output for o in outcomes]


def _ns(x: Any) -> Any:
    """JSON objects as attribute namespaces (what the parsers read with ``getattr``), lists kept as lists."""
    if isinstance(x, dict):
        return SimpleNamespace(**{str(k): _ns(v) for k, v in x.items()})
    if isinstance(x, list):
        return [_ns(v) for v in x]
    return x


def check_reply(content_type: str | None, text: str, n: int | None) -> tuple[dict[str, Any] | None, str | None]:
    """Whether a 200 body is a usable chat completion: ``(parsed body, None)`` or ``(None, what is wrong)``.

    Usable: a JSON ``content_type`` (the header), a JSON object, ``choices`` a non-empty list of objects that each
    have a ``message`` object (or at least a ``logprobs`` object), and ``n`` choices when ``n`` is given (None: any
    number). A choice whose ``logprobs`` is null is usable (its log-probs are NaN with a ``logprobs_status``), a body
    that is not is *malformed*: retried like a 5xx.
    """
    if content_type is not None and "json" not in content_type.lower():
        return None, f"content type {content_type.split(';')[0].strip()!r}, not JSON"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"invalid JSON ({exc})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not an object"
    choices = data.get("choices")
    if not isinstance(choices, list):
        return None, "no 'choices' list"
    if not choices:
        return None, "'choices' is empty"
    for i, c in enumerate(choices):
        if not isinstance(c, dict):
            return None, f"choice {i} is not an object"
        if not isinstance(c.get("message"), dict) and not isinstance(c.get("logprobs"), dict):
            return None, f"choice {i} has neither a message nor a distribution"
    if n is not None and len(choices) != n:
        return None, f"asked n={n}, the server returned {len(choices)} choice(s)"
    return data, None


def _usage(resp: Any, field: str) -> int:
    """A count of the response's ``usage`` (``prompt_tokens``, ``completion_tokens``); -1 when absent."""
    value = getattr(getattr(resp, "usage", None), field, None)
    return int(value) if value is not None else -1


def _logprob(x: float) -> float:
    return -math.inf if x <= LOGPROB_FLOOR else float(x)


def generation_logprobs(choice: Any) -> tuple[tuple[float, ...] | None, str]:
    """The log-prob (nats, <= 0) of every generated token of one choice (of ``ChatCompletion.choices``), and a status.

    The log-probs in generation order (``-9999.0`` read as ``-inf``) and ``"ok"``; or None and ``"no_logprobs"`` (the
    choice has no ``logprobs``) / ``"no_logprob_content"`` (``logprobs.content`` is null). An empty generation with
    content ``[]`` is ``((), "ok")``.
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

    Most probable first, as the server ordered them (stable-sorted by descending log-prob, so ties keep the server's
    order); status ``"ok"``, or empty tuples and ``"no_logprobs"``, ``"no_logprob_content"`` or ``"no_top_logprobs"``
    (no first token, or it carries no ``top_logprobs``).
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


class OpenAIBackend:
    """Chat completions of one model on one OpenAI-compatible server.

    ``model`` is the server's model name, ``name`` the grid's (in error messages; default ``model``);
    ``chat_template_kwargs`` is sent as a vLLM extra field when not empty; ``sleep`` waits between retries (tests
    pass a recorder).

    Raises ``ValueError`` if ``config.api_key_env`` names a variable that is not set (the message names the variable,
    never a value); ``ImportError`` if the ``openai`` package is missing (``pip install 'confgrid[api]'``).
    """

    tokenizer = None  # no local tokenizer: the server renders the chat template

    def __init__(self, model: str, config: ApiConfig, chat_template_kwargs: dict[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep, name: str | None = None) -> None:
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
        self.name = name or model  # the grid's name of the model, in every error message
        self.config = config
        self.template_kwargs = dict(chat_template_kwargs or {})
        self._sleep = sleep
        self._openai = openai
        # the client's own retries are off: this backend retries, counts and honours Retry-After itself
        self._client = openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=0,
                                     http_client=deadline_client(openai, config.max_concurrency))
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="confgrid-api")
        self._lock = threading.Lock()
        self._total = RequestCounts()
        self._consecutive = 0  # failed attempts in a row, over every request of this replica
        self._stopped: ApiRequestError | None = None  # why the model was stopped (every later request fails unsent)
        self._cache = self._open_cache(config.cache_dir)

    @staticmethod
    def _open_cache(path: str | None) -> AnswerCache | None:
        """The run's answer cache, when the folder is reachable from this process (same host or shared storage)."""
        if not path:
            return None
        if not os.path.isdir(path):
            logging.getLogger("confgrid").warning(
                "answer cache %s is not reachable from %s (a replica on another node without shared storage): "
                "answers of this replica are not cached", path, socket.gethostname())
            return None
        return AnswerCache(path)

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

    def _retry_wait(self, attempt: int, response: Any) -> float:
        cap = self.config.max_backoff_s
        header = response.headers.get("retry-after") if response is not None else None
        if header is not None:
            try:
                return min(cap, max(0.0, float(header)))
            except ValueError:
                pass  # an HTTP date: fall back to the exponential wait
        return min(cap, self.config.backoff_s * 2 ** attempt)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _where(self) -> str:
        return f"model {self.name!r} at {self.config.base_url}"

    def _key_note(self) -> str:
        """What a 401/403 says about the key: which variable it came from, and that it was set (never its value)."""
        env = self.config.api_key_env
        if not env:
            return "; no key was sent (api.api_key_env is not set in the grid; the placeholder 'EMPTY' went)"
        return (f"; the key comes from the variable named in api.api_key_env, {env}, which is set in the "
                f"replica's environment ({len(self._secret or '')} characters): check its value")

    def _send(self, kwargs: dict[str, Any], extra: dict[str, Any], n: int | None) -> tuple[str, dict[str, Any]]:
        """Send one attempt and read its whole body within ``timeout_s``; returns (body text, parsed body).

        The deadline runs from the moment the request is sent to the last byte of the body, headers included: every
        socket operation of this thread is shortened to what is left of it (actors/http_deadline.py), so a server
        that trickles its headers or its body a byte at a time is cut when ``timeout_s`` has passed. Raises
        ``_Failed`` with the cause: an HTTP status, ``timeout``, ``connection`` or ``malformed``.
        """
        o = self._openai
        try:
            with request_deadline(self.config.timeout_s), \
                    self._client.chat.completions.with_streaming_response.create(
                        model=self.model_name, extra_body=extra or None, **kwargs) as raw:
                http = raw.http_response
                body = b"".join(http.iter_bytes()).decode("utf-8", errors="replace")
                ctype = http.headers.get("content-type")
        except o.APIStatusError as exc:
            st = exc.status_code
            cause = str(st) if st in _RETRY_STATUS else "5xx" if st >= 500 else "4xx"
            try:
                text = exc.response.text
            except Exception:  # noqa: BLE001 - a body that cannot be read: the client's message
                text = str(exc)
            raise _Failed(cause, st, f"HTTP {st}", " ".join(text.split())[:1000], exc.response) from None
        except o.APITimeoutError:
            raise _Failed("timeout", None, "APITimeoutError", f"no answer within timeout_s={self.config.timeout_s:g} s") \
                from None
        except o.APIConnectionError as exc:
            raise _Failed("connection", None, "APIConnectionError", str(exc.__cause__ or exc)) from None
        except Exception as exc:  # noqa: BLE001 - the body stopped arriving: past the deadline, or the peer left
            transport = type(exc).__module__.split(".")[0].startswith(("httpx", "httpcore")) or isinstance(exc, OSError)
            if not transport:
                raise
            if "Timeout" in type(exc).__name__:  # the deadline passed while the body was arriving
                raise _Failed("timeout", None, "APITimeoutError",
                              f"the body did not arrive within timeout_s={self.config.timeout_s:g} s") from None
            raise _Failed("connection", None, "APIConnectionError", f"{type(exc).__name__}: {exc}") from None
        data, wrong = check_reply(ctype, body, n)
        if wrong is not None:
            raise _Failed("malformed", 200, f"malformed reply: {wrong}",
                          f"body starts {body[:BODY_EXCERPT]!r}")
        return body, data

    def _note(self, ok: bool, failed: _Failed | None = None) -> ApiRequestError | None:
        """Count an attempt's outcome run-wide; returns the stop reason when this failure stops the model."""
        with self._lock:
            if ok:
                self._consecutive = 0
                return None
            self._consecutive += 1
            if self._stopped is not None:
                return self._stopped
            limit = self.config.max_consecutive_failures
            if failed.status in FATAL_STATUS:
                note = self._key_note() if failed.status in (401, 403) else \
                    f"; the server does not know model {self.model_name!r}?" if failed.status == 404 else ""
                msg = f"{self._where()}: stopped at HTTP {failed.status} (not retried){note}: {failed.detail}"
            elif limit is not None and self._consecutive >= limit:
                msg = (f"{self._where()}: stopped after {self._consecutive} failed attempts in a row "
                       f"(api.max_consecutive_failures={limit}); the last: {failed.what}: {failed.detail}")
            else:
                return None
            self._stopped = ApiRequestError(self._scrub(msg), failed.status, 0, failed.cause, fatal=True)
            return self._stopped

    def _request(self, kwargs: dict[str, Any], extra: dict[str, Any], n: int | None = None) -> tuple[Any, RequestCounts]:
        """One chat completion, from the answer cache or with retries; returns (response, its counts).

        Raises ``ApiRequestError`` when it still fails (``counts`` attached; ``fatal`` when the model is stopped).
        """
        counts = RequestCounts(requests=1)
        key = request_key(self.model_name, self.config.base_url, {**kwargs, **extra}) if self._cache is not None else None
        stored = self._cache.get(key) if key is not None else None
        if stored is not None:
            data, wrong = check_reply("application/json", stored, n)
            if wrong is None:
                counts.answered = counts.cached = 1
                return self._answer(data, counts)
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            if self._stopped is not None:
                raise self._error(f"{self._stopped} (request not sent)", self._stopped.status, attempt,
                                  "stopped", True, counts)
            counts.attempts += 1
            counts.retries += int(attempt > 0)
            try:
                body, data = self._send(kwargs, extra, n)
            except _Failed as f:
                counts.failures[f.cause] = counts.failures.get(f.cause, 0) + 1
                stop = self._note(False, f)
                retry = f.cause not in ("4xx",) and f.status not in FATAL_STATUS
                if stop is not None:
                    raise self._error(str(stop), f.status, attempt + 1, f.cause, True, counts)
                if not retry or attempt == attempts - 1:
                    raise self._error(f"{self._where()}: failed after {attempt + 1} attempt(s) ({f.what}): "
                                      f"{f.detail}", f.status, attempt + 1, f.cause, False, counts)
                self._sleep(self._retry_wait(attempt, f.response))
                continue
            self._note(True)
            if key is not None:
                self._cache.put(key, body)
            counts.answered = 1
            return self._answer(data, counts)
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, data: dict[str, Any], counts: RequestCounts) -> tuple[Any, RequestCounts]:
        fp = data.get("system_fingerprint")
        if fp:
            counts.system_fingerprints = [str(fp)]
        with self._lock:
            self._total.add(counts)
        return _ns(data), counts

    def _error(self, msg: str, status: int | None, attempts: int, cause: str | None, fatal: bool,
               counts: RequestCounts) -> ApiRequestError:
        with self._lock:
            self._total.add(counts)
        return ApiRequestError(self._scrub(msg), status, attempts, cause, fatal, counts)

    def _run(self, fn: Callable[[Any], tuple[Any, RequestCounts]], items: list[Any]) -> list[ApiOutcome]:
        """``fn`` over ``items``, ``max_concurrency`` at a time, in input order; every request runs to its end
        (a failed one keeps the others' answers; after a fatal failure the rest fail unsent)."""
        if not items:
            return []
        futures = [self._pool.submit(fn, x) for x in items]
        wait(futures)
        out = []
        for f in futures:
            exc = f.exception()
            if exc is None:
                value, counts = f.result()
                out.append(ApiOutcome(value, None, counts))
            elif isinstance(exc, ApiRequestError):
                out.append(ApiOutcome(None, exc, exc.counts or RequestCounts(requests=1)))
            else:
                raise exc
        return out

    # -- what the worker calls ----------------------------------------------------------
    def generate(self, user_texts: list[str], assistant_prefixes: list[str], max_new_tokens: int,
                 sampling: Sampling | None = None) -> list[GenerationOutput] | list[SamplesOutput]:
        """The outputs of :meth:`generate_outcomes`; raises the first request's error (a fatal one first)."""
        return unwrap(self.generate_outcomes(user_texts, assistant_prefixes, max_new_tokens, sampling))

    def next_token(self, user_texts: list[str], assistant_prefixes: list[str], top_k: int,
                   candidates: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> list[NextTokenOutput]:
        """The outputs of :meth:`next_token_outcomes`; raises the first request's error (a fatal one first)."""
        return unwrap(self.next_token_outcomes(user_texts, assistant_prefixes, top_k, candidates, cases))

    def generate_outcomes(self, user_texts: list[str], assistant_prefixes: list[str], max_new_tokens: int,
                          sampling: Sampling | None = None) -> list[ApiOutcome]:
        """Continuations of each user turn (and assistant prefix): greedy, or ``sampling.n`` samples.

        A prefix ``""`` opens no assistant turn; ``max_new_tokens`` (>= 1) is sent as ``max_tokens`` (or
        ``max_completion_tokens``). ``sampling`` None or greedy: ``temperature=0``, ``n=1``, no seed; otherwise
        ``temperature``, ``top_p``, ``top_k`` (extra field, sent when > 0), ``n`` and ``seed =
        text_request_seed(sampling.seed, text)`` (not sent when ``sampling.seed`` is None).

        One ApiOutcome per input, in order: its output (a GenerationOutput when greedy, a SamplesOutput when sampled)
        or the ApiRequestError it failed with (every request runs to its end; the answered ones are kept, and stored
        in the answer cache), and its counts. ``n_tokens``: the generated tokens (the log-prob entries; without them
        the usage count, ``-1`` when unknown: ``n > 1`` without log-probs). ``token_logprobs`` / ``logprobs_status``
        as :func:`generation_logprobs` (``"not_requested"`` with ``api.logprobs: false``).

        Raises ``ValueError`` on invalid sampling (:func:`check_sampling`), ``max_new_tokens < 1``, ``from_model``
        sampling (a server's defaults are not visible), or an assistant prefix without ``assistant_prefill``.
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

        want = 1 if greedy else sampling.n

        def one(args: tuple[str, str]) -> tuple[Any, RequestCounts]:
            text, prefix = args
            msgs, extra = self._messages(text, prefix)
            kw = dict(base, messages=msgs)
            if not greedy and sampling.top_k:
                extra["top_k"] = int(sampling.top_k)
            if not greedy and sampling.seed is not None:
                kw["seed"] = text_request_seed(sampling.seed, text, prefix)
            resp, counts = self._request(kw, extra, want)
            choices = sorted(resp.choices, key=lambda c: getattr(c, "index", 0) or 0)
            outs = tuple(self._output(c, resp, len(choices)) for c in choices)
            return (outs[0] if greedy else SamplesOutput(samples=outs, sampling=sampling)), counts

        return self._run(one, list(zip(user_texts, assistant_prefixes, strict=True)))

    def _output(self, choice: Any, resp: Any, n_choices: int) -> GenerationOutput:
        if self.config.logprobs:
            lps, status = generation_logprobs(choice)
        else:
            lps, status = None, "not_requested"
        completion = _usage(resp, "completion_tokens")
        n_tokens = len(lps) if lps is not None else completion if n_choices == 1 else -1
        message = getattr(choice, "message", None)
        return GenerationOutput(text=getattr(message, "content", None) or "",
                                finish_reason=str(getattr(choice, "finish_reason", None)),
                                n_tokens=n_tokens, prompt_tokens=_usage(resp, "prompt_tokens"),
                                token_logprobs=lps, logprobs_status=status)

    def next_token_outcomes(self, user_texts: list[str], assistant_prefixes: list[str], top_k: int,
                            candidates: tuple[str, ...] = (), cases: tuple[str, ...] = ()) -> list[ApiOutcome]:
        """The returned top ``top_k`` of the first response token's distribution after each prompt.

        One greedy request per prompt with ``max_tokens=1, logprobs=true, top_logprobs=top_k``. A server returns
        token strings, not ids, so each row's tokens get the ids ``-1 - rank`` and ``candidate_tokens`` maps each
        candidate to the ids of the returned tokens that are one of its forms
        (:func:`~confgrid.protocols.candidates.candidate_tokens_from_strings`).

        One ApiOutcome per input, in order (as :meth:`generate_outcomes`), each output a NextTokenOutput: log-probs
        in nats, most probable first; ``logprobs_status`` as :func:`next_token_logprobs` (empty tuples when not
        ``"ok"``: the downstream P(True) is then NaN with that status). Raises ``ValueError`` if ``top_k`` is outside
        [1, ``api.max_top_logprobs``].
        """
        if not 1 <= top_k <= self.config.max_top_logprobs:
            raise ValueError(f"top_logprobs={top_k}: allowed 1..{self.config.max_top_logprobs} "
                             "(api.max_top_logprobs) for an API model")

        def one(args: tuple[str, str]) -> tuple[NextTokenOutput, RequestCounts]:
            text, prefix = args
            msgs, extra = self._messages(text, prefix)
            resp, counts = self._request(dict(messages=msgs, temperature=0.0, logprobs=True, top_logprobs=int(top_k),
                                              **{self.config.max_tokens_field: 1}), extra)
            tokens, lps, status = next_token_logprobs(resp.choices[0])
            ids = tuple(-1 - r for r in range(len(tokens)))
            cand = candidate_tokens_from_strings(dict(zip(ids, tokens, strict=True)), candidates, cases) \
                if candidates else {}
            return NextTokenOutput(token_ids=ids, logprobs=lps, prompt_tokens=_usage(resp, "prompt_tokens"),
                                   candidate_tokens=cand, logprobs_status=status), counts

        return self._run(one, list(zip(user_texts, assistant_prefixes, strict=True)))

    def provenance(self) -> dict[str, str]:
        """Backend, client version, server and model name, the key's variable name (never the key)."""
        return {"backend": "openai", "backend_version": f"openai {self._openai.__version__}",
                "dtype": "server", "device": "api", "model": self.model_name, "revision": "",
                "base_url": self.config.base_url, "api_key_env": self.config.api_key_env or ""}

    def request_stats(self) -> RequestCounts:
        """Every request of this replica so far (:class:`~confgrid.actors.calls.RequestCounts`: asked, answered,
        cached, attempts, retries, failed attempts by cause, the ``system_fingerprint`` values: a changed one
        means the server changed)."""
        with self._lock:
            return RequestCounts.from_dict(self._total.as_dict())

    def shutdown(self) -> None:
        """Stop the thread pool and close the HTTP client (idempotent)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
