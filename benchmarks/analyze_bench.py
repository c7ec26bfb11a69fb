"""``confgrid analyze`` on millions of rows: reading + checking, and the whole command, before and after (issue 13).

Each measurement runs in its own Python process (``python analyze_bench.py --child ...``) so that its peak
RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, imports included) is its own; the parent times the whole
process (``time.perf_counter`` around ``subprocess.run``: interpreter start, imports, work). "before" is
the path of commit ``--before`` (default 5a5d572, the commit before the column-wise reader) measured in the same
run: that commit's whole source tree, exported from git into a temporary folder and imported from there
(its package folders linked under one ``confgrid`` package, as its pyproject's package-dir maps them), with
this environment's installed libraries.

    .venv/bin/python benchmarks/analyze_bench.py                        # 8,000,000 rows, before and after
    .venv/bin/python benchmarks/analyze_bench.py --rows 200000          # quick check
    .venv/bin/python benchmarks/analyze_bench.py --rows 20000000 --no-before --what analyze   # out of core

Data (synthetic, seed 0): ``--settings`` settings (default 8) x rows/settings items, one signal ``tok``,
confidence uniform in [0, 1] (float64), correct ~ Bernoulli(confidence) as 0/1; Parquet written by pyarrow
(row groups of 1,048,576 rows, the settings one after another); the same rows as CSV for the reading check.
Targets (issue 13): 8M rows read and checked < 10 s and < 2 GB; ``confgrid analyze --metrics ece,brier
--bootstrap 10`` on the Parquet file < 25 s and < 2.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "5a5d572"


def make_data(rows: int, settings: int, out: Path, csv: bool) -> tuple[Path, Path | None]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    stem = f"rows_{rows}_settings_{settings}"
    pq_path, csv_path = out / f"{stem}.parquet", (out / f"{stem}.csv") if csv else None
    if pq_path.exists() and (csv_path is None or csv_path.exists()):
        return pq_path, csv_path
    rng = np.random.default_rng(0)
    per = rows // settings
    writer = None
    for s in range(settings):
        conf = rng.random(per)
        table = pa.table({
            "setting": pa.array(np.full(per, f"model{s}/data"), pa.string()),
            "item_id": pa.array(np.char.add("q", np.arange(per).astype(str)), pa.string()),
            "signal": pa.array(np.full(per, "tok"), pa.string()),
            "confidence": conf, "correct": (rng.random(per) < conf).astype(np.float64)})
        if writer is None:
            writer = pq.ParquetWriter(pq_path, table.schema)
        writer.write_table(table, row_group_size=1 << 20)
    writer.close()
    if csv_path is not None:
        pcsv.write_csv(pq.read_table(pq_path), csv_path,
                       pcsv.WriteOptions(quoting_style="none"))
    return pq_path, csv_path


def _before_tree(commit: str, where: Path) -> Path:
    """Export ``commit``'s source tree into ``where`` and return a folder whose ``confgrid`` package is that tree
    (each package folder of its pyproject's package-dir linked in place), for ``PYTHONPATH``."""
    import re
    import tarfile
    import tomllib

    src, root = where / f"tree-{commit}", where / f"pkg-{commit}"
    if not (root / "confgrid").is_dir():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
        import io

        tarfile.open(fileobj=io.BytesIO(archive)).extractall(src, filter="data")
        dirs = tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
        pkg = root / "confgrid"
        pkg.mkdir(parents=True, exist_ok=True)
        for f in (src / dirs["confgrid"]).glob("*.py"):
            (pkg / f.name).symlink_to(f)
        for name, folder in sorted(dirs.items()):
            if re.fullmatch(r"confgrid\.\w+", name):  # a top-level subpackage; nested ones come with their folder
                (pkg / name.split(".")[1]).symlink_to(src / folder)
    return root


def child(args: argparse.Namespace) -> None:
    import importlib

    t0 = time.perf_counter()
    if args.child == "read":
        if args.impl == "before":  # that commit's module, by its name then
            rows, _ = importlib.import_module("confgrid.flows." + "analyze_input").read_input(args.file)
        else:
            from confgrid.flows.analyze.input import read_rows

            rows = read_rows(args.file).frame
        n = len(rows)
    else:
        try:
            app = importlib.import_module("confgrid.cli.main").app
        except ModuleNotFoundError:  # the commit before the cli/ package
            app = importlib.import_module("confgrid.flows." + "cli").app

        out = tempfile.mkdtemp(prefix="analyze_bench_")
        extra = [] if args.impl == "before" else (["--whole-file"] if args.whole_file else [])
        try:
            app(["analyze", str(args.file), "--out", out, "--metrics", "ece,brier", "--bootstrap", "10", *extra],
                standalone_mode=False)
        finally:
            subprocess.run(["rm", "-rf", out], check=False)
        n = -1
    work = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KiB -> GiB
    print(json.dumps({"work_s": work, "peak_gib": peak, "rows": n}))


def measure(what: str, impl: str, file: Path, args: argparse.Namespace, whole_file: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--impl", impl, "--file", str(file)]
    if whole_file:
        cmd.append("--whole-file")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false")
    if impl == "before":  # that commit's tree first on the path (the editable install's finder comes after it)
        env["PYTHONPATH"] = os.pathsep.join([str(_before_tree(args.before, args.dir)), env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{what}/{impl} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["wall_s"] = wall
    print(f"  {what} {impl}{' --whole-file' if whole_file else ''} {file.name}: {wall:.1f} s, "
          f"{res['peak_gib']:.2f} GiB peak (load {os.getloadavg()[0]:.1f})", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=8_000_000)
    ap.add_argument("--settings", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "confgrid_analyze_bench")
    ap.add_argument("--what", default="read,analyze", help="read, analyze or both")
    ap.add_argument("--no-before", action="store_true", help="only the current path")
    ap.add_argument("--no-csv", action="store_true", help="read only the Parquet file")
    ap.add_argument("--no-whole-file", action="store_true", help="skip analyze --whole-file")
    ap.add_argument("--before", default=BEFORE, help="commit of today's path")
    ap.add_argument("--child", choices=["read", "analyze"], help=argparse.SUPPRESS)
    ap.add_argument("--impl", choices=["before", "after"], help=argparse.SUPPRESS)
    ap.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--whole-file", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    what = args.what.split(",")
    t0 = time.perf_counter()
    pq_path, csv_path = make_data(args.rows, args.settings, args.dir, csv="read" in what and not args.no_csv)
    print(f"data: {args.rows:,} rows, {args.settings} settings, one signal ({time.perf_counter() - t0:.1f} s); "
          f"load average before: {os.getloadavg()}", flush=True)
    impls = ["after"] if args.no_before else ["before", "after"]
    runs = []
    if "read" in what:
        for f in [pq_path, *([csv_path] if csv_path else [])]:
            for impl in impls:
                runs.append(("read + check", f.suffix[1:], impl, measure("read", impl, f, args)))
    if "analyze" in what:
        for impl in impls:
            runs.append(("analyze ece,brier x10", "parquet", impl, measure("analyze", impl, pq_path, args)))
        if not args.no_whole_file:
            runs.append(("analyze ece,brier x10", "parquet", "after --whole-file",
                         measure("analyze", "after", pq_path, args, whole_file=True)))
    print(f"{'what':24} {'input':8} {'path':20} {'process s':>10} {'work s':>8} {'peak GiB':>9}")
    for w, fmt, impl, r in runs:
        print(f"{w:24} {fmt:8} {impl:20} {r['wall_s']:10.1f} {r['work_s']:8.1f} {r['peak_gib']:9.2f}")
    if not args.no_before:
        for w, fmt in dict.fromkeys((w, f) for w, f, _, _ in runs):
            b = next(r for x, f, i, r in runs if (x, f, i) == (w, fmt, "before"))
            a = next(r for x, f, i, r in runs if (x, f, i) == (w, fmt, "after"))
            print(f"ratio before/after, {w} {fmt}: time {b['wall_s'] / a['wall_s']:.1f}x, "
                  f"memory {b['peak_gib'] / a['peak_gib']:.1f}x")
    for w, fmt, impl, r in runs:
        if impl != "after":
            continue
        lim = (10.0, 2.0) if w.startswith("read") else (25.0, 2.5)
        ok = r["wall_s"] < lim[0] and r["peak_gib"] < lim[1]
        print(f"target {w} {fmt} < {lim[0]:g} s and < {lim[1]:g} GB: {'MET' if ok else 'NOT MET'}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
