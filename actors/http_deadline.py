"""A deadline for a whole HTTP request: from the moment it is sent to the last byte of its body.

HTTP clients bound each socket operation (connect, one read, one write) by its own time-out, so a server that trickles
its headers or its body a byte at a time keeps one request open for as long as it likes. The openai package's client
(httpx underneath) is such a client. This module bounds the whole request instead: :func:`deadline_client` gives an
``httpx`` client whose connections read and write through :class:`DeadlineStream`, which shortens every operation's
time-out to what is left of the deadline that the calling thread set with :func:`request_deadline`, and refuses to
start one once the deadline has passed (``httpcore.ReadTimeout``/``WriteTimeout``, which the openai client reports as
``APITimeoutError`` while the headers are awaited and httpx as ``ReadTimeout`` while the body is read).

The deadline lives in a thread-local: a request is sent and read on the thread that set it (httpx's synchronous
client), and a connection reused from the pool by another thread reads that thread's deadline. A thread with no
deadline set gets the per-operation time-outs unchanged.

Works with the ``httpx``/``httpcore`` pair the installed openai package uses
(``httpx2``/``httpcore2`` for openai 3, ``httpx``/``httpcore`` before).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from types import ModuleType
from typing import Any, Iterator

__all__ = ["DeadlineStream", "deadline_client", "request_deadline"]

_local = threading.local()


@contextlib.contextmanager
def request_deadline(seconds: float) -> Iterator[float]:
    """Bound every socket operation of this thread, until the block ends, by one deadline ``seconds`` from now.

    ``seconds`` is the request's whole budget (``timeout_s`` of the grid's ``api`` section); the block gets the
    deadline on the ``time.monotonic()`` clock. Raises ``ValueError`` if ``seconds`` is not a positive finite number.
    """
    if not (seconds > 0 and seconds != float("inf")):
        raise ValueError(f"request_deadline: seconds={seconds!r}; allowed: a positive finite number of seconds")
    saved = getattr(_local, "at", None)
    _local.at = time.monotonic() + seconds
    try:
        yield _local.at
    finally:
        _local.at = saved


def _left(timeout: float | None, op: str, exc: type[Exception]) -> float | None:
    """``timeout`` shortened to what is left of this thread's deadline; raises ``exc`` when none is left."""
    at = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise exc(f"the request's deadline passed before this {op}")
    return left if timeout is None else min(timeout, left)


class DeadlineStream:
    """A network stream (``httpcore.NetworkStream``) whose reads and writes end at the calling thread's deadline;
    it wraps the connection's own stream, and raises the time-out exceptions of its ``httpcore`` module."""

    def __init__(self, inner: Any, httpcore: ModuleType) -> None:
        self._inner = inner
        self._hc = httpcore

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, "read", self._hc.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        return self._inner.write(buffer, _left(timeout, "write", self._hc.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> "DeadlineStream":
        inner = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, "TLS handshake",
                                                                          self._hc.ConnectTimeout))
        return DeadlineStream(inner, self._hc)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """A network backend (``httpcore.NetworkBackend``) that opens connections as :class:`DeadlineStream`."""

    def __init__(self, inner: Any, httpcore: ModuleType) -> None:
        self._inner = inner
        self._hc = httpcore

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> DeadlineStream:
        stream = self._inner.connect_tcp(host, port, timeout=_left(timeout, "connect", self._hc.ConnectTimeout),
                                         local_address=local_address, socket_options=socket_options)
        return DeadlineStream(stream, self._hc)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> DeadlineStream:
        stream = self._inner.connect_unix_socket(path, timeout=_left(timeout, "connect", self._hc.ConnectTimeout),
                                                 socket_options=socket_options)
        return DeadlineStream(stream, self._hc)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _http_modules(openai: ModuleType) -> tuple[ModuleType, ModuleType]:
    """The (httpx, httpcore) modules the installed openai package builds its client on."""
    top = next(c.__module__.split(".")[0] for c in openai.DefaultHttpxClient.__mro__[1:]
               if c.__name__ == "Client")
    return importlib.import_module(top), importlib.import_module(top.replace("httpx", "httpcore"))


def deadline_client(openai: ModuleType, max_connections: int) -> Any:
    """An ``httpx`` client for ``openai.OpenAI(http_client=...)`` whose requests end at :func:`request_deadline`.

    An ``openai.DefaultHttpxClient`` with openai's defaults (redirects, time-outs) and a transport whose connection
    pool (at most ``max_connections``, the backend's ``max_concurrency``) opens :class:`DeadlineStream` connections.

    Raises ``RuntimeError`` if the installed httpcore's connection pool has no network backend to wrap (an httpcore
    this module does not know): the deadline would silently not hold.
    """
    httpx, httpcore = _http_modules(openai)
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=max_connections,
                                                       max_keepalive_connections=max_connections))
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        raise RuntimeError(f"{httpcore.__name__} {getattr(httpcore, '__version__', '?')}: its connection pool has no "
                           "network backend to wrap, so api.timeout_s could not bound a whole request")
    pool._network_backend = _DeadlineBackend(backend, httpcore)
    return openai.DefaultHttpxClient(transport=transport)
