"""``OUT/report.html``: one self-contained page a reviewer reads without the terminal (what it holds:
docs/guides/report.md). It opens offline: figures embedded as base64 PNG (their SVG next to them under
``results/figures/``), an inline style sheet, no script, no CDN, no server; its links to the Parquet tables are
relative (valid while ``report.html`` stays in the run directory).
"""

from __future__ import annotations

import base64
import html
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from confgrid.analysis.figure_data import select_group
from confgrid.analysis.tables import format_table
from confgrid.flows.evaluate.outputs import closure_lines, fmt_intervals, interval_notes, result_matrix
from confgrid.flows.store.run_store import read_manifest, write_text_atomic
from confgrid.flows.tracking import Tracker, default_tracking_uri, sqlite_path

from confgrid import __version__

from .registry import FIGURE_DIR, FIGURES, REPORT_SECTIONS, FigureOptions, FigureSet, write_figures
from .run_tables import RunTables

__all__ = ["write_report", "render_report", "ReportResult", "REPORT_FILE", "MAX_TABLE_ROWS"]

log = logging.getLogger("confgrid")

#: The report's file name in the run directory.
REPORT_FILE = "report.html"
#: Rows of a study table shown in the page (the whole table is linked).
MAX_TABLE_ROWS = 60
#: Tables with their own section (not repeated under "Study tables", nor are those a study's section shows);
#: ``signals`` and the stage tables live in tables/ and are linked only.
_OWN_SECTION = {"metrics", "gaps", "settings", "closure", "verdicts"}

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222;
line-height:1.4;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;font-size:.8em;margin:.6em 0}th,td{border:1px solid #ccc;padding:.2em .5em;
text-align:left;vertical-align:top}th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
.scroll{overflow-x:auto}figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#444}details{margin:.4em 0}summary{cursor:pointer;font-weight:600}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}.note{color:#666;
font-size:.85em}.warn{color:#a33}nav li{margin:.1em 0}
"""


@dataclass
class ReportResult:
    """What :func:`write_report` did: the page, the figures (and failed families), whether they went to MLflow."""

    path: Path
    figures: FigureSet
    logged: bool = False
    messages: list[str] = field(default_factory=list)


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _table(df: pd.DataFrame, max_rows: int = MAX_TABLE_ROWS, link: str | None = None) -> str:
    if df.empty:
        return '<p class="note">(no rows)</p>'
    shown = df.head(max_rows).rename_axis(columns=None)  # a pivot's column name is no column of the table
    note = ""
    if len(df) > max_rows:
        more = f' (<a href="{_esc(link)}">whole table</a>)' if link else ""
        note = f'<p class="note">first {max_rows} of {len(df)} rows{more}</p>'
    return f'<div class="scroll">{shown.to_html(index=False, na_rep="-", border=0, escape=True)}</div>{note}'


def _gaps(gaps: pd.DataFrame) -> pd.DataFrame:
    if gaps.empty:
        return gaps
    g = gaps.assign(gap=fmt_intervals(gaps, "gap"))
    view = ("view",) if "view" in g and (g["view"].fillna("").astype(str) != "").any() else ()
    return g[[c for c in ("setting", "signal_a", "signal_b", *view, "metric", "gap", "excludes_zero", "favours", "n")
              if c in g]]


def _links(root: Path) -> str:
    rows = []
    for sub in ("results", "tables"):
        for p in sorted((root / sub).glob("*.parquet")):
            try:
                n = pq.ParquetFile(p).metadata.num_rows
            except Exception:  # noqa: BLE001 - a damaged file is still linked
                n = "?"
            rel = f"{sub}/{p.name}"
            rows.append(f'<tr><td><a href="{_esc(rel)}">{_esc(rel)}</a></td><td>{n}</td>'
                        f"<td>{p.stat().st_size / 1024:.1f}</td></tr>")
    if not rows:
        return '<p class="note">(no Parquet tables)</p>'
    return "<table><tr><th>table</th><th>rows</th><th>KiB</th></tr>" + "".join(rows) + "</table>"


def _figures(root: Path, figs: FigureSet) -> str:
    parts = []
    by_family: dict[str, list] = {}
    for f in figs.files:
        by_family.setdefault(f.family, []).append(f)
    for family, files in by_family.items():
        title = FIGURES.get(family).title if family in FIGURES else family
        parts.append(f'<h3 id="fig-{_esc(family)}">{_esc(title)}</h3>')
        for f in files:
            b64 = base64.b64encode(f.png.read_bytes()).decode("ascii")
            svg = f.svg.relative_to(root).as_posix() if f.svg.is_relative_to(root) else f.svg.as_posix()
            parts.append(f'<figure><img src="data:image/png;base64,{b64}" alt="{_esc(f.name)}" '
                         f'width="{f.size_px[0]}" height="{f.size_px[1]}"><figcaption>{_esc(f.caption)} '
                         f'(<a href="{_esc(svg)}">SVG</a>)</figcaption></figure>')
    for family, err in figs.failures:
        parts.append(f'<p class="warn">Figure {_esc(family)} could not be drawn: {_esc(err)}</p>')
    return "\n".join(parts) or '<p class="note">No figure: the run wrote none of the tables a figure needs.</p>'


def render_report(tables: RunTables, figs: FigureSet) -> str:
    """The report page as one HTML string (see the module docstring); ``tables.root`` must be the run directory."""
    root = tables.root
    if root is None:
        raise ValueError("render_report needs RunTables of a run directory (tables.root is None)")
    p = tables.primary
    name = tables.info.name or root.name
    level = tables.level
    group = ", ".join(f"{k} {v}" for k, v in p.items())
    notes = closure_lines(select_group(tables.get("closure"), p))
    verdicts = tables.get("verdicts")
    sections: list[tuple[str, str, str]] = [
        *([("verdicts", "Is the conclusion robust? (over every setting of the grid)",
            _table(verdicts, 200, "results/verdicts.parquet")
            + '<p class="note">share_a_better: settings where signal_a is better by point [lo, hi: its interval '
            "from the paired resamples]; share_resolved_a/_b: intervals excluding 0 for A/B; flip_axis: the axis "
            "whose single change flips the conclusion most often (docs, \"Is my conclusion robust?\").</p>")]
          if verdicts is not None and len(verdicts) else []),
        *((sec.anchor or sec.study, sec.title, text) for _, sec in REPORT_SECTIONS.items()
          if (text := sec.render(tables))),
        *([("closure", "The bin closure matters here",
            "<ul>" + "".join(f"<li>{_esc(x)}</li>" for x in notes) + "</ul>"
            '<p class="note">results/closure.csv; each signal\'s share of confidences on bin edges: '
            'results/edges.csv</p>')] if notes else []),
        ("settings", "Settings", _table(select_group(tables.get("settings"), p), 500, "results/settings.parquet")),
        ("metrics", f"Metrics (point [{level:.0%} paired bootstrap interval])",
         _table(result_matrix(select_group(tables.get("metrics"), p)), 500, "results/metrics.parquet")
         + "".join(f'<p class="note">{_esc(x)}</p>' for x in interval_notes(select_group(tables.get("metrics"), p)))),
        ("gaps", "Paired gap = metric(signal_a) - metric(signal_b)",
         _table(_gaps(select_group(tables.get("gaps"), p)), 500, "results/gaps.parquet")),
    ]
    study = []
    own = _OWN_SECTION.union(*(sec.shows for _, sec in REPORT_SECTIONS.items()))
    for n in sorted(q.stem for q in (root / "results").glob("*.parquet")):
        if n in own:
            continue
        df = tables.get(n)
        try:
            shown = format_table(df)
        except Exception:  # noqa: BLE001 - show the table as it is
            shown = df
        study.append(f'<h3 id="table-{_esc(n)}">{_esc(n)}</h3>' + _table(shown, link=f"results/{n}.parquet"))
    sections.append(("study", "Study tables", "\n".join(study) or '<p class="note">(none)</p>'))
    sections.append(("figures", "Figures", _figures(root, figs)))
    sections.append(("files", "Tables (Parquet)", _links(root)))
    nav = "".join(f'<li><a href="#{sid}">{_esc(title)}</a></li>' for sid, title, _ in sections)
    body = "\n".join(f'<h2 id="{sid}">{_esc(title)}</h2>\n{content}' for sid, title, content in sections)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>confgrid report: {_esc(name)}</title><style>{_CSS}</style></head><body>"
            f"<h1>confgrid report: {_esc(name)}</h1>"
            f'<p class="note">Run directory {_esc(root)}; written {stamp} by confgrid {_esc(__version__)}. '
            f"The settings, metrics and gap tables and the figures show the primary group ({_esc(group)}); the study "
            "tables are shown as the run wrote them, and every group is in the Parquet tables."
            f"</p><nav><ul>{nav}</ul></nav>{body}</body></html>\n")


def _log_mlflow(root: Path, tables: RunTables, paths: list[Path]) -> str | None:
    """Log ``paths`` into the run's MLflow parent run; a message when that is not possible, else None."""
    if not (root / "manifest.json").is_file():  # an analyze folder: no parent run of a grid to log into
        return f"figures not logged to MLflow: {root} has no manifest.json (only a run folder names its parent run)"
    try:
        meta = read_manifest(root / "manifest.json").get("meta", {})
    except Exception as exc:  # noqa: BLE001 - an unreadable manifest: nothing to log into
        return f"figures not logged to MLflow: {exc}"
    parent = meta.get("mlflow_parent_run_id")
    uri = meta.get("custom_tracking_uri") or default_tracking_uri(root)
    db = sqlite_path(uri)
    if parent is None or (db is not None and not db.is_file()):
        return "figures not logged to MLflow: the run has no MLflow parent run (see `confgrid log`)"
    try:
        tr = Tracker(uri, experiment=f"confgrid/{tables.info.name or root.name}")
        tr.parent_run_id = parent
        figs = [p for p in paths if p.suffix in (".png", ".svg")]
        tr.log_artifacts(figs, FIGURE_DIR.as_posix())
        tr.log_artifacts([p for p in paths if p not in figs])
    except Exception as exc:  # noqa: BLE001 - the files are written; say what failed
        return f"figures not logged to MLflow ({uri}): {type(exc).__name__}: {exc}"
    return None


def write_report(out_dir: str | Path, opts: FigureOptions | None = None, log_mlflow: bool = True) -> ReportResult:
    """Draw every figure of a finished run (old or new: what a figure needs and the run lacks is left out) into
    ``OUT/results/figures/`` and write ``OUT/report.html``; ``log_mlflow``: log them into the run's MLflow parent
    run (a store that fails is a message in the result, never an exception). Raises FileNotFoundError when
    ``out_dir`` has no ``results/metrics.parquet``, OSError when the page or a figure cannot be written (a figure
    that fails to draw is recorded instead).
    """
    root = Path(out_dir)
    if not (root / "results" / "metrics.parquet").is_file():
        raise FileNotFoundError(f"{root}: no results/metrics.parquet; is this the output directory of a finished run?")
    tables = RunTables(root)
    figs = write_figures(tables, root / FIGURE_DIR, opts)
    path = root / REPORT_FILE
    write_text_atomic(render_report(tables, figs), path)
    res = ReportResult(path, figs)
    res.messages += [f"figure {f}: {e}" for f, e in figs.failures]
    if log_mlflow:
        msg = _log_mlflow(root, tables, [f.png for f in figs.files] + [f.svg for f in figs.files] + [path])
        res.logged = msg is None
        if msg:
            res.messages.append(msg)
            log.warning("%s", msg)
    return res
