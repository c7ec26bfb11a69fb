"""The evaluation of examples/sensitivity.yaml, before and after the one evaluator (issue 20), in one run.

The grid runs once (fixture models, every shard stored in ``--run``); then each measurement is a fresh Python
process that rebuilds the run's units from the stored shards (no Ray, no model) and times only the evaluation:

* before: the code of ``--before`` (default f8b0fec, the last commit with four evaluation paths), checked out
  with ``git worktree`` into a temporary folder and imported from there: ``evaluate(spec, units)`` (the answer's
  signals, one bootstrap per setting) plus ``evaluate_methods(spec, method_signals)`` (each method on its own);
* after: this checkout: ``evaluate(spec, units, method_signals)`` (one signal table, one evaluator, every signal
  and gap on one resample stream per unit).

Peak memory is the growth of the process's high-water mark (``ru_maxrss``) across the evaluation call; time is
``time.perf_counter`` around it, best of ``--repeat``. Ratios after/before are printed (target: <= 1 for time
and memory, issue 20).

    .venv/bin/python benchmarks/evaluate_bench.py                  # run the grid (minutes), then measure
    .venv/bin/python benchmarks/evaluate_bench.py --run runs/sens  # reuse a finished run directory
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "f8b0fec"
#: the top-level folders that are subpackages of confgrid (pyproject's package-dir)
SUBPACKAGES = ("flows", "actors", "protocols", "analysis", "cluster", "report")

CHILD = r"""
import inspect, json, resource, sys, time, warnings
warnings.simplefilter("ignore")
from pathlib import Path
import confgrid
from confgrid.flows.runner import _load_items
try:  # the layout by concept (issue 20 item 4)
    import confgrid.flows.evaluate.run_evaluation as E
    from confgrid.flows.tables.assemble import assemble, shard_table
    from confgrid.flows.execute.executor import execute
    from confgrid.flows.evaluate.methods import method_tables
    from confgrid.flows.plan.grid_plan import GridPlan
    from confgrid.flows.spec.grid import load_grid
    from confgrid.flows.store.run_store import RunStore
except ImportError:  # the flat flows/ of the "before" commit
    import confgrid.flows.evaluate as E
    from confgrid.flows.assemble import assemble, shard_table
    from confgrid.flows.execute import Executor

    def execute(spec, store, plan, build):  # that commit's executor class (its run fills ex.done)
        ex = Executor(spec, store, build)
        ex.run(plan)
        return ex
    from confgrid.flows.methods import method_tables
    from confgrid.flows.plan import GridPlan
    from confgrid.flows.spec import load_grid
    from confgrid.flows.store import RunStore

run = Path(sys.argv[1]); repeat = int(sys.argv[2])
spec = load_grid(sys.argv[3])  # the grid file itself: the run's resolved grid.yaml has keys an older commit lacks
items = {d.name: _load_items(d) for d in spec.datasets}
plan = GridPlan(spec, items)
store = RunStore(run)
ex = execute(spec, store, plan, lambda sh, outs: shard_table(plan, sh, outs))
done = ex.done
assert ex.counters.computed == 0, "the run directory is not complete"
asm = assemble(plan, done, ex.submitted)
mt = method_tables(plan, done, ex.submitted)
one = "method_signals" in inspect.signature(E.evaluate).parameters
best, grew = float("inf"), 0
for _ in range(repeat):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if one:
        ev = E.evaluate(spec, asm.units, mt.signals)
    else:
        from confgrid.flows.methods import evaluate_methods
        ev = E.evaluate(spec, asm.units)
        evaluate_methods(spec, mt.signals)
    best = min(best, time.perf_counter() - t0)
    grew = max(grew, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
rows = len(ev.metrics) + len(ev.gaps) + len(ev.shifts)
print(json.dumps({"seconds": best, "peak_growth_mib": grew / 1024, "rows": rows, "units": len(asm.units),
                  "confgrid": confgrid.__file__}))
"""


def _tree_of(commit: str, where: Path) -> Path:
    """A folder importable as ``confgrid`` at ``commit``: a git worktree plus the package-dir mapping as links."""
    wt = where / "src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), commit], check=True,
                   capture_output=True)
    pkg = where / "path" / "confgrid"
    pkg.mkdir(parents=True)
    for f in (wt / "confgrid").iterdir():
        (pkg / f.name).symlink_to(f)
    for sub in SUBPACKAGES:
        if (wt / sub).is_dir():
            (pkg / sub).symlink_to(wt / sub)
    return where / "path"


def _measure(run: Path, repeat: int, path: Path | None, grid: Path) -> dict:
    """One child process on a copy of the run folder (its manifest is rewritten by the reuse pass)."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="evalbench-copy-") as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("mlflow.db*", "mlartifacts", "results"))
        # sys.path comes before the editable install's finder (appended to sys.meta_path)
        code = CHILD if path is None else f"import sys; sys.path.insert(0, {str(path)!r})\n" + CHILD
        out = subprocess.run([sys.executable, "-c", code, str(copy), str(repeat), str(grid.resolve())],
                             env=dict(os.environ),
                             check=False, capture_output=True, text=True, cwd=tempfile.gettempdir())
        if out.returncode != 0:
            raise RuntimeError(f"the measuring process failed ({'before' if path else 'after'}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=None, help="A finished run of the grid (default: run it now).")
    ap.add_argument("--grid", type=Path, default=ROOT / "examples" / "sensitivity.yaml")
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    run = a.run or Path(tempfile.mkdtemp(prefix="evalbench-")) / "run"
    if not (run / "manifest.json").is_file():
        t0 = time.perf_counter()
        subprocess.run([str(Path(sys.executable).with_name("confgrid")), "run", str(a.grid), "--out", str(run)],
                       check=True)
        print(f"grid run in {time.perf_counter() - t0:.0f} s: {run}", flush=True)
    with tempfile.TemporaryDirectory(prefix="evalbench-before-") as tmp:
        path = _tree_of(a.before, Path(tmp))
        try:
            before = _measure(run, a.repeat, path, a.grid)
            after = _measure(run, a.repeat, None, a.grid)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "src")],
                           capture_output=True)
    assert "evalbench-before" in before["confgrid"] and "evalbench-before" not in after["confgrid"], (before, after)
    print(json.dumps({"before": before, "after": after,
                      "time_ratio": after["seconds"] / before["seconds"],
                      "memory_ratio": after["peak_growth_mib"] / max(before["peak_growth_mib"], 1e-9)}, indent=1))


if __name__ == "__main__":
    main()
