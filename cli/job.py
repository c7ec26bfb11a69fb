"""The entrypoint of a grid submitted as a Ray Job (``confgrid submit``; :func:`confgrid.cluster.jobs.submit_grid`).

Run inside the job as ``python -m confgrid.cli.job --out DIR [--tracking-uri URI]``: it writes the grid shipped
in ``CONFGRID_GRID_YAML`` into the job's working directory, then runs ``confgrid run`` on it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from confgrid.cli.main import app

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Entrypoint inside a submitted job: write the shipped grid, then ``confgrid run`` it."""
    ap = argparse.ArgumentParser(prog="confgrid-job")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tracking-uri")
    ns = ap.parse_args(argv)
    grid = Path("_grid.yaml")
    grid.write_text(os.environ["CONFGRID_GRID_YAML"], encoding="utf-8")
    cli = ["run", str(grid), "--out", ns.out] + (["--tracking-uri", ns.tracking_uri] if ns.tracking_uri else [])
    app(cli)


if __name__ == "__main__":
    main()
