"""The tables of a finished run, read lazily from ``OUT/results`` and ``OUT/tables`` (what every figure takes).

A figure function never reads files itself: it asks a :class:`RunTables` for
tables by name, so ``confgrid report`` redraws any finished run, old or new,
and a test can hand figures tables built in memory (:meth:`RunTables.of`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["RunTables", "DEFAULT_PRIMARY"]

#: The primary group of a run that has no ``results/primary.json`` (the grid defaults).
DEFAULT_PRIMARY = {"answer_set": "main", "parse_policy": "label_or_fallback", "refusal": "drop",
                   "rule": "containment", "aggregation": "geometric_mean"}


class RunTables:
    """Tables of one run by name: ``results/<name>.parquet`` first, else ``tables/<name>.parquet``.

    Parameters
    ----------
    root : path or None
        The run's output directory (``None`` for tables given in memory).
    frames : mapping of name -> DataFrame, optional
        Tables given in memory; they take precedence over files.
    primary : mapping, optional
        The primary group (``results/primary.json``; :data:`DEFAULT_PRIMARY` when absent).
    grid : mapping, optional
        The grid as run (``grid.yaml``); figures read ``metrics.ece_bins`` from it.
    """

    def __init__(self, root: str | Path | None, frames: Mapping[str, pd.DataFrame] | None = None,
                 primary: Mapping[str, str] | None = None, grid: Mapping[str, Any] | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self._cache: dict[str, pd.DataFrame] = dict(frames or {})
        self._primary = dict(primary) if primary is not None else None
        self._grid = dict(grid) if grid is not None else None

    @classmethod
    def of(cls, frames: Mapping[str, pd.DataFrame], primary: Mapping[str, str] | None = None,
           grid: Mapping[str, Any] | None = None) -> RunTables:
        """Tables held in memory (no run directory)."""
        return cls(None, frames, primary, grid)

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
    def primary(self) -> dict[str, str]:
        """The run's primary group (``results/primary.json``)."""
        if self._primary is None:
            p = self.root / "results" / "primary.json" if self.root is not None else None
            self._primary = json.loads(p.read_text(encoding="utf-8")) if p is not None and p.is_file() \
                else dict(DEFAULT_PRIMARY)
        return self._primary

    @property
    def grid(self) -> dict[str, Any]:
        """The grid as run (``grid.yaml``), or ``{}``."""
        if self._grid is None:
            import yaml

            p = self.root / "grid.yaml" if self.root is not None else None
            self._grid = (yaml.safe_load(p.read_text(encoding="utf-8")) or {}) if p is not None and p.is_file() \
                else {}
        return self._grid

    @property
    def n_bins(self) -> int:
        """The run's ECE bins (``metrics.ece_bins``; 10 when the grid does not say)."""
        return int((self.grid.get("metrics") or {}).get("ece_bins") or 10)

    @property
    def closure(self) -> str:
        """The bin closure of the run's reliability bins: the first of ``metrics.ece_closure`` (``left`` when the
        grid does not say)."""
        closures = (self.grid.get("metrics") or {}).get("ece_closure") or ["left"]
        return str(closures[0])

    @property
    def bin_confidence(self) -> str:
        """What stands for a reliability bin's confidence: the first of ``metrics.ece_bin_confidence`` (``mean``
        when the grid does not say)."""
        confs = (self.grid.get("metrics") or {}).get("ece_bin_confidence") or ["mean"]
        return str(confs[0])

    @property
    def level(self) -> float:
        """The level of the run's intervals (``bootstrap.level``; an analysis: ``level`` of ``analyze.json``; 0.95
        when neither says)."""
        level = (self.grid.get("bootstrap") or {}).get("level")
        if level is None and self.root is not None and (self.root / "analyze.json").is_file():
            info = json.loads((self.root / "analyze.json").read_text(encoding="utf-8"))
            level = (info.get("params") or info).get("level")
        return float(level or 0.95)
