"""Golden results: run every example grid and every ``confgrid analyze`` input at small sizes, and compare two runs.

Issue 39's rule "numbers do not move": a refactor keeps ``results/*.csv`` byte for byte, ``tables/*.parquet`` as
tables (schema and values, exact) and the manifest's shard keys. Run from the repository root::

    python tools/golden.py run OUT [--cases demo,sensitivity,...]   # every case into OUT/<case>/
    python tools/golden.py compare A B [--partial]                  # exit 0: identical; 1: the differences
    python tools/golden.py refresh                                  # rewrite tests/data/golden/ (tests/e2e/test_golden.py)

``refresh`` is for a change of numbers that is intended and named in its commit, nothing else.

Cases. Each grid of ``examples/`` and the demo grid (flows/grids/demo.yaml) is loaded as users load it
(``parse_grid`` with its folder as ``base_dir``) and only reduced in size (items, k, resamples; :data:`GRIDS`),
then run with ``run_grid`` on one local Ray cluster of 2 CPUs; MLflow logs into ``OUT/<case>/mlflow.db`` (nothing
compared reads it). ``confgrid analyze`` (:func:`confgrid.flows.analyze.analysis.analyze`, what the command
calls; tracking off) then reads each input road it has (:data:`ANALYSES`): a run's signal table, five columns as
CSV, JSON Lines and Parquet (in turn, in turn on Ray, whole file), graded correctness with clusters, an
uncertainty score, a model column (the comparison across models) with and without candidate ratings. The
five-column inputs are drawn here from a seeded generator and written into ``OUT/<case>/input.*``.

What is compared (:func:`artefacts`): every ``results/**/*.csv`` (bytes), every ``tables/*.parquet`` (schema
without metadata, then values; NaN equals NaN) and the set of (stage, setting, key, status, rows) of
``manifest.json``. Two runs of the same code (main at cfd3a87, 20 cases) were identical in all of these; what
differed between them, or is left out for another reason, is named in :data:`IGNORED`.

Time: ``run`` took 25 min at a load average of 20-30 on 2 cores (other suites beside it; sensitivity 10 min of
it), tests/e2e/test_golden.py 83 s at a load average of 1.4 (108 s near 3). real_small and real_small_fewshot (SmolLM2 through
transformers on CPU, 4 items a dataset; 8-11 min each here) run only when named in ``--cases``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from confgrid.actors.named_models import resolve_model
from confgrid.analysis.conventions import CONVENTIONS
from confgrid.flows.analyze.analysis import analyze

try:
    from confgrid.flows.analyze.spec import AnalyzeSpec
except ImportError:  # a branch before 234412b: analyze takes keywords (the golden tool runs on both)
    AnalyzeSpec = None
from confgrid.flows.runner import run_grid
from confgrid.flows.spec.grid import parse_grid

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DEMO = ROOT / "flows" / "grids" / "demo.yaml"
#: The expected files of tests/e2e/test_golden.py (written by ``refresh``).
TEST_DATA = ROOT / "tests" / "data" / "golden"
#: The shard keys of a run, as kept in a snapshot (the manifest itself holds times, hosts and run ids).
SHARD_KEYS = "shard_keys.json"

#: What is not compared: name -> why. Nothing in results/*.csv or tables/*.parquet differed between two runs.
IGNORED: dict[str, str] = {
    "manifest shards started, seconds, node_id": "differ run to run (times, Ray node ids)",
    "manifest shards host, node_ip, replica, attempts, restarts, reused, requests, error, extra, mlflow_run_id":
        "where and how a shard ran, not what it holds",
    "manifest shards sha256": "equal run to run, but a shard file's bytes follow how its table was built; the "
                              "tables are compared as tables",
    "manifest meta": "invocations, queued, replicas, MLflow run ids and absolute tracking URIs differ run to run",
    "results/*.md, *.json, report.*, figures": "derived from the CSVs (checklist.json, analyze.json hold paths and "
                                               "times)",
    "results/*.parquet": "the same tables as results/*.csv",
    "mlflow.db, mlartifacts/, confgrid.log": "tracking and logs: ids, times, paths",
}


# ---------------------------------------------------------------------------------------------------------------
# The grids


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _limits(raw: dict, limit: int | dict[str, int], resamples: int = 100) -> dict:
    for d in raw["datasets"]:
        d["limit"] = limit[d["name"]] if isinstance(limit, dict) else limit
    raw["bootstrap"]["resamples"] = resamples
    return raw


def _k(raw: dict, k: dict[str, int]) -> dict:
    for m in raw.get("methods", []):
        if m["id"] in k:
            m["k"] = k[m["id"]]
    return raw


def _demo(tiny: bool) -> dict:
    return _limits(_load(DEMO), 4 if tiny else 8)


def _sensitivity(tiny: bool) -> dict:
    raw = _limits(_load(EXAMPLES / "sensitivity.yaml"), 2 if tiny else 3)
    raw["probe"]["resamples"] = 100
    if tiny:  # every signal x 12 metrics is 47 MB of CSV and most of the time, even at 2 items
        raw["metrics"]["names"] = ["ece", "auroc"]
    return raw


def _methods(tiny: bool) -> dict:
    k = 2 if tiny else 4
    raw = _k(_limits(_load(EXAMPLES / "methods.yaml"), 4 if tiny else 8), {"self_consistency": k,
                                                                            "expected_accuracy": k})
    raw["execution"] = {"shard_size": 8}
    return raw


def _ace(tiny: bool) -> dict:
    raw = _k(_limits(_load(EXAMPLES / "ace.yaml"), 3 if tiny else 4), {"self_consistency": 2 if tiny else 3})
    if tiny:
        raw["datasets"] = raw["datasets"][:2]
    raw["comparison"]["bootstrap"] = 100
    return raw


def _capability(tiny: bool) -> dict:
    raw = _load(EXAMPLES / "capability.yaml")
    raw["datasets"] = [dict(raw["datasets"][0], limit=8 if tiny else 12), dict(raw["datasets"][1], limit=8)]
    raw["bootstrap"]["resamples"] = 100
    _k(raw, {"target": 4, "consistency": 4, "target_train": 2})
    raw["capability"].update(consistency_k=[2, 4], pass_at_k=[1, 4], budgets=[1, 2, 4], allocation_seeds=2)
    return raw


def _confidencebench(tiny: bool) -> dict:
    raw = _limits(_load(EXAMPLES / "confidencebench.yaml"), {"mmlu": 6, "mmlu_pro": 4} if tiny else
                  {"mmlu": 10, "mmlu_pro": 6})
    for a in raw["answer_sets"]:
        a["runs"] = 2
    return raw


def _hard_easy(tiny: bool) -> dict:
    return _limits(_load(EXAMPLES / "hard_easy.yaml"), {"lifeeval": 16, "mmlu": 8, "mmlu_pro": 6})


def _real_small(tiny: bool) -> dict:
    return _limits(_load(EXAMPLES / "real_small.yaml"), 4)


def _real_small_fewshot(tiny: bool) -> dict:
    raw = _limits(_load(EXAMPLES / "real_small_fewshot.yaml"), 4)
    raw["probe"]["resamples"] = 100
    return raw


@dataclass(frozen=True)
class Grid:
    """A grid case: the reduced grid (a raw mapping, as a user's YAML file loads; ``raw(tiny)``, tiny for
    tests/e2e/test_golden.py) and the folder it resolves in."""

    raw: Callable[[bool], dict]
    base_dir: Path
    #: a model the case needs that may be missing here (its resolver is called first; a failure skips the case)
    needs: str | None = None
    #: run only when named (``--cases``): SmolLM2 on CPU takes minutes a grid even at 4 items
    optional: bool = False


GRIDS: dict[str, Grid] = {
    "demo": Grid(_demo, DEMO.parent),
    "sensitivity": Grid(_sensitivity, EXAMPLES),
    "methods": Grid(_methods, EXAMPLES),
    "ace": Grid(_ace, EXAMPLES),
    "capability": Grid(_capability, EXAMPLES),
    "confidencebench": Grid(_confidencebench, EXAMPLES),
    "hard_easy": Grid(_hard_easy, EXAMPLES),
    "real_small": Grid(_real_small, EXAMPLES, needs="smollm2-135m-instruct", optional=True),
    "real_small_fewshot": Grid(_real_small_fewshot, EXAMPLES, needs="smollm2-135m-instruct", optional=True),
}


# ---------------------------------------------------------------------------------------------------------------
# The analyze inputs


def _five_columns(seed: int = 0, *, graded: bool = False, models: tuple[str, ...] = ()) -> pd.DataFrame:
    """Seeded rows (setting, item_id, signal, confidence, correct, cluster[, model]): 3 settings x 30 items x 3
    signals per model, correctness per answer (shared by its signals), the second model less accurate, a few rows
    of one signal left out (the alignment has something to say); values on a 0.01 grid (CSV and JSON keep them)."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, model in enumerate(models or ("",)):
        for setting in ("trivia", "mmlu", "truthful"):
            truth = rng.uniform(0.1, 0.9, 30)
            noisy = np.clip(truth - 0.2 * m + rng.normal(0.0, 0.15, 30), 0.0, 1.0)
            correct = noisy.round(2) if graded else (rng.uniform(size=30) < truth - 0.2 * m).astype(float)
            for signal in ("verbalized", "token", "p_true"):
                conf = np.clip(truth + rng.normal(0.0, 0.2, 30), 0.0, 1.0).round(2)
                for i in range(30):
                    if signal == "token" and setting == "mmlu" and i % 11 == 3:
                        continue
                    row = {"setting": setting, "item_id": f"q{i:02d}", "signal": signal,
                           "confidence": float(conf[i]), "correct": float(correct[i]), "cluster": f"c{i // 3}"}
                    if model:
                        row["model"] = model
                    rows.append(row)
    return pd.DataFrame(rows)


