"""The console of every ``confgrid`` command: confgrid's own log lines on the stderr of now."""

from __future__ import annotations

import logging
import os
import sys
from typing import Iterable, NoReturn

import typer
from rich.table import Table

__all__ = ["setup_logging", "fail", "rich_table"]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` on stderr and end the command with exit status ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code) from None


def rich_table(title: str, columns: Iterable[object], rows: Iterable[Iterable[object]]) -> Table:
    """A rich table of ``rows`` under ``columns``, every value shown as ``str``."""
    t = Table(title=title)
    for col in columns:
        t.add_column(str(col))
    for r in rows:
        t.add_row(*map(str, r))
    return t


def setup_logging(verbose: bool) -> None:
    """confgrid's own log lines on stderr; other libraries keep their own handlers (no duplicates)."""
    log = logging.getLogger("confgrid")
    for old in [h for h in log.handlers if getattr(h, "_confgrid_console", False)]:
        log.removeHandler(old)  # a second command in one process (tests, notebooks): the stderr of now
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("[confgrid] %(message)s"))
        h._confgrid_console = True  # type: ignore[attr-defined]
        log.addHandler(h)
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    for noisy in ("ray", "mlflow", "alembic", "urllib3", "filelock", "datasets", "httpx", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # an unreachable tracking server fails in seconds, not minutes
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
