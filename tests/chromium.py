"""Headless Chromium for the browser tests (report.html, the MLflow UI).

Chromium comes from Debian packages (``apt-get install chromium``, at /usr/bin/chromium) and the driver from the
``playwright`` package (the ``test`` extra); without either a test is skipped with the reason. ``.ci/run``
installs Chromium in the background and touches ``$CONFGRID_CHROMIUM_DONE`` when it is done, so a test waits for
that first. Screenshots are kept under ``$CONFGRID_TEST_ARTIFACTS`` (default ``<tmp>/confgrid-test-artifacts``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def wait_for_ci_install(timeout_s: float = 300.0) -> None:
    """Wait (at most ``timeout_s``) for ``$CONFGRID_CHROMIUM_DONE``, the marker of .ci/run's background install."""
    marker = os.environ.get("CONFGRID_CHROMIUM_DONE")
    end = time.monotonic() + timeout_s
    while marker and not Path(marker).exists() and time.monotonic() < end:
        time.sleep(1.0)


def artifact_dir() -> Path:
    """Where screenshots are kept (created)."""
    d = Path(os.environ.get("CONFGRID_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "confgrid-test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def browser() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright ``Browser``); skips without Chromium or Playwright."""
    wait_for_ci_install()
    if not Path(CHROMIUM).is_file():
        pytest.skip("no Chromium at /usr/bin/chromium (Debian: apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
