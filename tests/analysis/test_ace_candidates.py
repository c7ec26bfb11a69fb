"""Candidate-aligned calibration (CA) and self-preference of study 001 (ACE)."""

from __future__ import annotations

import warnings

import ace_example as EX
import numpy as np
import pandas as pd
import pytest
from confgrid.analysis.ace import ACEInputError, ace_tables
from confgrid.analysis.ace import candidates as CA
from confgrid.analysis.ace import weighted as W
from confgrid.analysis.ace import frame as F


@pytest.fixture(scope="module")
def pool():
    return CA.candidate_pool(EX.rows(), EX.normalize)


@pytest.fixture(scope="module")
def example():
    rows = EX.rows()
    return ace_tables(rows, EX.ratings(CA.candidate_pool(rows, EX.normalize)), n_bootstrap=200, seed=0)


def test_pool_dedupes_keeps_the_first_surface_form_and_records_producers(pool):
    assert len(pool) == 17 and list(pool.columns) == list(CA.POOL_COLUMNS)
    one = pool[pool["item_id"] == "1"]
    assert one[["candidate", "surface", "producers", "label"]].values.tolist() == [["gold", "Gold.", ("A", "B"), 1.0]]
    seven = pool[pool["item_id"] == "7"]
    assert seven[["candidate", "producers", "label"]].values.tolist() == [["gold", ("A",), 1.0], ["wrong", ("B",), 0.0]]
    twelve = pool[pool["item_id"] == "12"]
    assert twelve[["candidate", "surface", "producers"]].values.tolist() == [["same", "same", ("A", "B")]]
    assert pool.groupby("item_id").size().sum() == 17


def test_pool_skips_empty_answers_and_checks_labels():
    rows = EX.rows()
    rows.loc[(rows["model"] == "B") & (rows["item_id"] == "10"), "answer"] = " . "  # normalizes to ""
    rows.loc[(rows["model"] == "B") & (rows["item_id"] == "11"), "answer"] = None
    p = CA.candidate_pool(rows, EX.normalize)
    assert p[p["item_id"].isin(["10", "11"])]["producers"].tolist() == [("A",), ("A",)]
    clash = EX.rows()
    clash.loc[(clash["model"] == "B") & (clash["item_id"] == "1"), "correct"] = 0.0  # same candidate, other grade
    with pytest.raises(ACEInputError, match=r"candidate 'gold' of item '1' \(qa\)"):
        CA.candidate_pool(clash, EX.normalize)
    seen = []
    graded = CA.candidate_pool(clash, EX.normalize, grade=lambda d, i, s: seen.append((d, i, s)) or 0.5)
    assert (graded["label"] == 0.5).all() and ("qa", "1", "Gold.") in seen
    with pytest.raises(ACEInputError, match="label"):
        CA.candidate_pool(EX.rows(), EX.normalize, grade=lambda d, i, s: 2.0)
    with pytest.raises(ACEInputError, match="answer"):
        CA.candidate_pool(EX.rows().drop(columns="answer"), EX.normalize)


def test_ratings_validation():
    r = EX.ratings(CA.candidate_pool(EX.rows(), EX.normalize))
    s = r.assign(producers=["|".join(p) for p in r["producers"]])
    assert CA.validate_ratings(s)["producers"].tolist() == r["producers"].tolist()
    with pytest.raises(ACEInputError, match=r"missing required column\(s\) \['rater'\]"):
        CA.validate_ratings(r.drop(columns="rater"))
    with pytest.raises(ACEInputError, match="duplicate candidate rating"):
        CA.validate_ratings(pd.concat([r, r.iloc[[0]]]))
    bad = r.copy()
    bad.loc[5, "signal"] = -0.1
    with pytest.raises(ACEInputError, match="signal: candidate row 5"):
        CA.validate_ratings(bad)
    bad = r.copy()
    bad.loc[0, "label"] = 0.0  # the same candidate labelled 1.0 in B's row
    with pytest.raises(ACEInputError, match="different label"):
        CA.validate_ratings(bad)


def test_ca_values_by_hand(example):
    g = example.gaps.query("view == 'ca'").set_index("metric")
    assert g.loc["ece", "value_a"] == pytest.approx(6.5 / 17, abs=1e-12)
    assert g.loc["ece", "value_b"] == pytest.approx(1.2 / 17, abs=1e-12)
    assert g.loc["brier", "value_a"] == pytest.approx(4.01 / 17, abs=1e-12)
    assert g.loc["brier", "value_b"] == pytest.approx(4.32 / 17, abs=1e-12)
    assert g.loc["ece", "n_a"] == 17 and bool(g.loc["ece", "reversal"]) and not bool(g.loc["brier", "reversal"])
    pats = example.patterns.set_index("metric")["pattern"]
    assert pats["ece"] == "all_three" and pats["brier"] == "da_ia"  # by hand: ace_example.py


def test_self_preference_by_hand(example):
    sp = example.self_preference.set_index("rater")
    assert sp.loc["A", "n_differ"] == 5 and sp.loc["A", "diff"] == pytest.approx(0.12, abs=1e-12)
    assert sp.loc["A", "mean_own"] == pytest.approx((3 * 0.9 + 2 * 0.7) / 5)
    assert sp.loc["B", "diff"] == 0.0 and sp.loc["B", "lo"] == 0.0 and sp.loc["B", "hi"] == 0.0
    assert 0.0 <= sp.loc["A", "lo"] <= 0.12 <= sp.loc["A", "hi"] <= 0.2 + 1e-12
    assert sp.loc["A", "other"] == "B" and not sp.loc["B", "excludes_zero"]