def _candidates(frame: pd.DataFrame) -> pd.DataFrame:
    """Candidate ratings (analysis/ace/candidates.py RATING_COLUMNS) of every item by both models, p_true."""
    out = []
    rng = np.random.default_rng(7)
    for (setting, item), _ in frame.groupby(["setting", "item_id"], sort=True):
        for surface, label, producers in (("gold", 1.0, "a|b"), ("wrong", 0.0, "b")):
            for rater in ("a", "b"):
                out.append({"dataset": setting, "item_id": item, "candidate": surface, "surface": surface,
                            "producers": producers, "label": label, "rater": rater, "method": "p_true",
                            "signal": round(float(rng.uniform(0.05, 0.95)), 2)})
    return pd.DataFrame(out)


def _write_input(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path, index=False, row_group_size=40)
    return path


@dataclass(frozen=True)
class Analysis:
    """An analyze case: where its input comes from and the options (keyword arguments of ``analyze``)."""

    #: (case folder) -> the input file, written there (or a run's table, read where it is)
    input: Callable[[Path, Path], Path]
    options: dict = field(default_factory=dict)
    #: the grid case whose output the input is (run first)
    after: str | None = None


def _signals_of(case: str) -> Callable[[Path, Path], Path]:
    return lambda out, root: root / case / "tables" / "signals.parquet"


