"""The run directory (its layout: docs/concepts/index.md): content-keyed shards ``OUT/shards/<stage>/<key>.parquet``,
atomic Parquet writes, a manifest (``OUT/manifest.json``: every shard's stage, setting, key, status, attempts, error,
host, timing, sha256 and row count of its file).

A shard's key is a hash of exactly the inputs its stage depends on, so a later run that needs the same shard
finds it. Integrity: a shard is reused only if its file verifies (the sha256 and row count recorded when it was
written, or, for a file the manifest does not know, a readable Parquet footer). A file that does not verify is
reported by path, moved to ``OUT/damaged/``, recorded as failed and recomputed. A manifest that cannot be read
is moved there too, and rebuilt from the readable shard files (their names are their keys).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from confgrid.analysis.tables import format_table, to_markdown
from confgrid.errors import FieldsPickle

__all__ = ["shard_key", "ShardRecord", "RunStore", "ManifestDamaged", "read_manifest", "file_sha256", "atomic_write",
           "Frames", "write_frames",
           "write_text_atomic", "write_parquet_atomic", "write_frame_atomic"]

log = logging.getLogger("confgrid")


def shard_key(stage: str, inputs: Any) -> str:
    """Stable key of a shard (64 hex characters): sha256 of the stage name and its JSON-encoded ``inputs``,
    exactly what the stage depends on (model id and revision, prompt text, item ids, upstream keys...); dict keys
    are sorted."""
    blob = json.dumps({"stage": stage, "inputs": inputs}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` atomically (its folder created if missing): ``write(tmp)`` fills a temp file in the same
    folder, then it is renamed; returns ``path``. The one atomic writer of the project: a reader never sees a
    half-written file, and a crash leaves the old file (or none) in place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        mask = os.umask(0)  # read the umask (only setting it returns it), then put it back
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; give the file the usual permissions
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

    Raises ValueError for any other suffix, or a frame without columns (a CSV with no header line cannot be read
    back).
    """
    path = Path(path)
    if len(df.columns) == 0:
        raise ValueError(f"write_frame_atomic: the table for {str(path)!r} has no columns; build it with its "
                         "columns (an empty table keeps its header)")
    if path.suffix == ".csv":
        return atomic_write(path, lambda p: df.to_csv(p, index=False, lineterminator="\n"))
    if path.suffix == ".parquet":
        return atomic_write(path, lambda p: df.to_parquet(p, index=False))
    raise ValueError(f"write_frame_atomic: suffix {path.suffix!r} of {str(path)!r}; allowed: .csv, .parquet")


