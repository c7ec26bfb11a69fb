"""Print a finished run's result tables to the terminal (``confgrid show``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from confgrid.cli.console import rich_table
from confgrid.cli.show import show_sections
from confgrid.flows.evaluate.outputs import (_has_views, closure_lines, fmt_interval, fmt_intervals, interval_notes,
                                             result_matrix)
from confgrid.flows.store.run_info import read_run_info

__all__ = ["print_results", "print_verdicts"]


def _read(res: Path, name: str) -> pd.DataFrame | None:
    """Table ``name`` of ``res`` (results/), None when it is missing or has no rows."""
    f = res / f"{name}.parquet"
    if not f.is_file():
        return None
    df = pd.read_parquet(f)
    return df if len(df) else None


def _table(df: pd.DataFrame, title: str) -> Table:
    return rich_table(title, df.columns, ([f"{x:.3f}" if isinstance(x, float) else x for x in row]
                                          for row in df.itertuples(index=False)))


def print_verdicts(verdicts: pd.DataFrame, console: Console, level: float = 0.95) -> None:
    """Print ``results/verdicts`` (analysis/verdicts.py): per conclusion, the verdict, the share of settings
    where A is better by point [interval], the shares resolved each way and the axis that flips it most."""
    if verdicts is None or verdicts.empty:
        return
    v = verdicts.assign(
        # "A vs B": the side the settings favour is the holds_for column (a phrase "A better than B" misread as
        # the finding when B holds)
        conclusion=[f"A={a} vs B={b}" + (f" ({v} view)" if isinstance(v, str) and v else "") for a, b, v in
                    zip(verdicts["signal_a"], verdicts["signal_b"],
                        verdicts["view"] if "view" in verdicts.columns else [""] * len(verdicts), strict=True)],
        a_better=[fmt_interval(p, lo, hi) for p, lo, hi in zip(verdicts["share_a_better"], verdicts["lo"], verdicts["hi"],
                                                        strict=True)],
        flips=[f"{ax} ({n} of {c})" if ax else "none" for ax, n, c in
               zip(verdicts["flip_axis"], verdicts["flip_count"], verdicts["single_changes"], strict=True)])
    v = v.rename(columns={"a_better": "share_A_better", "share_resolved_a": "resolved_for_A",
                          "share_resolved_b": "resolved_for_B"})
    cols = ["conclusion", "metric", "verdict", "holds_for", "n_settings", "share_A_better", "resolved_for_A",
            "resolved_for_B", "flips"]
    console.print(_table(v[cols], "Is the conclusion robust? Over every setting of the grid: the side the settings "
                                  f"favour (holds_for), the share where A is better by point [{level:.0%} interval], resolved "
                                  "for A / for B, the axis whose single change flips it most, in how many of the "
                                  "pairs of settings that differ in that axis only (results/verdicts.csv)"))


def print_results(out_dir: str | Path, console: Console | None = None) -> None:
    """Print the verdicts first, then the studies' sections of rank below 0 (why each setting stopped), settings,
    metrics (point [95% CI]), gaps and shifts of a run, then the other studies' sections."""
    console = console or Console(width=200)
    res = Path(out_dir) / "results"
    info = read_run_info(out_dir)  # the level and primary group of the run or analysis
    level = info.level
    pct = f"{level:.0%}"

    def read(name: str) -> pd.DataFrame:  # a run writes every table; an analysis has no settings
        f = res / f"{name}.parquet"
        return pd.read_parquet(f) if f.is_file() else pd.DataFrame()

    sections = show_sections()  # the studies' sections (cli/show/<study>.py): ranks below 0 before the settings
    print_verdicts(read("verdicts"), console, level)
    for section in (s for s in sections if s.rank < 0):
        section.print(res, console)
    settings, metrics, gaps, shifts = (read(n) for n in ("settings", "metrics", "gaps", "shifts"))
    primary = dict(info.primary or {})
    settings, metrics, gaps, shifts = (_sel(df, primary) for df in (settings, metrics, gaps, shifts))
    if primary:
        console.print(f"Main protocol: {', '.join(f'{k}={v}' for k, v in primary.items())} "
                      "(other answer sets, parse policies and rules are in results/*.csv)")
    if not settings.empty:
        cols = [c for c in ("setting", "items", "parse_rate", "accuracy", "n_analyzed", "n_replaced") if c in settings]
        console.print(_table(settings[cols], "Settings (rows left out, by status: results/dropped.csv)"))
    if not metrics.empty:
        console.print(_table(result_matrix(metrics), f"Metrics per setting and signal: point [{pct} paired bootstrap "
                                                     "interval]"))
        for line in interval_notes(metrics):
            console.print(f"Note: {line}", markup=False)
    for line in closure_lines(_sel(read("closure"), primary)):  # where the bin closure changes a result
        console.print(f"Note: {line} (results/closure.csv)", markup=False)
    if not gaps.empty:
        g = gaps.assign(gap=fmt_intervals(gaps, "gap"))
        index = ["setting", "signal_a", "signal_b", *(["view"] if _has_views(gaps) else []), "n"]
        wide = g.pivot_table(index=index, columns="metric", values="gap", aggfunc="first", sort=False).reset_index()
        console.print(_table(wide, f"Paired gap = metric(signal_a) - metric(signal_b) [{pct} interval] on the n items "
                                   "both have: >0 favours signal_b under ECE/AURC/Brier, signal_a under AUROC"))
    if not shifts.empty:
        shifts = shifts[shifts["from_aggregation"] == shifts["to_aggregation"]] if "from_aggregation" in shifts else shifts
        s = shifts.assign(shift=fmt_intervals(shifts, "shift"))
        console.print(_table(s[["setting", "from_context", "to_context", "metric", "shift", "flip", "resolved_flip"]],
                             "Shift of the gap between scoring contexts"))
    for section in (s for s in sections if s.rank >= 0):
        section.print(res, console)


def _sel(df: pd.DataFrame, group: dict[str, str]) -> pd.DataFrame:
    if df.empty:
        return df
    for k, v in group.items():
        if k in df.columns:
            df = df[df[k].isin(["", v])] if k == "aggregation" else df[df[k] == v]
    return df.reset_index(drop=True)
