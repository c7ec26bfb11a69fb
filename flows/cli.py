"""The ``confgrid`` command line: run, demo, show."""

from __future__ import annotations

import logging
import sys
from importlib.resources import files
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="confgrid: fix the answer, vary the measurement.")

DEMO_GRID = files("confgrid.flows") / "grids" / "demo.yaml"


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="[confgrid] %(message)s", stream=sys.stderr)
    for noisy in ("ray", "mlflow", "alembic", "urllib3", "filelock", "datasets", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run(grid_path: Path, out: Path, address: str | None, tracking_uri: str | None) -> None:
    from confgrid.flows.spec import GridSpecError, load_grid

    try:
        spec = load_grid(grid_path)
    except GridSpecError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    from confgrid.flows.runner import run_grid
    from confgrid.flows.show import print_results

    summary = run_grid(spec, out, address=address, tracking_uri=tracking_uri,
                       grid_text=Path(grid_path).read_text(encoding="utf-8"))
    print_results(summary.out_dir)
    typer.echo(f"\nOutputs in {summary.out_dir} (tables/, results/, manifest.json); "
               f"MLflow parent run {summary.parent_run_id} in {tracking_uri or 'sqlite:///' + str(summary.out_dir / 'mlflow.db')}")


@app.command()
def run(
    grid: Path = typer.Argument(..., help="Grid YAML file."),
    out: Path = typer.Option(None, "--out", help="Output directory (default runs/<grid name>)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join (default: start a local cluster)."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", help="MLflow tracking URI (default: sqlite file in OUT)."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a grid: generate, parse, grade, score, metrics with paired bootstrap intervals."""
    _setup_logging(verbose)
    _run(grid, out or Path("runs") / grid.stem, address, tracking_uri)


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Output directory."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", help="MLflow tracking URI."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run the embedded default grid: the bundled smoke-test model on 450 bundled questions."""
    _setup_logging(verbose)
    _run(Path(str(DEMO_GRID)), out, address, tracking_uri)


@app.command()
def show(out_dir: Path = typer.Argument(..., help="Output directory of a finished run.")) -> None:
    """Print the result tables of a finished run."""
    from confgrid.flows.show import print_results

    if not (out_dir / "results" / "metrics.parquet").is_file():
        typer.echo(f"{out_dir}: no results/metrics.parquet; is this the output directory of a finished run?", err=True)
        raise typer.Exit(2)
    print_results(out_dir)


from confgrid.flows.analyze import analyze_cmd  # noqa: E402

app.command("analyze")(analyze_cmd)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
