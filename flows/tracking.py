"""MLflow tracking: one parent run per grid execution, one child run per setting.

By default the store is a SQLite file in the output directory
(``sqlite:///OUT/mlflow.db``); ``--tracking-uri`` points at any MLflow server.
All logging happens from the driver, so many settings finishing together never
contend for the SQLite lock.
"""

from __future__ import annotations

import logging
import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

__all__ = ["default_tracking_uri", "Tracker", "mlflow_key"]

_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


def default_tracking_uri(out_dir: str | Path) -> str:
    """``sqlite:///<out_dir>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def mlflow_key(*parts: str) -> str:
    """A metric/param name MLflow accepts: parts joined by '/', other characters to '_'."""
    return "/".join(_BAD.sub("_", p) for p in parts if p != "")


class Tracker:
    """Thin wrapper over the MLflow fluent API.

    Parameters
    ----------
    tracking_uri : str
        MLflow tracking URI.
    experiment : str
        Experiment name (created if missing).
    """

    def __init__(self, tracking_uri: str, experiment: str) -> None:
        import mlflow

        for name in ("alembic", "mlflow", "mlflow.store", "mlflow.tracking"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self._mlflow = mlflow
        self.tracking_uri = tracking_uri
        mlflow.set_tracking_uri(tracking_uri)
        self.experiment_id = mlflow.set_experiment(experiment).experiment_id
        self.parent_run_id: str | None = None

    @contextmanager
    def parent(self, run_name: str, params: dict[str, Any], tags: dict[str, str] | None = None) -> Iterator[str]:
        with self._mlflow.start_run(run_name=run_name, experiment_id=self.experiment_id, tags=tags or {}) as run:
            self.parent_run_id = run.info.run_id
            self._mlflow.log_params({mlflow_key(k): _param(v) for k, v in params.items()})
            yield run.info.run_id

    def child(
        self,
        run_name: str,
        params: dict[str, Any],
        metrics: dict[str, float],
        artifacts: list[Path],
        tags: dict[str, str] | None = None,
    ) -> str:
        """Log one finished setting as a nested run; returns its run id. NaN metrics are skipped."""
        with self._mlflow.start_run(
            run_name=run_name, experiment_id=self.experiment_id, nested=True, tags=tags or {}
        ) as run:
            self._mlflow.log_params({mlflow_key(k): _param(v) for k, v in params.items()})
            finite = {mlflow_key(k): float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}
            if finite:
                self._mlflow.log_metrics(finite)
            for a in artifacts:
                if Path(a).exists():
                    self._mlflow.log_artifact(str(a))
            return run.info.run_id

    def log_artifacts(self, paths: list[Path], artifact_path: str | None = None) -> None:
        for a in paths:
            if Path(a).exists():
                self._mlflow.log_artifact(str(a), artifact_path=artifact_path)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        finite = {mlflow_key(k): float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}
        if finite:
            self._mlflow.log_metrics(finite)


def _param(v: Any) -> str:
    s = v if isinstance(v, str) else repr(v) if not isinstance(v, (list, tuple)) else ",".join(map(str, v))
    return s[:6000]
