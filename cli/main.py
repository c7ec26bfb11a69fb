"""The ``confgrid`` command line: run, demo, show, analyze, report; resume, resubmit --failed, status; log (MLflow,
later); submit and logs (Ray Jobs API); lifeeval (the LifeEval item set and its MAS); schema (the grid file's JSON
Schema, for editors).

Exit status (docs/guides/running.md): 0 done; 1 some shards failed (the rest is stored); 2 bad input or options,
nothing computed; 3 every result written but the MLflow record failed (``confgrid log OUT`` logs it later); 130
interrupted. ``run`` and ``demo`` end by writing OUT/report.html (``confgrid report``); a report that cannot be
drawn is a warning and leaves the exit status as it is.
"""

from __future__ import annotations

import json
import socket
import time
from importlib.resources import files
from pathlib import Path

import pandas as pd
import typer
from rich.console import Console

from confgrid.actors.calls import RequestCounts
from confgrid.cli.analyze import analyze_cmd
from confgrid.cli.console import fail, rich_table, setup_logging
from confgrid.cli.plan_size import plan_size_cmd
from confgrid.cli.show.tables import print_results
from confgrid.cluster.jobs import job_logs, job_status, submit_grid
from confgrid.flows.analyze.analysis import RECORD_FILE, log_analysis
from confgrid.flows.execute.capacity import CapacityError
from confgrid.flows.execute.ray_session import RayConnectError
from confgrid.flows.runner import DatasetError, ShardFailures, address_hint, log_run, run_grid
from confgrid.flows.spec.base import GridSpecError
from confgrid.flows.spec.grid import grid_json_schema, load_grid
from confgrid.flows.store.run_info import RunInfoError, read_run_info
from confgrid.flows.store.run_status import run_status
from confgrid.flows.store.run_store import ManifestDamaged, RunStore, read_manifest, write_frame_atomic, \
    write_text_atomic
from confgrid.flows.tracking import EXIT_TRACKING_FAILED, TrackingError
from confgrid.protocols.lifeeval import WINDOWS, item_rows
from confgrid.report import FigureOptions, write_report

# rich_markup_mode=None: help texts are plain text. Typer's default ("rich" when rich is installed) reads square
# brackets as markup and drops them from --help ("[k/B, (k+1)/B)" vanished from analyze's --ece-closure). Every
# command and sub-app takes the mode of this app (typer.main.get_group_from_info); tests/cli/test_cli_help.py checks
# that every help text is shown as written.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="confgrid: fix the answer, vary the measurement.")

#: Options several commands share (one OptionInfo may be the default of many commands' parameters).
VERBOSE = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")
RUN_TRACKING_URI = typer.Option(None, "--tracking-uri", help="MLflow tracking URI (default: the one an earlier run "
                                "into OUT was given, else $MLFLOW_TRACKING_URI, else sqlite:///OUT/mlflow.db).")

DEMO_GRID = files("confgrid.flows") / "grids" / "demo.yaml"


def _check_tracking_uri(uri: str | None) -> None:
    if uri and "://" not in uri and not uri.startswith("databricks"):
        fail(f"--tracking-uri {uri!r} is not a URI; use sqlite:///PATH/mlflow.db or http://HOST:5000")


def _tracking_failed(failure, out: Path) -> None:
    """The tracking failure of a finished command: one line and the `confgrid log` hint, exit 3."""
    fail(f"\n{failure.line()}\n{failure.hint(out)}", EXIT_TRACKING_FAILED)


def _cluster_call(fn, *args, **kwargs):
    """Run a Jobs API call; an unreachable or refusing cluster is a one-line error, exit 2."""
    try:
        return fn(*args, **kwargs)
    except (ConnectionError, OSError, RuntimeError, ValueError) as exc:
        fail(f"Ray Jobs API: {exc}")


def _load(grid_path: Path):
    try:
        return load_grid(grid_path)
    except GridSpecError as exc:
        fail(str(exc))


