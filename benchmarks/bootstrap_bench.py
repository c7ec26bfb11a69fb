"""Benchmark of the paired bootstrap in the shape of study 000's main analysis.

Not a test. Default size (issue 4, item 9): 20 settings x n = 1,000 items x
{ECE, AUROC, AURC} x 10,000 paired resamples, synthetic data. "3 contexts x 2
signals" is read as the two signals of the study (verbalized and token) with
the token score read in 3 contexts, so each setting has S = 4 signal rows:
verbalized + token(bare) + token(Answer:) + token(Guess:), every gap and
shift of the setting being a difference of those rows on the same resamples.
``--signals 6`` runs the other reading (both signals in every context).

Paths timed, on the same resample indices in the same process:

* vectorized: :func:`confgrid.analysis.bootstrap.paired_bootstrap` per setting;
* naive: per resample and signal, ``sklearn.metrics.roc_auc_score`` + a numpy
  ECE + AURC (:func:`confgrid.analysis.metrics.aurc`) in a Python loop; run
  on ``--naive-resamples`` resamples of ``--naive-settings`` settings and
  extrapolated linearly to the full size (the output says so);
* Ray Data (hook): :func:`run_ray` calls
  ``confgrid.flows.evaluate.bootstrap_ray.bootstrap_settings_ray`` with 1 and 2
  workers if that module exists; otherwise it is reported as skipped.

Each path prints wall time (``perf_counter``), CPU time (``process_time``;
for Ray, the driver plus every process of the Ray session, read from
``/proc``) and peak memory (``ru_maxrss``; for Ray also the largest
``VmHWM`` of its processes), then the ratios and MET / NOT MET per target,
with the load average: on a shared machine wall times depend on the other
processes, CPU times much less. The vectorized and Ray runs are repeated
(``--repeat``) and the fastest is kept. Ray workers are started at
niceness 0 (``--ray-niceness``; Ray's default 15 starves them behind every
normal-priority process on a shared machine, while the in-process path runs
at 0).

Usage::

    python benchmarks/bootstrap_bench.py                 # full size
    python benchmarks/bootstrap_bench.py --settings 2 --resamples 1000   # quick

Targets (issue 4): vectorized >= 100x faster than naive, < 20 s on the 2-core
machine, peak memory < 2 GB; Ray Data with 2 workers >= 1.7x one worker.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from typing import Callable

import numpy as np

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import resampling as RS
from confgrid.analysis import metrics as M

METRICS = ["ece", "auroc", "aurc"]


def make_settings(n_settings: int, n: int, n_signals: int, seed: int = 0) -> list[dict]:
    """Synthetic settings: correctness ~ Bernoulli(0.55); verbalized scores on a 0.05 grid (ties),
    token scores continuous with a context-dependent level."""
    out = []
    for k in range(n_settings):
        rng = np.random.default_rng([seed, k])
        y = (rng.random(n) < 0.55).astype(np.float64)
        rows = []
        for s in range(n_signals):
            if s == 0 or (n_signals == 6 and s % 2 == 0):  # verbalized: coarse, many ties
                c = np.round(np.clip(0.6 + 0.25 * y + 0.15 * rng.standard_normal(n), 0, 1) * 20) / 20
            else:
                level = 0.15 + 0.25 * (s % 3)
                c = np.clip(level + 0.3 * y * rng.random(n) + 0.2 * rng.random(n), 0, 1)
            rows.append(c)
        out.append(dict(name=f"model{k // 4}/dataset{k % 4}", model=f"model{k // 4}", dataset=f"dataset{k % 4}",
                        confidence=np.vstack(rows), correct=y,
                        seed=RS.setting_seed(f"model{k // 4}", f"dataset{k % 4}", 0)))
    return out


def measure(fn: Callable[[], object], trace: bool = False) -> tuple[object, float, float]:
    """(result, wall seconds, tracemalloc peak in MiB or nan).

    Timed without tracemalloc by default: tracing slows every Python
    allocation and would inflate the naive loop far more than the vectorized
    path. Peak memory is reported from ``ru_maxrss`` instead; ``trace=True``
    adds a traced pass (for ``--tracemalloc``).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    wall = time.perf_counter() - t0
    _LAST_CPU[0] = time.process_time() - c0
    peak = float("nan")
    if trace:
        tracemalloc.start()
        fn()
        _, peak_b = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peak = peak_b / 2**20
    return out, wall, peak


