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
  ``confgrid.flows.bootstrap_ray.bootstrap_settings_ray`` with 1 and 2
  workers if that module exists; otherwise it is reported as skipped.

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
                        seed=BS.setting_seed(f"model{k // 4}", f"dataset{k % 4}", 0)))
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


def run_vectorized(settings, n_resamples, chunk_size, n_bins=10):
    return [
        BS.paired_bootstrap(s["confidence"], s["correct"], METRICS, n_resamples=n_resamples, seed=s["seed"],
                            chunk_size=chunk_size, n_bins=n_bins)
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
        idx = BS.chunk_indices(n, n_resamples_total, s["seed"], 0, chunk_size)[:n_naive]
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

    ``runner`` is ``confgrid.flows.bootstrap_ray.bootstrap_settings_ray``
    (flows engineer), called as ``runner(mapping, metrics, n_resamples,
    n_bins=, chunk_size=, num_workers=)`` with ``mapping`` = setting name ->
    ``(confidence (S, n), correct (n,), signal_names, seed)``; it returns
    ``{name: BootstrapResult}``. Adapt here if that signature changes.
    """
    mapping = {s["name"]: (s["confidence"], s["correct"], None, s["seed"]) for s in settings}
    return runner(mapping, METRICS, n_resamples, n_bins=n_bins, chunk_size=chunk_size, num_workers=num_workers)


def ray_runner():
    try:
        from confgrid.flows.bootstrap_ray import bootstrap_settings_ray, ensure_ray
    except ImportError as exc:
        return None, f"skipped ({exc})"
    ensure_ray()  # start-up is not timed
    return bootstrap_settings_ray, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", type=int, default=20)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--signals", type=int, default=4, choices=[4, 6])
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--chunk-size", type=int, default=BS.DEFAULT_CHUNK_SIZE)
    ap.add_argument("--naive-resamples", type=int, default=100, help="resamples per setting in the naive loop")
    ap.add_argument("--naive-settings", type=int, default=2, help="settings in the naive loop")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--tracemalloc", action="store_true", help="also report the tracemalloc peak (extra pass)")
    a = ap.parse_args(argv)
    if hasattr(os, "getloadavg"):
        print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs "
              "(wall times are inflated when other processes share the cores)")

    settings = make_settings(a.settings, a.n, a.signals)
    total_evals = a.settings * a.signals * len(METRICS) * a.resamples
    print(f"size: {a.settings} settings x n={a.n} x {a.signals} signals x {len(METRICS)} metrics "
          f"x {a.resamples} resamples = {total_evals:,} metric evaluations")
    rss0 = max_rss_mib()

    vec, t_vec, peak_vec = measure(lambda: run_vectorized(settings, a.resamples, a.chunk_size), a.tracemalloc)
    rss1 = max_rss_mib()
    cpu_vec = _LAST_CPU[0]
    print(f"vectorized: {t_vec:8.2f} s wall, {cpu_vec:.2f} s CPU   max RSS {rss1:.0f} MiB (+{rss1 - rss0:.0f} MiB during the run; "
          f"includes the {vec[0].resamples.nbytes * len(vec) / 2**20:.0f} MiB of results)"
          + (f"   peak traced {peak_vec:.1f} MiB" if a.tracemalloc else ""))

    n_naive = min(a.naive_resamples, a.resamples, a.chunk_size)
    ns = min(a.naive_settings, a.settings)
    naive, t_naive_sub, _ = measure(lambda: run_naive(settings[:ns], a.resamples, n_naive, a.chunk_size))
    scale = (a.settings * a.resamples) / (ns * n_naive)
    t_naive = t_naive_sub * scale
    cpu_naive = _LAST_CPU[0] * scale
    print(f"naive:      {t_naive:8.2f} s wall, {cpu_naive:.2f} s CPU   EXTRAPOLATED linearly x{scale:.0f} "
          f"from {t_naive_sub:.2f} s measured on {ns} setting(s) x {n_naive} resamples")
    # the naive loop must agree with the vectorized path on the same indices
    for k in range(ns):
        np.testing.assert_allclose(naive[k], vec[k].resamples[:, :, :n_naive], rtol=1e-9, atol=1e-12)
    print("naive == vectorized on the shared resamples: OK")
    print(f"ratio naive / vectorized: {t_naive / t_vec:.0f}x wall, {cpu_naive / cpu_vec:.0f}x CPU (target >= 100x); "
          f"vectorized wall {t_vec:.1f} s (target < 20 s); max RSS {rss1:.0f} MiB (target < 2048)")

    if not a.no_ray:
        runner, why = ray_runner()
        if runner is None:
            print(f"ray data:   {why}")
        else:
            # warm-up (untimed): worker processes start and import the kernels
            run_ray(runner, settings[:1], min(a.resamples, 2 * a.chunk_size), a.chunk_size, 10, 2)
            times = {}
            for w in (1, 2):
                rss_before = max_rss_mib()
                out, t, _ = measure(lambda w=w: run_ray(runner, settings, a.resamples, a.chunk_size, 10, w))
                times[w] = t
                same = all(np.array_equal(out[s["name"]].resamples, v.resamples, equal_nan=True)
                           for s, v in zip(settings, vec))
                print(f"ray data {w} worker(s): {t:8.2f} s   driver max RSS {max_rss_mib():.0f} MiB "
                      f"(+{max_rss_mib() - rss_before:.0f})   bit-identical to vectorized: {same}")
            print(f"ray 2 workers vs 1: {times[1] / times[2]:.2f}x (target >= 1.7x); "
                  f"ray 1 worker vs vectorized: {times[1] / t_vec:.2f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