def _write_report(out: Path, log_mlflow: bool = True, opts=None) -> bool:
    """Draw the figures and write OUT/report.html; print its path. A failure is a warning (the results are
    written already) and returns False; the exit status is not changed."""
    try:
        res = write_report(out, opts, log_mlflow=log_mlflow)
    except Exception as exc:  # noqa: BLE001 - a view of finished results; never lose the run for it
        typer.echo(f"warning: report not written: {type(exc).__name__}: {exc} (retry with `confgrid report {out}`)",
                   err=True)
        return False
    typer.echo(f"Report: {res.path} ({len(res.figures.files)} figures in {res.path.parent / 'results' / 'figures'})")
    return not res.figures.failures


def _execute(spec, out: Path, address: str | None, tracking_uri: str | None, grid_text: str | None,
             only_failed: bool = False, resume: bool = False) -> None:
    _check_tracking_uri(tracking_uri)
    try:
        summary = run_grid(spec, out, address=address, tracking_uri=tracking_uri, grid_text=grid_text,
                           only_failed=only_failed, resume=resume)
    except KeyboardInterrupt:
        fail(f"\ninterrupted; every finished shard is stored; continue with: confgrid resume {out}"
             f"{address_hint(address)}", 130)
    except (DatasetError, CapacityError, GridSpecError, RayConnectError) as exc:
        fail(str(exc))
    except OSError as exc:  # a read-only or full output folder: one line (the traceback is in OUT/confgrid.log)
        what = f" {exc.filename!s}" if exc.filename else ""
        fail(f"cannot write the output directory {out}:{what}: {exc.strerror or exc}")
    except ShardFailures as exc:
        if exc.summary is not None and not exc.summary.metrics.empty:
            print_results(exc.summary.out_dir)
            _write_report(exc.summary.out_dir, log_mlflow=exc.summary.tracking_failure is None)
        typer.echo(f"\n{exc}", err=True)
        if exc.summary is not None and exc.summary.tracking_failure is not None:
            typer.echo(exc.summary.tracking_failure.line(), err=True)
        raise typer.Exit(1) from None
    if summary.metrics.empty:
        typer.echo(f"No complete setting to report yet (see `confgrid status {summary.out_dir}`).")
    else:
        print_results(summary.out_dir)
        _write_report(summary.out_dir, log_mlflow=summary.tracking_failure is None)
    if summary.tracking_failure is not None:
        _tracking_failed(summary.tracking_failure, summary.out_dir)
    if not summary.metrics.empty:
        typer.echo(f"\nOutputs in {summary.out_dir} (tables/, results/, manifest.json); MLflow parent run "
                   f"{summary.parent_run_id} in {summary.tracking_uri}")


@app.command()
def run(
    grid: Path = typer.Argument(..., help="Grid YAML file."),
    out: Path = typer.Option(None, "--out", help="Output directory (default runs/<grid file stem>)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join (default: start a local cluster)."),
    tracking_uri: str = RUN_TRACKING_URI,
    verbose: bool = VERBOSE,
) -> None:
    """Run a grid: generate, parse, grade, score, metrics with paired bootstrap intervals."""
    setup_logging(verbose)
    spec = _load(grid)
    _execute(spec, out or Path("runs") / grid.stem, address, tracking_uri, grid.read_text(encoding="utf-8"))


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Output directory."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join."),
    tracking_uri: str = RUN_TRACKING_URI,
    verbose: bool = VERBOSE,
) -> None:
    """Run the embedded default grid: the bundled smoke-test model on 452 bundled questions."""
    setup_logging(verbose)
    grid = Path(str(DEMO_GRID))
    _execute(_load(grid), out, address, tracking_uri, grid.read_text(encoding="utf-8"))


def _run_dir(out_dir: Path) -> None:
    if not (out_dir / "grid.yaml").is_file() or not (out_dir / "manifest.json").is_file():
        fail(f"{out_dir}: no grid.yaml and manifest.json; is this the output directory of a run?")


