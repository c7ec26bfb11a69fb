"""MLflow tracking: a parent run per grid execution, a child run per (model, dataset) setting (the stores, the
runs and what the UI shows: docs/guides/mlflow.md).

Only the driver logs, with explicit run ids (:class:`mlflow.tracking.MlflowClient`), so a resumed shard or
``resume`` logs into the run recorded in the manifest; metric keys, the same for ``run`` and ``analyze``:
:func:`result_metrics`. A shared SQLite store is opened under a file lock (:func:`store_lock`) and a locked write
is retried (:data:`LOCKED_BACKOFF_S`); a server is probed first (:func:`probe_server`). Computing never depends
on tracking: a store that fails is a :class:`TrackingFailure`, the results are written all the same, the command
ends with :data:`EXIT_TRACKING_FAILED`, and ``confgrid log OUT`` logs them later.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import logging
import math
import os
import re
import sqlite3
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from filelock import FileLock, Timeout

from confgrid.errors import FieldsPickle

__all__ = ["default_tracking_uri", "choose_tracking_uri", "TrackingChoice", "ENV_TRACKING_URI", "Tracker", "mlflow_key", "keyed_metrics", "view_of", "result_metrics", "sqlite_path", "relocate_artifacts",
           "ARTIFACT_DIR", "EXIT_TRACKING_FAILED", "TrackingUnavailable", "TrackingFailure", "probe_server",
           "store_lock", "LOCKED_BACKOFF_S", "TrackingError", "Logged", "DatasetRef", "ModelRef", "items_digest",
           "model_name", "EXPERIMENT_KIND_TAG", "EXPERIMENT_KIND"]

#: Folder of MLflow artifacts next to a local SQLite store (``OUT/mlartifacts`` for the default store).
ARTIFACT_DIR = "mlartifacts"
#: Exit status of ``confgrid run``, ``analyze`` and ``log`` when every result is written but not the MLflow record.
EXIT_TRACKING_FAILED = 3
#: Seconds a tracking server has to answer the probe of :func:`probe_server`.
PROBE_TIMEOUT_S = 5.0
#: Seconds to wait for another process that holds a SQLite store's lock (creating or migrating it).
LOCK_TIMEOUT_S = 300.0
#: Seconds slept before each retry of an MLflow call that found the SQLite store locked by another writer
#: (each attempt already waits up to MLflow's own 20 s SQLite busy timeout).
LOCKED_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)

log = logging.getLogger("confgrid")


class TrackingUnavailable(FieldsPickle, RuntimeError):
    """The tracking store cannot be reached: no server answers at the URI, or its lock is held too long."""


@dataclass(frozen=True)
class TrackingFailure:
    """MLflow logging of a command failed (its results are written all the same): the store and the error,
    ``"<exception type>: <first line of its message>"`` (at most 300 characters)."""

    tracking_uri: str
    error: str

    @classmethod
    def of(cls, tracking_uri: str, exc: BaseException) -> TrackingFailure:
        """The failure ``exc`` raised while logging to ``tracking_uri``."""
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        return cls(tracking_uri, text if isinstance(exc, TrackingUnavailable) else f"{type(exc).__name__}: {text}")

    def line(self) -> str:
        """One line naming the store and the error."""
        return f"MLflow tracking failed ({self.tracking_uri}): {self.error}"

    def hint(self, out_dir: str | Path) -> str:
        """Where the results are and the command that logs them later."""
        return (f"every result is written in {out_dir}; log them when the store works: "
                f"confgrid log {out_dir} --tracking-uri {self.tracking_uri}")


class TrackingError(FieldsPickle, RuntimeError):
    """Logging a finished directory (``confgrid log``) failed; ``.failure`` names the store and the error."""

    def __init__(self, failure: TrackingFailure) -> None:
        super().__init__(failure.line())
        self.failure = failure


@dataclass(frozen=True)
class Logged:
    """Where ``confgrid log`` logged a directory: the new parent run, its store and experiment."""

    parent_run_id: str
    tracking_uri: str
    experiment: str

    @classmethod
    def of(cls, tracker: Tracker) -> Logged:
        return cls(tracker.parent_run_id or "", tracker.tracking_uri, tracker.experiment)


def probe_server(tracking_uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Check that an ``http(s)://`` tracking server answers (``GET <uri>/health``) within ``timeout`` seconds.

    Any HTTP answer counts, an error status too (an older server, a proxy); other URIs are not probed. Raises
    :class:`TrackingUnavailable` when nothing answers (refused, unknown host, timeout, a reply that is not HTTP).
    """
    if not tracking_uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=timeout):
            pass
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TrackingUnavailable(f"no MLflow server answers at {tracking_uri} within {timeout:g} s "
                                  f"({reason})") from None


