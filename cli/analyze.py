"""``confgrid analyze``: the command over flows/analyze/analysis.py ``analyze`` (options, messages, exit status).

Exit status: 0 done; 2 bad input or options (every bad row named, nothing written); 3 every file written but the
MLflow record failed (``confgrid log OUT`` logs it later).
"""

from __future__ import annotations

import inspect
import logging
import sys
import warnings
from pathlib import Path
from types import GenericAlias
from typing import Any, get_args

import pandas as pd
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.console import Console

from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.cli.console import fail, setup_logging
from confgrid.cli.show.ace import print_ace
from confgrid.flows.analyze.analysis import EXPERIMENT, TABLES, TrackingWarning, analyze
from confgrid.flows.analyze.input import AnalyzeWarning
from confgrid.flows.analyze.read import FLAGS as COLUMN_FLAGS
from confgrid.flows.analyze.read import HOLDS, AnalyzeInputError
from confgrid.flows.analyze.spec import FLAGS as SPEC_FLAGS
from confgrid.flows.analyze.spec import AnalyzeSpec
from confgrid.flows.evaluate.outputs import closure_lines, interval_notes
from confgrid.flows.spec.estimation import VerdictSpec
from confgrid.flows.tracking import EXIT_TRACKING_FAILED

__all__ = ["analyze_cmd"]


#: the fields of AnalyzeSpec that are not one option each: INPUT is the argument, columns the --*-col flags,
#: verdicts one flag per threshold; chunk_size has no flag
_NOT_OPTIONS = ("input", "columns", "verdicts", "chunk_size")


def _cli_type(annotation: Any) -> type:
    """The type a flag of a field takes: the field's (without None), or str for lists (comma-separated)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    t = args[0] if args and not isinstance(annotation, GenericAlias) else annotation
    return t if t in (bool, int, float, str, Path) else str


def _help(field: FieldInfo) -> str:
    """A field's description (flows/analyze/spec.py: the one source of every flag's help), with its default."""
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    shown = ",".join(default) if isinstance(default, tuple) else ("on" if default else "off") \
        if isinstance(default, bool) else default
    return field.description + ("" if shown is None or shown == "" or isinstance(default, BaseModel)
                                else f" Default: {shown}.")


def _parameters() -> list[inspect.Parameter]:
    """The command's parameters, from the fields of AnalyzeSpec, its roles' columns and its verdicts' thresholds;
    every flag defaults to None (not given: the spec's default, or the --spec file's value)."""
    def option(name: str, cli_type: type, flag: str, text: str) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=cli_type | None,
                                 default=typer.Option(None, flag, help=text, show_default=False))

    fields = AnalyzeSpec.model_fields
    out = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
           inspect.Parameter("input", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                             default=typer.Argument(None, metavar="[INPUT]", show_default=False,
                                                    help=fields["input"].description)),
           option("spec_file", Path, "--spec", "A YAML file of the options (keys: the fields of flows/analyze/spec.py "
                  "AnalyzeSpec, e.g. input, out, metrics, n_resamples, group_col); flags given on the command line "
                  "override its values.")]
    out += [option(n, _cli_type(f.annotation), SPEC_FLAGS[n], _help(f)) for n, f in fields.items()
            if n not in _NOT_OPTIONS]
    out += [option(_COLUMNS[role], str, flag, f"Column holding {HOLDS[role]}. Default: {role}.")
            for role, flag in COLUMN_FLAGS.items() if role in _COLUMNS]
    out += [option(n, f.annotation, "--" + n.replace("_", "-"), "Verdicts: " + _help(f)[0].lower() + _help(f)[1:])
            for n, f in VerdictSpec.model_fields.items()]
    return out


#: the column flags (parameter names) of the roles other than group (that one is the field group_col)
_COLUMNS = {r: f.lstrip("-").replace("-", "_") for r, f in COLUMN_FLAGS.items() if r != "group"}


def _spec(values: dict[str, Any]) -> AnalyzeSpec:
    """The :class:`AnalyzeSpec` of the flags given; with ``--spec FILE``, the file's with the flags on top."""
    given = {n: v for n, v in values.items() if v is not None}
    fields = {n: v for n, v in given.items() if n in AnalyzeSpec.model_fields}
    columns = {role: given[n] for role, n in _COLUMNS.items() if n in given}
    verdicts = {n: given[n] for n in VerdictSpec.model_fields if n in given}
    fields.update({"columns": columns} if columns else {}, **({"verdicts": verdicts} if verdicts else {}))
    if values.get("spec_file") is None:
        return AnalyzeSpec(**fields)
    return AnalyzeSpec.from_yaml(values["spec_file"], **fields)


