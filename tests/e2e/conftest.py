"""Fixtures of the end-to-end tests: every module runs on a local Ray cluster of its own."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local(request):
    """A private local Ray for the module's tests: 2 CPUs and the GPUs the module declares in ``RAY_GPUS`` (none
    declared: Ray's own count), shut down after them. A Ray left by an earlier module (or Ray Data's auto-init)
    is shut down first: it may lack this module's resources (one lacked the ACE run's two declared GPUs, and
    the model-load counts went wrong)."""
    ray = pytest.importorskip("ray")
    gpus = getattr(request.module, "RAY_GPUS", None)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **({} if gpus is None else {"num_gpus": gpus}))
    yield ray
    ray.shutdown()
