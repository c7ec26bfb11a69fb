"""A damaged shard or manifest never breaks resume (issue 14, items 1 and 2)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from confgrid.flows.store.run_store import ManifestDamaged, RunStore, file_sha256, read_manifest


def _done(store: RunStore, stage: str, setting: str, key: str, n: int = 50) -> None:
    store.finish(store.begin(stage, setting, key), pa.table({"x": list(range(n)), "y": [f"v{i}" for i in range(n)]}))
    store.save_manifest()


def _truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_finish_records_checksum_and_rows(tmp_path):
    store = RunStore(tmp_path)
    _done(store, "score", "m/d", "k1")
    rec = read_manifest(tmp_path / "manifest.json")["shards"][0]
    assert rec["rows"] == 50 and rec["sha256"] == file_sha256(store.shard_path("score", "k1"))


def test_truncated_shard_is_moved_aside_marked_failed_and_not_reused(tmp_path, caplog):
    _done(RunStore(tmp_path), "score", "m/d", "k1")
    path = tmp_path / "shards" / "score" / "k1.parquet"
    _truncate(path)
    store = RunStore(tmp_path)
    with caplog.at_level("WARNING", logger="confgrid"):
        assert store.read_stored("score", "k1") is None
    assert str(path) in caplog.text  # the file is named
    assert not path.exists()
    moved = list((tmp_path / "damaged").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith("shards.score.k1.parquet")
    rec = read_manifest(tmp_path / "manifest.json")["shards"][0]
    assert rec["status"] == "failed" and "damaged shard file" in rec["error"]
    assert [r.setting for r in RunStore(tmp_path).failed()] == ["m/d"]  # resubmit --failed reruns it


def test_same_size_corruption_is_caught_by_the_checksum(tmp_path):
    _done(RunStore(tmp_path), "score", "m/d", "k1")
    path = tmp_path / "shards" / "score" / "k1.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # one flipped byte inside the data pages: the footer still reads
    path.write_bytes(bytes(data))
    assert not RunStore(tmp_path).has_shard("score", "k1")


def test_a_shard_that_verifies_is_reused(tmp_path):
    _done(RunStore(tmp_path), "score", "m/d", "k1")
    store = RunStore(tmp_path)
    table = store.read_stored("score", "k1")
    assert table is not None and table.num_rows == 50
    rec = store.reuse("score", "m/d", "k1")
    assert rec.status == "done" and rec.reused and rec.sha256


def test_unknown_unreadable_file_is_damage_too(tmp_path):
    store = RunStore(tmp_path)
    path = store.shard_path("generate", "k9")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not parquet at all")
    assert store.read_stored("generate", "k9") is None and not path.exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "wrong_shape"])
def test_damaged_manifest_is_rebuilt_from_readable_shards(tmp_path, caplog, damage):
    store = RunStore(tmp_path)
    _done(store, "generate", "m/d", "g1")
    _done(store, "score", "m/d/ctx", "s1", n=7)
    bad = tmp_path / "shards" / "score" / "s2.parquet"
    bad.write_bytes(b"\x00" * 10)
    manifest = tmp_path / "manifest.json"
    if damage == "truncate":
        _truncate(manifest)
    elif damage == "garbage":
        manifest.write_bytes(b"\xff\xfe garbage {")
    elif damage == "empty":
        manifest.write_text("")
    else:
        manifest.write_text(json.dumps({"shards": {"a": 1}}))
    with pytest.raises(ManifestDamaged, match="manifest.json"):
        read_manifest(manifest)
    with caplog.at_level("WARNING", logger="confgrid"):
        again = RunStore(tmp_path)
    assert again.recovered and "rebuilt from 2 readable shard file(s), 1 unreadable" in again.recovered
    assert "manifest damaged" in caplog.text
    assert {(r.stage, r.key, r.rows) for r in again.records.values()} == {("generate", "g1", 50), ("score", "s1", 7)}
    assert any(p.name.startswith("manifest.json") for p in (tmp_path / "damaged").iterdir())
    read_manifest(manifest)  # a valid manifest again
    # a run that reuses the shard names it: the stand-in record is replaced
    assert again.has_shard("score", "s1")
    again.reuse("score", "m/d/ctx", "s1")
    assert {r.setting for r in again.records.values() if r.stage == "score"} == {"m/d/ctx"}


def test_status_reports_a_damaged_manifest_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    _done(RunStore(tmp_path), "score", "m/d", "k1")
    (tmp_path / "grid.yaml").write_text("name: x\n")
    (tmp_path / "manifest.json").write_text('{"meta": {}, "shards": [')
    res = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert res.exit_code == 1
    out = res.output.strip()
    assert "\n" not in out and "not a readable manifest" in out and "resume" in out
    assert "Traceback" not in out


def test_an_empty_table_keeps_its_header(tmp_path):
    import pandas as pd

    from confgrid.flows.store.run_store import write_frame_atomic

    p = write_frame_atomic(pd.DataFrame(columns=["setting", "signal", "point"]), tmp_path / "shifts.csv")
    assert p.read_text() == "setting,signal,point\n"
    assert list(pd.read_csv(p).columns) == ["setting", "signal", "point"]
    with pytest.raises(ValueError, match="has no columns"):
        write_frame_atomic(pd.DataFrame(), tmp_path / "none.csv")
    assert not (tmp_path / "none.csv").exists()
