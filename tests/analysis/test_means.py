"""Means over settings (analysis/means.py) against the per-setting oracle (tests/reference/summary.py), exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis.means import SUMMARY_COLUMNS, Kept, mean_gap, mean_shift, sides
from confgrid.analysis.signals import UNIT_COLUMNS
from reference import summary as SM

from test_summary import NAMES, make_results

METRICS = ("ece", "auroc", "kde_ece", "calibration_gap")
INFO = {s: {"kind": "verbalized" if s == "verbalized" else "token", "context": s, "aggregation": "g"} for s in NAMES}


def kept(results: dict, rule: str) -> Kept:
    return Kept.concat(Kept.of({**dict.fromkeys(UNIT_COLUMNS, ""), "setting": s, "rule": rule}, NAMES, INFO, r)
                       for s, r in results.items())


@pytest.fixture(scope="module")
def both():
    a = make_results(metrics=METRICS)
    b = make_results(metrics=METRICS, seed0=50)  # other data, the same resample seeds: paired with a
    return a, b, sides(Kept.concat([kept(a, "r"), kept(b, "r2")]))


def same(got: dict, want: pd.Series, cols) -> None:
    for c in cols:
        assert (got[c] == want[c]) or (np.isnan(got[c]) and np.isnan(want[c])), (c, got[c], want[c])


def test_means_equal_the_oracle_exactly(both):
    a, b, s = both
    at = lambda c, m, rule="r": s.where(rule=rule, context=c, metric=m)  # noqa: E731
    for m in METRICS:
        want = SM.summarize_shifts(a, [("bare", "guess")], [m]).iloc[0]
        same(mean_shift(s, at("bare", m), at("guess", m)), want, SUMMARY_COLUMNS)
        g = SM.summarize_gaps(a, ["answer"], [m]).iloc[0]
        same(mean_gap(s, at("answer", m)), g, ["point", "lo", "hi"])
        same(mean_shift(s, at("bare", m), at("bare", m, "r2")), SM.summarize_axis(a, b, "bare", [m]).iloc[0],
             SUMMARY_COLUMNS)
    for e in ("kde_ece", "calibration_gap", "auroc"):  # across metrics: the advantages oriented first
        want = SM.summarize_estimators(a, ["guess"], [e], base="ece", context_pair=("bare", "guess")).iloc[0]
        same(mean_shift(s, at("guess", "ece"), at("guess", e)), want, SUMMARY_COLUMNS)
        assert mean_shift(s, at("bare", e), at("guess", e))["n_flips"] == want["context_flips"]


def test_settings_pair_by_name(both):
    a, b, s = both
    frm = s.where(rule="r", context="bare", metric="ece")
    assert mean_shift(s, frm, frm.iloc[:0]) is None
    assert mean_shift(s, frm, s.where(rule="r", context="guess", metric="ece").iloc[1:])["n_settings"] == 2
    with pytest.raises(ValueError, match="two rows of one setting"):
        mean_shift(s, pd.concat([frm, frm]), frm)
