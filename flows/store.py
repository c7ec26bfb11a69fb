"""The run directory: content-keyed shards, atomic Parquet writes, a manifest.

Layout of an output directory ``OUT``::

    OUT/grid.yaml                 the grid as run (validated, defaults filled in, paths resolved)
    OUT/grid.source.yaml          the grid file as written
    OUT/shards/<stage>/<key>.parquet   one file per shard, named by its key
    OUT/tables/<stage>.parquet    every shard of a stage of this run, concatenated
    OUT/results/...               metrics, gaps, shifts (Parquet, CSV, Markdown)
    OUT/manifest.json             every shard: stage, setting, key, status, attempts,
                                  error, host, timing
    OUT/mlflow.db                 the default MLflow tracking store

A shard's key is a hash of exactly the inputs its stage depends on, so a later
run that needs the same shard finds it and does not recompute it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["shard_key", "ShardRecord", "RunStore", "atomic_write", "write_text_atomic", "write_parquet_atomic",
           "write_frame_atomic"]


def shard_key(stage: str, inputs: Any) -> str:
    """Stable key of a shard: sha256 of the stage name and its JSON-encoded inputs.

    Parameters
    ----------
    stage : str
        Stage name (``generate``, ``score``...).
    inputs : JSON-serialisable
        Exactly the inputs the stage depends on (model id and revision, prompt
        text, decoding, item ids and questions, upstream keys...). Dict keys are
        sorted, so their order does not matter.

    Returns
    -------
    str
        64 hex characters.
    """
    blob = json.dumps({"stage": stage, "inputs": inputs}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write a file atomically: ``write(tmp)`` fills a temp file in the same folder, then it is renamed.

    The one atomic writer of the project: shards, tables, results, manifest.
    A reader never sees a half-written file, and a crash leaves the old file
    (or none) in place.

    Parameters
    ----------
    path : path
        Destination; its folder is created if missing.
    write : callable
        Called with the temp file's path; writes the whole content there.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write UTF-8 text atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_parquet_atomic(table: pa.Table, path: Path) -> Path:
    """Write a Parquet file atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda p: pq.write_table(table, p))


def write_frame_atomic(df: Any, path: str | Path) -> Path:
    """Write a DataFrame atomically as CSV (``.csv``) or Parquet (``.parquet``), without its index.

    Raises
    ------
    ValueError
        For any other suffix.
    """
    path = Path(path)
    if path.suffix == ".csv":
        return atomic_write(path, lambda p: df.to_csv(p, index=False, lineterminator="\n"))
    if path.suffix == ".parquet":
        return atomic_write(path, lambda p: df.to_parquet(p, index=False))
    raise ValueError(f"write_frame_atomic: suffix {path.suffix!r} of {str(path)!r}; allowed: .csv, .parquet")


@dataclass
class ShardRecord:
    """One manifest entry."""

    stage: str
    setting: str
    key: str
    status: str = "pending"  # pending | done | failed
    attempts: int = 0
    error: str | None = None
    host: str | None = None
    started: float | None = None
    seconds: float | None = None
    rows: int | None = None
    reused: bool = False
    mlflow_run_id: str | None = None
    replica: str | None = None  # the replica that computed it (``model#index``)
    restarts: int = 0  # actor restarts this shard's engine call went through (absorbed faults)
    extra: dict[str, Any] = field(default_factory=dict)


