"""Launch a grid on a Ray cluster through the Ray Jobs API.

``confgrid submit GRID.yaml --address http://HEAD:8265`` ships the project directory as the job's ``working_dir``
(runtime_env), with the grid file inside it, and runs ``confgrid run`` there on the cluster; ``confgrid logs`` and
``confgrid status --job`` follow the job.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from confgrid.flows.spec.grid import load_grid

__all__ = ["submit_grid", "job_status", "job_logs", "project_root", "RUNTIME_EXCLUDES"]

#: Paths never shipped to the cluster (virtual environments, caches, run outputs).
RUNTIME_EXCLUDES = [".git", ".venv", ".venv-*", "**/__pycache__", "runs", "mlruns", "*.egg-info", ".pytest_cache",
                    ".hypothesis", ".whl", "build", "dist"]


def project_root() -> Path:
    """The folder holding pyproject.toml of this confgrid checkout."""
    here = Path(__file__).resolve().parent.parent
    if not (here / "pyproject.toml").is_file():
        raise FileNotFoundError(f"no pyproject.toml above {Path(__file__).resolve()}; `confgrid submit` ships a source "
                                "checkout, install confgrid with `pip install -e .` from a clone")
    return here


def _client(address: str):
    from ray.job_submission import JobSubmissionClient  # lazy: only `confgrid submit` and `jobs` talk to Ray

    return JobSubmissionClient(address)


def submit_grid(grid: str | Path, address: str, *, out: str | None = None, python: str | None = None,
                pip_install: bool = False, tracking_uri: str | None = None, env_vars: dict[str, str] | None = None,
                submission_id: str | None = None) -> str:
    """Submit ``confgrid run GRID`` as a Ray job to the Jobs API at ``address`` (``http://HEAD:8265``); returns the
    submission id.

    ``out``: output directory on the cluster (default ``runs/<grid name>`` under the job's working directory; shared
    storage on a multi-node cluster); ``python``: the interpreter on the cluster that has confgrid (default: this
    one's path, right for a cluster started from this machine's virtual environment); ``pip_install``: install the
    shipped project into the job's environment (``runtime_env.pip``) instead. Raises GridSpecError for an invalid
    grid (validated here, so it never reaches the cluster).
    """
    spec = load_grid(grid)
    root = project_root()
    # The working_dir is the project checkout (never written to); the grid's text travels in an environment
    # variable and the entrypoint writes it into the job's copy of the working dir before running it.
    grid_text = Path(grid).read_text(encoding="utf-8")
    args = ["--out", out or f"runs/{spec.name}"]
    if tracking_uri:
        args += ["--tracking-uri", tracking_uri]
    entry = " ".join(shlex.quote(c) for c in [python or sys.executable, "-m", "confgrid.cli.job", *args])
    runtime_env: dict[str, Any] = {"working_dir": str(root), "excludes": RUNTIME_EXCLUDES, "env_vars": {
        "CONFGRID_GRID_YAML": grid_text, "RAY_USAGE_STATS_ENABLED": "0", **(env_vars or {})}}
    if pip_install:
        runtime_env["pip"] = [str(root)]
    return _client(address).submit_job(entrypoint=entry, runtime_env=runtime_env, submission_id=submission_id)


def job_status(address: str, job_id: str) -> str:
    """PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED."""
    return str(_client(address).get_job_status(job_id).value)


def job_logs(address: str, job_id: str) -> str:
    """Everything the job printed so far."""
    return _client(address).get_job_logs(job_id)

