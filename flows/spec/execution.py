"""The ``execution`` section of a grid: how the work is cut and run (shards, retries, where the bootstrap runs, how
many models at once, engine calls in flight, MLflow shard runs) and early stopping (``stop_when_resolved``, the one
field that decides how many items run; analysis/stopping.py, flows/evaluate/rounds.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_serializer

from confgrid.flows.spec.base import _Spec

__all__ = ["ExecutionSpec", "StopSpec"]


class StopSpec(_Spec):
    """Early stopping (``execution.stop_when_resolved``): generate each (model, dataset) setting's
    items in rounds of whole generate shards and stop the setting once every declared conclusion is resolved, or once
    the sample-size planner says the items left cannot resolve one (analysis/stopping.py)."""

    round_share: float = Field(0.1, gt=0.0, le=1.0, description="Share of a setting's generate chunks (of "
                               "execution.shard_size items) each round adds, in (0, 1]; at least one chunk.")
    min_items: int = Field(30, ge=1, le=100_000_000, description="Items a setting runs before it may stop (the "
                           "planner needs at least 30 units to extrapolate, analysis/planner.py MIN_PILOT).")
    power: float = Field(0.5, gt=0.0, lt=1.0, description="The planner's power: a still-unresolved gap stops the "
                         "setting (budget_insufficient) when more items than the setting has would be needed to "
                         "resolve the observed gap with this probability (0.5: the interval just excludes 0 on "
                         "average).")
    planner_resamples: int = Field(200, ge=3, le=100_000, description="Resamples per subsample size of the "
                                   "planner's 1/sqrt(n) fit, per unresolved gap and round.")
    seed: int = Field(0, ge=0, description="Seed of the round order of a dataset's chunks (the same order for "
                      "every model on the dataset).")


class ExecutionSpec(_Spec):
    """How the work is cut and run (no effect on any number, except ``stop_when_resolved``, which decides how many
    items run)."""

    shard_size: int = Field(64, ge=1, le=1_000_000, description="Items per generate/score shard.")
    max_retries: int = Field(
        1, ge=0, le=10, description="Ray restarts a crashed model actor and retries its calls at most this many times.")
    bootstrap_backend: Literal["local", "ray_data"] = Field(
        "local", description="Where the paired bootstrap runs: in the driver, or spread over CPU workers with Ray Data."
    )
    bootstrap_workers: int | None = Field(None, ge=1, description="Ray Data workers (None: every CPU of the cluster).")
    max_concurrent_models: int | None = Field(
        None, ge=1, description="Most models whose replica pools are alive at once (None: as many as the cluster fits; "
        "Ray queues the rest and they start as resources free up). Pools start largest replica first, so the largest "
        "models take the first slots.")
    calls_in_flight: int = Field(
        2, ge=1, le=64, description="Engine calls queued per replica, so that a replica never waits for the driver.")
    wait_for_nodes: StrictBool = Field(
        False, description="On an autoscaling cluster: a replica larger than every node now in the cluster waits "
        "(with a log line) for the autoscaler to add a node, instead of failing the grid at once.")
    mlflow_shard_runs: StrictBool = Field(
        False, description="Also log one MLflow run per shard (the manifest, logged as an artifact, always has them).")
    stop_when_resolved: StopSpec | None = Field(
        None, description="Early stopping: true (the defaults of round_share, min_items, power, "
        "planner_resamples, seed) or a mapping of them; false or absent: every item runs. Only which generate "
        "shards run changes: their keys are the same, so a later run without it (or with a higher limit) "
        "reuses every shard.")

    @field_validator("stop_when_resolved", mode="before")
    @classmethod
    def _stop_flag(cls, v: Any) -> Any:
        if v is None or v is False:
            return None
        if v is True:
            return {}
        if isinstance(v, (dict, StopSpec)):
            return v
        raise ValueError(f"expected true, false or a mapping of {', '.join(StopSpec.model_fields)}")

    @model_serializer(mode="wrap")
    def _omit_stop_off(self, handler: Any) -> dict[str, Any]:
        """No ``stop_when_resolved`` key when it is off: grid.yaml of a grid without it stays what it was before the
        field existed."""
        data = handler(self)
        if self.stop_when_resolved is None:
            data.pop("stop_when_resolved", None)
        return data

    @property
    def stopping(self) -> StopSpec | None:
        """The early-stopping settings, or None when every item runs."""
        return self.stop_when_resolved