def test_pair_pool_ignores_the_other_models_candidates():
    rows = EX.rows()
    c_rows = rows[rows["model"] == "B"].assign(model="C")
    c_rows.loc[c_rows["item_id"] == "1", ["answer", "correct"]] = ["copper", 0.0]
    rows3 = pd.concat([rows, c_rows], ignore_index=True)
    pool3 = CA.candidate_pool(rows3, EX.normalize)
    assert len(pool3) == 18
    r3 = pd.concat([EX.ratings(pool3), EX.ratings(pool3).query("rater == 'B'").assign(rater="C")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = ace_tables(rows3, r3, pairs=[("A", "B", "size"), ("A", "C", "size")], n_bootstrap=0)
    ab = t.gaps.query("view == 'ca' and model_b == 'B'").set_index("metric")
    ac = t.gaps.query("view == 'ca' and model_b == 'C'").set_index("metric")
    assert ab.loc["ece", "value_a"] == pytest.approx(6.5 / 17) and ab.loc["ece", "n_a"] == 17
    assert ac.loc["ece", "n_a"] == 18  # A and C's pool: copper (C) next to gold (A) on item 1
    assert "bootstrap skipped: n_bootstrap = 0" in t.messages and t.bootstrap.empty


def test_unrated_pairs_and_missing_ratings():
    rows = EX.rows()
    cell = F.matched_cells(rows).cells[0]
    r = CA.validate_ratings(EX.ratings(CA.candidate_pool(rows, EX.normalize)))
    drop = (r["rater"] == "B") & (r["item_id"] == "7") & (r["candidate"] == "wrong")
    ca = CA.ca_cell(cell, r[~drop])
    assert (ca.n_pairs, ca.n_unrated) == (16, 1)
    assert CA.ca_cell(cell, r.assign(method="p_true")) is None
    t = ace_tables(rows, EX.ratings(CA.candidate_pool(rows, EX.normalize), method="p_true"), n_bootstrap=0)
    assert any("CA skipped, no candidate ratings" in m for m in t.messages)
    assert "ca" not in set(t.gaps["view"])
    t2 = ace_tables(rows, None, n_bootstrap=0)
    assert "CA skipped: no candidate-ratings table was given" in t2.messages
    assert t2.patterns["views_used"].iloc[0] == "ia+da" and t2.self_preference.empty


def test_ambiguous_own_candidate_is_left_out_of_self_preference():
    # A answers item 7 differently under a second method: two own candidates there
    rows = pd.concat([EX.rows(), EX.rows(method="p_true")], ignore_index=True)
    rows.loc[(rows["method"] == "p_true") & (rows["model"] == "A") & (rows["item_id"] == "7"), "answer"] = "silver"
    rows.loc[(rows["method"] == "p_true") & (rows["model"] == "A") & (rows["item_id"] == "7"), "correct"] = 0.0
    pool = CA.candidate_pool(rows, EX.normalize)
    cell = next(c for c in F.matched_cells(rows).cells if c.method == "verbalized")
    ca = CA.ca_cell(cell, CA.validate_ratings(EX.ratings(pool)))
    sa, _ = CA.self_preference_data(ca, cell)
    # left: items 8, 9 (0.9 - 0.7 each) and 10, 11 (0.7 - 0.7): 0.4 / 4
    assert sa.n_ambiguous == 1 and sa.item_index.size == 4 and sa.mean_diff == pytest.approx(0.4 / 4, abs=1e-12)


def test_graded_candidate_labels():
    pool = CA.candidate_pool(EX.rows(), EX.normalize).assign(label=lambda d: np.where(d["label"] == 1, 0.75, 0.25))
    rows = EX.rows()
    cell = F.matched_cells(rows).cells[0]
    ca = CA.ca_cell(cell, CA.validate_ratings(EX.ratings(pool.assign(label=1.0)).assign(label=np.tile(pool["label"], 2))))
    v = {x.metric: x for x in CA.ca_views(ca)}
    # rater B: 0.6 on all 17 pairs, labels 0.75 (9) and 0.25 (8): ECE = |0.6 - (9 * 0.75 + 8 * 0.25) / 17|
    assert v["ece"].value_b == pytest.approx(abs(0.6 - (9 * 0.75 + 8 * 0.25) / 17), abs=1e-12)
    assert v["brier"].value_b == pytest.approx((9 * 0.15 ** 2 + 8 * 0.35 ** 2) / 17, abs=1e-12)
    assert v["ece"].value_a == W.weighted_ece(ca.signal_a, ca.label)


def test_the_comparison_round_trips_through_the_signal_table(example):
    """Issue 39: own-answer rows and candidate ratings as signal rows (answer set ``comparison``) give back the same
    inputs, so the same tables."""
    from confgrid.analysis.ace.units import COMPARISON_SET, comparison_inputs, signal_rows, without_comparison
    from confgrid.analysis.signals import check

    rows = EX.rows()
    table = signal_rows(rows, EX.ratings(CA.candidate_pool(rows, EX.normalize)))
    check(table)
    assert set(table["answer_set"]) == {COMPARISON_SET} and without_comparison(table).empty
    own, ratings = comparison_inputs(table)
    got = ace_tables(own, ratings, n_bootstrap=200, seed=0)
    for name, df in example.tables().items():
        pd.testing.assert_frame_equal(got.tables()[name], df, obj=name)
    ratings = EX.ratings(CA.candidate_pool(rows, EX.normalize))
    ratings["producers"] = [tuple(f"{m}|x" for m in p) for p in ratings["producers"]]
    with pytest.raises(ValueError, match=r"producers: model name\(s\) \[.*\] hold '\|', which joins"):
        signal_rows(rows, ratings)
