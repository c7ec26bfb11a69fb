"""The tables of a finished run, read lazily from ``OUT/results`` and ``OUT/tables`` (what every figure takes).

A figure function never reads files itself: it asks a :class:`RunTables` for tables by name, so ``confgrid
report`` redraws any finished run, old or new, and a test can hand figures tables in memory (:meth:`RunTables.of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from confgrid.flows.store.run_info import RunInfo, read_run_info

__all__ = ["RunTables", "DEFAULT_PRIMARY"]

#: The primary group of a run that recorded none (a run older than results/primary.json: the grid defaults).
DEFAULT_PRIMARY = {"answer_set": "main", "parse_policy": "label_or_fallback", "refusal": "drop",
                   "rule": "containment", "aggregation": "geometric_mean"}


def _of_info(name: str, doc: str) -> property:
    """A read-only attribute of :class:`RunTables` that is field ``name`` of its run's record."""
    return property(lambda self: getattr(self.info, name), doc=doc)


class RunTables:
    """Tables of one run by name: ``results/<name>.parquet`` first, else ``tables/<name>.parquet``; ``frames``
    given in memory take precedence (``root`` None: no files). ``info`` is the run's record (default: read from
    ``root``, flows/store/run_info.py, or the defaults without a root)."""

    def __init__(self, root: str | Path | None, frames: Mapping[str, pd.DataFrame] | None = None,
                 info: RunInfo | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self._cache: dict[str, pd.DataFrame] = dict(frames or {})
        self._info = info

    @classmethod
    def of(cls, frames: Mapping[str, pd.DataFrame], info: RunInfo | None = None) -> RunTables:
        """Tables held in memory (no run directory)."""
        return cls(None, frames, info)

    def path(self, name: str) -> Path | None:
        """The Parquet file of table ``name`` (``results/`` before ``tables/``), or None."""
        if self.root is None:
            return None
        for sub in ("results", "tables"):
            p = self.root / sub / f"{name}.parquet"
            if p.is_file():
                return p
        return None

    def has(self, name: str) -> bool:
        """Whether table ``name`` exists and has rows."""
        return not self.get(name).empty

    def get(self, name: str) -> pd.DataFrame:
        """Table ``name`` (an empty frame when the run wrote none)."""
        if name not in self._cache:
            p = self.path(name)
            self._cache[name] = pd.read_parquet(p) if p is not None else pd.DataFrame()
        return self._cache[name]

    def names(self) -> list[str]:
        """Every table available (in memory and on disk), sorted."""
        names = {k for k, v in self._cache.items() if len(v)}
        if self.root is not None:
            for sub in ("results", "tables"):
                names |= {p.stem for p in (self.root / sub).glob("*.parquet")}
        return sorted(names)

    @property
    def info(self) -> RunInfo:
        """The run's record: bins, closure, level, primary group (flows/store/run_info.py)."""
        if self._info is None:
            self._info = read_run_info(self.root) if self.root is not None else RunInfo(command="run")
        return self._info

    @property
    def primary(self) -> dict[str, str]:
        """The run's primary group (:data:`DEFAULT_PRIMARY` when the run recorded none)."""
        return dict(self.info.primary) if self.info.primary is not None else dict(DEFAULT_PRIMARY)

    n_bins = _of_info("n_bins", "The run's ECE bins (``metrics.ece_bins``, 10 by default).")
    closure = _of_info("closure", "The bin closure of the run's reliability bins: the first of "
                                  "``metrics.ece_closure``.")
    bin_confidence = _of_info("bin_confidence", "What stands for a reliability bin's confidence: the first of "
                                                "``metrics.ece_bin_confidence``.")
    level = _of_info("level", "The level of the run's intervals (``bootstrap.level``; an analysis: its ``level``).")
