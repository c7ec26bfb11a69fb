"""Study 001's comparison: its own vectorized bootstrap against the one evaluator's units, in one run (issue 20).

Synthetic cells (two models, ``--methods`` compared methods, ``--items`` items each, correctness 80% vs 50%,
confidences on a 0.001 grid) with the IA and DA views. For each cell:

* reference: tests/reference/ace_cell_bootstrap.py ``cell_bootstrap`` (per-item sums times the count matrix, the
  DA weights applied to per-stratum sums; kept as the test reference);
* one evaluator: :func:`confgrid.analysis.ace.units.ace_unit` bootstrapped by
  :func:`confgrid.analysis.evaluation.bootstrap_unit` and turned into rows by
  :func:`confgrid.analysis.evaluation.estimates` (what a run and ``confgrid analyze`` now do).

Both draw the same resamples; the largest difference of their resampled gaps is printed with the times (best of
``--repeat``, ``time.perf_counter``) and the ratio one evaluator / reference.

    .venv/bin/python benchmarks/ace_bench.py                         # 3 cells x 1,000 items x 2,000 resamples
    .venv/bin/python benchmarks/ace_bench.py --items 300 --methods 10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test-only oracle
from reference.ace_cell_bootstrap import cell_bootstrap  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--methods", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    from confgrid.analysis.ace.bootstrap import cell_seed
    from confgrid.analysis.ace.frame import matched_cells
    from confgrid.analysis.ace.units import ace_unit
    from confgrid.analysis.ace.views import DEFAULT_OPTIONS, cell_views
    from confgrid.analysis.evaluation import bootstrap_unit, estimates

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    n, mets = a.items, ("ece", "brier")
    rows = pd.concat([pd.DataFrame(dict(model=m, dataset="qa", method=f"m{k}", item_id=range(n),
                                        signal=np.round(np.clip(0.7 + 0.15 * rng.standard_normal(n), 0, 1), 3),
                                        correct=(rng.random(n) < acc).astype(float)))
                      for m, acc in (("big", 0.8), ("small", 0.5)) for k in range(a.methods)])
    cells = matched_cells(rows).cells
    points = [cell_views(c, mets, ("ia", "da")) for c in cells]
    t_ref = t_one = float("inf")
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        ref = [cell_bootstrap(c, p, mets, ("ia", "da"), n_resamples=a.resamples, seed=cell_seed(c))
               for c, p in zip(cells, points)]
        t_ref = min(t_ref, time.perf_counter() - t0)
        t0 = time.perf_counter()
        units = [ace_unit(c, p, mets, ("ia", "da"), DEFAULT_OPTIONS, None, a.resamples, cell_seed(c))
                 for c, p in zip(cells, points)]
        res = [bootstrap_unit(u, mets, a.resamples) for u in units]
        estimates(units, res)
        t_one = min(t_one, time.perf_counter() - t0)
    worst = 0.0
    for u, r, b in zip(units, res, ref):
        cell = {(u.names[x], u.info[y]["view"]): (i, j) for x, y, i, j in u.pairs}
        for (view, m), g in b.gaps.items():
            i, j = cell[(u.names[u.pairs[0][0]], view)]
            d = r.resamples[i, mets.index(m)] - r.resamples[j, mets.index(m)] - g
            worst = max(worst, float(np.nanmax(np.abs(d))) if np.isfinite(d).any() else 0.0)
    print(json.dumps({"cells": len(cells), "items": n, "resamples": a.resamples, "reference_s": round(t_ref, 3),
                      "one_evaluator_s": round(t_one, 3), "ratio": round(t_one / t_ref, 2),
                      "max_abs_gap_difference": worst}, indent=1))


if __name__ == "__main__":
    main()
