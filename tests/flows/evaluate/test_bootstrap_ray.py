"""The Ray Data bootstrap stage gives the in-process paired bootstrap's numbers, bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from confgrid.analysis.bootstrap import paired_bootstrap
from confgrid.analysis.metrics import UndefinedMetricWarning
from confgrid.flows.evaluate.bootstrap_ray import SettingInput, bootstrap_settings_ray

METRICS = ["ece", "auroc", "aurc", "brier"]


def _settings():
    rng = np.random.default_rng(7)
    # setting A: 3 signals, n = 9, one shared correctness vector with a single
    # wrong answer, so many resamples are one-class (AUROC undefined -> nan)
    corr_a = np.ones(9)
    corr_a[4] = 0.0
    conf_a = np.round(rng.random((3, 9)), 1)  # ties
    # setting B: 2 signals, n = 40, correctness per signal (graded values too)
    corr_b = (rng.random((2, 40)) < 0.6).astype(float)
    corr_b[1, :3] = 0.5
    conf_b = rng.random((2, 40))
    return {
        "A": (conf_a, corr_a, ["s0", "s1", "s2"], 11),
        "B": SettingInput(conf_b, corr_b, ["verbalized", "token"], 12345),
    }


def _reference(inp, n_resamples, chunk_size, n_bins):
    conf, corr, names, seed = (inp.confidence, inp.correct, inp.signal_names, inp.seed) \
        if isinstance(inp, SettingInput) else inp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return paired_bootstrap(conf, corr, METRICS, n_resamples=n_resamples, seed=seed,
                                chunk_size=chunk_size, n_bins=n_bins, signal_names=names)


def test_bit_identical_to_in_process(ray_local):
    settings = _settings()
    B, chunk = 250, 100  # 3 chunks, the last one half full
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        got = bootstrap_settings_ray(settings, METRICS, B, n_bins=5, chunk_size=chunk, num_workers=2)
    assert list(got) == ["A", "B"]
    for name, inp in settings.items():
        ref = _reference(inp, B, chunk, 5)
        res = got[name]
        assert res.resamples.shape == ref.resamples.shape == (len(ref.point), 4, B)
        assert res.resamples.dtype == np.float64
        assert np.array_equal(res.resamples, ref.resamples, equal_nan=True)
        assert np.array_equal(res.point, ref.point, equal_nan=True)
        assert res.metrics == ref.metrics and res.signal_names == ref.signal_names
        assert (res.n_resamples, res.seed, res.chunk_size, res.n_bins) == (B, ref.seed, chunk, 5)
    # the one-class resamples really occurred and stayed nan in both paths
    auroc_a = got["A"].resamples[:, METRICS.index("auroc")]
    assert np.isnan(auroc_a).any() and not np.isnan(auroc_a).all()
    assert not np.isnan(got["A"].resamples[:, METRICS.index("ece")]).any()


def test_every_registered_metric_bit_identical(ray_local):
    from confgrid.analysis.registry import METRICS

    # vectorized kernels and the per-resample fallback (smoothed_ece); smece
    # takes the same fallback path but costs ~50 ms a call through relplot
    names = sorted(m for m in METRICS if m != "smece")
    settings = _settings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        got = bootstrap_settings_ray(settings, names, 30, n_bins=5, chunk_size=20, num_workers=2)
        for name, inp in settings.items():
            conf, corr, sig, seed = inp if isinstance(inp, tuple) else (
                inp.confidence, inp.correct, inp.signal_names, inp.seed)
            ref = paired_bootstrap(conf, corr, names, n_resamples=30, seed=seed, chunk_size=20, n_bins=5,
                                   signal_names=sig)
            assert np.array_equal(got[name].resamples, ref.resamples, equal_nan=True), name
            assert np.array_equal(got[name].point, ref.point, equal_nan=True), name


def test_worker_count_does_not_change_numbers(ray_local):
    settings = {"B": _settings()["B"]}
    one = bootstrap_settings_ray(settings, ["auroc", "ece"], 120, chunk_size=50, num_workers=1)["B"]
    two = bootstrap_settings_ray(settings, ["auroc", "ece"], 120, chunk_size=50, num_workers=2)["B"]
    assert np.array_equal(one.resamples, two.resamples, equal_nan=True)


def test_one_setting_as_a_tuple_keeps_its_names(ray_local):
    conf, corr, names, seed = _settings()["B"].confidence, _settings()["B"].correct, ["v", "t"], 3
    a = paired_bootstrap(conf, corr, ["aurc", "brier"], n_resamples=130, seed=seed, chunk_size=60, n_bins=10,
                         signal_names=names)
    b = bootstrap_settings_ray({"setting": (conf, corr, names, seed, None)}, ["aurc", "brier"], 130, n_bins=10,
                               chunk_size=60)["setting"]
    assert np.array_equal(a.resamples, b.resamples, equal_nan=True)
    assert np.array_equal(a.point, b.point)
    assert b.signal_names == ["v", "t"]


def test_setting_without_rows_is_all_nan_without_ray_work():
    with pytest.warns(UndefinedMetricWarning):
        got = bootstrap_settings_ray({"empty": (np.zeros((2, 0)), np.zeros(0), None, 0)}, ["ece"], 10)
    assert got["empty"].resamples.shape == (2, 1, 10) and np.isnan(got["empty"].resamples).all()


def test_errors_name_the_setting_before_any_ray_work():
    bad = {"ok": (np.full((1, 3), 0.5), np.ones(3), None, 0), "bad": (np.array([[0.2, 1.5]]), np.ones(2), None, 0)}
    with pytest.raises(ValueError, match=r"setting 'bad'.*\[0, 1\]"):
        bootstrap_settings_ray(bad, ["ece"], 10)
    with pytest.raises(ValueError, match="unknown metric 'nope'; allowed: aurc, auroc"):
        bootstrap_settings_ray({"ok": bad["ok"]}, ["nope"], 10)
    with pytest.raises(ValueError, match="num_workers"):
        bootstrap_settings_ray({"ok": bad["ok"]}, ["ece"], 10, num_workers=0)
    with pytest.raises(ValueError, match=r"settings\['ok'\] must be \(confidence"):
        bootstrap_settings_ray({"ok": (np.ones(3), np.ones(3))}, ["ece"], 10)


def test_tasks_spanning_settings_and_chunks_bit_identical(ray_local, monkeypatch):
    # one worker, few tasks: every task evaluates chunks of several settings
    import confgrid.flows.evaluate.bootstrap_ray as BR

    monkeypatch.setattr(BR, "TASKS_PER_WORKER", 2)
    settings = _settings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        got = bootstrap_settings_ray(settings, METRICS, 170, n_bins=10, chunk_size=40, num_workers=1)
    for name, inp in settings.items():
        ref = _reference(inp, 170, 40, 10)
        assert np.array_equal(got[name].resamples, ref.resamples, equal_nan=True)


def test_a_setting_with_its_own_metrics_in_the_same_job(ray_local):
    """Issue 20: a unit graded against another target (study 004's estimators: Brier, ECE, Spearman against the
    expected accuracy) joins the run's one Ray Data job under its own metrics, bit-identical to in process."""
    settings = _settings()
    rng = np.random.default_rng(3)
    mu = np.round(rng.random(30) * 4) / 4  # a graded target: expected accuracy over 4 samples
    own = ["brier", "ece", "spearman"]
    settings["C"] = SettingInput(np.round(rng.random((2, 30)), 1), mu, ["vb", "sc_k2"], 99, metrics=own)
    B, chunk = 120, 50
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        got = bootstrap_settings_ray(settings, METRICS, B, chunk_size=chunk, num_workers=2)
        ref_c = paired_bootstrap(settings["C"].confidence, mu, own, n_resamples=B, seed=99, chunk_size=chunk,
                                 signal_names=["vb", "sc_k2"])
        ref_a = _reference(settings["A"], B, chunk, 10)
    assert got["C"].metrics == ref_c.metrics == own and got["A"].metrics == ref_a.metrics == METRICS
    assert np.array_equal(got["C"].resamples, ref_c.resamples, equal_nan=True)
    assert np.array_equal(got["A"].resamples, ref_a.resamples, equal_nan=True)
    assert np.isfinite(got["C"].resamples[:, 2]).all()  # Spearman through its weighted kernel


