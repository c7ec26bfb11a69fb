"""Print why each setting stopped (``confgrid show`` of a grid with ``execution.stop_when_resolved``; the
``stop_reasons`` study, flows/studies/stopping.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table

__all__ = ["print_stopping"]


@register_show("stop_reasons", rank=-10)
def print_stopping(res: Path, console: Console) -> None:
    """Print ``results/stopping``: per setting, why it stopped, after how many rounds and items, and the gap that
    decided (nothing without early stopping)."""
    stopping = _read(res, "stopping")
    if stopping is None:
        return
    s = stopping.assign(items=[f"{int(i)} of {int(t)}" for i, t in zip(stopping["items"], stopping["items_total"],
                                                                          strict=True)],
                        resolved=[f"{int(r)} of {int(g)}" for r, g in zip(stopping["n_resolved"], stopping["n_gaps"],
                                                                          strict=True)])
    console.print(_table(s[["model", "dataset", "reason", "rounds", "items", "resolved", "detail"]],
                         "Early stopping (execution.stop_when_resolved): why each setting stopped, the conclusion "
                         "gaps resolved, and what decided (results/stopping.csv)"))
