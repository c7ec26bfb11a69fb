"""The per-resample loop of the paired bootstrap: a test-only oracle of analysis/bootstrap.py's kernels.

Takes the rows of each resample and calls the metric functions of metrics.py / estimators.py (through the
registry) one resample at a time; tests/analysis/test_bootstrap.py and test_estimators.py compare the vectorized
kernels and the fallback with it on the same indices.
"""

from __future__ import annotations

import warnings

import numpy as np

from confgrid.analysis import registry as REG
from confgrid.analysis.metrics import UndefinedMetricWarning

__all__ = ["loop_chunk"]


def loop_chunk(conf, corr, metrics, idx, n_bins=10):
    """(S, len(metrics), R) values of each signal's metrics on each resample's rows ``idx`` (R, n); ``n_bins``
    goes to the metrics that take it."""
    S = conf.shape[0]
    corr = np.broadcast_to(corr, conf.shape)
    out = np.empty((S, len(metrics), idx.shape[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for s in range(S):
            for j, name in enumerate(metrics):
                info = REG.get_metric(name)
                kw = {"n_bins": n_bins} if info.takes_n_bins else {}
                for r, rows in enumerate(idx):
                    out[s, j, r] = info.func(conf[s][rows], corr[s][rows], **kw)
    return out