def analyze_cmd(ctx: typer.Context, **values: Any) -> None:
    """Metrics with paired bootstrap intervals, and paired gaps between signals, of outputs from anywhere.

    INPUT has one row per (setting, item_id, signal) with columns setting, item_id, signal, confidence, correct
    (rename with the --*-col flags). Every bad row is reported by line (CSV: the header is line 1; Parquet: 0-based
    row) and nothing is written (exit status 2). Within a setting, signals are compared on the items all of them
    scored; items left out are counted in OUT/results/alignment.csv. --group-col COL resamples the clusters of COL
    (e.g. the question of several generations) with all their items, for intervals that allow for rows that are not
    independent.

    Writes OUT/results/metrics.csv (a row per setting, signal and metric: point, lo, hi, n), OUT/results/gaps.csv (gap
    = metric(signal_a) - metric(signal_b); the pairs: see --against and --signal-pairs), OUT/results/shifts.csv,
    OUT/results/alignment.csv, OUT/results/edges.csv, OUT/results/closure.csv, OUT/results/verdicts.csv, a .parquet
    copy of each, OUT/results/run_info.json (bins, closures, level: what show and report read), OUT/analyze.json (what
    `confgrid log OUT` logs) and an MLflow parent run (experiment confgrid/analyze; store: --tracking-uri, else
    $MLFLOW_TRACKING_URI, else OUT/mlflow.db) with one child run per setting. With a model column, the comparison
    across models adds OUT/results/ace_*.csv. If the MLflow store fails, every file is still written and the exit
    status is 3; log them later with `confgrid log OUT`.
    """
    setup_logging(False)  # also: an unreachable tracking server fails in seconds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalyzeWarning)
        warnings.simplefilter("always", UndefinedMetricWarning)
        try:
            spec = _spec(values)  # the flags, a --spec file or both
            if spec.use_ray:  # Ray Data without progress bars or an INFO line per execution (the table says it all)
                import ray.data  # lazy: Ray loads only when the bootstrap is spread over it

                ray.data.DataContext.get_current().enable_progress_bars = False
                logging.getLogger("ray.data").setLevel(logging.WARNING)
                logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
            result = analyze(spec)
        except AnalyzeInputError as exc:
            _echo_warnings(caught)
            fail(f"confgrid analyze: {exc}")
    _echo_warnings(caught)
    tables, spec, out = result.tables, result.spec, result.spec.out
    m = tables["metrics"]
    typer.echo(f"{m['setting'].nunique()} setting(s), {len(m)} (setting, signal, metric) rows, "
               f"{len(tables['gaps'])} gap rows, {spec.n_resamples} {result.resampled}.")
    if len(m) <= 60:
        shown = ["setting", "signal", "metric", "point", "lo", "hi", "n", "interval",
                 *(["n_clusters"] if spec.group_col else [])]
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            typer.echo(m[shown].to_string(index=False))
    if result.n_graded and spec.threshold is None:
        typer.echo(f"note: correctness is graded ({result.n_graded} values strictly between 0 and 1): AUROC and "
                   "AURC use them as soft labels (an item counts as correct with weight y and wrong with 1 - y); "
                   "--threshold T makes correct >= T a 1 and the rest 0.")
    elif spec.threshold is not None:
        typer.echo(f"note: correctness thresholded at {spec.threshold:g} (correct >= {spec.threshold:g} is 1, "
                   "else 0).")
    res = out / "results"
    for line in closure_lines(tables.get("closure")):
        typer.echo(f"note: {line} (results/closure.csv)")
    for line in interval_notes(m):
        typer.echo(f"note: {line}")
    typer.echo(f"Wrote {', '.join(str(res / f'{t}.csv') for t in TABLES)} (+ .parquet), {res / 'run_info.json'}")
    if "ace_gaps" in tables:
        print_ace(res, Console(width=200))
        typer.echo(f"Wrote the comparison across models: {res}/ace_*.csv (+ .parquet, .md)")
    if result.run_id:
        typer.echo(f"MLflow parent run {result.run_id} (experiment {EXPERIMENT}) in {result.tracking_uri}")
    failure = result.tracking_failure
    if failure is not None:
        fail(f"confgrid analyze: {failure.line()}\n{failure.hint(out)}", EXIT_TRACKING_FAILED)


analyze_cmd.__signature__ = inspect.Signature(_parameters())  # what typer reads: the options above
analyze_cmd.__annotations__ = {p.name: p.annotation for p in analyze_cmd.__signature__.parameters.values()}


def _echo_warnings(caught: list[warnings.WarningMessage]) -> None:
    shown = set()
    for w in caught:
        if issubclass(w.category, TrackingWarning):
            continue  # said once, with the exit status, at the end
        if issubclass(w.category, (AnalyzeWarning, UndefinedMetricWarning)):
            msg = str(w.message)
            if msg not in shown:
                shown.add(msg)
                typer.echo(f"warning: {msg}", err=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, file=sys.stderr)
