"""``confgrid plan-size``: the items (or clusters) a comparison needs, from a pilot (flows/analyze/plan_size.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import NoReturn

import pandas as pd
import typer
from rich.console import Console

from confgrid.cli.console import fail, rich_table
from confgrid.flows.analyze.plan_size import PLAN_COLUMNS, plan_sizes, read_pilot
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.store.run_store import write_frame_atomic

__all__ = ["plan_records", "plan_size_cmd"]


def plan_size_cmd(
    pilot: Path = typer.Argument(..., metavar="OUT_DIR|FILE", show_default=False,
                                 help="A finished run's directory (its tables/signals.parquet), a signal table, or an "
                                      "analyze input (setting, item_id, signal, confidence, correct)."),
    gap: float = typer.Option(..., "--gap", help="The smallest gap metric(A) - metric(B) worth detecting, e.g. 0.02.",
                              show_default=False),
    metric: str = typer.Option("ece", "--metric", help="The metric of the gap (a registered metric with a weighted "
                                                       "kernel: ece, brier, auroc, aurc, ...)."),
    signals: tuple[str, str] = typer.Option(..., "--signals", metavar="A B", help="The two signals A B.", show_default=False),
    power: float = typer.Option(0.8, "--power", help="Wanted probability that the interval excludes 0."),
    level: float = typer.Option(0.95, "--level", help="Interval level (the run's bootstrap.level)."),
    resamples: int = typer.Option(1000, "--resamples", help="Resamples per subsample size."),
    seed: int = typer.Option(0, "--seed", help="Seed of the subsamples."),
    unit: str = typer.Option(None, "--unit", help="Only this unit (as printed: setting|answer set|parse policy|"
                             "refusal|rule), or every unit of a setting."),
    clustered: bool = typer.Option(False, "--clustered/--items", help="Resample the signal table's clusters (a "
                                   "run with bootstrap.cluster): the answer counts clusters."),
    ece_bins: int = typer.Option(10, "--ece-bins", help="Equal-width ECE bins."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON list of objects (the columns of "
                                 "--out; NaN and missing as null) and nothing else on stdout, instead of the table."),
    out: Path = typer.Option(None, "--out", help="Also write the rows to this CSV file, one row per unit with "
                             f"columns {', '.join(PLAN_COLUMNS)}.", show_default=False),
) -> None:
    """How many items (or clusters) the paired interval of a gap needs to exclude 0 with the given power.

    Measured on the pilot: the spread of the resampled gap at several subsample sizes, fitted to the 1/sqrt(n)
    law, then n = (c (z_{1-alpha/2} + z_power) / gap)^2. Says when the pilot is too small to tell. One row per
    unit of pairing that has both signals: a table, or with --json a JSON list on stdout; --out FILE.csv also
    writes the rows. Exit status 2 on bad input, one line naming the option.
    """
    if signals[0] == signals[1]:
        _bad(f"--signals {signals[0]!r} {signals[1]!r}: the two signals are the same (a signal against itself has "
             "no gap); give two different signals, e.g. --signals verbalized p_true")
    if out is not None and out.suffix != ".csv":
        _bad(f"--out {str(out)!r}: expected a .csv file")

    try:
        table = read_pilot(pilot, "cluster" if clustered else None)
    except AnalyzeInputError as exc:
        _bad(str(exc))
    have = sorted(set(table["signal"]))
    absent = [s for s in dict.fromkeys(signals) if s not in have]
    if absent:
        _bad(f"--signals {signals[0]!r} {signals[1]!r}: the pilot has no signal {' and no '.join(map(repr, absent))}; "
             f"its signals: {', '.join(have)}")
    try:
        df = plan_sizes(table, signals[0], signals[1], metric, gap, power=power, level=level,
                        n_resamples=resamples, seed=seed, clustered=clustered, unit=unit, n_bins=ece_bins)
    except (AnalyzeInputError, ValueError, KeyError) as exc:
        _bad(_as_flags(str(exc), signals, unit))
    if out is not None:
        try:
            write_frame_atomic(df, out)
        except OSError as exc:
            _bad(f"--out {str(out)!r}: cannot write: {exc.strerror or exc}")
    if as_json:
        typer.echo(json.dumps(plan_records(df), indent=1, allow_nan=False))
    else:
        _print_table(df, metric, signals, gap, power, level, clustered)
    if out is not None:
        typer.echo(f"wrote {len(df)} row(s) to {out}", err=as_json)


def plan_records(df) -> list[dict]:
    """The rows of :func:`confgrid.flows.analyze.plan_size.plan_sizes` as JSON-ready dicts (its columns, in order;
    NaN and missing values as None)."""
    return [{k: None if v is None or v is pd.NA or (isinstance(v, float) and not math.isfinite(v)) else v
             for k, v in row.items()} for row in df.to_dict(orient="records")]


#: the planner's words for this command's options (analysis/planner.py, analysis/metrics.py): message start -> flag
_FLAG_WORDS = (
    (re.compile(r"^(gap|power|level)=(\S+?)(:?) "), lambda m: f"--{m[1]} {m[2]}{m[3]} "),
    (re.compile(r"^n_resamples=(\S+?):"), lambda m: f"--resamples {m[1]}:"),
    (re.compile(r"^n_bins must be an integer >= 1, got (.+)$"),
     lambda m: f"--ece-bins {m[1]}: must be an integer >= 1"),
    (re.compile(r"^(unknown metric|metric) "), lambda m: f"--metric: {m[1]} "),
)


def _as_flags(msg: str, signals: tuple[str, str], unit: str | None) -> str:
    """A planner's error in this command's terms: the option it is about, then the message."""
    for pattern, repl in _FLAG_WORDS:
        if pattern.match(msg):
            return pattern.sub(repl, msg, count=1)
    pair = f"--signals {signals[0]!r} {signals[1]!r}"
    if msg.startswith("no unit or setting is called"):
        return f"--unit: {msg}"
    if msg.startswith("no unit matching"):
        return f"{pair} --unit {unit!r}: {msg}"
    if msg.startswith("no unit has both"):
        return f"{pair}: {msg}"
    return msg


def _bad(msg: str) -> NoReturn:
    fail(f"confgrid plan-size: {msg}")


def _print_table(df, metric: str, signals: tuple[str, str], gap: float, power: float, level: float,
                 clustered: bool) -> None:
    what = "clusters" if clustered else "items"
    Console(width=200).print(rich_table(
        f"{what} needed for {metric}({signals[0]}) - {metric}({signals[1]}) = {gap:g} to be resolved with power "
        f"{power:g} ({level:.0%} paired interval)",
        ("unit", f"pilot {what}", "pilot gap", "power now", "sd = c/sqrt(n): c", "slope", f"{what} needed", "status"),
        [(r.unit, r.n_pilot, f"{r.pilot_gap:.4f}", f"{r.pilot_power:.2f}" if r.pilot_power == r.pilot_power else "-",
          f"{r.c:.3f}" if r.c == r.c else "-", f"{r.slope:.2f}" if r.slope == r.slope else "-",
          r.n_required if r.status == "ok" else "-", r.status if r.status == "ok" else f"{r.status}: {r.reason}")
         for r in df.itertuples(index=False)]))
