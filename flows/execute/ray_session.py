"""The one Ray start-up helper: join a given cluster, or start a private local one.

Without an address (and outside a Ray job) confgrid starts its own local cluster in its own temp dir, and never
joins one somebody else started with ``ray start`` (``ray.init()`` alone would, and hang once it is gone). A
given address is checked first: one that does not answer within ``connect_timeout`` seconds is an error that
names it, not a hang.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from confgrid.errors import FieldsPickle
from confgrid.flows.store.runlog import LOG_NAME, trace

__all__ = ["init_ray", "RayConnectError", "RayTarget", "ray_target", "wait_reachable", "private_temp_dir",
           "DEFAULT_CONNECT_TIMEOUT"]

log = logging.getLogger("confgrid")

#: Seconds to wait for a given cluster address to accept a connection (``CONFGRID_RAY_CONNECT_TIMEOUT``).
DEFAULT_CONNECT_TIMEOUT = 60.0


class RayConnectError(FieldsPickle, ConnectionError):
    """A Ray cluster address that does not answer (or cannot be resolved)."""


@dataclass(frozen=True)
class RayTarget:
    """Which cluster a driver connects to: ``kind`` ``join`` (a given address), ``job`` (inside a Ray job,
    ``RAY_ADDRESS``) or ``local``; the ``address`` passed to ``ray.init``; the ``(host, port)`` ``probe`` checked
    before joining (None for ``local``, and for ``auto`` without an address file)."""

    kind: str
    address: str | None
    probe: tuple[str, int] | None


def _host_port(address: str) -> tuple[str, int] | None:
    addr = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def ray_target(address: str | None, environ: dict[str, str] | None = None) -> RayTarget:
    """Decide which cluster to use (pure: reads only ``environ`` and, for ``auto``, Ray's address file).

    ``address`` is ``--address`` as given (``ray://HEAD:10001``, ``HOST:6379``, ``auto``: the cluster ``ray
    start`` started on this machine, or None); ``RAY_ADDRESS`` in ``environ`` means inside a Ray job.
    """
    env = os.environ if environ is None else environ
    if address:
        if address == "auto":
            resolved = env.get("RAY_ADDRESS") or _address_file()
            return RayTarget("join", "auto", _host_port(resolved) if resolved else None)
        return RayTarget("join", address, _host_port(address))
    return RayTarget("job", None, None) if env.get("RAY_ADDRESS") else RayTarget("local", "local", None)


def _address_file() -> str | None:
    try:
        from ray._private.utils import read_ray_address  # lazy: no Ray until a shard must be computed

        return read_ray_address()
    except Exception:  # noqa: BLE001 - a private Ray API: without it, Ray itself resolves "auto"
        return None


def wait_reachable(host: str, port: int, timeout: float) -> None:
    """Wait until ``host:port`` accepts a TCP connection, for at most ``timeout`` seconds (else
    :class:`RayConnectError`, naming the address and the seconds waited)."""
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(5.0, left))):
                return
        except OSError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise RayConnectError(f"Ray cluster at {host}:{port} does not answer after {timeout:g} s ({last}); "
                                  "check --address (or omit it to run on a private local cluster)")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def init_ray(address: str | None = None, *, connect_timeout: float | None = None, **local: Any) -> None:
    """Connect this driver to Ray, once (nothing if Ray is already initialized), and log which cluster it uses.

    ``address``: a cluster to join (:func:`ray_target`); None: the Ray job's cluster, else a private local one
    (:func:`private_temp_dir`), given the extra ``ray.init`` arguments ``local``. ``connect_timeout``: seconds a
    given address may take to answer (default ``CONFGRID_RAY_CONNECT_TIMEOUT`` or 60; else
    :class:`RayConnectError`). Usage statistics are off unless turned on; the actors' logs are not streamed.
    """
    import ray  # lazy: no Ray until a shard must be computed

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    target = ray_target(address)
    if target.kind != "local":  # join a given cluster, or the Ray job's (target.address None)
        timeout = connect_timeout if connect_timeout is not None else float(
            os.environ.get("CONFGRID_RAY_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT))
        if target.probe is not None:
            wait_reachable(*target.probe, timeout)
        ray.init(address=target.address, **kwargs)
        _route_ray_errors()
        log.info("Ray: %s (%s)", f"joined the cluster at {address}" if target.kind == "join" else
                 f"inside a Ray job, on its cluster at {os.environ['RAY_ADDRESS']}", _resources(ray))
    else:
        temp = private_temp_dir()
        with _quiet_token_notice():
            ray.init(address="local", include_dashboard=False, _temp_dir=temp, **kwargs, **local)
        log.info("Ray: a private local cluster for this run (%s; temp dir %s)", _resources(ray), temp)


def _route_ray_errors() -> None:
    """Send Ray's error messages for the driver (a raylet's death with its ``[state-dump]``, a node marked dead)
    to OUT/confgrid.log, and their first sentence to the console, by replacing
    ``ray._private.worker.print_to_stdstream`` (looked up on each message; Ray's other output is unchanged)."""
    try:
        from ray._private import worker as ray_worker  # lazy: no Ray until a shard must be computed
    except ImportError:  # another Ray layout: its messages stay on the console
        return
    plain = ray_worker.print_to_stdstream
    if getattr(plain, "_confgrid", False):
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        if data.get("pid") != "raylet":
            plain(data, ignore_prefix)
            return
        text = "\n".join(str(line) for line in data.get("lines") or [])
        trace.warning("Ray's message to the driver:\n%s", text)
        first = re.split(r"(?<=\.)\s", " ".join(text.split()), maxsplit=1)[0][:200]
        log.warning("Ray: %s (Ray's own message in %s)", first, LOG_NAME)

    to_log._confgrid = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_log


@contextmanager
def _quiet_token_notice() -> Iterator[None]:
    """Start a private local cluster without Ray's token-authentication notice (it tells the user nothing
    there); authentication itself is left as Ray decides."""
    target = logging.getLogger("ray._private.authentication.authentication_token_setup")

    def quiet(record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("Token authentication is ")

    target.addFilter(quiet)
    try:
        yield
    finally:
        target.removeFilter(quiet)


def private_temp_dir() -> str:
    """Ray's temp dir for confgrid's local clusters: ``<tmp>/confgrid-ray-<uid>`` (short: Ray's socket paths
    must stay under 107 characters; a plain ``ray.init()`` looks in ``/tmp/ray`` and never joins them)."""
    path = os.path.join(tempfile.gettempdir(), f"confgrid-ray-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    os.makedirs(path, exist_ok=True)
    return path


def _resources(ray: Any) -> str:
    res = ray.cluster_resources()
    alive = sum(1 for n in ray.nodes() if n.get("Alive"))  # dead nodes stay in Ray's node table
    parts = [f"{alive} node(s)"] + [f"{res[k]:g} {k}" for k in ("CPU", "GPU") if res.get(k)]
    return ", ".join(parts)
