"""Signals on their own items within one paired resample (``masks``), against brute-force loops.

Every resample draws ``n`` item indices over all items; a signal with a
support is evaluated on the drawn indices that fall in its support (with their
multiplicity), by the point functions of analysis/metrics.py. Full supports
must leave the values bit-identical to the bootstrap without masks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from confgrid.analysis import bootstrap as BS
from confgrid.analysis import resampling as RS
from confgrid.analysis import registry as REG
from confgrid.analysis.clusters import cluster_codes, resample_rows
from confgrid.analysis.metrics import UndefinedMetricWarning
from reference.resample_loop import bootstrap_chunk

FUSED = ["ece", "auroc", "aurc", "brier", "calibration_gap"]
OTHER = ["ece_equal_mass", "ks_ece", "ece_15", "smoothed_ece"]  # weighted kernels and the per-resample fallback


def _setting(seed: int, S: int = 4, n: int = 50, decimals: int = 1):
    rng = np.random.default_rng(seed)
    corr = (rng.random((S, n)) < 0.55).astype(float)
    corr[1] = np.round(rng.random(n), 2)  # one graded signal
    conf = np.round(np.clip(0.4 * corr + 0.6 * rng.random((S, n)), 0, 1), decimals)
    masks = rng.random((S, n)) < 0.7
    masks[0] = True  # one signal on every item
    masks[3, :] = False
    masks[3, :3] = True  # a tiny support: many resamples draw none of it
    conf[~masks] = np.nan  # values outside a support are ignored
    return conf, corr, masks


def _loop(conf, corr, masks, metrics, rows_of_resample, n_bins=10):
    out = np.full((conf.shape[0], len(metrics), len(rows_of_resample)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for s in range(conf.shape[0]):
            for r, rows in enumerate(rows_of_resample):
                keep = rows[masks[s][rows]]
                if keep.size == 0:
                    continue
                for j, name in enumerate(metrics):
                    info = REG.get_metric(name)
                    kw = {"n_bins": n_bins} if info.takes_n_bins else {}
                    out[s, j, r] = info.func(conf[s][keep], corr[s][keep], **kw)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_supports_equal_a_loop_over_drawn_items(seed):
    conf, corr, masks = _setting(seed)
    n = conf.shape[1]
    idx = np.random.default_rng(seed + 10).integers(0, n, size=(40, n))
    got = bootstrap_chunk(conf, corr, FUSED + OTHER, idx, masks=masks)
    ref = _loop(conf, corr, masks, FUSED + OTHER, list(idx))
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12, equal_nan=True)
    assert np.isnan(got[3]).any() and not np.isnan(got[3]).all()  # resamples without its items: nan


def test_supports_with_clusters_equal_a_loop():
    conf, corr, masks = _setting(5)
    n = conf.shape[1]
    groups = np.arange(n) // 3  # clusters of three items
    cl = cluster_codes(groups, n)
    idx = np.random.default_rng(3).integers(0, cl.n_clusters, size=(30, cl.n_clusters))
    got = bootstrap_chunk(conf, corr, FUSED + ["ks_ece"], idx, groups=groups, masks=masks)
    ref = _loop(conf, corr, masks, FUSED + ["ks_ece"], resample_rows(idx, cl))
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12, equal_nan=True)


def test_full_supports_are_bit_identical_and_points_use_the_support():
    conf, corr, masks = _setting(7)
    full = np.ones_like(masks)
    dense = np.where(np.isnan(conf), 0.5, conf)
    a = BS.paired_bootstrap(dense, corr, FUSED, n_resamples=300, seed=4, chunk_size=128)
    b = BS.paired_bootstrap(dense, corr, FUSED, n_resamples=300, seed=4, chunk_size=128, masks=full)
    np.testing.assert_array_equal(a.resamples, b.resamples)
    np.testing.assert_array_equal(a.point, b.point)
    c = BS.paired_bootstrap(conf, corr, FUSED, n_resamples=300, seed=4, chunk_size=128, masks=masks)
    for s in range(3):
        for j, name in enumerate(FUSED):
            want = REG.get_metric(name).func(conf[s][masks[s]], corr[s][masks[s]])
            assert c.point[s, j] == pytest.approx(want, abs=1e-15)
    # the chunks that the Ray path evaluates one by one concatenate to the whole
    parts = BS.bootstrap_chunks(conf, corr, FUSED, 300, 4, [0, 1, 2], chunk_size=128, masks=masks)
    np.testing.assert_array_equal(np.concatenate(parts, axis=2), c.resamples)


def test_a_gap_on_the_items_both_have_is_paired():
    """Two signals on overlapping supports: the gap on their common items is the difference of two cells with
    that support, on the same resamples (what the evaluator computes for a pair)."""
    conf, corr, masks = _setting(9)
    both = masks[1] & masks[2]
    c = np.vstack([conf[1], conf[2]])
    y = np.vstack([corr[1], corr[2]])
    r = BS.paired_bootstrap(c, y, ["ece", "auroc"], n_resamples=200, seed=1, masks=np.vstack([both, both]))
    idx = np.concatenate([i for _, i in RS.resample_indices(conf.shape[1], 200, 1, RS.DEFAULT_CHUNK_SIZE)])
    ref = _loop(c, y, np.vstack([both, both]), ["ece", "auroc"], list(idx))
    np.testing.assert_allclose(r.resamples[0] - r.resamples[1], ref[0] - ref[1], rtol=1e-11, atol=1e-12,
                               equal_nan=True)


def test_bad_masks_are_named():
    conf, corr, masks = _setting(0)
    with pytest.raises(ValueError, match="masks must be a bool array of shape"):
        BS.paired_bootstrap(conf, corr, ["ece"], n_resamples=5, masks=masks[:2])
    with pytest.raises(ValueError, match="masks must be a bool array"):
        BS.paired_bootstrap(conf, corr, ["ece"], n_resamples=5, masks=masks.astype(int))
    empty = masks.copy()
    empty[2] = False  # a signal with no item at all: every value nan, never an error
    r = BS.paired_bootstrap(conf, corr, ["ece", "auroc"], n_resamples=20, masks=empty)
    assert np.isnan(r.resamples[2]).all() and np.isnan(r.point[2]).all()
