"""How often do confgrid's 95% intervals contain the population value? A coverage study by simulation (issue 37).

Datasets are drawn from processes whose population values are known; each is bootstrapped as ``confgrid analyze``
does (analysis/bootstrap.py ``paired_bootstrap``: two signals of the same answers, paired resamples) and the interval
of every metric and of the paired gap ``metric(a) - metric(b)`` is formed by each interval method of
analysis/intervals.py. The coverage of a cell is the share of datasets whose interval contains the population value,
with its Monte Carlo standard error ``sqrt(c (1 - c) / reps)``.

Population values (:func:`population`) are computed on a large sample (``10**6`` items) with each answer's
correctness replaced by its probability ``p_i`` (the process knows it): every metric here is linear in the labels
given the confidences (a binned ECE is ``sum_b |sum_{i in b} (y_i - c_i)| / n`` per bin sum, AUROC a sum over
(right, wrong) pairs, AURC a sum of error indicators along the ranking), so its expectation over the labels is the
same formula at ``p``; the Brier score's is ``mean(p (1 - c)^2 + (1 - p) c^2)``. The large sample's own error is
below 1e-4, far inside the coverage's Monte Carlo error. ``ece_debiased`` estimates the population binned ECE:
its truth is ``ece``'s.

Processes (:data:`PROCESSES`): ``grid94`` is the issue's process (stated confidence on a 5% grid from 0.70 to 1.0,
most mass at 0.95-1.0, accuracy 0.94, slightly underconfident; population ECE 0.0262, Brier 0.0517); ``cont<acc>``
and ``grid<acc>`` (accuracy 0.5, 0.7, 0.9, 0.99) a stated confidence from a Beta distribution, overconfident
(``P(right | s) = s ** 1.3``), continuous or rounded to 5%; ``clust<acc>`` the same in clusters of 5 items that
share a random shift of the log-odds of being right (sd 1), bootstrapped by item and by cluster; ``edge99`` the
boundary case (every answer stated 0.9 (signal a) or 0.8 (b), 99% right). Signal ``b`` is a token-like score:
``sigmoid(logit(s) + N(0, 0.6^2))``.

Usage::

    python benchmarks/coverage.py                       # every process, n = 50..2000, 200 datasets, 1000 resamples
    python benchmarks/coverage.py --processes grid94 --n 87 300 1000 --reps 200 --out cov.csv

Writes a CSV (one row per process, n, resampling, metric, target, interval method) and prints a Markdown table;
benchmarks/RESULTS.md holds the measured tables, dated.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from confgrid.analysis.binning import Binning
from confgrid.analysis.bootstrap import paired_bootstrap
from confgrid.analysis.intervals import INTERVALS, bootstrap_interval, degenerate, jeffreys_resamples
from confgrid.analysis.metrics import aurc, auroc

#: the metrics studied (``ece_debiased``'s target is the population ``ece``)
METRICS = ("ece", "ece_debiased", "brier", "auroc", "aurc")
#: n of the study
SIZES = (50, 87, 200, 300, 1000, 2000)
#: the study-002-like grid process of the issue: P(stated = c) and P(right | c) on the 5% grid 0.70..1.0
GRID94 = (np.array([0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00]),
          np.array([0.06, 0.065, 0.005, 0.195, 0.01, 0.20, 0.465]),
          np.array([0.75, 0.72, 0.85, 0.95, 0.96, 0.92, 1.0]))
#: Beta(alpha, 1) of the stated confidence per accuracy level: E[s ** 1.3] = alpha / (alpha + 1.3) is the level
_ALPHA = {a: 1.3 * a / (1.0 - a) for a in (0.5, 0.7, 0.9, 0.99)}


@dataclass(frozen=True)
class Draw:
    """One dataset: ``conf`` (2, n) the two signals, ``correct`` (n,) 0/1, ``p`` (n,) the probability each answer
    is right (for population values), ``groups`` (n,) cluster ids or None."""

    conf: np.ndarray
    correct: np.ndarray
    p: np.ndarray
    groups: np.ndarray | None = None


@dataclass(frozen=True)
class Process:
    """A data-generating process (module docstring)."""

    name: str
    kind: str  # grid94, beta, edge
    accuracy: float = 0.94
    rounded: bool = False
    cluster: int = 0  # items per cluster (0: independent items)

    def sample(self, n: int, rng: np.random.Generator) -> Draw:
        if self.kind == "grid94":
            c_vals, prob, acc = GRID94
            k = rng.choice(c_vals.size, n, p=prob / prob.sum())
            s, p = c_vals[k], acc[k]
        elif self.kind == "edge":
            s, p = np.full(n, 0.9), np.full(n, self.accuracy)
        else:
            s = rng.beta(_ALPHA[self.accuracy], 1.0, n)
            p = s ** 1.3
            if self.rounded:
                s = np.round(s * 20) / 20
        groups = None
        if self.cluster:
            groups = np.arange(n) // self.cluster
            shift = rng.normal(0.0, 1.0, groups.max() + 1)[groups]
            p = expit(logit(np.clip(p, 1e-6, 1 - 1e-6)) + shift)
        y = (rng.random(n) < p).astype(np.float64)
        if self.kind == "edge":
            b = np.full(n, 0.8)
        else:
            b = expit(logit(np.clip(s, 1e-4, 1 - 1e-4)) + rng.normal(0.0, 0.6, n))
        return Draw(np.vstack([s, b]), y, p, groups)


PROCESSES = {p.name: p for p in [
    Process("grid94", "grid94"),
    *[Process(f"cont{int(a * 100)}", "beta", a) for a in (0.5, 0.7, 0.9, 0.99)],
    *[Process(f"grid{int(a * 100)}", "beta", a, rounded=True) for a in (0.5, 0.7, 0.9, 0.99)],
    *[Process(f"clust{int(a * 100)}", "beta", a, cluster=5) for a in (0.7, 0.9)],
    Process("edge99", "edge", 0.99),
]}


def population(process: Process, size: int = 1_000_000, seed: int = 12345, n_bins: int = 10) -> dict:
    """``{(target, metric): value}`` for targets ``a``, ``b`` and ``gap`` (module docstring)."""
    d = process.sample(size, np.random.default_rng(seed))
    p = d.p
    out = {}
    for t, c in (("a", d.conf[0]), ("b", d.conf[1])):
        b = Binning(n_bins).indices(c)
        e = np.abs(np.bincount(b, weights=p - c, minlength=n_bins)).sum() / c.size
        vals = {"ece": e, "ece_debiased": e, "brier": float(np.mean(p * (1 - c) ** 2 + (1 - p) * c ** 2))}
        if process.kind != "edge":  # one confidence value: no ranking
            vals.update(auroc=auroc(c, p), aurc=aurc(c, p))
        for m, v in vals.items():
            out[(t, m)] = float(v)
    for m in METRICS:
        if ("a", m) in out:
            out[("gap", m)] = out[("a", m)] - out[("b", m)]
    return out


def coverage(process: Process, n: int, reps: int = 200, resamples: int = 1000, seed: int = 0, level: float = 0.95,
             truth: dict | None = None, methods=INTERVALS, metrics=METRICS) -> pd.DataFrame:
    """One cell of the study: ``reps`` datasets of ``n`` items, each bootstrapped (by item, and by cluster for a
    clustered process) and every interval method applied. One row per (resampling, metric, target, method):
    ``covered`` (share), ``mc_se``, ``width`` (mean), ``point`` (mean estimate), ``truth``, ``degenerate`` (share
    of datasets whose interval had no spread)."""
    truth = population(process) if truth is None else truth
    metrics = [m for m in metrics if ("a", m) in truth]
    rng = np.random.default_rng([seed, n, sum(map(ord, process.name))])
    schemes = ["item", "cluster"] if process.cluster else ["item"]
    acc: dict = {}
    for r in range(reps):
        d = process.sample(n, rng)
        for scheme in schemes:
            groups = d.groups if scheme == "cluster" else None
            s = int(rng.integers(2**31))
            res = paired_bootstrap(d.conf, d.correct, metrics, n_resamples=resamples, seed=s, groups=groups)
            jr = jeffreys_resamples(d.conf, np.vstack([d.correct, d.correct]), None, metrics, resamples, s,
                                    groups=groups) if "jeffreys" in methods else None
            for j, m in enumerate(metrics):
                for target in ("a", "b", "gap"):
                    pt = res.point[0, j] - res.point[1, j] if target == "gap" else res.point["ab".index(target), j]
                    for meth in methods:
                        vals = res.resamples if meth != "jeffreys" else jr
                        if np.isnan(vals[:, j]).all():
                            continue  # jeffreys: a metric without fixed bins
                        rs = vals[0, j] - vals[1, j] if target == "gap" else vals["ab".index(target), j]
                        flat = bool(degenerate(rs[None, :])[0])
                        lo, hi = bootstrap_interval(np.array([pt]), rs[None, :], level, meth)
                        key = (scheme, m, target, meth)
                        a = acc.setdefault(key, {"covered": 0, "width": 0.0, "point": 0.0, "degenerate": 0, "k": 0,
                                                 "k_defined": 0})
                        t = truth[(target, m)]
                        # an undefined interval covers nothing; 1e-9: the population sums of 10**6 terms carry
                        # about 1e-11 of rounding, and a degenerate interval may sit on the truth
                        a["covered"] += int(lo[0] - 1e-9 <= t <= hi[0] + 1e-9)
                        if np.isfinite(hi[0] - lo[0]) and np.isfinite(pt):
                            a["width"] += float(hi[0] - lo[0])
                            a["point"] += float(pt)
                            a["k_defined"] += 1
                        a["degenerate"] += int(flat)
                        a["k"] += 1
    out = []
    for (scheme, m, target, meth), a in acc.items():
        c = a["covered"] / a["k"]
        out.append({"process": process.name, "n": n, "resampling": scheme, "metric": m, "target": target,
                    "method": meth, "covered": c, "mc_se": float(np.sqrt(c * (1 - c) / a["k"])),
                    "width": a["width"] / max(a["k_defined"], 1), "point": a["point"] / max(a["k_defined"], 1),
                    "truth": truth[(target, m)], "undefined": 1 - a["k_defined"] / a["k"],
                    "degenerate": a["degenerate"] / a["k"], "reps": a["k"], "resamples": resamples})
    return pd.DataFrame(out)


def markdown(df: pd.DataFrame, target: str = "a") -> str:
    """The table of one target: a row per (process, resampling, metric, n), a column per method (coverage +- its
    Monte Carlo error)."""
    d = df[df["target"] == target]
    lines = ["| process | resampling | metric | n | truth | mean point | " + " | ".join(INTERVALS) + " | degenerate |",
             "| --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in INTERVALS) + " | --- |"]
    for (p, s, m, n), g in d.groupby(["process", "resampling", "metric", "n"], sort=False):
        g = g.set_index("method")
        cells = [f"{g.at[k, 'covered']:.3f} ± {g.at[k, 'mc_se']:.3f}" if k in g.index else "" for k in INTERVALS]
        first = g.iloc[0]
        lines.append(f"| {p} | {s} | {m} | {n} | {first['truth']:.4f} | {first['point']:.4f} | " + " | ".join(cells)
                     + f" | {first['degenerate']:.2f} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", nargs="+", default=list(PROCESSES), choices=list(PROCESSES))
    ap.add_argument("--n", nargs="+", type=int, default=list(SIZES))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="CSV of every cell")
    a = ap.parse_args(argv)
    for flag, v, least in (("--reps", a.reps, 1), ("--resamples", a.resamples, 2)):
        if v < least:
            ap.error(f"{flag} must be >= {least}, got {v}")
    if any(n < 2 for n in a.n):
        ap.error(f"--n: every size must be >= 2, got {a.n}")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    frames = []
    for name in a.processes:
        proc = PROCESSES[name]
        truth = population(proc)
        for n in a.n:
            t0 = time.perf_counter()
            frames.append(coverage(proc, n, a.reps, a.resamples, a.seed, truth=truth))
            print(f"{name} n={n}: {time.perf_counter() - t0:.1f} s", flush=True)
    df = pd.concat(frames, ignore_index=True)
    if a.out:
        df.to_csv(a.out, index=False)
    print("\nCoverage of each interval method: share of datasets whose interval contains the population value, "
          "+- one Monte Carlo standard error; target a: signal a's metric, gap: metric(a) - metric(b); degenerate: "
          "share of datasets whose resamples had no spread (such an interval covers only if it sits on the truth).")
    for target in ("a", "gap"):
        print(f"\n### target {target}\n")
        print(markdown(df, target))


if __name__ == "__main__":
    main()
