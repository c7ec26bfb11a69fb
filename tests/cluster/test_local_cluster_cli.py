"""``python -m confgrid.cluster.local`` stops every node it started on SIGTERM, not only on Ctrl-C (a cluster
started in the background and ended with ``kill PID`` left its GCS, raylets and agents running before)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil


def _ours(root: str) -> list[psutil.Process]:
    """Processes whose command line names a temp dir under ``root`` (the nodes' and their agents')."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if root in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_sigterm_stops_the_nodes_of_the_local_cluster():
    root = tempfile.mkdtemp(prefix="cgterm", dir="/tmp")  # Ray's socket paths under it stay below 108 characters
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "confgrid.cluster.local", "--workers", "1", "--gpus", "1",
                             "--root", root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    lines = []
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ray cluster at"):
                break
        assert lines and lines[-1].startswith("Ray cluster at"), "".join(lines)[-2000:]
        assert f"kill {proc.pid} stops it" in lines[-1]
        assert len({p.pid for p in _ours(root) if "raylet" in p.name()}) == 2  # the head and one worker
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while _ours(root) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _ours(root) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _ours(root):  # what the fix did not stop: stopped here by pid, so nothing leaks into the suite
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(root, ignore_errors=True)
