"""The GPU suite (marker ``gpu``): confgrid's backends and a grid on a CUDA device.

Run on a GPU machine with ``python -m pytest tests/gpu -m gpu -q`` (README, "Tests"). Without CUDA every
test here is skipped with that reason (:func:`pytest_collection_modifyitems`), so the CPU suite never fails
on them; the default ``-m 'not ... gpu'`` deselects them anyway. The measurements of
benchmarks/gpu_check.py (throughput, raw vLLM) stay a benchmark; these are its pass/fail checks.
"""

from __future__ import annotations

import pytest

SKIP_REASON = "no CUDA device (tests/gpu runs on a GPU machine: python -m pytest tests/gpu -m gpu)"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
