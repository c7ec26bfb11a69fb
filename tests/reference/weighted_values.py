"""A count-weighted metric of ``b`` resamples at once, by name: the package's kernels called one by one.

The run's evaluator calls its kernels through the fused bootstrap (analysis/fused.py); the tests check each
kernel, its ties and its weight checks through this one entry.
"""

from __future__ import annotations

import numpy as np

from confgrid.analysis.kernels import WEIGHTED_KERNELS, _apply, _binned, _sorted
from confgrid.analysis.registry import get_metric

#: kernels that take any finite weights >= 0 (the others want integer multiplicities)
REAL_WEIGHTS = ("brier",)


def weighted_values(name: str, conf, correct, w, n_bins: int = 10) -> np.ndarray:
    """Count-weighted metric ``name``: ``conf``, ``correct`` of shape (n,), ``w`` of shape (b, n) -> (b,) float64,
    ``nan`` where undefined for a resample. ValueError for a metric without a kernel or for non-integer weights
    where the kernel needs multiplicities."""
    binning = get_metric(name).binning
    if binning is not None:
        return _binned(binning, conf, correct, w, n_bins)
    if name not in WEIGHTED_KERNELS:
        raise ValueError(f"metric {name!r} has no weighted kernel; kernels: {', '.join(WEIGHTED_KERNELS)} and "
                         "every binned ECE")
    return _apply(WEIGHTED_KERNELS[name], _sorted(conf, correct), w, integer=name not in REAL_WEIGHTS)
