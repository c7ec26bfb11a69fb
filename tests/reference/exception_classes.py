"""Every exception class the package defines, each built with its fields filled (the pickling tests, with and without Ray)."""

from __future__ import annotations

from confgrid.actors.calls import RequestCounts
from confgrid.actors.openai_backend import ApiRequestError
from confgrid.flows import runner, tracking
from confgrid.flows.analyze import read as analyze_read
from confgrid.flows.execute import capacity, ray_session
from confgrid.flows.spec import base as spec_base
from confgrid.flows.store import run_store as store


def all_exception_classes() -> list[Exception]:
    """One instance of every exception class the package defines, with a constructor call that fills its fields."""
    return [
        ApiRequestError("model 'm' at http://h/v1: failed after 3 attempt(s) (HTTP 500): boom", 500, 3, "5xx", False,
                        RequestCounts(requests=1, attempts=3, retries=2, failures={"5xx": 3})),
        runner.ShardFailures([{"stage": "generate", "setting": "m/d", "key": "k" * 16, "error": "e"}], "/tmp/x"),
        runner.DatasetError("dataset 'd': missing"),
        tracking.TrackingError(tracking.TrackingFailure.of("sqlite:///x.db", RuntimeError("locked"))),
        tracking.TrackingUnavailable("no store"),
        analyze_read.AnalyzeInputError("bad input", ["row 3"], 7, ["use --x"]),
        capacity.CapacityError(["model m: needs {GPU: 2}"]),
        spec_base.GridSpecError([("models[0].api.timeout_s", "must be > 0")]),
        store.ManifestDamaged("manifest.json: not JSON"),
        ray_session.RayConnectError("Ray cluster at h:1 does not answer"),
    ]