def _file(name: str, **kw) -> Callable[[Path, Path], Path]:
    return lambda out, root: _write_input(_five_columns(**kw), out / name)


def _uncertain(out: Path, root: Path) -> Path:
    frame = _five_columns()
    frame["confidence"] = (-np.log(frame["confidence"].clip(0.01, 1.0))).round(4)
    return _write_input(frame, out / "input.csv")


def _with_candidates(out: Path, root: Path) -> Path:
    frame = _five_columns(models=("a", "b"))
    _write_input(_candidates(frame), out / "candidates.csv")
    return _write_input(frame.drop(columns="cluster"), out / "input.parquet")


_METRICS = "ece,auroc,aurc,brier,ece_15"
ANALYSES: dict[str, Analysis] = {
    # a run's signal table (flows/analyze/roads.py, entry signal_table): the run's units, statuses, alignment and comparisons
    "analyze_signal_table": Analysis(_signals_of("demo"), after="demo"),
    "analyze_signal_table_sensitivity": Analysis(_signals_of("sensitivity"), after="sensitivity"),
    # five columns, whole file: CSV and JSON Lines; with closures, bin confidences and the published conventions
    "analyze_csv": Analysis(_file("input.csv"), {"metrics": _METRICS}),
    "analyze_csv_conventions": Analysis(_file("input.csv"), {
        "metrics": "ece,brier", "ece_closure": "left,right", "ece_bin_confidence": "mean,midpoint",
        "ece_conventions": "all", "against": "verbalized"}),
    "analyze_jsonl": Analysis(_file("input.jsonl"), {"metrics": f"{_METRICS},smece", "interval": "bc"}),
    # Parquet: in turn (the default without a model column), in turn on Ray, the whole file (Jeffreys intervals)
    "analyze_parquet_in_turn": Analysis(_file("input.parquet"), {"metrics": _METRICS}),
    "analyze_parquet_in_turn_ray": Analysis(_file("input.parquet"), {"metrics": _METRICS, "use_ray": True,
                                                                       "num_workers": 2}),
    "analyze_parquet_whole": Analysis(_file("input.parquet"), {"metrics": _METRICS, "in_turn": False,
                                                                 "interval": "jeffreys"}),
    # graded correctness as soft labels, resampled by cluster; thresholded; an uncertainty score
    "analyze_graded_clusters": Analysis(_file("input.csv", graded=True), {"metrics": _METRICS,
                                                                         "group_col": "cluster"}),
    "analyze_graded_threshold": Analysis(_file("input.csv", graded=True), {"metrics": _METRICS, "threshold": 0.5,
                                                                          "signal_pairs": "verbalized:token"}),
    "analyze_uncertainty": Analysis(_uncertain, {"metrics": _METRICS, "uncertainty": "exp-neg"}),
    # a model column: the comparison across models (study 001), then with candidate ratings (the CA view)
    "analyze_models": Analysis(_file("input.csv", models=("a", "b")), {"metrics": "ece,brier,auroc",
                                                                       "pairs": "a:b:size",
                                                                       "comparison_resamples": 100}),
    "analyze_models_candidates": Analysis(_with_candidates, {"metrics": "ece,brier",
                                                             "comparison_resamples": 100}),
}