@app.command()
def resume(
    out_dir: Path = typer.Argument(..., help="Output directory of an earlier run."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join."),
    verbose: bool = VERBOSE,
) -> None:
    """Run whatever the run in OUT_DIR has not finished (done shards are reused, no model call for them)."""
    setup_logging(verbose)
    _run_dir(out_dir)
    _execute(_load(out_dir / "grid.yaml"), out_dir, address, None, None, resume=True)


@app.command()
def resubmit(
    out_dir: Path = typer.Argument(..., help="Output directory of an earlier run."),
    failed: bool = typer.Option(False, "--failed", help="Rerun only the shards the manifest records as failed."),
    address: str = typer.Option(None, "--address", help="Ray cluster address to join."),
    verbose: bool = VERBOSE,
) -> None:
    """Rerun the failed shards of a run (`--failed`), then the CPU stages and metrics."""
    setup_logging(verbose)
    if not failed:
        fail("resubmit needs --failed (to run everything not done, use `confgrid resume`)")
    _run_dir(out_dir)
    n = len(RunStore(out_dir).failed())
    typer.echo(f"{n} failed shard(s) recorded in {out_dir / 'manifest.json'}")
    if n == 0:
        typer.echo("nothing to resubmit (use `confgrid resume` to run shards that never ran)")
        return
    _execute(_load(out_dir / "grid.yaml"), out_dir, address, None, None, only_failed=True, resume=True)


@app.command()
def status(
    out_dir: Path = typer.Argument(None, help="Output directory of a run (shows its manifest)."),
    job: str = typer.Option(None, "--job", help="A submitted job id (with --address): show the job's status."),
    address: str = typer.Option(None, "--address", help="Jobs API address, e.g. http://HEAD:8265."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Show the shards of a run (status, attempts, error, host, seconds) and its replicas, or a submitted job's state."""
    if job:
        if not address:
            fail("status --job needs --address (the Jobs API, e.g. http://HEAD:8265)")
        st = _cluster_call(job_status, address, job)
        typer.echo(st)
        if st in ("FAILED", "STOPPED"):
            raise typer.Exit(1)
        return
    if out_dir is None:
        fail("give OUT_DIR, or --job ID --address URL")
    _run_dir(out_dir)
    try:
        data = read_manifest(out_dir / "manifest.json")
    except ManifestDamaged as exc:
        fail(f"{exc}; `confgrid resume {out_dir}` rebuilds it from the shard files", 1)
    st = run_status(data, socket.gethostname())
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        raise typer.Exit(st.exit_code)
    stale = set(st.stale)
    console = Console(width=200)
    console.print(rich_table(f"Shards of {out_dir}", ("stage", "shard", "status", "attempts", "restarts", "rows",
                                                       "seconds", "replica", "node", "key", "error"), [
        (r["stage"], r["setting"], "stale (driver gone)" if f"{r['stage']} {r['setting']}" in stale
         and r["status"] == "running" else r["status"] + (" (reused)" if r.get("reused") else ""),
         r["attempts"], r.get("restarts") or 0, r.get("rows") or "", r.get("seconds") or "", r.get("replica") or "",
         r.get("node_ip") or r.get("host") or "", r["key"][:12], (r.get("error") or "")[:120])
        for r in sorted(data["shards"], key=lambda r: (r["stage"], r["setting"]))]))
    typer.echo(", ".join(f"{k}: {v}" for k, v in sorted(st.counts.items())))
    typer.echo(st.driver_line)
    api = [r["requests"] for r in data["shards"] if r.get("requests")]
    if api:
        total = RequestCounts()
        for d in api:
            total.add(RequestCounts.from_dict(d))
        typer.echo(f"API requests (latest attempt of {len(api)} shard(s)): {total.line()}")
    reps = data.get("meta", {}).get("replicas") or []
    if reps:
        console.print(rich_table(
            "Replicas (what each holds, model loads, Ray restarts, seconds loading and computing)",
            ("replica", "state", "holds", "loads", "restarts", "load s", "busy s", "calls", "host", "node", "error"),
            [(r["replica"], r["state"], _holds(r), r["loads"], r["restarts"], f"{r['load_seconds']:.1f}",
              f"{r['busy_seconds']:.1f}", r["calls"], r.get("host") or "",
              f"{r.get('node_ip') or ''} {(r.get('node_id') or '')[:8]}".strip(), (r.get("error") or "")[:80])
             for r in reps]))
    if st.exit_code:
        hint = address_hint(((data.get("meta", {}).get("invocations") or [{}])[-1]).get("address"))
        fail(f"{st.failed} failed, {len(st.stale)} stale shard(s): `confgrid resume {out_dir}{hint}` (or "
             f"`confgrid resubmit {out_dir} --failed{hint}`) runs them", st.exit_code)


def _holds(replica: dict) -> str:
    """What a replica of ``meta.replicas`` reserves, for ``status``: ``4 GPUs``, ``1 GPU``, ``2 CPUs`` ("" before the
    field existed); a tensor-parallel replica on CPU adds its ranks' cores (``2 CPUs (0|1)``)."""
    gpus, cpus, bind = replica.get("gpus") or 0, replica.get("cpus") or 0, replica.get("cpu_bind")
    if gpus or not cpus:
        return f"{gpus:g} GPU" + ("s" if gpus != 1 else "") if gpus else ""
    return f"{cpus:g} CPU" + ("s" if cpus != 1 else "") + (f" ({bind})" if bind else "")


@app.command("log")
def log_cmd(
    out_dir: Path = typer.Argument(..., help="Output directory of a finished `confgrid run` or `confgrid analyze`."),
    tracking_uri: str = typer.Option(None, "--tracking-uri",
                                     help="MLflow tracking URI (default: the one the run or analysis was given, "
                                          "by option or $MLFLOW_TRACKING_URI; else, for a run, "
                                          "$MLFLOW_TRACKING_URI now; else sqlite:///OUT_DIR/mlflow.db)."),
    verbose: bool = VERBOSE,
) -> None:
    """Log a finished run or analysis to MLflow: a new parent run, a child run per setting, the result files.

    For a run whose tracking failed (exit status 3), or to copy a run into another store.
    """
    setup_logging(verbose)
    _check_tracking_uri(tracking_uri)
    if (out_dir / "grid.yaml").is_file():
        fn = log_run
    elif (out_dir / RECORD_FILE).is_file():
        fn = log_analysis
    else:
        fail(f"{out_dir}: neither grid.yaml (confgrid run) nor {RECORD_FILE} (confgrid analyze); "
             "is this the output directory of a finished run?")
    try:
        logged = fn(out_dir, tracking_uri)
    except (FileNotFoundError, GridSpecError) as exc:
        fail(str(exc))
    except TrackingError as exc:
        _tracking_failed(exc.failure, out_dir)
    typer.echo(f"Logged {out_dir}: MLflow parent run {logged.parent_run_id} (experiment {logged.experiment}) "
               f"in {logged.tracking_uri}")


def _finished_run(out_dir: Path) -> None:
    """Exit 2 with one line unless ``out_dir`` holds a finished run's results and a readable run-info record."""
    if not out_dir.is_dir():
        fail(f"{out_dir}: no such directory (give the output directory of a finished run)")
    if not (out_dir / "results" / "metrics.parquet").is_file():
        fail(f"{out_dir}: no results/metrics.parquet; is this the output directory of a finished run?")
    try:
        read_run_info(out_dir)
    except RunInfoError as exc:
        fail(str(exc))


@app.command()
def show(out_dir: Path = typer.Argument(..., help="Output directory of a finished run.")) -> None:
    """Print the result tables of a finished run."""
    _finished_run(out_dir)
    print_results(out_dir)


@app.command()
def report(
    out_dir: Path = typer.Argument(..., help="Output directory of a finished run (old or new)."),
    width: int = typer.Option(1200, "--width", help="Figure width in pixels."),
    smooth: bool = typer.Option(False, "--smooth", help="Add the smooth smECE curve (relplot) to each reliability "
                                "diagram (slower: a kernel fit per diagram)."),
    no_mlflow: bool = typer.Option(False, "--no-mlflow", help="Do not log the figures to the run's MLflow parent run."),
    verbose: bool = VERBOSE,
) -> None:
    """Redraw the figures of a finished run (results/figures/, PNG and SVG) and write OUT_DIR/report.html.

    Exit status: 0 written; 1 written, but some figure could not be drawn (named on stderr and in the page);
    2 not a run directory or a bad option.
    """
    setup_logging(verbose)
    _finished_run(out_dir)
    try:
        opts = FigureOptions(width_px=width, smooth=smooth)
    except ValueError as exc:
        fail(f"--width: {exc}")
    if not _write_report(out_dir, log_mlflow=not no_mlflow, opts=opts):
        raise typer.Exit(1)


@app.command()
def submit(
    grid: Path = typer.Argument(..., help="Grid YAML file (validated here before anything is sent)."),
    address: str = typer.Option(..., "--address", help="Jobs API of the head node, e.g. http://HEAD:8265."),
    out: str = typer.Option(None, "--out", help="Output directory on the cluster (shared storage for multi-node)."),
    python: str = typer.Option(None, "--python", help="Python on the cluster that has confgrid (default: this one's path)."),
    pip_install: bool = typer.Option(False, "--pip-install", help="pip-install the shipped project in the job's env."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", help="MLflow URI for the job (a server, for clusters)."),
    wait: bool = typer.Option(False, "--wait", help="Follow the job until it ends and print its logs."),
) -> None:
    """Submit `confgrid run GRID` to a Ray cluster through the Ray Jobs API."""
    _load(grid)
    _check_tracking_uri(tracking_uri)
    job_id = _cluster_call(submit_grid, grid, address, out=out, python=python, pip_install=pip_install,
                           tracking_uri=tracking_uri)
    typer.echo(f"submitted {job_id}; follow with: confgrid logs {job_id} --address {address}")
    if wait:
        while (st := job_status(address, job_id)) in ("PENDING", "RUNNING"):
            time.sleep(2)
        typer.echo(job_logs(address, job_id))
        typer.echo(f"job {job_id}: {st}")
        if st != "SUCCEEDED":
            raise typer.Exit(1)


@app.command()
def logs(
    job_id: str = typer.Argument(..., help="Submission id printed by `confgrid submit`."),
    address: str = typer.Option(..., "--address", help="Jobs API address, e.g. http://HEAD:8265."),
) -> None:
    """Print a submitted job's logs."""
    typer.echo(_cluster_call(job_logs, address, job_id))


@app.command()
def schema(
    out: Path = typer.Option(None, "--out", help="Write the schema to this file (default: print it)."),
) -> None:
    """Print (or write) the JSON Schema of a grid file, for editors that complete and check YAML.

    Point an editor at it with a first line `# yaml-language-server: $schema=PATH` in the grid file (the YAML
    language server of VS Code and others reads it). `confgrid run` validates more than the schema says: names
    registered in code, paths and the checks across sections.
    """
    text = json.dumps(grid_json_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        write_text_atomic(text, out)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"wrote the grid's JSON Schema to {out}")


@app.command("lifeeval")
def lifeeval_cmd(
    year: int = typer.Option(..., "--year", help="Calendar year of the period life table (bundled SSA table of the "
                             "2020 Trustees Report: 1900-2017 historical, 2018-2095 projected)."),
    window: str = typer.Option("inclusive", "--window", help="inclusive: |D - g| <= r (2r + 1 ages); official: the "
                               "study code's floor(g - r) <= D < g + r (2r ages)."),
    out: Path = typer.Option(..., "--out", help="CSV file to write, one row per item: sex, min_age, radius, "
                             "best_guess, mas."),
) -> None:
    """Write the LifeEval item set (study 002, 4.5) of a year with each item's best guess and MAS; no model is run."""
    if window not in WINDOWS:
        fail(f"--window {window!r}; allowed: {', '.join(WINDOWS)}")
    if out.suffix != ".csv":
        fail(f"--out {str(out)!r}: expected a .csv file")
    try:
        rows = item_rows(year, window=window)  # type: ignore[arg-type]
    except (ValueError, OSError) as exc:
        fail(str(exc))
    df = pd.DataFrame([(r.sex, r.min_age, r.radius, r.best_guess, r.mas) for r in rows],
                      columns=["sex", "min_age", "radius", "best_guess", "mas"])
    try:
        write_frame_atomic(df, out)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    by_radius = ", ".join(f"r={r} {m:.4f}" for r, m in df.groupby("radius", sort=True)["mas"].mean().items())
    typer.echo(f"wrote {len(df)} LifeEval items (year {year}, window {window}) to {out}; mean MAS "
               f"{df['mas'].mean():.4f} ({by_radius})")



app.command("analyze")(analyze_cmd)
app.command("plan-size")(plan_size_cmd)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
