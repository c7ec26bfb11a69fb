"""`confgrid show`: a finished run's result tables printed to the terminal.

A study's part of the output is a section registered with :func:`register_show` under the study's registry
entry (flows/studies/), in a module of this folder; :func:`show_sections` imports every module here, so
cli/show/tables.py prints them in their ranks' order and names none.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from confgrid.flows.studies import get_study
from confgrid.registry import Registry

__all__ = ["ShowSection", "SHOW_SECTIONS", "register_show", "show_sections"]


@dataclass(frozen=True)
class ShowSection:
    """One study's section of ``confgrid show``: ``study`` its registry name (flows/studies/), ``rank`` its
    place after the settings, metrics, gaps and shifts (ascending, unique;
    below 0: right after the verdicts, before the settings), ``print(res, console)`` prints what
    of its tables the run's results/ folder ``res`` has, nothing otherwise."""

    study: str
    rank: int
    print: Callable[[Path, Console], object]


#: "<study>/<function>" -> its section
SHOW_SECTIONS = Registry[ShowSection]("show section", value_type=ShowSection)


def register_show(study: str, rank: int) -> Callable:
    """Decorator registering ``print(res, console)`` as a section of study ``study`` at ``rank``. Raises KeyError
    (listing the studies) for an unknown study, ValueError when the function is registered or ``rank`` taken."""
    get_study(study)

    def decorator(fn: Callable) -> Callable:
        taken = [k for k, s in SHOW_SECTIONS.items() if s.rank == rank]
        if taken:
            raise ValueError(f"show section rank {rank} is taken by {taken[0]}")
        SHOW_SECTIONS.register(f"{study}/{fn.__name__}", ShowSection(study, rank, fn))
        return fn

    return decorator


def show_sections() -> list[ShowSection]:
    """Every module of this folder imported (each registers its sections); the sections in rank order."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return sorted((s for _, s in SHOW_SECTIONS.items()), key=lambda s: s.rank)