#: The cases of tests/e2e/test_golden.py (issue 39: at least the demo, sensitivity, methods, ACE, capability and
#: ConfidenceBench examples), at the sizes of :data:`GRIDS`.
TEST_CASES = ("demo", "sensitivity", "methods", "ace", "capability", "confidencebench", "analyze_signal_table",
              "analyze_csv", "analyze_parquet_in_turn", "analyze_models")


def all_cases() -> list[str]:
    """Every case, in running order (grids first)."""
    return [*GRIDS, *ANALYSES]


def default_cases() -> list[str]:
    """The cases of ``run`` without ``--cases``: all but the optional ones."""
    return [c for c in all_cases() if not (c in GRIDS and GRIDS[c].optional)]


# ---------------------------------------------------------------------------------------------------------------
# Running


def _skip_reason(grid: Grid) -> str | None:
    if grid.needs is None:
        return None
    try:
        resolve_model(grid.needs)
    except Exception as exc:  # noqa: BLE001 - any failure to find the model skips the case, saying why
        return f"model {grid.needs} unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def run_grid_case(name: str, out: Path, tiny: bool = False) -> None:
    """Run grid case ``name`` into ``out`` (Ray initialized by the caller)."""
    grid = GRIDS[name]
    spec = parse_grid(grid.raw(tiny), base_dir=grid.base_dir)
    summary = run_grid(spec, out)
    if summary.failed_shards:
        raise RuntimeError(f"{name}: {summary.failed_shards} failed shard(s); see {out / 'manifest.json'}")


def run_analysis_case(name: str, out: Path, root: Path) -> None:
    """Analyze case ``name`` into ``out`` (its input written there first; tracking off)."""
    case = ANALYSES[name]
    src = case.input(out, root)
    options = dict(case.options)
    if "ece_conventions" in options and options["ece_conventions"] == "all":
        options["ece_conventions"] = ",".join(CONVENTIONS.names())
    if name == "analyze_models_candidates":
        options["candidates"] = out / "candidates.csv"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if AnalyzeSpec is None:
            analyze(src, out, n_resamples=100, seed=0, track=False, **options)
        else:
            analyze(AnalyzeSpec(input=src, out=out, n_resamples=100, seed=0, track=False, **options))