def test_an_ace_unit_joins_the_same_job_bit_identical(ray_local):
    """Issue 20: a cell of study 001's comparison (distribution-aligned cells, candidate rows as clusters, its own
    metrics and resample count) is a unit of the one Ray Data job, bit-identical to in process."""
    import ace_example as EX
    from confgrid.analysis.ace import candidates as CA
    from confgrid.analysis.ace import frame as F
    from confgrid.analysis.ace import views as V
    from confgrid.analysis.ace.units import ace_unit
    from confgrid.analysis.evaluation import bootstrap_unit
    from confgrid.flows.evaluate.bootstrap_ray import bootstrap_units

    rows = EX.rows()
    cell = F.matched_cells(rows).cells[0]
    ca = CA.ca_cell(cell, CA.validate_ratings(EX.ratings(CA.candidate_pool(rows, EX.normalize))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        point = V.cell_views(cell)
        unit = ace_unit(cell, point, ["ece", "brier"], ("ia", "da"), V.DEFAULT_OPTIONS, ca, n_resamples=130, seed=4)
        assert unit.reweight is not None and unit.groups is not None
        got = bootstrap_units([unit], METRICS, 70, chunk_size=50, use_ray=True, num_workers=2)[0]
        ref = bootstrap_unit(unit, METRICS, 70, chunk_size=50)
    assert got.n_resamples == ref.n_resamples == 130 and got.metrics == ["ece", "brier"]
    assert np.array_equal(got.point, ref.point, equal_nan=True)
    assert np.array_equal(got.resamples, ref.resamples, equal_nan=True)