@contextmanager
def store_lock(tracking_uri: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """The inter-process lock of a ``sqlite:///PATH`` store, the file ``PATH.lock``; a no-op for other stores.

    Held while a process opens the store (MLflow creates and migrates its tables then) and creates its
    experiment. Acquiring it raises :class:`TrackingUnavailable` after ``timeout`` seconds.
    """
    db = sqlite_path(tracking_uri)
    if db is None:
        yield
        return
    lock = FileLock(f"{db}.lock", timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise TrackingUnavailable(f"another process has held {lock.lock_file} for more than {timeout:g} s") from None
    try:
        yield
    finally:
        lock.release()


def _locked(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception behind it is SQLite's ``database is locked``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if "database is locked" in str(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _Retrying:
    """An MLflow client whose calls are retried, after ``waits`` seconds each, while SQLite says
    ``database is locked`` (another process writing); any other error is raised at once."""

    def __init__(self, client: Any, waits: tuple[float, ...] = LOCKED_BACKOFF_S,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client, self._waits, self._sleep = client, waits, sleep

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            for wait in self._waits:
                try:
                    return attr(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - only a locked database is retried
                    if not _locked(exc):
                        raise
                    log.info("MLflow store locked by another writer (%s); retrying in %g s", name, wait)
                    self._sleep(wait)
            return attr(*args, **kwargs)

        return call

_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")
PARENT_TAG = "mlflow.parentRunId"
#: Experiment tag the MLflow UI (3.x) reads to choose an experiment's first page.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
#: Its value for confgrid's experiments: the runs table (``genai_development`` opens on traces, which confgrid
#: does not log).
EXPERIMENT_KIND = "custom_model_development"
#: Characters MLflow refuses in a logged model's name (``mlflow.utils.validation._validate_logged_model_name``).
_BAD_MODEL_NAME = re.compile(r"[/:.%\"']")
#: Hexadecimal characters kept of a dataset digest (MLflow's column holds 36).
DIGEST_CHARS = 16


@dataclass(frozen=True)
class DatasetRef:
    """A dataset as an MLflow run input: the questions one setting ran on.

    ``digest``: :func:`items_digest` of its item ids; ``source``: a file path, or ``bundled:<name>``;
    ``source_type``: ``local`` or ``bundled``; ``n_items``: items in the setting (after ``limit``).
    """

    name: str
    digest: str
    source: str
    source_type: str
    n_items: int


@dataclass(frozen=True)
class ModelRef:
    """A model as MLflow's Models column shows it: a logged model per setting run, named after the grid's model
    (:func:`model_name`), with its id or path, revision ("" when none was pinned) and further params."""

    name: str
    model_id: str
    revision: str
    params: dict[str, str]


def items_digest(item_ids: Any) -> str:
    """The digest of a set of questions: the first :data:`DIGEST_CHARS` hex characters of the SHA-256 of the
    sorted, distinct item ids joined by newlines (any order, same digest). Raises ValueError for no item id."""
    ids = sorted({str(i) for i in item_ids})
    if not ids:
        raise ValueError("item_ids: no item id to digest; a dataset input needs at least one item")
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def model_name(name: str) -> str:
    """``name`` as MLflow accepts a logged model's name: ``/ : . % " '`` become ``-``."""
    return _BAD_MODEL_NAME.sub("-", name) or "model"


def default_tracking_uri(out_dir: str | Path) -> str:
    """``sqlite:///<out_dir>/mlflow.db`` (absolute path)."""
    return f"sqlite:///{Path(out_dir).resolve() / 'mlflow.db'}"


#: The environment variable MLflow itself reads for its tracking URI (the team's server, typically).
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"


@dataclass(frozen=True)
class TrackingChoice:
    """The MLflow store a command logs into and why: ``source`` is ``"--tracking-uri"``, ``"recorded"`` (given
    to an earlier command on the folder, kept in its manifest), ``"MLFLOW_TRACKING_URI"`` or ``"run folder"``."""

    uri: str
    source: str

    def line(self) -> str:
        """``MLflow tracking URI <uri> (from <source>)``, the log line of every command that tracks."""
        return f"MLflow tracking URI {self.uri} (from {self.source})"


def choose_tracking_uri(given: str | None, out_dir: str | Path, *, recorded: str | None = None,
                        environ: dict[str, str] | None = None) -> TrackingChoice:
    """The store of a command on ``out_dir``: the first of ``given`` (``--tracking-uri``), ``recorded``,
    ``$MLFLOW_TRACKING_URI`` and the folder's own ``sqlite:///OUT/mlflow.db``; an empty string counts as unset.

    ``recorded`` (the manifest's ``custom_tracking_uri``) is what an earlier command on the folder was given, so
    a resume continues the parent run in the store it was started in whatever the environment says now.
    """
    env = (os.environ if environ is None else environ).get(ENV_TRACKING_URI) or None
    for uri, source in ((given, "--tracking-uri"), (recorded, "recorded"), (env, ENV_TRACKING_URI)):
        if uri:
            return TrackingChoice(uri, source)
    return TrackingChoice(default_tracking_uri(out_dir), "run folder")


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, or None for any other store."""
    return Path(tracking_uri[len("sqlite:///"):]) if tracking_uri.startswith("sqlite:///") else None


def relocate_artifacts(db: Path) -> int:
    """Point a moved SQLite store's artifact paths at ``<db folder>/mlartifacts``; returns the rows rewritten
    (experiments and runs), 0 if nothing had moved.

    MLflow records absolute artifact paths; after the folder was moved or copied, the paths under the old
    ``.../mlartifacts`` are rewritten to where the database is now. Artifacts that live elsewhere are left alone.
    """
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


def keyed_metrics(df: Any, key: Callable[[Any], tuple], values: dict[str, str]) -> dict[str, float]:
    """The one MLflow keying: per row of ``df``, ``mlflow_key(*key(row), stat)`` -> the row's ``values[stat]``.

    ``df``: rows to log (None or empty: none); ``key``: a row (namedtuple of ``itertuples``) -> the key's leading
    parts, empty ones left out; ``values``: last key part -> its column (e.g. ``{"point": "gap", "lo": "lo",
    "hi": "hi"}``). NaN and None are left out (MLflow has no NaN); a later row with the same key wins.
    """
    out: dict[str, float] = {}
    if df is None or len(df) == 0:
        return out
    for r in df.itertuples(index=False):
        base = key(r)
        for stat, col in values.items():
            v = getattr(r, col)
            if v is not None and v == v:
                out[mlflow_key(*base, stat)] = float(v)
    return out


def view_of(r) -> str:
    """Study 001's view of a model's cell, a part of its key (``<model>/<view>/<metric>``), or ""."""
    v = getattr(r, "view", "")
    return v if isinstance(v, str) else ""


def result_metrics(metrics_df: Any, gaps_df: Any | None = None) -> dict[str, float]:
    """MLflow metrics of one setting, in the one vocabulary of ``run`` and ``analyze`` (:func:`keyed_metrics`).

    From ``metrics_df`` (signal, metric, point, lo, hi) ``<signal>/<metric>/{point,lo,hi}``, from ``gaps_df``
    (signal_a, signal_b, metric, gap, lo, hi) ``gap/<signal_a>-<signal_b>/<metric>/{point,lo,hi}``; a row with a
    ``view`` (study 001's model-vs-model cells) has it after the signal or pair. NaN values are left out.
    """
    return {**keyed_metrics(metrics_df, lambda r: (r.signal, view_of(r), r.metric),
                            {"point": "point", "lo": "lo", "hi": "hi"}),
            **keyed_metrics(gaps_df, lambda r: ("gap", f"{r.signal_a}-{r.signal_b}", view_of(r), r.metric),
                            {"point": "gap", "lo": "lo", "hi": "hi"})}


def mlflow_key(*parts: str) -> str:
    """A metric/param name MLflow accepts: parts joined by '/', other characters to '_'."""
    return "/".join(_BAD.sub("_", str(p)) for p in parts if p != "")


def _param(v: Any) -> str:
    s = v if isinstance(v, str) else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else repr(v)
    return s[:6000]


class Tracker:
    """Parent, setting and shard runs of one grid execution, in ``experiment`` (created if missing).

    Raises :class:`TrackingUnavailable` when no server answers at an ``http(s)`` URI or a SQLite store's lock is
    held by another process for more than :data:`LOCK_TIMEOUT_S`, and whatever MLflow raises when it cannot open
    the store (e.g. a database it cannot migrate).
    """

    def __init__(self, tracking_uri: str, experiment: str) -> None:
        from mlflow.tracking import MlflowClient

        for name in ("alembic", "mlflow", "mlflow.store", "mlflow.tracking"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.tracking_uri, self.experiment = tracking_uri, experiment
        probe_server(tracking_uri)
        db = sqlite_path(tracking_uri)
        with store_lock(tracking_uri):  # one process at a time creates, migrates and relocates the store
            if db is not None and relocate_artifacts(db):
                log.info("MLflow store %s was moved; its artifact paths now point at %s", db, db.parent / ARTIFACT_DIR)
            self.client = _Retrying(MlflowClient(tracking_uri=tracking_uri))
            self.experiment_id = self._experiment(experiment, db)
        self.parent_run_id: str | None = None

    def _experiment(self, name: str, db: Path | None) -> str:
        """The id of experiment ``name``, created if missing (its first call opens, and migrates, the store)."""
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get(EXPERIMENT_KIND_TAG) is None:  # made by an older confgrid: opened on traces
                self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        # a local store keeps its artifacts next to it (MLflow's default is ./mlruns of the working directory)
        location = (db.parent / ARTIFACT_DIR).resolve().as_uri() if db is not None else None
        try:
            return self.client.create_experiment(name, artifact_location=location,
                                                 tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException:  # another client of the same server created it meanwhile
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

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

    def _reopen(self, run_id: str | None, **logged: Any) -> bool:
        """Mark run ``run_id`` RUNNING and log ``logged`` (params, metrics, tags) into it; False when the store has
        no such run."""
        if not run_id:
            return False
        try:
            self.client.get_run(run_id)
        except Exception:  # noqa: BLE001 - unknown run id
            return False
        self.client.update_run(run_id, status="RUNNING")
        if logged:
            self._log(run_id, **logged)
        return True

    def open_parent(self, *, run_id: str | None, run_name: str, params: dict[str, Any],
                    tags: dict[str, str] | None = None) -> str:
        """Start the parent run, or reopen ``run_id`` (resume); returns its id."""
        if self._reopen(run_id):
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
              tags: dict[str, str] | None = None, run_id: str | None = None, step: int = 0,
              dataset: DatasetRef | None = None, model: ModelRef | None = None) -> str:
        """Log one finished setting as a child of the parent; returns its run id. NaN metrics are skipped.

        ``run_id``: the setting's run from an earlier invocation of the same parent (resume, resubmit); its
        metrics get new values at ``step``. If its params differ now (another grid), a new child run is made.
        ``dataset`` is logged as the run's input (:meth:`log_dataset`), ``model`` as its logged model
        (:meth:`log_model`, once per run).
        """
        from mlflow.exceptions import MlflowException

        try:
            reuse = self._reopen(run_id, params=params, metrics=metrics, tags=tags, step=step)
        except MlflowException:  # changed params are not allowed on a run: a new child
            self.client.set_terminated(run_id, status="FINISHED")
            reuse = False
        if not reuse:
            run_id = self._new_child(run_name, tags or {}, params=params, metrics=metrics, step=step)
        if dataset is not None:  # logging the same dataset again is a no-op for MLflow
            self.log_dataset(run_id, dataset)
        if model is not None and not self.client.get_run(run_id).inputs.model_inputs:  # once per run
            self.log_model(run_id, model, step)
        self._artifacts(run_id, artifacts)
        self.client.set_terminated(run_id, status="FINISHED")
        return run_id

    def _new_child(self, name: str, tags: dict[str, str], **logged: Any) -> str:
        """A new child run of the parent, with ``logged`` (params, metrics, step) logged into it."""
        run = self.client.create_run(self.experiment_id, run_name=name,
                                     tags={PARENT_TAG: self.parent_run_id or "", **tags})
        self._log(run.info.run_id, **logged)
        return run.info.run_id

    def log_dataset(self, run_id: str, dataset: DatasetRef) -> None:
        """Log ``dataset`` as an input of ``run_id`` (context ``evaluation``): the UI's Dataset column."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        ds = Dataset(name=dataset.name, digest=dataset.digest, source_type=dataset.source_type,
                     source=json.dumps({"path": dataset.source}), profile=json.dumps({"num_items": dataset.n_items}))
        self.client.log_inputs(run_id, datasets=[DatasetInput(ds, tags=[InputTag("mlflow.data.context", "evaluation")])])

    def log_model(self, run_id: str, model: ModelRef, step: int = 0) -> str:
        """Record ``model`` as a logged model (no files: its id, revision and params), linked to ``run_id`` as an
        input and as an output at ``step`` (the runs table's Models column reads the outputs); returns its id."""
        from mlflow.entities import LoggedModelInput, LoggedModelOutput

        params = {"model_id": model.model_id, "revision": model.revision or "", **model.params}
        lm = self.client.create_logged_model(self.experiment_id, name=model_name(model.name), source_run_id=run_id,
                                             params={mlflow_key(k): _param(v) for k, v in params.items()},
                                             tags={"confgrid.model_id": model.model_id,
                                                   "confgrid.revision": model.revision or ""}, model_type="llm")
        self.client.finalize_logged_model(lm.model_id, "READY")
        self.client.log_inputs(run_id, models=[LoggedModelInput(lm.model_id)])
        self.client.log_outputs(run_id, [LoggedModelOutput(lm.model_id, step)])
        return lm.model_id

    def shard_run(self, *, run_id: str | None, name: str, params: dict[str, Any], metrics: dict[str, float],
                  tags: dict[str, str]) -> str:
        """Create or update the run of one shard (a resumed shard reuses ``run_id``)."""
        if not self._reopen(run_id, metrics=metrics, tags=tags):
            run_id = self._new_child(name, tags, params=params, metrics=metrics)
        status = "FAILED" if tags.get("confgrid.status") == "failed" else "FINISHED"
        self.client.set_terminated(run_id, status=status)
        return run_id

    def _artifacts(self, run_id: str, paths: list[Path], artifact_path: str | None = None) -> None:
        for a in paths:
            if Path(a).exists():
                self.client.log_artifact(run_id, str(a), artifact_path=artifact_path)

    def log_artifacts(self, paths: list[Path], artifact_path: str | None = None) -> None:
        self._artifacts(self.parent_run_id, paths, artifact_path)

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self._log(self.parent_run_id, metrics=metrics, step=step)

    def log_tags(self, tags: dict[str, str]) -> None:
        """Set tags on the parent run (e.g. the nodes lost during the run)."""
        if tags:
            self._log(self.parent_run_id, tags=tags)
