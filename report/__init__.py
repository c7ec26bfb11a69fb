"""Figures and the HTML report of a run (``confgrid report``): draw from the results tables, never from a live run.

Compute lives in :mod:`confgrid.analysis.figure_data`; drawing in the modules here. Importing this package
registers every figure family (:data:`confgrid.report.registry.FIGURES`).
"""

from . import figures_reliability, figures_studies  # noqa: F401 - registers the figure families, in this order
from . import figures_capability  # noqa: F401, I001 - study 004's families, after the others
from . import figures_verdicts  # noqa: F401, I001 - the specification curves of the verdicts, last
from . import stop_reasons, protocol  # noqa: F401, I001 - the studies' report sections, in this order
from .html import REPORT_FILE, ReportResult, render_report, write_report
from .registry import (FIGURE_DIR, FIGURES, Drawn, FigureEntry, FigureFile, FigureOptions, FigureSet,
                       available_figures, draw_figures, new_figure, register_figure, write_figures)
from .run_tables import RunTables

__all__ = ["FIGURE_DIR", "FIGURES", "Drawn", "FigureEntry", "FigureFile", "FigureOptions", "FigureSet", "RunTables",
           "available_figures", "draw_figures", "new_figure", "register_figure", "write_figures",
           "REPORT_FILE", "ReportResult", "render_report", "write_report"]
