"""MLflow tracking: a parent run per grid execution, a child run per (model, dataset) setting.

By default the store is a SQLite file in the output directory
(``sqlite:///OUT/mlflow.db``) and artifacts go to ``OUT/mlartifacts``, so a
run directory holds its whole MLflow record and can be moved or shared (the
next confgrid command on the moved folder re-points the store's artifact
paths, :func:`relocate_artifacts`). ``--tracking-uri`` points at any MLflow
server, which keeps its own artifact store (use a server, not a shared SQLite
file, when several drivers log at once). All logging happens from the driver,
never from actors. Shards live in ``manifest.json`` (logged as an artifact);
one run per shard is opt-in (``execution.mlflow_shard_runs``).

Metric keys, the same for ``confgrid run`` and ``confgrid analyze``
(:func:`result_metrics`): ``<signal>/<metric>/point``, ``.../lo``, ``.../hi``
and ``gap/<signal_a>-<signal_b>/<metric>/{point,lo,hi}``.

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

__all__ = ["default_tracking_uri", "Tracker", "mlflow_key", "result_metrics", "sqlite_path", "relocate_artifacts",
           "ARTIFACT_DIR"]

#: Folder of MLflow artifacts next to a local SQLite store (``OUT/mlartifacts`` for the default store).
ARTIFACT_DIR = "mlartifacts"

_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")
PARENT_TAG = "mlflow.parentRunId"


def default_tracking_uri(out_dir: str | Path) -> str:
    """``sqlite:///<out_dir>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, or None for any other store."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///"):])


def relocate_artifacts(db: Path) -> int:
    """Point a moved SQLite store's artifact paths at ``<db folder>/mlartifacts``.

    A run directory records absolute artifact paths (MLflow resolves them when
    the experiment is created). If the folder was moved or copied, the paths
    under the old ``.../mlartifacts`` are rewritten to the folder the database
    is in now. Runs whose artifacts live elsewhere are left alone.

    Returns
    -------
    int
        Rows rewritten (experiments and runs); 0 if nothing had moved.
    """
    import sqlite3

    db = Path(db)
    if not db.is_file():
        return 0
    new_root = (db.parent / ARTIFACT_DIR).resolve().as_uri()
    changed = 0
    with sqlite3.connect(db) as con:
        try:
            exps = con.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        except sqlite3.Error:  # not (yet) an MLflow database
            return 0
        for exp_id, loc in exps:
            if not loc or f"/{ARTIFACT_DIR}" not in loc:
                continue
            old_root = loc[: loc.rindex(f"/{ARTIFACT_DIR}") + len(ARTIFACT_DIR) + 1]
            old_root_uri = old_root if "://" in old_root else Path(old_root).as_uri()
            if old_root_uri == new_root or old_root == new_root:
                continue
            con.execute("UPDATE experiments SET artifact_location = ? || substr(artifact_location, ?) "
                        "WHERE experiment_id = ?", (new_root, len(old_root) + 1, exp_id))
            cur = con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                              "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                              (new_root, len(old_root) + 1, exp_id, len(old_root), old_root))
            changed += 1 + cur.rowcount
    return changed


def result_metrics(metrics_df: Any, gaps_df: Any | None = None) -> dict[str, float]:
    """MLflow metrics of one setting, in the one vocabulary of ``run`` and ``analyze``.

    Parameters
    ----------
    metrics_df : DataFrame
        Columns signal, metric, point, lo, hi (one setting).
    gaps_df : DataFrame, optional
        Columns signal_a, signal_b, metric, gap, lo, hi (one setting).

    Returns
    -------
    dict
        ``<signal>/<metric>/{point,lo,hi}`` and
        ``gap/<signal_a>-<signal_b>/<metric>/{point,lo,hi}``; NaN values are
        kept here and skipped when logged (MLflow has no NaN).
    """
    out: dict[str, float] = {}
    for r in metrics_df.itertuples(index=False):
        for stat in ("point", "lo", "hi"):
            out[f"{r.signal}/{r.metric}/{stat}"] = float(getattr(r, stat))
    if gaps_df is not None and len(gaps_df):
        for r in gaps_df.itertuples(index=False):
            out[f"gap/{r.signal_a}-{r.signal_b}/{r.metric}/point"] = float(r.gap)
            out[f"gap/{r.signal_a}-{r.signal_b}/{r.metric}/lo"] = float(r.lo)
            out[f"gap/{r.signal_a}-{r.signal_b}/{r.metric}/hi"] = float(r.hi)
    return out


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
        db = sqlite_path(tracking_uri)
        if db is not None and relocate_artifacts(db):
            logging.getLogger("confgrid").info("MLflow store %s was moved; its artifact paths now point at %s",
                                               db, db.parent / ARTIFACT_DIR)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is not None:
            self.experiment_id = exp.experiment_id
        else:  # a local store keeps its artifacts next to it (MLflow's default is ./mlruns of the working directory)
            location = (db.parent / ARTIFACT_DIR).resolve().as_uri() if db is not None else None
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
        self.parent_run_id: str | None = None
        self._mlflow = mlflow

    # -- runs ---------------------------------------------------------------------------
    def _log(self, run_id: str, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
             tags: dict[str, str] | None = None, step: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag

        ts = int(time.time() * 1000)
        p = [Param(mlflow_key(k), _param(v)) for k, v in (params or {}).items()]
        m = [Metric(mlflow_key(k), float(v), ts, step) for k, v in (metrics or {}).items()
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
              tags: dict[str, str] | None = None, run_id: str | None = None, step: int = 0) -> str:
        """Log one finished setting as a child of the parent; returns its run id. NaN metrics are skipped.

        ``run_id``: the setting's run from an earlier invocation of the same parent (resume, resubmit); its
        metrics get new values at ``step``. If its params differ now (another grid), a new child run is made.
        """
        from mlflow.exceptions import MlflowException

        if self._exists(run_id):
            try:
                self.client.update_run(run_id, status="RUNNING")
                self._log(run_id, params=params, metrics=metrics, tags=tags, step=step)
            except MlflowException:  # changed params are not allowed on a run: a new child
                self.client.set_terminated(run_id, status="FINISHED")
            else:
                for a in artifacts:
                    if Path(a).exists():
                        self.client.log_artifact(run_id, str(a))
                self.client.set_terminated(run_id, status="FINISHED")
                return run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={PARENT_TAG: self.parent_run_id or "", **(tags or {})})
        rid = run.info.run_id
        self._log(rid, params=params, metrics=metrics, step=step)
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

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self._log(self.parent_run_id, metrics=metrics, step=step)
