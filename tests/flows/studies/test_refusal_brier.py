"""Study 003's refusal-aware Brier score as a view of any run (flows/studies/refusal_brier.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis.signals import conform
from confgrid.flows.studies import get_study
from confgrid.flows.studies.refusal_brier import refusal_brier


def _rows(conf, target, status, dataset="d"):
    n = len(conf)
    return conform(pd.DataFrame({"setting": f"m/{dataset}", "model": "m", "dataset": dataset, "answer_set": "main",
                                 "parse_policy": "strict", "refusal": "drop", "rule": "exact",
                                 "item_id": [f"i{j}" for j in range(n)], "signal": "verbalized", "kind": "verbalized",
                                 "confidence": conf, "target": target, "status": status}))


def test_refusals_are_scored_at_chance_not_dropped():
    sig = _rows([0.9, 0.2, np.nan, np.nan], [1.0, 1.0, np.nan, np.nan], ["ok", "ok", "refused", "no_confidence"])
    opts = pd.DataFrame({"dataset": "d", "item_id": ["i0", "i1", "i2", "i3"], "n_options": [4, 4, 4, 0]})
    r = refusal_brier(sig, opts).iloc[0]
    assert (r.n, r.n_refused, r.refusal_rate) == (4, 2, 0.5)
    assert r.brier_answered == pytest.approx((0.01 + 0.64) / 2)
    # the four-option refusal: 0.25 * 0.75 = 0.1875 (study 003's baseline); the open one: 0
    assert r.brier == pytest.approx((0.01 + 0.64 + 0.1875 + 0.0) / 4)
    assert r.baseline == pytest.approx((0.1875 * 3 + 0) / 4)


def test_it_is_a_registered_study_on_by_default():
    assert get_study("refusal_brier").tables == ("refusal_brier",)
    assert refusal_brier(pd.DataFrame(), pd.DataFrame()).empty
