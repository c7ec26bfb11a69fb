"""A multi-node Ray cluster on one machine, for tests and benchmarks of the cluster path without a second machine
(its use: docs/guides/cluster.md; ``python -m confgrid.cluster.local --workers 2 --gpus 2`` starts one).

Every node is a ``ray start`` with its own ``--temp-dir`` (its processes are told apart from any other Ray on the
machine by their command lines), ports, declared resources and node label ``confgrid.node=<name>``;
:meth:`LocalCluster.stop` ends exactly the processes of these nodes, by their pids, never by ``ray stop`` (which
would end every Ray process of the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["LocalNode", "LocalCluster", "start_local_cluster", "FAST_HEALTH_CHECK"]

#: The head's health checks for a test cluster: a node that stops answering is dead after about 3 x 1 s.
FAST_HEALTH_CHECK = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                     "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000"}


def _ports(n: int) -> list[int]:
    """``n`` distinct free ports (each bound once, then released)."""
    out: set[int] = set()
    while len(out) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.add(s.getsockname()[1])
    return sorted(out)


@dataclass
class LocalNode:
    """One node of a :class:`LocalCluster`: its name (``head``, ``worker1``, ...; also its label ``confgrid.node``),
    its own ``--temp-dir`` (on the command line of every process of the node) and the resources it declares."""

    name: str
    temp_dir: str
    resources: dict[str, float]

    def processes(self) -> list:
        """The live processes of this node (psutil), found by its temp dir on their command lines, with their
        children."""
        ours = {}
        for p in psutil.process_iter(["cmdline"]):
            try:
                if self.temp_dir in " ".join(p.info["cmdline"] or []):
                    ours[p.pid] = p
                    ours.update({c.pid: c for c in p.children(recursive=True)})
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return list(ours.values())

    def stop(self, timeout: float = 3.0) -> None:
        """End every process of the node: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        procs = self.processes()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=timeout)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


@dataclass
class LocalCluster:
    """A head and worker nodes started by :func:`start_local_cluster` (the head first): ``address`` is the GCS
    address (``confgrid run --address``), ``dashboard`` the Jobs API (``confgrid submit --address``)."""

    address: str
    dashboard: str
    nodes: list[LocalNode] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the workers, then the head, each by its own pids."""
        for n in reversed(self.nodes):
            n.stop()


def start_local_cluster(workers: int = 2, gpus_per_worker: float = 2, cpus_per_worker: float = 1,
                        head_cpus: float = 1, *, python: str | None = None, root: str | None = None,
                        fast_health_check: bool = True, dashboard: bool = False, env: dict[str, str] | None = None,
                        timeout: float = 180.0) -> LocalCluster:
    """Start a head (``--num-gpus 0``) and ``workers`` worker nodes on this machine; returns once all joined.

    ``python``: the interpreter whose ``ray`` executable starts the nodes (default: this one); ``root``: folder of
    the nodes' temp dirs (default ``/tmp``: Ray's socket paths must stay under 108 characters);
    ``fast_health_check``: :data:`FAST_HEALTH_CHECK` on the head (a node whose raylet is killed is dead within
    about 4 s, not Ray's 15 to 30 s); ``dashboard``: start the head's dashboard, which serves the Jobs API
    (``confgrid submit``; about 10 s of CPU more); ``timeout``: seconds each ``ray start`` and the wait for the
    nodes may take. Raises RuntimeError if a ``ray start`` fails (its stderr in the message) or the nodes do not
    all join in time, after stopping the nodes already started.
    """
    if workers < 0:
        raise ValueError(f"workers: {workers}; allowed: >= 0")
    base = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
            "RAY_AUTH_MODE": "disabled", **(env or {})}
    base.pop("RAY_ADDRESS", None)
    ray = Path(python or sys.executable).with_name("ray")  # the interpreter's own ray, else the one on PATH
    ray = str(ray) if ray.exists() else "ray"
    gcs, dash = _ports(2)
    cluster = LocalCluster(f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}")
    try:
        for i in range(workers + 1):
            name = "head" if i == 0 else f"worker{i}"
            temp = tempfile.mkdtemp(prefix=f"cg{name[0]}{i}", dir=root or "/tmp")
            res = {"CPU": float(head_cpus), "GPU": 0.0} if i == 0 else {"CPU": float(cpus_per_worker),
                                                                         "GPU": float(gpus_per_worker)}
            nm, om, me, al, ag, rt, wlo = _ports(7)
            args = [ray, "start", f"--temp-dir={temp}", "--node-ip-address=127.0.0.1",
                    f"--num-cpus={res['CPU']:g}", f"--num-gpus={res['GPU']:g}",
                    f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--metrics-export-port={me}",
                    f"--dashboard-agent-listen-port={al}", f"--dashboard-agent-grpc-port={ag}",
                    f"--runtime-env-agent-port={rt}", f"--labels=confgrid.node={name}",
                    "--disable-usage-stats"]
            node_env = dict(base)
            if i == 0:
                args += ["--head", f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                         f"--include-dashboard={'true' if dashboard else 'false'}"]
                if fast_health_check:
                    node_env.update(FAST_HEALTH_CHECK)
            else:
                args += [f"--address={cluster.address}", f"--min-worker-port={wlo}",
                         f"--max-worker-port={wlo + 40}"]
            cluster.nodes.append(LocalNode(name, temp, res))
            # one at a time: side by side, a loaded machine lets a raylet miss its registration deadline
            proc = subprocess.Popen(args, env=node_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            _, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(args[:3])} failed (exit {proc.returncode}):\n{err[-3000:]}")
        _wait_nodes(cluster, workers + 1, python, base, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_nodes(cluster: LocalCluster, n: int, python: str | None, env: dict[str, str], timeout: float) -> None:
    """Wait until the GCS lists ``n`` alive nodes (asked from a separate process: this one may join later)."""
    code = ("import ray,sys,time; ray.init(address=sys.argv[1], log_to_driver=False); n=int(sys.argv[2]); "
            "end=time.monotonic()+float(sys.argv[3]); alive=lambda: sum(1 for x in ray.nodes() if x['Alive'])\n"
            "while alive() < n and time.monotonic() < end: time.sleep(0.5)\nprint(alive())")
    res = subprocess.run([python or sys.executable, "-c", code, cluster.address, str(n), str(timeout)], env=env,
                         capture_output=True, text=True, timeout=timeout + 60)
    seen = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-500:]
    if seen != str(n):
        raise RuntimeError(f"local cluster at {cluster.address}: {n} node(s) expected, saw {seen} after "
                           f"{timeout:g} s")


def main() -> None:  # pragma: no cover - a helper for people, exercised by tests/cluster/test_multinode.py's fixture

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--gpus", type=float, default=2, help="GPUs each worker declares")
    ap.add_argument("--cpus", type=float, default=1, help="CPUs each worker declares")
    ap.add_argument("--root", default=None, help="folder for the nodes' temp dirs (default /tmp)")
    a = ap.parse_args()

    def _stop(signum: int, frame: object) -> None:  # `kill PID` or a closed terminal stops the nodes, as Ctrl-C does
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a script: obey SIGINT too
        signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster = start_local_cluster(a.workers, a.gpus, a.cpus, root=a.root, dashboard=True)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # the line is printed inside: a signal right after it is obeyed
            print(f"Ray cluster at {cluster.address} (Jobs API {cluster.dashboard}); nodes: "
                  + ", ".join(f"{n.name} {n.resources}" for n in cluster.nodes)
                  + f"; Ctrl-C or kill {os.getpid()} stops it", flush=True)
            while True:
                time.sleep(3600)
    finally:
        cluster.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
