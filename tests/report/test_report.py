"""report.html: one self-contained page, checked as a file and in a real headless browser (Chromium).

The browser test needs Chromium and Playwright (tests/chromium.py); without either it is skipped with the
reason. Its full-page screenshot is kept under ``$CONFGRID_TEST_ARTIFACTS``, path printed.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import report_example
from chromium import artifact_dir, browser
from rich.console import Console

from confgrid.cli.main import app
from confgrid.cli.show.tables import print_results
from confgrid.flows.store.run_info import RUN_INFO, RunInfo, derived_run_info, read_run_info, write_run_info
from confgrid.report import FIGURES, RunTables, render_report
from confgrid.report.html import _log_mlflow
from confgrid.report.registry import FigureSet, register_figure
from confgrid.report.run_tables import DEFAULT_PRIMARY


@pytest.fixture(scope="module")
def report(report_run):
    return report_run[1]


def test_the_page_is_self_contained_and_holds_every_section(report):
    page = report.path.read_text(encoding="utf-8")
    root = report.path.parent
    assert report.path == root / "report.html" and report.figures.failures == []
    assert "<script" not in page.lower()
    # nothing is fetched: every src is inline, no URL with a scheme anywhere in an attribute
    assert not re.search(r'(src|href)="(https?:)?//', page)
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(srcs) == len(report.figures.files) >= 8
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    for section in ("Protocol (reporting checklist)", "Settings", "Metrics (point [95% paired bootstrap interval])",
                    "Study tables", "Figures", "Tables (Parquet)"):
        assert f">{section}</h2>" in page, section
    assert "Reporting checklist: m (fixture) on qa" in page  # rendered from results/checklist.json
    assert "table3_ablation" in page and "ace_gaps" in page and "calibration" in page
    # relative links to the Parquet tables resolve from the page's folder
    links = re.findall(r'href="([^"#]+\.parquet)"', page)
    assert "results/metrics.parquet" in links and "tables/signals.parquet" in links
    assert all((root / h).is_file() for h in links)
    svgs = re.findall(r'href="([^"]+\.svg)"', page)
    assert len(svgs) == len(srcs) and all((root / h).is_file() for h in svgs)


def _open_in_chromium(path: Path, shot: Path) -> tuple[list[str], list[str], list[int]]:
    """Load a page in headless Chromium: (console and page errors, requested URLs, each image's natural width);
    a full-page screenshot goes to ``shot``. Skips without Chromium or Playwright."""
    errors, requests = [], []
    with browser() as b:
        page = b.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri(), wait_until="load")
        widths = page.evaluate("[...document.images].map(i => i.complete ? i.naturalWidth : 0)")
        page.screenshot(path=str(shot), full_page=True)
    return errors, requests, widths


def test_the_page_loads_in_headless_chromium_with_every_figure_and_no_console_error(report, tmp_path, capsys):
    shot = tmp_path / "report.png"
    errors, requests, widths = _open_in_chromium(report.path, shot)
    assert errors == []
    assert [u for u in requests if not u.startswith(("data:", "file:"))] == []  # opens offline
    assert len(widths) == len(report.figures.files)
    assert all(w == f.size_px[0] for w, f in zip(widths, report.figures.files, strict=True))
    # issue 22: the specification curves of the verdicts are among them, and the verdicts come first
    assert any(f.family == "specification_curve" for f in report.figures.files)
    page = report.path.read_text(encoding="utf-8")
    assert page.index('id="verdicts"') < page.index('id="protocol"')
    kept = artifact_dir() / "report_screenshot.png"
    shutil.copyfile(shot, kept)
    assert kept.stat().st_size > 10_000
    with capsys.disabled():  # printed past pytest's capture, so the path shows in the test output
        print(f"\nreport screenshot: {kept}")


def test_confgrid_report_cli_exit_status(tmp_path):
    from typer.testing import CliRunner

    cli = CliRunner()
    r = cli.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "no results/metrics.parquet" in r.output
    r = cli.invoke(app, ["report", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "no such directory" in r.output
    root = report_example.write_run(tmp_path / "run", with_studies=False)
    r = cli.invoke(app, ["report", str(root), "--width", "50"])
    assert r.exit_code == 2 and "width_px" in r.output
    name = "test_cli_broken"

    @register_figure(name, needs=("metrics",), title="broken")
    def _draw(tables, opts):
        raise RuntimeError("cannot draw this")

    try:
        r = cli.invoke(app, ["report", str(root), "--width", "400", "--no-mlflow"])
    finally:
        FIGURES.unregister(name)
    assert r.exit_code == 1, r.output  # written, but a figure failed
    assert f"Report: {root / 'report.html'}" in r.output
    page = (root / "report.html").read_text(encoding="utf-8")
    assert f"Figure {name} could not be drawn: RuntimeError: cannot draw this" in page
    assert sorted(p.name for p in (root / "results" / "figures").glob("*.png")) == [
        "gaps.png", "reliability__m__mc.png", "reliability__m__qa.png"]



def test_report_of_an_analyze_directory_loads_in_chromium(tmp_path, capsys):
    """Issue 20: `confgrid analyze` writes the run's results layout, so `confgrid report` (and `show`) work on
    its directory: the page holds the metrics and gaps, its figures load, nothing is requested online."""
    from typer.testing import CliRunner

    src = Path(__file__).resolve().parents[1] / "fixtures" / "analyze_small.csv"
    out = tmp_path / "analysis"
    cli = CliRunner()
    r = cli.invoke(app, ["analyze", str(src), "--out", str(out), "--bootstrap", "200", "--no-tracking",
                         "--against", "verbalized"])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["show", str(out)])
    assert r.exit_code == 0 and "Paired gap" in r.output and "token" in r.output, r.output
    r = cli.invoke(app, ["report", str(out), "--width", "500", "--no-mlflow"])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "verbalized" in page and "token" in page and "gaps.png" not in page  # figures are embedded
    shot = tmp_path / "analysis.png"
    errors, requests, widths = _open_in_chromium(out / "report.html", shot)
    assert errors == [] and [u for u in requests if not u.startswith(("data:", "file:"))] == []
    assert widths and all(w == 500 for w in widths)
    kept = artifact_dir() / "analyze_report_screenshot.png"
    shutil.copyfile(shot, kept)
    with capsys.disabled():
        print(f"\nanalyze report screenshot: {kept}")


def test_a_folder_without_a_manifest_says_why_its_figures_are_not_logged(tmp_path):
    """An analyze folder has no manifest.json, so no parent run to log figures into: said, not an OSError."""
    msg = _log_mlflow(tmp_path, None, [])
    assert msg == (f"figures not logged to MLflow: {tmp_path} has no manifest.json (only a run folder names its "
                   "parent run)")


def test_the_run_info_record_and_its_derivation_from_an_old_folder(tmp_path):
    old = report_example.write_run(tmp_path / "old")  # grid.yaml and results/primary.json, no run_info.json
    assert not (old / RUN_INFO).exists()
    info = read_run_info(old)
    assert info == derived_run_info(old) == RunInfo(command="run", name="figtest", n_bins=10, level=0.95,
                                                     primary=report_example.PRIMARY)
    write_run_info(old, info.model_copy(update={"n_bins": 7}))
    assert RunTables(old).n_bins == 7 and RunTables(old).primary == report_example.PRIMARY  # the record wins
    (tmp_path / "bare").mkdir()
    assert RunTables(tmp_path / "bare").primary == DEFAULT_PRIMARY and RunTables(tmp_path / "bare").level == 0.95
    with pytest.raises(ValueError):
        RunInfo(command="run", level=1.5)


def test_a_study_section_registered_by_its_study_shows_only_when_it_has_rows(tmp_path):
    """Early stopping's report and show sections (registered by the ``stop_reasons`` study, report/stop_reasons.py
    and cli/show/stop_reasons.py) come right after the verdicts, once, and only for a run with stop reasons."""
    root = report_example.write_run(tmp_path / "run", with_studies=False)
    assert 'id="stopping"' not in render_report(RunTables(root), FigureSet())
    pd.DataFrame([{"model": "m", "dataset": "qa", "reason": "resolved", "rounds": 2, "items": 16, "items_total": 40,
                   "n_gaps": 1, "n_resolved": 1, "detail": "every gap resolved"}]).to_parquet(
        root / "results" / "stopping.parquet", index=False)
    page = render_report(RunTables(root), FigureSet())
    assert page.index('<h2 id="stopping">Early stopping: why each setting stopped</h2>') < page.index('id="protocol"')
    assert 'id="table-stopping"' not in page and "every gap resolved" in page
    console = Console(width=200, record=True, file=io.StringIO())
    print_results(root, console)
    text = console.export_text()
    assert text.count("Early stopping") == 1 and text.index("Early stopping") < text.index("Settings")
