"""Print a finished run's result tables to the terminal (``confgrid show``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

__all__ = ["print_results"]


def _table(df: pd.DataFrame, title: str) -> Table:
    t = Table(title=title, show_lines=False)
    for c in df.columns:
        t.add_column(str(c))
    for row in df.itertuples(index=False):
        t.add_row(*[f"{x:.3f}" if isinstance(x, float) else str(x) for x in row])
    return t


def print_results(out_dir: str | Path, console: Console | None = None) -> None:
    """Print settings, metrics (point [95% CI]), gaps and shifts of a run."""
    from confgrid.flows.runner import result_matrix, _fmt

    console = console or Console(width=200)
    res = Path(out_dir) / "results"
    settings = pd.read_parquet(res / "settings.parquet")
    metrics = pd.read_parquet(res / "metrics.parquet")
    gaps = pd.read_parquet(res / "gaps.parquet")
    shifts = pd.read_parquet(res / "shifts.parquet")
    if not settings.empty:
        console.print(_table(settings[["setting", "items", "parse_rate", "accuracy", "n_analyzed", "dropped"]], "Settings"))
    if not metrics.empty:
        console.print(_table(result_matrix(metrics), "Metrics per setting and signal: point [95% paired bootstrap interval]"))
    if not gaps.empty:
        g = gaps.assign(g=[_fmt(p, lo, hi) for p, lo, hi in zip(gaps["g"], gaps["lo"], gaps["hi"], strict=True)])
        wide = g.pivot_table(index=["setting", "context"], columns="metric", values="g", aggfunc="first", sort=False).reset_index()
        console.print(_table(wide, "Gap g = metric(verbalized) - metric(token): >0 favours token under ECE/AURC, verbalized under AUROC"))
    if not shifts.empty:
        s = shifts.assign(shift=[_fmt(p, lo, hi) for p, lo, hi in zip(shifts["shift"], shifts["lo"], shifts["hi"], strict=True)])
        console.print(_table(s[["setting", "from_context", "to_context", "metric", "shift", "flip", "resolved_flip"]],
                             "Shift of g between scoring contexts"))
