"""The run directory: content-keyed shards, atomic Parquet writes, a manifest.

Layout of an output directory ``OUT``::

    OUT/grid.yaml                 the grid as run (validated, paths resolved)
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
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["shard_key", "ShardRecord", "RunStore"]


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


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write a Parquet file via a temp file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    extra: dict[str, Any] = field(default_factory=dict)


class RunStore:
    """The output directory of a grid run."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._manifest_path = self.root / "manifest.json"
        self.records: dict[str, ShardRecord] = {}
        self.meta: dict[str, Any] = {}
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
        write_parquet_atomic(table, self.shard_path(rec.stage, rec.key))
        rec.status = "done"
        rec.rows = table.num_rows
        rec.seconds = round(time.time() - (rec.started or time.time()), 3)
        self.save_manifest()

    def fail(self, rec: ShardRecord, error: BaseException) -> None:
        rec.status = "failed"
        rec.error = f"{type(error).__name__}: {error}"
        rec.seconds = round(time.time() - (rec.started or time.time()), 3)
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
        _atomic_write_bytes(self._manifest_path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))

    def write_table(self, stage: str, tables: list[pa.Table]) -> Path:
        """Concatenate a stage's shard tables into ``tables/<stage>.parquet``."""
        path = self.table_path(stage)
        table = pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
        write_parquet_atomic(table, path)
        return path
