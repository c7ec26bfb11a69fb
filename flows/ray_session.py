"""The one Ray start-up helper: join a cluster or start a local one."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["init_ray"]


def init_ray(address: str | None = None, **local: Any) -> None:
    """Connect this driver to Ray, once.

    Parameters
    ----------
    address : str, optional
        A cluster to join (``ray://HEAD:10001``, ``auto``, ``HOST:6379``).
        None: inside a Ray job (``RAY_ADDRESS`` set) join the job's cluster,
        else start a local cluster on this machine.
    **local
        Extra ``ray.init`` arguments for a local cluster only (``num_cpus``,
        ``num_gpus``...); ignored when joining.

    Notes
    -----
    Does nothing if Ray is already initialized (a caller, a test, a notebook
    started it). Usage statistics are off unless the user turned them on; the
    actors' logs are not streamed to the driver (confgrid logs what matters).
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if address:
        ray.init(address=address, **kwargs)
    elif os.environ.get("RAY_ADDRESS"):  # inside a Ray job: join the job's cluster
        ray.init(**kwargs)
    else:
        ray.init(include_dashboard=False, **kwargs, **local)
