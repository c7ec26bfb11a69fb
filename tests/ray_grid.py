"""A private local Ray cluster for an end-to-end test module (started and shut down by the test itself)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def local_ray(num_cpus: int = 2, **kwargs) -> Iterator[None]:
    """``ray.init(num_cpus=...)`` for the block (an already running driver connection is shut down first)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, **kwargs)
    try:
        yield
    finally:
        ray.shutdown()


def run_on_local_ray(spec, out):
    """Yield ``(spec, out, run_grid(spec, out))`` on a private 2-CPU cluster (a module fixture's body)."""
    from confgrid.flows.runner import run_grid

    with local_ray():
        yield spec, out, run_grid(spec, out)