#: CPU seconds of this process in the last :func:`measure` (robust to other load on the machine)
_LAST_CPU = [float("nan")]


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_vectorized(settings, n_resamples, chunk_size, n_bins=10, cluster_size=None):
    """``paired_bootstrap`` per setting; ``cluster_size`` m: the cluster bootstrap with items ``i // m`` as clusters
    (m = 1: singleton clusters in item order, the row-level draws through the cluster path)."""
    return [
        BS.paired_bootstrap(s["confidence"], s["correct"], METRICS, n_resamples=n_resamples, seed=s["seed"],
                            chunk_size=chunk_size, n_bins=n_bins,
                            groups=None if cluster_size is None else np.arange(s["correct"].size) // cluster_size)
        for s in settings
    ]


def numpy_ece(c, y, n_bins=10):
    b = np.clip((c * n_bins).astype(int), 0, n_bins - 1)
    nb = np.bincount(b, minlength=n_bins)
    d = np.abs(np.bincount(b, weights=y, minlength=n_bins) - np.bincount(b, weights=c, minlength=n_bins))
    return d.sum() / nb.sum()


def run_naive(settings, n_resamples_total, n_naive, chunk_size):
    """Naive loop on the first ``n_naive`` resamples (same indices as the vectorized path)."""
    from sklearn.metrics import roc_auc_score

    out = []
    for s in settings:
        conf, y = s["confidence"], s["correct"]
        n = y.size
        idx = RS.chunk_indices(n, n_resamples_total, s["seed"], 0, chunk_size)[:n_naive]
        res = np.empty((conf.shape[0], len(METRICS), idx.shape[0]))
        for r, rows in enumerate(idx):
            yy = y[rows]
            for k in range(conf.shape[0]):
                cc = conf[k, rows]
                res[k, 0, r] = numpy_ece(cc, yy)
                res[k, 1, r] = roc_auc_score(yy, cc) if 0 < yy.sum() < n else np.nan
                res[k, 2, r] = M.aurc(cc, yy)
        out.append(res)
    return out


# ---------------------------------------------------------------------------
# Ray Data hook
# ---------------------------------------------------------------------------


def run_ray(runner: Callable, settings, n_resamples, chunk_size, n_bins, num_workers):
    """HOOK for the Ray Data path.

    ``runner`` is ``confgrid.flows.evaluate.bootstrap_ray.bootstrap_settings_ray``
    (flows engineer), called as ``runner(mapping, metrics, n_resamples,
    n_bins=, chunk_size=, num_workers=)`` with ``mapping`` = setting name ->
    ``(confidence (S, n), correct (n,), signal_names, seed)``; it returns
    ``{name: BootstrapResult}``. Adapt here if that signature changes.
    """
    mapping = {s["name"]: (s["confidence"], s["correct"], None, s["seed"]) for s in settings}
    return runner(mapping, METRICS, n_resamples, n_bins=n_bins, chunk_size=chunk_size, num_workers=num_workers)


def ray_runner():
    try:
        from confgrid.flows.evaluate.bootstrap_ray import bootstrap_settings_ray, ensure_ray
    except ImportError as exc:
        return None, f"skipped ({exc})"
    ensure_ray()  # start-up is not timed
    return bootstrap_settings_ray, None


def warm_workers(k: int) -> list[int]:
    """Have ``k`` Ray worker processes import numpy, scipy.sparse, Ray Data and the kernels (concurrently,
    so they are distinct processes); returns their PIDs."""
    import ray

    @ray.remote(num_cpus=1)
    def _warm() -> int:
        import scipy.sparse  # noqa: F401
        import ray.data  # noqa: F401
        import confgrid.analysis.bootstrap  # noqa: F401
        import confgrid.flows.evaluate.bootstrap_ray  # noqa: F401

        time.sleep(1.0)
        return os.getpid()

    return ray.get([_warm.remote() for _ in range(k)])


# ---------------------------------------------------------------------------
# CPU time and memory of the Ray processes (read from /proc; Linux only)
# ---------------------------------------------------------------------------


def _ray_pids() -> list[int]:
    """PIDs of this Ray session's processes: those whose command line names its GCS
    address (raylet, GCS, agents) and all their descendants (the workers, whose
    command line Ray rewrites to ``ray::...``)."""
    try:
        import ray

        gcs = ray.get_runtime_context().gcs_address
    except Exception:
        return []
    if not gcs:
        return []
    parent, roots = {}, set()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                parent[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if gcs.encode() in fh.read():
                    roots.add(int(d))
        except (OSError, IndexError, ValueError):
            continue
    keep = set(roots)
    changed = True
    while changed:
        changed = False
        for pid, pp in parent.items():
            if pid not in keep and pp in keep:
                keep.add(pid)
                changed = True
    return sorted(keep)


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def _proc_hwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def ray_cpu_snapshot() -> dict[int, float]:
    return {pid: _proc_cpu(pid) for pid in _ray_pids()}


def ray_cpu_since(before: dict[int, float]) -> float:
    """CPU seconds used by this session's Ray processes since ``before`` (new processes from 0)."""
    return sum(ray_cpu_per_process(before))


def ray_cpu_per_process(before: dict[int, float]) -> list[float]:
    """CPU seconds of each of this session's Ray processes since ``before``, largest first."""
    return sorted((_proc_cpu(pid) - before.get(pid, 0.0) for pid in _ray_pids()), reverse=True)


def _worker_niceness() -> str:
    """Niceness of the Ray worker processes of this session (field 19 of /proc/PID/stat)."""
    vals = set()
    for pid in _ray_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if not fh.read().startswith(b"ray::"):
                    continue
            with open(f"/proc/{pid}/stat") as fh:
                vals.add(int(fh.read().rsplit(")", 1)[1].split()[16]))
        except (OSError, IndexError, ValueError):
            continue
    return ",".join(str(v) for v in sorted(vals)) or "n/a"


def ray_worker_hwm_mib() -> float:
    """Largest peak RSS (VmHWM) over this session's Ray worker processes."""
    return max([_proc_hwm_mib(p) for p in _ray_pids()] or [0.0])


def _load() -> str:
    if not hasattr(os, "getloadavg"):
        return "n/a"
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", type=int, default=20)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--signals", type=int, default=4, choices=[4, 6])
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--chunk-size", type=int, default=RS.DEFAULT_CHUNK_SIZE)
    ap.add_argument("--naive-resamples", type=int, default=100, help="resamples per setting in the naive loop")
    ap.add_argument("--naive-settings", type=int, default=2, help="settings in the naive loop")
    ap.add_argument("--repeat", type=int, default=2,
                    help="timed runs of the vectorized and Ray paths (alternating 1 and 2 workers); "
                         "the fastest is reported")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--ray-niceness", type=int, default=0,
                    help="niceness of the Ray workers when this script starts Ray (Ray's own default is 15, which on "
                         "a shared machine starves them behind every normal-priority process; 0 runs them at the "
                         "priority of the in-process path)")
    ap.add_argument("--tracemalloc", action="store_true", help="also report the tracemalloc peak (extra pass)")
    ap.add_argument("--cluster-size", type=int, default=10,
                    help="also time the cluster bootstrap (--group-col, bootstrap.cluster) with clusters of this many "
                         "consecutive items (10: Rank-Calibration's generations per question); 0: skip")
    a = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; load average (1/5/15 min) before the run: {_load()} "
          "(wall times are inflated when other processes share the cores; CPU times much less so)")
    print("threads: every path evaluates with BLAS pinned to 1 thread (the kernels are single-threaded numpy); "
          "the in-process vectorized path therefore uses one core")

    settings = make_settings(a.settings, a.n, a.signals)
    total_evals = a.settings * a.signals * len(METRICS) * a.resamples
    print(f"size: {a.settings} settings x n={a.n} x {a.signals} signals x {len(METRICS)} metrics "
          f"x {a.resamples} resamples = {total_evals:,} metric evaluations")
    rss0 = max_rss_mib()

    t_vec = cpu_vec = float("inf")
    for _ in range(max(1, a.repeat)):
        vec, t, peak_vec = measure(lambda: run_vectorized(settings, a.resamples, a.chunk_size), a.tracemalloc)
        t_vec, cpu_vec = min(t_vec, t), min(cpu_vec, _LAST_CPU[0])
    rss1 = max_rss_mib()
    res_mib = vec[0].resamples.nbytes * len(vec) / 2**20
    print(f"vectorized (in process): {t_vec:8.2f} s wall, {cpu_vec:7.2f} s CPU   peak RSS {rss1:.0f} MiB "
          f"(+{rss1 - rss0:.0f} MiB during the run, of which {res_mib:.0f} MiB are the results)   load {_load()}"
          + (f"   peak traced {peak_vec:.1f} MiB" if a.tracemalloc else ""))

    t_cl = float("nan")
    if a.cluster_size > 0:
        t_cl = cpu_cl = float("inf")
        for _ in range(max(1, a.repeat)):
            _, t, _ = measure(lambda: run_vectorized(settings, a.resamples, a.chunk_size, cluster_size=a.cluster_size))
            t_cl, cpu_cl = min(t_cl, t), min(cpu_cl, _LAST_CPU[0])
        print(f"clustered (in process, clusters of {a.cluster_size} items, {a.n // a.cluster_size} per setting): "
              f"{t_cl:8.2f} s wall, {cpu_cl:7.2f} s CPU   = {t_cl / t_vec:.2f}x the row-level wall, "
              f"{cpu_cl / cpu_vec:.2f}x its CPU   load {_load()}")
        one = run_vectorized(settings[:1], a.resamples, a.chunk_size, cluster_size=1)[0]
        np.testing.assert_allclose(one.resamples, vec[0].resamples, rtol=0, atol=1e-12)
        print("clustered with singleton clusters == row level on the same draws (atol 1e-12): OK")

    n_naive = min(a.naive_resamples, a.resamples, a.chunk_size)
    ns = min(a.naive_settings, a.settings)
    naive, t_naive_sub, _ = measure(lambda: run_naive(settings[:ns], a.resamples, n_naive, a.chunk_size))
    scale = (a.settings * a.resamples) / (ns * n_naive)
    t_naive = t_naive_sub * scale
    cpu_naive = _LAST_CPU[0] * scale
    print(f"naive loop:              {t_naive:8.2f} s wall, {cpu_naive:7.2f} s CPU   "
          f"EXTRAPOLATED linearly x{scale:.0f} "
          f"from {t_naive_sub:.2f} s wall / {_LAST_CPU[0]:.2f} s CPU measured on {ns} setting(s) x {n_naive} resamples"
          f"   load {_load()}")
    # the naive loop must agree with the vectorized path on the same indices
    for k in range(ns):
        np.testing.assert_allclose(naive[k], vec[k].resamples[:, :, :n_naive], rtol=1e-9, atol=1e-12)
    print("naive == vectorized on the shared resamples (rtol 1e-9, atol 1e-12): OK")

    ray_times: dict[int, tuple[float, float, float]] = {}
    if not a.no_ray:
        os.environ.setdefault("RAY_worker_niceness", str(a.ray_niceness))  # read when Ray starts here
        runner, why = ray_runner()
        if runner is None:
            print(f"ray data:   {why}")
        else:
            # warm-up (untimed): two worker processes start and import the kernels (a short Ray Data
            # run alone often uses one process, leaving the second worker's imports inside the timed run)
            warm_workers(2)
            run_ray(runner, settings[:2], min(a.resamples, 4 * a.chunk_size), a.chunk_size, 10, 2)
            time.sleep(3.0)  # Ray Data's helper actors (stats, autoscaling) finish starting outside the timing
            same_all = True
            for _ in range(max(1, a.repeat)):
                for w in (1, 2):
                    snap = ray_cpu_snapshot()
                    out, t, _ = measure(lambda w=w: run_ray(runner, settings, a.resamples, a.chunk_size, 10, w))
                    per_proc = ray_cpu_per_process(snap)
                    cpu = _LAST_CPU[0] + sum(per_proc)
                    # on w idle cores the run cannot beat its busiest process: a CPU-bound wall estimate
                    busiest = per_proc[:w]
                    best = ray_times.get(w, (float("inf"),) * 4)
                    ray_times[w] = (min(best[0], t), min(best[1], cpu), os.getloadavg()[0],
                                    min(best[3], max(busiest or [0.0])))
                    same = all(np.array_equal(out[s["name"]].resamples, v.resamples, equal_nan=True)
                               for s, v in zip(settings, vec))
                    same_all &= same
                    print(f"  ray data {w} worker(s) run: {t:7.2f} s wall, {cpu:7.2f} s CPU (driver + Ray processes; "
                          f"busiest {w} process(es): {', '.join(f'{x:.2f}' for x in busiest)} s)"
                          f"   load {_load()}   bit-identical to in-process: {same}")
            for w in (1, 2):
                t, cpu, _, crit = ray_times[w]
                print(f"ray data, {w} worker(s):     {t:8.2f} s wall, {cpu:7.2f} s CPU (fastest of {a.repeat}); "
                      f"busiest worker {crit:.2f} s CPU")
            print(f"ray workers' niceness: {_worker_niceness()} "
                  f"(RAY_worker_niceness={os.environ.get('RAY_worker_niceness')})")
            print(f"ray memory: driver peak RSS {max_rss_mib():.0f} MiB; largest Ray process peak RSS "
                  f"{ray_worker_hwm_mib():.0f} MiB; bit-identical to in-process in every run: {same_all}")

    print()
    print("summary (targets of issue 4, item 9):")
    ok_ratio = t_naive / t_vec >= 100
    print(f"  naive / vectorized: {t_naive / t_vec:.0f}x wall, {cpu_naive / cpu_vec:.0f}x CPU "
          f"(target >= 100x): {_met(ok_ratio)}")
    print(f"  vectorized wall: {t_vec:.2f} s (CPU {cpu_vec:.2f} s) (target < 20 s): {_met(t_vec < 20)}")
    print(f"  peak memory of the in-process run: {rss1:.0f} MiB RSS (target < 2048 MiB): {_met(rss1 < 2048)}")
    if a.cluster_size > 0:
        print(f"  clustered / row-level bootstrap: {t_cl / t_vec:.2f}x wall (clusters of {a.cluster_size})")
    if ray_times:
        r = ray_times[1][0] / ray_times[2][0]
        rc = ray_times[1][1] / ray_times[2][1]
        rcrit = ray_times[1][3] / ray_times[2][3] if ray_times[2][3] > 0 else float("nan")
        print(f"  ray data 2 workers vs 1: {r:.2f}x wall (target >= 1.7x): {_met(r >= 1.7)}; "
              f"total CPU 1 worker / 2 workers {rc:.2f} (1.0 = no extra work from splitting); "
              f"busiest-worker CPU 1 worker / 2 workers {rcrit:.2f}x (the speed-up on 2 otherwise idle cores, "
              f"if the run is CPU-bound)")
        print(f"  ray data 1 worker / in-process vectorized: {ray_times[1][0] / t_vec:.2f}x the wall time")
    print(f"load average after the run: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
