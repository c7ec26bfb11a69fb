"""The figure registry: which figure is drawn from which results table, and how figures are written.

A figure family is one entry: the tables it needs (by name, as :class:`~confgrid.report.run_tables.RunTables`
finds them) and a function ``draw(tables, options) -> list[Drawn]``. A run draws every family whose tables exist
and have rows. Adding a figure for a new results table is one function decorated with :func:`register_figure`
and an import of its module in ``report/__init__.py`` (an example: docs/guides/report.md). Matplotlib is used
through :class:`matplotlib.figure.Figure` (the Agg canvas; no pyplot state).

A study's own section of the page (placed after the verdicts and early stopping) is a :class:`ReportSection`
registered with :func:`register_section` under the study's registry entry (flows/studies/); report/html.py
renders them in registration order and names none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from confgrid.flows.store.run_store import atomic_write, write_frame_atomic
from confgrid.flows.studies import get_study
from confgrid.registry import Registry

from .run_tables import RunTables

__all__ = ["FigureOptions", "Drawn", "FigureEntry", "FigureFile", "FigureSet", "FIGURES", "register_figure",
           "ReportSection", "REPORT_SECTIONS", "register_section",
           "available_figures", "new_figure", "panels", "grid_shape", "draw_figures", "write_figures", "FIGURE_DIR"]

log = logging.getLogger("confgrid")

#: Where figures go, relative to the run directory.
FIGURE_DIR = Path("results") / "figures"


@dataclass(frozen=True)
class FigureOptions:
    """How figures are drawn (ValueError for a size out of range)."""

    width_px: int = 1200  # width of every figure in pixels (PNG), >= 100
    height_px: int | None = None  # height in pixels (>= 100); None: panel_px per row of panels
    panel_px: int = 380
    dpi: int = 100  # dots per inch of the PNG (>= 10; the pixel size is the same whatever the dpi)
    smooth: bool = False  # add the smooth smECE curve (relplot) to each reliability diagram
    metric: str = "ece"  # the metric named in the reliability diagrams' titles

    def __post_init__(self) -> None:
        for name in ("width_px", "panel_px", "dpi"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (100 if name != "dpi" else 10):
                raise ValueError(f"FigureOptions.{name} must be an int >= {100 if name != 'dpi' else 10}, got {v!r}")
        if self.height_px is not None and (not isinstance(self.height_px, int) or self.height_px < 100):
            raise ValueError(f"FigureOptions.height_px must be None or an int >= 100, got {self.height_px!r}")


@dataclass
class Drawn:
    """One drawn figure: ``name`` (file stem, ``[A-Za-z0-9_.-]``), the figure, a caption, and the data drawn."""

    name: str
    figure: Any
    caption: str
    data: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True)
class FigureEntry:
    """A figure family: drawn when every table in ``needs`` exists with rows."""

    family: str
    needs: tuple[str, ...]
    title: str
    draw: Callable[[RunTables, FigureOptions], list[Drawn]]


#: family -> entry, in registration order (the order of the report's figure sections); the one Registry class,
#: so an unknown family names the allowed ones.
FIGURES: Registry[FigureEntry] = Registry("figure family", value_type=FigureEntry)


def register_figure(family: str, needs: tuple[str, ...] | None = None, *, title: str) -> Callable:
    """Decorator registering ``draw(tables, options) -> list[Drawn]`` as figure family ``family``, drawn when the
    results tables ``needs`` have rows (default: the table of the family's name). Raises ValueError when ``family``
    is already registered or ``needs`` is empty.
    """
    if family in FIGURES:
        raise ValueError(f"figure family {family!r} is already registered (by {FIGURES.get(family).draw.__module__})")
    needs = (family,) if needs is None else needs
    if not needs:
        raise ValueError(f"figure family {family!r}: needs must name at least one results table")

    def deco(fn: Callable[[RunTables, FigureOptions], list[Drawn]]) -> Callable:
        FIGURES.register(family, FigureEntry(family, tuple(needs), title, fn))
        return fn

    return deco


@dataclass(frozen=True)
class ReportSection:
    """A study's section of ``report.html``: ``study`` its registry name (flows/studies/), ``render(tables)`` its
    HTML (a string, empty: no section; ``tables.root`` is the run directory), ``anchor`` its id in the page (empty:
    the study's name), ``shows`` the results tables it shows (not repeated under "Study tables")."""

    study: str
    title: str
    render: Callable[[RunTables], str]
    anchor: str = ""
    shows: tuple[str, ...] = ()


#: study name -> its section, in registration order (the order in the page)
REPORT_SECTIONS: Registry[ReportSection] = Registry("report section", value_type=ReportSection)


def register_section(study: str, title: str, anchor: str = "", shows: tuple[str, ...] = ()) -> Callable:
    """Decorator registering ``render(tables) -> str`` as the report section of study ``study``
    (:class:`ReportSection`): a ``KeyError`` (listing the registered studies) when ``study`` is none of them, a
    ``ValueError`` when it has a section."""
    get_study(study)

    def deco(fn: Callable[[RunTables], str]) -> Callable:
        REPORT_SECTIONS.register(study, ReportSection(study, title, fn, anchor, tuple(shows)))
        return fn

    return deco


def available_figures(tables: RunTables) -> list[FigureEntry]:
    """The registered families whose tables the run has (with rows)."""
    return [e for _, e in FIGURES.items() if all(tables.has(n) for n in e.needs)]


def new_figure(opts: FigureOptions, n_rows: int = 1):
    """A constrained-layout :class:`~matplotlib.figure.Figure` of ``opts.width_px`` x (``opts.height_px`` or
    ``n_rows * opts.panel_px + 60``) pixels."""
    from matplotlib.figure import Figure

    h = opts.height_px if opts.height_px is not None else n_rows * opts.panel_px + 60
    return Figure(figsize=(opts.width_px / opts.dpi, h / opts.dpi), dpi=opts.dpi, layout="constrained")


def grid_shape(n: int, max_cols: int = 4) -> tuple[int, int]:
    """(rows, cols) of ``n`` panels, at most ``max_cols`` a row."""
    cols = max(1, min(max_cols, n))
    return math.ceil(max(n, 1) / cols), cols


def panels(opts: FigureOptions, keys: list, max_cols: int = 3) -> tuple[Any, list[tuple[Any, Any]]]:
    """A figure with one panel per key, at most ``max_cols`` a row: ``(figure, [(key, axes), ...])``."""
    nrows, ncols = grid_shape(len(keys), max_cols)
    fig = new_figure(opts, nrows)
    return fig, [(k, fig.add_subplot(nrows, ncols, i + 1)) for i, k in enumerate(keys)]


@dataclass(frozen=True)
class FigureFile:
    """A written figure: family, name, the PNG and SVG paths, caption, pixel size (width, height) and the CSV of
    the numbers drawn (``None`` when the figure has no data frame)."""

    family: str
    name: str
    png: Path
    svg: Path
    caption: str
    size_px: tuple[int, int]
    data: Path | None = None


@dataclass
class FigureSet:
    """What :func:`write_figures` wrote, and the families that failed (``(family, "Type: message")``)."""

    files: list[FigureFile] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)


def draw_figures(tables: RunTables, opts: FigureOptions | None = None,
                 families: list[str] | None = None) -> tuple[dict[str, list[Drawn]], list[tuple[str, str]]]:
    """Draw every available family (or those named); a family that raises is recorded, never raised."""
    opts = opts or FigureOptions()
    drawn: dict[str, list[Drawn]] = {}
    failures: list[tuple[str, str]] = []
    for e in available_figures(tables):
        if families is not None and e.family not in families:
            continue
        try:
            drawn[e.family] = e.draw(tables, opts)
        except Exception as exc:  # noqa: BLE001 - a figure is a view; report it, draw the rest
            failures.append((e.family, f"{type(exc).__name__}: {exc}"))
            log.warning("figure %s not drawn: %s: %s", e.family, type(exc).__name__, exc)
    return drawn, failures


def write_figures(tables: RunTables, out_dir: str | Path, opts: FigureOptions | None = None,
                  families: list[str] | None = None) -> FigureSet:
    """Draw and write every available figure (or those of ``families``) as ``<out_dir>/<name>.png`` and
    ``.svg``, and the numbers it draws as ``<name>.csv``; returns the files written, in registry order, and the
    families that failed. ``out_dir`` (usually ``OUT/results/figures``) is created if missing; earlier figures
    stay (a name drawn again is overwritten)."""
    opts = opts or FigureOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawn, failures = draw_figures(tables, opts, families)
    result = FigureSet(failures=failures)
    for family, figs in drawn.items():
        for d in figs:
            try:
                png, svg = out / f"{d.name}.png", out / f"{d.name}.svg"
                if d.figure.get_layout_engine() is not None:  # lay out once (each save would lay out again)
                    d.figure.draw_without_rendering()
                    d.figure.set_layout_engine("none")
                atomic_write(png, lambda t, fig=d.figure: fig.savefig(t, format="png", dpi=opts.dpi))
                atomic_write(svg, lambda t, fig=d.figure: fig.savefig(t, format="svg", dpi=opts.dpi))
                data = None
                if len(d.data):
                    data = write_frame_atomic(d.data, out / f"{d.name}.csv")
                w, h = (round(x) for x in d.figure.get_size_inches() * opts.dpi)
                result.files.append(FigureFile(family, d.name, png, svg, d.caption, (w, h), data))
            except Exception as exc:  # noqa: BLE001 - as above
                result.failures.append((family, f"{d.name}: {type(exc).__name__}: {exc}"))
                log.warning("figure %s not written: %s: %s", d.name, type(exc).__name__, exc)
    return result