class RunStore:
    """The output directory of a grid run."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._manifest_path = self.root / "manifest.json"
        self.records: dict[str, ShardRecord] = {}
        self.meta: dict[str, Any] = {}
        self.flush_seconds = 2.0
        self._dirty = False
        self._saved_at = 0.0
        if self._manifest_path.exists():
            data = json.loads(self._manifest_path.read_text(encoding="utf-8"))
            self.meta = dict(data.get("meta", {}))
            for d in data["shards"]:
                rec = ShardRecord(**d)
                self.records[self._rid(rec.stage, rec.setting)] = rec

    @staticmethod
    def _rid(stage: str, setting: str) -> str:
        return f"{stage}/{setting}"

    def shard_path(self, stage: str, key: str) -> Path:
        return self.root / "shards" / stage / f"{key}.parquet"

    def table_path(self, stage: str) -> Path:
        return self.root / "tables" / f"{stage}.parquet"

    def status(self, stage: str, setting: str, key: str) -> str:
        """Manifest status of a shard: pending, running, done or failed ('pending' if unknown)."""
        rec = self.records.get(self._rid(stage, setting))
        if rec is None or rec.key != key:
            return "pending"
        return rec.status

    def failed(self) -> list[ShardRecord]:
        return [r for r in self.records.values() if r.status == "failed"]

    def has_shard(self, stage: str, key: str) -> bool:
        return self.shard_path(stage, key).is_file()

    def read_shard(self, stage: str, key: str) -> pa.Table:
        return pq.read_table(self.shard_path(stage, key))

    def begin(self, stage: str, setting: str, key: str) -> ShardRecord:
        rid = self._rid(stage, setting)
        rec = self.records.get(rid)
        if rec is None or rec.key != key:
            rec = ShardRecord(stage=stage, setting=setting, key=key)
            self.records[rid] = rec
        rec.attempts += 1
        rec.status = "running"
        rec.error = None
        rec.host = socket.gethostname()
        rec.started = time.time()
        return rec

    def finish(self, rec: ShardRecord, table: pa.Table) -> None:
        """Store a computed shard (atomic write) and mark it done; the manifest is saved by :meth:`flush`."""
        write_parquet_atomic(table, self.shard_path(rec.stage, rec.key))
        rec.status = "done"
        rec.rows = table.num_rows
        rec.seconds = round(time.time() - (rec.started or time.time()), 3)
        self._dirty = True

    def fail(self, rec: ShardRecord, error: BaseException | str) -> None:
        """Mark a shard failed with its error text; the manifest is saved at once (a failure is never lost)."""
        rec.status = "failed"
        rec.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        rec.seconds = round(time.time() - (rec.started or time.time()), 3)
        self.save_manifest()

    def prune(self, keep: Callable[[ShardRecord], bool]) -> int:
        """Drop the manifest records ``keep`` rejects (shard files stay); returns how many were dropped."""
        gone = [rid for rid, rec in self.records.items() if not keep(rec)]
        for rid in gone:
            del self.records[rid]
        if gone:
            self.save_manifest()
        return len(gone)

    def touch(self) -> None:
        """Mark the manifest changed (saved by the next :meth:`flush`)."""
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        """Save the manifest if it changed, at most once per :attr:`flush_seconds` unless ``force``.

        Losing an unsaved ``done`` record loses nothing: the shard file exists,
        so the next run finds and reuses it.
        """
        if force or (self._dirty and time.time() - self._saved_at >= self.flush_seconds):
            self.save_manifest()

    def reuse(self, stage: str, setting: str, key: str) -> ShardRecord:
        rid = self._rid(stage, setting)
        rec = self.records.get(rid)
        if rec is None or rec.key != key:
            rec = ShardRecord(stage=stage, setting=setting, key=key, status="done")
            self.records[rid] = rec
        rec.status = "done"
        rec.reused = True
        rec.rows = pq.ParquetFile(self.shard_path(stage, key)).metadata.num_rows
        return rec

    def save_manifest(self) -> None:
        data = {"meta": self.meta, "shards": [asdict(r) for r in self.records.values()]}
        write_text_atomic(json.dumps(data, indent=1, sort_keys=True, default=str), self._manifest_path)
        self._dirty = False
        self._saved_at = time.time()

    def write_table(self, stage: str, tables: list[pa.Table]) -> Path:
        """Concatenate a stage's shard tables into ``tables/<stage>.parquet``."""
        path = self.table_path(stage)
        table = pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
        write_parquet_atomic(table, path)
        return path
