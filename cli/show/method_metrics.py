"""Print the confidence methods' metrics and the expected accuracy of a run (``confgrid show``; the
``method_metrics`` study, flows/studies/method_metrics.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console

from confgrid.cli.show import register_show
from confgrid.cli.show.tables import _read, _table
from confgrid.flows.evaluate.outputs import fmt_interval
from confgrid.flows.store.run_info import read_run_info

__all__ = ["print_methods", "print_expected_accuracy"]


@register_show("method_metrics", rank=10)
def print_methods(res: Path, console: Console) -> None:
    """``results/methods``: per setting, signal and rated answer, each metric as point [interval] over the
    method's own rows (the level of the run's intervals, flows/store/run_info.py)."""
    methods = _read(res, "methods")
    if methods is None:
        return
    pct = f"{read_run_info(res.parent).level:.0%}"
    wide = methods.assign(value=[fmt_interval(p, lo, hi) for p, lo, hi in
                                 zip(methods["point"], methods["lo"], methods["hi"], strict=True)])
    wide = wide.pivot_table(index=["setting", "signal", "rated", "n"], columns="metric", values="value",
                            aggfunc="first", sort=False).reset_index()
    console.print(_table(wide, f"Confidence methods: point [{pct} paired bootstrap interval] over each "
                               "method's own rows (n); rated = the answer whose correctness is the target; "
                               "their gaps against verbalized are in the gap table"))


@register_show("method_metrics", rank=50)
def print_expected_accuracy(res: Path, console: Console) -> None:
    """``results/expected_accuracy``: the expected accuracy over k samples, as written."""
    ea = res / "expected_accuracy.parquet"
    if ea.is_file():
        console.print(_table(pd.read_parquet(ea), "Expected accuracy over k samples (the capability target)"))