@dataclass(frozen=True)
class Frames:
    """Named result frames of one view, as :func:`write_frames` writes them into ``results/``.

    ``frames``: name -> DataFrame (``<name>.csv`` and ``.parquet``; one that is None or has no columns is never
    written); ``markdown``: names also written as ``<name>.md``; ``skip_empty``: leave out frames without rows
    (else an empty frame is written with its header, replacing an earlier run's rows); ``texts``: file name ->
    text written beside them.
    """

    frames: dict[str, Any] = field(default_factory=dict)
    markdown: tuple[str, ...] = ()
    skip_empty: bool = False
    texts: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The frame called ``name``, or None."""
        return self.frames.get(name)


def write_frames(out: Frames, results: str | Path) -> list[Path]:
    """The one writer of result frames: every frame of ``out`` as ``results/<name>.{csv,parquet}`` (and ``.md``
    for the names in ``out.markdown``), then its texts; returns the CSV paths in the frames' order."""
    paths = []
    for name, df in out.frames.items():
        if df is None or len(df.columns) == 0 or (out.skip_empty and df.empty):
            log.debug("results/%s: nothing to write", name)
            continue
        paths.append(write_frame_atomic(df, Path(results) / f"{name}.csv"))
        write_frame_atomic(df, Path(results) / f"{name}.parquet")
        if name in out.markdown:
            write_text_atomic(to_markdown(format_table(df)) if len(df) else "(empty)\n", Path(results) / f"{name}.md")
    for name, text in out.texts.items():
        write_text_atomic(text, Path(results) / name)
    return paths


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (64 hex characters), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ManifestDamaged(FieldsPickle, ValueError):
    """``manifest.json`` exists but is not a manifest (truncated, garbage, wrong shape)."""


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read ``manifest.json``: ``{"meta": {...}, "shards": [{...}, ...]}``.

    Raises FileNotFoundError if there is no file, :class:`ManifestDamaged` (naming the file and what is wrong)
    if it is not JSON, or not an object with a ``shards`` list of records with ``stage``, ``setting`` and ``key``.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestDamaged(f"{path}: not a readable manifest ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("shards"), list):
        raise ManifestDamaged(f"{path}: not a manifest (expected an object with a 'shards' list)")
    for i, d in enumerate(data["shards"]):
        if not isinstance(d, dict) or not {"stage", "setting", "key"} <= set(d):
            raise ManifestDamaged(f"{path}: shard record {i} lacks stage, setting or key")
    if not isinstance(data.get("meta", {}), dict):
        raise ManifestDamaged(f"{path}: 'meta' is not an object")
    return data


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
    node_id: str | None = None  # the Ray node of that replica (id and IP)
    node_ip: str | None = None
    restarts: int = 0  # actor restarts this shard's engine call went through (absorbed faults)
    sha256: str | None = None  # of the shard file as written; checked before the file is reused
    requests: dict[str, Any] | None = None  # an API model's requests (actors/calls.py RequestCounts.as_dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # the grid entries the shard belongs to, as fields (never parsed back out of ``setting``, the label);
    # None in a manifest written before they were recorded
    model: str | None = None
    dataset: str | None = None
    answer_set: str | None = None


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
        self.recovered: str | None = None  # set when a damaged manifest was rebuilt (what happened, one line)
        self._verified: set[str] = set()  # shard paths verified in this process
        self._sums: dict[tuple[str, str], tuple[str, int | None]] = {}  # (stage, key) -> (sha256, rows) as written
        if self._manifest_path.exists():
            try:
                data = read_manifest(self._manifest_path)
            except ManifestDamaged as exc:
                self._rebuild_manifest(str(exc))
            else:
                self.meta = dict(data.get("meta", {}))
                known = {f.name for f in fields(ShardRecord)}
                for d in data["shards"]:
                    rec = ShardRecord(**{k: v for k, v in d.items() if k in known})
                    self.records[self._rid(rec.stage, rec.setting)] = rec
                    if rec.sha256:
                        self._sums[(rec.stage, rec.key)] = (rec.sha256, rec.rows)

    def _move_aside(self, path: Path) -> Path:
        """Move a file that failed verification to ``OUT/damaged/`` (never deleted); returns its new path."""
        rel = path.relative_to(self.root)
        dest = self.root / "damaged" / f"{'.'.join(rel.parts)}.{time.strftime('%Y%m%d-%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
        return dest

    def _rebuild_manifest(self, why: str) -> None:
        """Replace a damaged manifest by records of the shard files whose Parquet footer reads."""
        moved = self._move_aside(self._manifest_path)
        n_bad = 0
        for path in sorted((self.root / "shards").glob("*/*.parquet")):
            stage, key = path.parent.name, path.stem
            try:
                rows = pq.ParquetFile(path).metadata.num_rows
            except Exception:  # noqa: BLE001 - any unreadable file is simply not recovered
                n_bad += 1
                continue
            rec = ShardRecord(stage=stage, setting=f"recovered:{key[:12]}", key=key, status="done", rows=rows,
                              sha256=file_sha256(path), extra={"recovered": True})
            self.records[self._rid(rec.stage, rec.setting)] = rec
            self._sums[(stage, key)] = (rec.sha256, rows)
        self.recovered = (f"manifest damaged ({why}); moved to {moved}; rebuilt from {len(self.records)} readable "
                          f"shard file(s)" + (f", {n_bad} unreadable left to recompute" if n_bad else "")
                          + "; run history (MLflow parent run, invocations) starts afresh")
        log.warning("%s", self.recovered)
        self.save_manifest()

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
        return "pending" if rec is None or rec.key != key else rec.status

    def failed(self) -> list[ShardRecord]:
        return [r for r in self.records.values() if r.status == "failed"]

    def has_shard(self, stage: str, key: str) -> bool:
        """Whether a verified file of this shard exists (module notes); one that does not verify is moved to
        ``OUT/damaged/`` with a warning, every record of it marked failed (``resubmit --failed`` reruns it too),
        and False is returned: the shard is recomputed."""
        path = self.shard_path(stage, key)
        if not path.is_file():
            return False
        if str(path) in self._verified:
            return True
        problem = self._verify(stage, key, path)
        if problem is None:
            self._verified.add(str(path))
            return True
        self._quarantine(stage, key, problem)
        return False

    def read_stored(self, stage: str, key: str) -> pa.Table | None:
        """The stored shard's table if its file verifies and reads, else None (a damaged file is moved aside,
        as in :meth:`has_shard`, and the shard is recomputed)."""
        if not self.has_shard(stage, key):
            return None
        try:
            return pq.read_table(self.shard_path(stage, key))
        except Exception as exc:  # noqa: BLE001 - damage past the footer of a file without a checksum
            self._quarantine(stage, key, f"unreadable Parquet: {type(exc).__name__}: {exc}")
            return None

    def _quarantine(self, stage: str, key: str, problem: str) -> None:
        path = self.shard_path(stage, key)
        self._verified.discard(str(path))
        moved = self._move_aside(path)
        error = f"damaged shard file {path} ({problem}); moved to {moved}; recomputed"
        log.warning("%s", error)
        self._sums.pop((stage, key), None)
        for rec in self.records.values():
            if rec.stage == stage and rec.key == key:
                rec.status, rec.error, rec.sha256 = "failed", error, None
        self.save_manifest()

    def _verify(self, stage: str, key: str, path: Path) -> str | None:
        """None if the file verifies, else what is wrong (one phrase)."""
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as exc:  # noqa: BLE001 - any unreadable footer is damage
            return f"unreadable Parquet: {type(exc).__name__}: {exc}"
        if (stage, key) not in self._sums:
            return None
        sha, n = self._sums[(stage, key)]
        if n is not None and rows != n:
            return f"{rows} rows, manifest says {n}"
        digest = file_sha256(path)
        return f"sha256 {digest[:12]}..., manifest says {sha[:12]}..." if digest != sha else None

    def begin(self, stage: str, setting: str, key: str, *, model: str | None = None, dataset: str | None = None,
              answer_set: str | None = None) -> ShardRecord:
        """Mark shard ``key`` of ``stage`` running under its label ``setting``; ``model``, ``dataset`` and
        ``answer_set`` say which grid entries it belongs to (kept on the record)."""
        rec = self._record(stage, setting, key, model, dataset, answer_set)
        rec.attempts += 1
        rec.status = "running"
        rec.error = None
        rec.requests = None
        rec.host = socket.gethostname()
        rec.started = time.time()
        return rec

    def _record(self, stage: str, setting: str, key: str, model: str | None, dataset: str | None,
                answer_set: str | None) -> ShardRecord:
        """The record of shard ``key`` under its label (a new one if the label held another key)."""
        rid = self._rid(stage, setting)
        rec = self.records.get(rid)
        if rec is None or rec.key != key:
            rec = self.records[rid] = ShardRecord(stage=stage, setting=setting, key=key)
        rec.model, rec.dataset, rec.answer_set = model, dataset, answer_set
        return rec

    def finish(self, rec: ShardRecord, table: pa.Table) -> None:
        """Store a computed shard (atomic write) and mark it done; the manifest is saved by :meth:`flush`."""
        path = write_parquet_atomic(table, self.shard_path(rec.stage, rec.key))
        rec.status = "done"
        rec.rows = table.num_rows
        rec.sha256 = file_sha256(path)
        self._sums[(rec.stage, rec.key)] = (rec.sha256, rec.rows)
        self._verified.add(str(path))
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
        """Save the manifest if it changed, at most once per :attr:`flush_seconds` unless ``force`` (an unsaved
        ``done`` record loses nothing: the next run finds the shard file)."""
        if force or (self._dirty and time.time() - self._saved_at >= self.flush_seconds):
            self.save_manifest()

    def reuse(self, stage: str, setting: str, key: str, *, model: str | None = None, dataset: str | None = None,
              answer_set: str | None = None) -> ShardRecord:
        """Record a stored shard as reused (no model call); the grid entries as in :meth:`begin`."""
        rec = self._record(stage, setting, key, model, dataset, answer_set)
        path = self.shard_path(stage, key)
        rec.status = "done"
        rec.reused = True
        rec.error = None
        rec.rows = pq.ParquetFile(path).metadata.num_rows
        if (stage, key) not in self._sums:
            self._sums[(stage, key)] = (file_sha256(path), rec.rows)
        rec.sha256 = self._sums[(stage, key)][0]
        stand_in = self._rid(stage, f"recovered:{key[:12]}")  # a rebuilt manifest's record, now named
        if stand_in != self._rid(stage, setting):
            self.records.pop(stand_in, None)
        return rec

    def save_manifest(self) -> None:
        data = {"meta": self.meta, "shards": [asdict(r) for r in self.records.values()]}
        write_text_atomic(json.dumps(data, indent=1, sort_keys=True, default=str), self._manifest_path)
        self._dirty = False
        self._saved_at = time.time()

    def write_table(self, stage: str, tables: list[pa.Table], empty: pa.Schema | None = None) -> Path:
        """Concatenate a stage's shard tables into ``tables/<stage>.parquet``; ``empty``: the columns the file
        keeps when ``tables`` is empty (without it, none)."""
        path = self.table_path(stage)
        table = (pa.concat_tables(tables, promote_options="default") if tables
                 else empty.empty_table() if empty is not None else pa.table({}))
        write_parquet_atomic(table, path)
        return path