def run(root: Path, cases: Iterable[str] | None = None, log: Callable[[str], None] = print, *,
        tiny: bool = False) -> dict[str, str]:
    """Run ``cases`` (default :func:`default_cases`) into ``root/<case>/``; returns case -> why it was skipped.
    ``tiny``: the grids at the sizes of tests/e2e/test_golden.py."""
    import ray  # lazy: compare and snapshot need no Ray (seconds to import)

    cases = list(cases or default_cases())
    unknown = [c for c in cases if c not in GRIDS and c not in ANALYSES]
    if unknown:
        raise SystemExit(f"golden: unknown case(s) {unknown}; choose from {', '.join(all_cases())}")
    for c in list(cases):  # an analysis of a run's table runs after that run
        after = ANALYSES[c].after if c in ANALYSES else None
        if after and after not in cases:
            cases.insert(0, after)
    cases = [c for c in all_cases() if c in cases]
    root.mkdir(parents=True, exist_ok=True)
    skipped: dict[str, str] = {}
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for name in cases:
            out = root / name
            if out.exists():
                shutil.rmtree(out)
            t0 = time.perf_counter()
            if name in GRIDS:
                why = _skip_reason(GRIDS[name])
                if why:
                    skipped[name] = why
                    log(f"golden: {name}: skipped ({why})")
                    continue
                run_grid_case(name, out, tiny)
            else:
                after = ANALYSES[name].after
                if after in skipped:
                    skipped[name] = f"needs {after}, skipped"
                    continue
                out.mkdir(parents=True)
                run_analysis_case(name, out, root)
            log(f"golden: {name}: {time.perf_counter() - t0:.1f} s")
    finally:
        if started_here:
            ray.shutdown()
    (root / "skipped.json").write_text(json.dumps(skipped, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return skipped


# ---------------------------------------------------------------------------------------------------------------
# Comparing


def shard_keys(case: Path) -> list[list] | None:
    """The sorted (stage, setting, key, status, rows) of a run's manifest (or a snapshot's shard_keys.json)."""
    kept = case / SHARD_KEYS
    if kept.is_file():
        return json.loads(kept.read_text(encoding="utf-8"))
    manifest = case / "manifest.json"
    if not manifest.is_file():
        return None
    shards = json.loads(manifest.read_text(encoding="utf-8"))["shards"]
    return sorted([r["stage"], r["setting"], r["key"], r["status"], r["rows"]] for r in shards)


def artefacts(case: Path, tables: str = "*") -> dict[str, Path]:
    """Compared files of a case folder by relative path: results/**/*.csv (or .csv.gz, a snapshot's, keyed without
    .gz) and tables/<tables>.parquet."""
    found = {}
    for pattern in ("results/**/*.csv", "results/**/*.csv.gz", f"tables/{tables}.parquet"):
        for p in sorted(case.glob(pattern)):
            found[p.relative_to(case).as_posix().removesuffix(".gz")] = p
    return found


def _bytes(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def _norm(v):
    """A value for exact comparison: NaN equals NaN, nested lists and dicts compared element by element."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def compare_csv(a: Path, b: Path, shown: int = 5) -> list[str]:
    """Byte comparison of two CSV files; on a difference, the columns present on one side and the first rows
    and columns that differ."""
    if _bytes(a) == _bytes(b):
        return []
    lines = []
    try:
        fa, fb = pd.read_csv(a, dtype=str, keep_default_na=False), pd.read_csv(b, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 - not readable as a table: say so, the bytes still differ
        return [f"bytes differ (not readable as CSV: {exc})"]
    only_a, only_b = [c for c in fa.columns if c not in fb.columns], [c for c in fb.columns if c not in fa.columns]
    if only_a:
        lines.append(f"columns only in A: {only_a}")
    if only_b:
        lines.append(f"columns only in B: {only_b}")
    common = [c for c in fa.columns if c in fb.columns]
    if common != [c for c in fb.columns if c in fa.columns]:
        lines.append(f"column order differs: A {list(fa.columns)} / B {list(fb.columns)}")
    if len(fa) != len(fb):
        lines.append(f"rows: A {len(fa)}, B {len(fb)}")
    n = min(len(fa), len(fb))
    diff = (fa[common].iloc[:n].to_numpy() != fb[common].iloc[:n].to_numpy())
    rows = np.flatnonzero(diff.any(axis=1))
    if rows.size:
        lines.append(f"{rows.size} of {n} rows differ; first ones (row: column A -> B):")
        for r in rows[:shown]:
            cols = [common[j] for j in np.flatnonzero(diff[r])]
            lines.append(f"  row {r + 2}: " + "; ".join(f"{c} {fa[c].iloc[r]!r} -> {fb[c].iloc[r]!r}"
                                                         for c in cols[:6]))
    if not lines:
        lines.append("bytes differ, cells equal (quoting, line ends or float text)")
    return lines


def compare_parquet(a: Path, b: Path, shown: int = 5) -> list[str]:
    """Two Parquet files as tables: schema without metadata, then values (NaN equals NaN, order kept)."""
    ta, tb = pq.read_table(a), pq.read_table(b)
    sa, sb = ta.schema.remove_metadata(), tb.schema.remove_metadata()
    lines = []
    if not sa.equals(sb):
        na, nb = set(sa.names), set(sb.names)
        if na - nb:
            lines.append(f"columns only in A: {sorted(na - nb)}")
        if nb - na:
            lines.append(f"columns only in B: {sorted(nb - na)}")
        for name in [n for n in sa.names if n in nb]:
            if not sa.field(name).type.equals(sb.field(name).type):
                lines.append(f"column {name}: type {sa.field(name).type} -> {sb.field(name).type}")
        if [n for n in sa.names if n in nb] != [n for n in sb.names if n in na]:
            lines.append("column order differs")
    if ta.num_rows != tb.num_rows:
        lines.append(f"rows: A {ta.num_rows}, B {tb.num_rows}")
    n = min(ta.num_rows, tb.num_rows)
    for name in [c for c in sa.names if c in set(sb.names)]:
        ca, cb = ta.column(name).slice(0, n), tb.column(name).slice(0, n)
        if ca.type.equals(cb.type) and ca.equals(cb):
            continue
        va, vb = [_norm(x) for x in ca.to_pylist()], [_norm(x) for x in cb.to_pylist()]
        bad = [i for i, (x, y) in enumerate(zip(va, vb, strict=True)) if x != y]
        if bad:
            lines.append(f"column {name}: {len(bad)} of {n} rows differ; first: "
                         + "; ".join(f"row {i}: {va[i]!r} -> {vb[i]!r}" for i in bad[:shown]))
    return lines


def compare_case(a: Path, b: Path) -> list[str]:
    """Every difference between case folders ``a`` and ``b`` (empty: identical)."""
    lines = []
    fa, fb = artefacts(a), artefacts(b)
    for rel in sorted(set(fa) | set(fb)):
        if rel not in fb:
            lines.append(f"{rel}: only in A")
        elif rel not in fa:
            lines.append(f"{rel}: only in B")
        else:
            diff = compare_csv(fa[rel], fb[rel]) if rel.endswith(".csv") else compare_parquet(fa[rel], fb[rel])
            lines += [f"{rel}: {d}" for d in diff[:1]] + [f"    {d}" for d in diff[1:]]
    ka, kb = shard_keys(a), shard_keys(b)
    if (ka is None) != (kb is None):
        lines.append(f"manifest: only in {'A' if kb is None else 'B'}")
    elif ka is not None and ka != kb:
        sa, sb = {tuple(k) for k in ka}, {tuple(k) for k in kb}
        lines.append(f"manifest shard keys: {len(sa - sb)} only in A, {len(sb - sa)} only in B")
        for tag, keys in (("A", sorted(sa - sb)), ("B", sorted(sb - sa))):
            for k in keys[:5]:
                lines.append(f"    only in {tag}: stage {k[0]}, setting {k[1]}, key {k[2][:16]}..., {k[3]}, "
                             f"{k[4]} rows")
    return lines


def _cases_in(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def compare(a: Path, b: Path, partial: bool = False) -> list[str]:
    """Every difference between golden folders ``a`` and ``b``, case by case (empty: identical); ``partial``: only
    the cases ``b`` has (a run with ``--cases``)."""
    lines = []
    skipped_a, skipped_b = (json.loads(p.read_text()) if p.is_file() else {}
                            for p in (a / "skipped.json", b / "skipped.json"))
    cases = _cases_in(b) if partial else _cases_in(a) | _cases_in(b)
    if partial:
        skipped_a = {k: v for k, v in skipped_a.items() if k in cases or k in skipped_b}
    for case in sorted(cases):
        if not (a / case).is_dir():
            lines.append(f"{case}: only in B")
        elif not (b / case).is_dir():
            lines.append(f"{case}: only in A")
        else:
            lines += [d if d.startswith(" ") else f"{case}/{d}" for d in compare_case(a / case, b / case)]
    for case in sorted(set(skipped_a) ^ set(skipped_b)):
        lines.append(f"{case}: skipped in {'A' if case in skipped_a else 'B'} only")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Snapshots (tests/data/golden)


#: The tables a snapshot keeps (the test data stays small): the signal table of a run.
SNAPSHOT_TABLES = "signals"


def snapshot(src: Path, dst: Path) -> None:
    """Copy what is compared of every case of ``src`` into ``dst``: results CSVs (gzipped, without a time stamp),
    tables/signals.parquet, and the manifest's shard keys as shard_keys.json."""
    if dst.exists():
        shutil.rmtree(dst)
    for case in sorted(_cases_in(src)):
        for rel, path in artefacts(src / case, SNAPSHOT_TABLES).items():
            target = dst / case / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel.endswith(".csv"):
                target.with_name(target.name + ".gz").write_bytes(gzip.compress(_bytes(path), mtime=0))
            else:
                shutil.copyfile(path, target)
        keys = shard_keys(src / case)
        if keys is not None:
            (dst / case / SHARD_KEYS).write_text(json.dumps(keys, indent=0) + "\n", encoding="utf-8")


def refresh(cases: Iterable[str] = TEST_CASES, dst: Path = TEST_DATA) -> None:
    """Rewrite the expected files of tests/e2e/test_golden.py: only when a change of numbers is intended, named in
    its commit."""
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        run(Path(tmp), cases, tiny=True)
        snapshot(Path(tmp), dst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/golden.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run every case (or --cases) into OUT/<case>/")
    p_run.add_argument("out", type=Path)
    p_run.add_argument("--cases", default=None, help=f"comma-separated, of: {', '.join(all_cases())} (default: "
                                                     "all but real_small*)")
    p_run.add_argument("--tiny", action="store_true", help="the sizes of tests/e2e/test_golden.py")
    p_cmp = sub.add_parser("compare", help="compare two golden folders; exit 1 on a difference")
    p_cmp.add_argument("a", type=Path)
    p_cmp.add_argument("b", type=Path)
    p_cmp.add_argument("--partial", action="store_true", help="compare only the cases B has (B ran with --cases)")
    sub.add_parser("refresh", help="rewrite tests/data/golden/ (an intended change of numbers only)")
    args = parser.parse_args(argv)
    if args.command == "run":
        t0 = time.perf_counter()
        skipped = run(args.out, args.cases.split(",") if args.cases else None, tiny=args.tiny)
        print(f"golden: wrote {args.out} in {time.perf_counter() - t0:.0f} s"
              + "".join(f"\n  skipped {k}: {v}" for k, v in skipped.items()))
        return 0
    if args.command == "compare":
        lines = compare(args.a, args.b, args.partial)
        if lines:
            print(f"golden: {args.a} and {args.b} differ:\n" + "\n".join(lines))
            return 1
        print(f"golden: {args.a} and {args.b} are identical ({len(_cases_in(args.b if args.partial else args.a))} "
              "cases)")
        return 0
    refresh()
    print(f"golden: rewrote {TEST_DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
