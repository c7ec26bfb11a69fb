"""``confgrid plan-size``: the items (or clusters) a comparison needs, from a pilot (flows/analyze/plan_size.py)."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["plan_size_cmd"]


def plan_size_cmd(
    pilot: Path = typer.Argument(..., metavar="OUT_DIR|FILE", show_default=False,
                                 help="A finished run's directory (its tables/signals.parquet), a signal table, or an "
                                      "analyze input (setting, item_id, signal, confidence, correct)."),
    gap: float = typer.Option(..., "--gap", help="The smallest gap metric(A) - metric(B) worth detecting, e.g. 0.02.",
                              show_default=False),
    metric: str = typer.Option("ece", "--metric", help="The metric of the gap (a registered metric with a weighted "
                                                       "kernel: ece, brier, auroc, aurc, ...)."),
    signals: tuple[str, str] = typer.Option(..., "--signals", help="The two signals A B.", show_default=False),
    power: float = typer.Option(0.8, "--power", help="Wanted probability that the interval excludes 0."),
    level: float = typer.Option(0.95, "--level", help="Interval level (the run's bootstrap.level)."),
    resamples: int = typer.Option(1000, "--resamples", help="Resamples per subsample size."),
    seed: int = typer.Option(0, "--seed", help="Seed of the subsamples."),
    unit: str = typer.Option(None, "--unit", help="Only this unit (as printed: setting|answer set|parse policy|"
                             "refusal|rule), or every unit of a setting."),
    clustered: bool = typer.Option(False, "--clustered/--items", help="Resample the signal table's clusters (a "
                                   "run with bootstrap.cluster): the answer counts clusters."),
    ece_bins: int = typer.Option(10, "--ece-bins", help="Equal-width ECE bins."),
) -> None:
    """How many items (or clusters) the paired interval of a gap needs to exclude 0 with the given power.

    Measured on the pilot: the spread of the resampled gap at several subsample sizes, fitted to the 1/sqrt(n)
    law, then n = (c (z_{1-alpha/2} + z_power) / gap)^2. Says when the pilot is too small to tell. One row per
    unit of pairing that has both signals; exit status 2 on bad input.
    """
    from rich.console import Console
    from rich.table import Table

    from confgrid.flows.analyze.plan_size import plan_sizes, read_pilot
    from confgrid.flows.analyze.read import AnalyzeInputError

    try:
        df = plan_sizes(read_pilot(pilot, "cluster" if clustered else None), signals[0], signals[1], metric, gap,
                        power=power, level=level,
                        n_resamples=resamples, seed=seed, clustered=clustered, unit=unit, n_bins=ece_bins)
    except (AnalyzeInputError, ValueError, KeyError) as exc:
        typer.echo(f"confgrid plan-size: {exc}", err=True)
        raise typer.Exit(2) from None
    what = "clusters" if clustered else "items"
    t = Table(title=f"{what} needed for {metric}({signals[0]}) - {metric}({signals[1]}) = {gap:g} to be resolved "
                    f"with power {power:g} ({level:.0%} paired interval)")
    for c in ("unit", f"pilot {what}", "pilot gap", "power now", "sd = c/sqrt(n): c", "slope", f"{what} needed",
              "status"):
        t.add_column(c)
    for r in df.itertuples(index=False):
        t.add_row(r.unit, str(r.n_pilot), f"{r.pilot_gap:.4f}", f"{r.pilot_power:.2f}" if r.pilot_power == r.pilot_power
                  else "-", f"{r.c:.3f}" if r.c == r.c else "-", f"{r.slope:.2f}" if r.slope == r.slope else "-",
                  str(r.n_required) if r.status == "ok" else "-",
                  r.status if r.status == "ok" else f"{r.status}: {r.reason}")
    Console(width=200).print(t)
