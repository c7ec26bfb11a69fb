"""The per-resample loop of the paired bootstrap: a test-only oracle of analysis/bootstrap.py's kernels.

Takes the rows of each resample and calls the metric functions of metrics.py / estimators.py (through the
registry) one resample at a time; tests/analysis/test_bootstrap.py and test_estimators.py compare the vectorized
kernels and the fallback (:func:`bootstrap_chunk`: the package's chunk evaluator on given indices) with it on the
same indices.
"""

from __future__ import annotations

import warnings

import numpy as np

from confgrid.analysis import registry as REG
from confgrid.analysis.clusters import cluster_codes
from confgrid.analysis.fused import evaluate_chunk, one_blas_thread, prepare
from confgrid.analysis.metrics import UndefinedMetricWarning

__all__ = ["loop_chunk", "bootstrap_chunk"]


def bootstrap_chunk(conf, corr, metrics, idx, n_bins=10, groups=None, masks=None, reweight=None):
    """(S, len(metrics), R) values of analysis/fused.py's chunk evaluator (the one of paired_bootstrap) on given
    resample indices ``idx`` (R, n), or drawn cluster indices (R, G) with ``groups``."""
    conf = np.atleast_2d(np.asarray(conf, dtype=np.float64))
    corr = np.broadcast_to(np.asarray(corr, dtype=np.float64), conf.shape)
    clusters = cluster_codes(groups, conf.shape[1]) if groups is not None else None
    with one_blas_thread():
        prep = prepare(conf, corr, n_bins, None if masks is None else np.asarray(masks, dtype=bool), reweight)
        return evaluate_chunk(prep, list(metrics), np.asarray(idx), clusters)


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
