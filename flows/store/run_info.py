"""What ``confgrid show`` and ``confgrid report`` need to know of a finished run or analysis: one typed record.

``confgrid run`` (flows/evaluate/outputs.py) and ``confgrid analyze`` (flows/analyze/analysis.py) write
``OUT/results/run_info.json`` (:class:`RunInfo`); the readers call :func:`read_run_info`, never grid.yaml. A
folder written before the record existed is read once by :func:`derived_run_info` from what it has (grid.yaml,
results/primary.json, analyze.json), with the defaults the readers used before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from confgrid.flows.store.run_store import write_text_atomic
from confgrid.yaml_load import safe_load

__all__ = ["RUN_INFO", "RunInfo", "derived_run_info", "read_run_info", "write_run_info"]

#: where the record lives, relative to the output folder
RUN_INFO = Path("results") / "run_info.json"


class RunInfo(BaseModel):
    """The facts of a finished run or analysis that its tables do not hold (frozen; a damaged file, with an
    unknown key or a value outside its range, raises pydantic.ValidationError)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: Literal["run", "analyze"] = Field(description="What wrote the folder.")
    name: str | None = Field(None, description="The grid's name (the MLflow experiment confgrid/<name>); None for "
                                               "an analysis (its folder's name stands in).")
    n_bins: int = Field(10, ge=1, description="Bins of the binned metrics without their own count (ece_bins).")
    ece_closure: tuple[str, ...] = Field(("left",), min_length=1, description="Bin closures computed; the first "
                                         "is that of the reliability bins drawn.")
    ece_bin_confidence: tuple[str, ...] = Field(("mean",), min_length=1, description="Bin confidences computed; "
                                                "the first is that of the reliability bins drawn.")
    level: float = Field(0.95, gt=0.0, lt=1.0, description="Level of the intervals.")
    primary: dict[str, str] | None = Field(None, description="The primary group (answer set, parse policy, "
                                           "refusal, rule, aggregation) whose rows show and report lead with; "
                                           "{} for an analysis (every row); None: not recorded (a run older than "
                                           "results/primary.json).")

    @property
    def closure(self) -> str:
        """The closure of the reliability bins drawn (the first of :attr:`ece_closure`)."""
        return self.ece_closure[0]

    @property
    def bin_confidence(self) -> str:
        """The bin confidence of the reliability bins drawn (the first of :attr:`ece_bin_confidence`)."""
        return self.ece_bin_confidence[0]


def write_run_info(root: str | Path, info: RunInfo) -> Path:
    """Write ``root/results/run_info.json`` atomically; returns its path."""
    path = Path(root) / RUN_INFO
    write_text_atomic(info.model_dump_json(indent=1), path)
    return path


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def derived_run_info(root: str | Path) -> RunInfo:
    """The record of a folder written before ``results/run_info.json`` existed (the one place that reads
    grid.yaml, primary.json and analyze.json for it): a run's ``metrics.ece_bins``, ``ece_closure``,
    ``ece_bin_confidence`` and ``bootstrap.level``; an analysis' params; the defaults where neither says."""
    root = Path(root)
    primary = _json(root / "results" / "primary.json")
    grid_file = root / "grid.yaml"
    if grid_file.is_file():
        grid = safe_load(grid_file.read_text(encoding="utf-8")) or {}
        metrics, boot = grid.get("metrics") or {}, grid.get("bootstrap") or {}
        return RunInfo(command="run", name=grid.get("name"), n_bins=metrics.get("ece_bins") or 10,
                       ece_closure=tuple(metrics.get("ece_closure") or ("left",)),
                       ece_bin_confidence=tuple(metrics.get("ece_bin_confidence") or ("mean",)),
                       level=boot.get("level") or 0.95, primary=primary)
    record = _json(root / "analyze.json")
    if record is not None:
        params = record.get("params") or record
        split = lambda v, d: tuple(str(v).split(",")) if v else d  # noqa: E731 - "left,right" as analyze.json has it
        return RunInfo(command="analyze", n_bins=params.get("n_bins") or 10,
                       ece_closure=split(params.get("ece_closure"), ("left",)),
                       ece_bin_confidence=split(params.get("ece_bin_confidence"), ("mean",)),
                       level=params.get("level") or 0.95, primary=primary if primary is not None else {})
    return RunInfo(command="run", primary=primary)


class RunInfoError(ValueError):
    """``results/run_info.json`` exists but is not a :class:`RunInfo` record (hand-edited or truncated)."""


def read_run_info(root: str | Path) -> RunInfo:
    """The record of a finished run or analysis: ``results/run_info.json``, else :func:`derived_run_info`.
    Raises :class:`RunInfoError`, naming the file and the first problem, if the file is not a valid record."""
    path = Path(root) / RUN_INFO
    try:
        data = _json(path)
        return RunInfo(**data) if data is not None else derived_run_info(root)
    except (json.JSONDecodeError, TypeError, ValidationError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}, got {first.get('input')!r}" if first else exc
        raise RunInfoError(f"{path}: not a run-info record ({why}); delete it to derive it again from grid.yaml "
                           "or analyze.json") from None
