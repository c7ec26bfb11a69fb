"""MLflow tracking: a parent run per grid execution, child runs per setting and per shard.

By default the store is a SQLite file in the output directory
(``sqlite:///OUT/mlflow.db``); ``--tracking-uri`` points at any MLflow server
(use a server, not a shared SQLite file, when several drivers log at once).
All logging happens from the driver, never from actors, so many shards
finishing together never contend for the SQLite lock.

Runs are written with :class:`mlflow.tracking.MlflowClient` (explicit run ids,
no global "active run"), so a resumed shard logs into the run id recorded in
the manifest and ``resume`` continues the same parent run.
"""

from __future__ import annotations

import logging
import math
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["default_tracking_uri", "Tracker", "mlflow_key"]

_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")
PARENT_TAG = "mlflow.parentRunId"


def default_tracking_uri(out_dir: str | Path) -> str:
    """``sqlite:///<out_dir>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def mlflow_key(*parts: str) -> str:
    """A metric/param name MLflow accepts: parts joined by '/', other characters to '_'."""
    return "/".join(_BAD.sub("_", str(p)) for p in parts if p != "")


def _param(v: Any) -> str:
    s = v if isinstance(v, str) else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else repr(v)
    return s[:6000]


class Tracker:
    """Parent, setting and shard runs of one grid execution.

    Parameters
    ----------
    tracking_uri : str
        MLflow tracking URI.
    experiment : str
        Experiment name (created if missing).
    """

    def __init__(self, tracking_uri: str, experiment: str) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        for name in ("alembic", "mlflow", "mlflow.store", "mlflow.tracking"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp is not None else self.client.create_experiment(experiment)
        self.parent_run_id: str | None = None
        self._mlflow = mlflow

    # -- runs ---------------------------------------------------------------------------
    def _log(self, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
             tags: dict[str, str] | None = None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        ts = int(time.time() * 1000)
        p = [Param(mlflow_key(k), _param(v)) for k, v in (params or {}).items()]
        m = [Metric(mlflow_key(k), float(v), ts, 0) for k, v in (metrics or {}).items()
             if v is not None and math.isfinite(float(v))]
        t = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for i in range(0, max(len(p), len(m), len(t), 1), 100):
            self.client.log_batch(run_id, metrics=m[i : i + 100], params=p[i : i + 100], tags=t[i : i + 100])

    def _exists(self, run_id: str | None) -> bool:
        if not run_id:
            return False
        try:
            self.client.get_run(run_id)
        except Exception:  # noqa: BLE001 - unknown run id
            return False
        return True

    def open_parent(self, *, run_id: str | None, run_name: str, params: dict[str, Any],
                    tags: dict[str, str] | None = None) -> str:
        """Start the parent run, or reopen ``run_id`` (resume); returns its id."""
        if self._exists(run_id):
            self.client.update_run(run_id, status="RUNNING")
            self.parent_run_id = run_id
            return run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags or {})
        self.parent_run_id = run.info.run_id
        self._log(self.parent_run_id, params=params)
        return self.parent_run_id

    @contextmanager
    def parent(self, run_name: str, params: dict[str, Any], tags: dict[str, str] | None = None) -> Iterator[str]:
        """A new parent run for the block; FAILED if the block raises."""
        rid = self.open_parent(run_id=None, run_name=run_name, params=params, tags=tags)
        try:
            yield rid
        except BaseException:
            self.close_parent("FAILED")
            raise
        self.close_parent("FINISHED")

    def close_parent(self, status: str = "FINISHED") -> None:
        if self.parent_run_id:
            self.client.set_terminated(self.parent_run_id, status=status)

    def child(self, run_name: str, params: dict[str, Any], metrics: dict[str, float], artifacts: list[Path],
              tags: dict[str, str] | None = None) -> str:
        """Log one finished setting as a child of the parent; returns its run id. NaN metrics are skipped."""
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={PARENT_TAG: self.parent_run_id or "", **(tags or {})})
        rid = run.info.run_id
        self._log(rid, params=params, metrics=metrics)
        for a in artifacts:
            if Path(a).exists():
                self.client.log_artifact(rid, str(a))
        self.client.set_terminated(rid, status="FINISHED")
        return rid

    def shard_run(self, *, run_id: str | None, name: str, params: dict[str, Any], metrics: dict[str, float],
                  tags: dict[str, str]) -> str:
        """Create or update the run of one shard (a resumed shard reuses ``run_id``)."""
        if self._exists(run_id):
            self.client.update_run(run_id, status="RUNNING")
            self._log(run_id, metrics=metrics, tags=tags)
        else:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={PARENT_TAG: self.parent_run_id or "", **tags})
            run_id = run.info.run_id
            self._log(run_id, params=params, metrics=metrics)
        status = "FAILED" if tags.get("confgrid.status") == "failed" else "FINISHED"
        self.client.set_terminated(run_id, status=status)
        return run_id

    def log_artifacts(self, paths: list[Path], artifact_path: str | None = None) -> None:
        for a in paths:
            if Path(a).exists():
                self.client.log_artifact(self.parent_run_id, str(a), artifact_path=artifact_path)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        self._log(self.parent_run_id, metrics=metrics)
