"""A real ``mlflow server`` process for tests: its own backend store and artifact root, artifacts proxied.

The server is what a team runs (``mlflow server --serve-artifacts``): clients send artifacts over HTTP and
never see its folders. It is started on a free 127.0.0.1 port, waited for on ``/health`` and stopped by its
own pid (its process group: uvicorn's workers too).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: Seconds the server has to answer ``/health`` (measured: 70 to 120 s on the shared 2-core machine under heavy load).
START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class MlflowServer:
    """A running server: its URL and the folders only it writes."""

    url: str
    backend_db: Path
    artifact_root: Path
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def mlflow_server(root: Path) -> Iterator[MlflowServer]:
    """Run ``mlflow server --serve-artifacts`` with ``root/server.db`` and ``root/artifacts`` for the block.

    Raises
    ------
    RuntimeError
        The server exited or did not answer within :data:`START_TIMEOUT_S` (its log's tail in the message).
    """
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    srv = MlflowServer(f"http://127.0.0.1:{port}", root / "server.db", root / "artifacts", root / "server.log")
    cmd = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{srv.backend_db}",
           "--artifacts-destination", srv.artifact_root.as_uri(), "--serve-artifacts"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    with open(srv.log, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        end = time.monotonic() + START_TIMEOUT_S
        while not _healthy(srv.url):
            if proc.poll() is not None or time.monotonic() > end:
                tail = srv.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mlflow server did not start (exit {proc.poll()}): {tail}")
            time.sleep(0.5)
        yield srv
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
