"""The calibrated-random baseline, the Brier skill score, per-category summaries, repeated runs (studies 002/003),
and the refusal policies of the signal table, against hand-computed values and brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from confgrid.analysis.calibration_summary import (
    brier_skill_score,
    calibration_summary,
    random_baseline_brier,
    runs_summary,
)
from confgrid.flows.stages.grade import answer_rows
from confgrid.protocols.items import Item


def test_random_baseline_by_hand():
    # k = 4: (1/4)(3/4)^2 + (3/4)(1/4)^2 = 9/64 + 3/64 = 12/64 = 0.1875; k = 2: 0.25; k = 10: 0.09; k = 1: 0
    assert random_baseline_brier([4, 2, 10, 1]) == pytest.approx([0.1875, 0.25, 0.09, 0.0])
    assert np.isnan(random_baseline_brier([0])[0])
    # brute force: expected Brier of a guesser stating 1/k over a uniform random pick
    for k in (2, 3, 4, 5, 10):
        p = 1 / k
        assert random_baseline_brier([k])[0] == pytest.approx(p * (p - 1) ** 2 + (1 - p) * p ** 2)
    assert brier_skill_score(0.1875, 0.1875) == 0.0 and brier_skill_score(0.0, 0.1875) == 1.0
    assert brier_skill_score(0.375, 0.1875) == -1.0
    assert math.isnan(brier_skill_score(0.1, 0.0)) and math.isnan(brier_skill_score(0.1, float("nan")))


def _rows() -> pd.DataFrame:
    return pd.DataFrame({
        "setting": "m/d", "signal": "verbalized",
        "confidence": [0.9, 0.8, 0.25, 1.0, 0.0, 0.1],
        "correct": [1.0, 0.0, 0.0, 1.0, 0.0, 1.0],
        "n_options": [4, 4, 4, 4, 2, 2],
        "category": ["math", "math", "lookup", "lookup", "lookup", ""],
    })


def test_calibration_summary_by_hand():
    out = calibration_summary(_rows(), ["setting", "signal"], ["category"], n_bins=10)
    every = out[out["group"] == "all"].iloc[0]
    c = np.array([0.9, 0.8, 0.25, 1.0, 0.0, 0.1])
    y = np.array([1, 0, 0, 1, 0, 1.0])
    assert every["n"] == 6
    assert every["brier"] == pytest.approx(np.mean((c - y) ** 2))
    assert every["calibration_gap"] == pytest.approx(c.mean() - y.mean())
    assert every["baseline_brier"] == pytest.approx((4 * 0.1875 + 2 * 0.25) / 6)
    assert every["brier_skill_score"] == pytest.approx(1 - every["brier"] / every["baseline_brier"])
    # ECE by hand (10 equal-width bins, 1.0 in the last bin): bins 9 {0.9 y1, 1.0 y1}, 8 {0.8 y0}, 2 {0.25 y0},
    # 0 {0.0 y0}, 1 {0.1 y1}
    ece = (2 * abs(0.95 - 1) + abs(0.8 - 0) + abs(0.25 - 0) + abs(0.0 - 0) + abs(0.1 - 1)) / 6
    assert every["ece"] == pytest.approx(ece)
    cats = out[out["group"] == "category"].set_index("group_value")
    assert set(cats.index) == {"math", "lookup"}  # an empty category value has no row of its own
    assert cats.loc["math", "n"] == 2 and cats.loc["math", "accuracy"] == 0.5
    assert cats.loc["lookup", "brier"] == pytest.approx(np.mean([0.25 ** 2, 0.0, 0.0]))
    empty = calibration_summary(_rows().iloc[:0], ["setting", "signal"], ["category"])
    assert empty.empty and "brier_skill_score" in empty.columns


def test_runs_summary_matches_numpy():
    rows = []
    rng = np.random.default_rng(0)
    for r in (1, 2, 3):
        n = 20 + r
        rows.append(_rows().assign(answer_set=f"cb.run{r}").sample(n, replace=True, random_state=r))
    summ = calibration_summary(pd.concat(rows), ["setting", "answer_set", "signal"], [])
    out = runs_summary(summ, {"cb": ("cb.run1", "cb.run2", "cb.run3")}, ["setting", "signal", "group", "group_value"])
    row = out.iloc[0]
    per = summ.set_index("answer_set")
    assert row["runs"] == 3 and row["n_pooled"] == 21 + 22 + 23
    for m in ("brier", "ece", "accuracy"):
        v = per.loc[["cb.run1", "cb.run2", "cb.run3"], m].to_numpy()
        assert row[f"{m}_mean"] == pytest.approx(v.mean())
        assert row[f"{m}_sd"] == pytest.approx(np.std(v, ddof=1))
    one = runs_summary(summ[summ["answer_set"] == "cb.run1"], {"cb": ("cb.run1",)}, ["setting", "signal"])
    assert math.isnan(one.iloc[0]["brier_sd"])
    del rng


def _graded() -> tuple[pd.DataFrame, list[Item]]:
    items = [Item(f"q{i}", "d", "Q?", ("x",), "x", options=("w", "x", "y", "z"), gold_letter="B") for i in range(4)]
    items.append(Item("open", "d", "Q?", ("x",), "x"))
    g = pd.DataFrame({
        "item_id": ["q0", "q1", "q2", "q3", "open"],
        "answer": ["B", None, "A", None, None],
        "verbalized": pd.array([0.9, None, 0.6, None, None], dtype="Float64"),
        "parse_status": ["ok", "refusal", "ok", "unparseable", "unparseable"],
        "used_fallback": False,
    })
    g["correct_mc_letter"] = [1.0, np.nan, 0.0, np.nan, np.nan]
    g["correct"] = g["correct_mc_letter"]
    return g, items


def _used(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of one unit that enter the metrics (usable, on the answer's aligned items)."""
    from confgrid.analysis.signals import analyzed, conform

    return analyzed(conform(rows, setting="m/d")).rename(columns={"target": "correct"})


def test_refusal_drop_and_chance():
    from confgrid.protocols.json_output import chance_answer

    g, items = _graded()
    tokens = pd.DataFrame(columns=["item_id", "context_id"])
    rows = answer_rows(g, tokens, (), rule="mc_letter", refusal="drop", items=items)
    drop = _used(rows)
    assert sorted(drop["item_id"]) == ["q0", "q2"]
    v = rows.set_index("item_id")["status"]
    assert v.to_dict() == {"q0": "ok", "q1": "refusal", "q2": "ok", "q3": "unparseable", "open": "unparseable"}
    ch_rows = answer_rows(g, tokens, (), rule="mc_letter", refusal="chance", items=items, chance_seed=3)
    ch = _used(ch_rows)
    # the two MC refusals are kept at 1/4 with their seeded letters; the open item cannot be replaced
    assert sorted(ch["item_id"]) == ["q0", "q1", "q2", "q3"]
    assert ch_rows.set_index("item_id").loc["open", "status"] == "unparseable"
    rep = ch.set_index("item_id")
    assert rep.loc["q1", "confidence"] == 0.25 and rep.loc["q3", "confidence"] == 0.25 and rep.loc["q1", "replaced"]
    assert not rep.loc["q0", "replaced"] and rep.loc["q0", "confidence"] == 0.9
    for q in ("q1", "q3"):
        assert rep.loc[q, "correct"] == float(chance_answer(3, q, 4) == "B")
    with pytest.raises(ValueError, match="refusal='skip'"):
        answer_rows(g, tokens, (), rule="mc_letter", refusal="skip")


def test_chance_fills_token_signals_with_one_over_k():
    g, items = _graded()
    tokens = pd.DataFrame({"item_id": ["q0", "q2"], "context_id": "mc_bare", "token_score__geometric_mean": [0.7, 0.4]})
    ch = _used(answer_rows(g, tokens, ("mc_bare",), rule="mc_letter", refusal="chance", items=items))
    tok = ch[ch["signal"] == "token_mc_bare"].set_index("item_id")
    assert tok.loc["q0", "confidence"] == 0.7 and tok.loc["q1", "confidence"] == 0.25
    drop = _used(answer_rows(g, tokens, ("mc_bare",), rule="mc_letter", items=items))
    assert sorted(drop["item_id"].unique()) == ["q0", "q2"]


def test_hard_easy_cells_use_mas_or_the_category_accuracy():
    from scipy.stats import linregress

    from confgrid.flows.evaluate.calibration_tables import _BY, _hard_easy
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid({"models": [{"name": "m", "model": "confgrid-fixture"}],
                       "datasets": [{"name": "d", "adapter": "mmlu"}], "bootstrap": {"resamples": 200}})
    rng = np.random.default_rng(1)
    n = 60
    base = {k: "x" for k in _BY}
    life = pd.DataFrame({**base, "signal": "life", "confidence": rng.uniform(0, 1, n).round(2),
                         "correct": rng.uniform(0, 1, n), "mas": rng.uniform(0.1, 1, n), "category": "radius 5"})
    cats = pd.DataFrame({**base, "signal": "mc", "confidence": rng.uniform(0, 1, n), "correct": (rng.uniform(0, 1, n) > 0.5)
                         .astype(float), "mas": np.nan, "category": np.repeat(["a", "b", "c"], n // 3)})
    none = cats.assign(signal="flat", category="")  # no difficulty: no row
    slopes, bins = _hard_easy(pd.concat([life, cats, none], ignore_index=True), spec)
    assert set(slopes["signal"]) == {"life", "mc"}
    row = slopes.set_index("signal")
    ref = linregress(1 - life["mas"], life["confidence"] - life["correct"])
    assert row.loc["life", "slope"] == pytest.approx(ref.slope) and row.loc["life", "difficulty"] == "1 - MAS"
    assert row.loc["life", "lo"] <= row.loc["life", "slope"] <= row.loc["life", "hi"]
    acc = cats.groupby("category")["correct"].transform("mean")
    ref = linregress(1 - acc, cats["confidence"] - cats["correct"])
    assert row.loc["mc", "slope"] == pytest.approx(ref.slope)
    share = np.mean([round(100 * c, 6) % 5 == 0 for c in life["confidence"]])
    assert row.loc["life", "share_multiple_of_5"] == pytest.approx(share)
    assert len(bins[bins["signal"] == "life"]) == 10 and bins.loc[bins["signal"] == "life", "n"].sum() == n


def test_the_hard_easy_slope_resamples_its_units_own_draws():
    """Issue 20: the slope's interval is taken on the evaluator's resamples of the unit (the items in the unit's
    order, some of them outside this signal's answers), so it is paired with the unit's metrics."""
    from scipy.stats import linregress

    from confgrid.analysis.bootstrap import interval, resample_counts
    from confgrid.analysis.evaluation import Comparisons, plan_unit
    from confgrid.flows.evaluate.calibration_tables import _BY, _hard_easy
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid({"models": [{"name": "m", "model": "confgrid-fixture"}],
                       "datasets": [{"name": "d", "adapter": "mmlu"}], "bootstrap": {"resamples": 150}})
    rng = np.random.default_rng(2)
    n = 40
    base = {k: "x" for k in _BY}
    life = pd.DataFrame({**base, "signal": "life", "item_id": [f"q{i}" for i in range(n)],
                         "confidence": rng.uniform(0, 1, n).round(2), "correct": rng.uniform(0, 1, n),
                         "mas": rng.uniform(0.1, 1, n), "category": "radius 5"})
    items = np.array([f"q{i}" for i in range(n + 5)][::-1], dtype=object)  # another order, 5 more items
    labels = {**{c: "x" for c in _BY[:-1]}, "target_kind": "correct"}
    conf = np.full((1, n + 5), 0.5)
    u = plan_unit(labels, items, ["life"], conf, conf, np.ones((1, n + 5), dtype=bool), [""], {}, Comparisons(),
                  seed=77)
    slopes, _ = _hard_easy(life, spec, [u])
    W = resample_counts(n + 5, 150, 77)[:, pd.Index(items).get_indexer(life["item_id"])]
    o, x = (life["confidence"] - life["correct"]).to_numpy(), (1 - life["mas"]).to_numpy()
    ref = [linregress(x[np.repeat(np.arange(n), w.astype(int))], o[np.repeat(np.arange(n), w.astype(int))]).slope
           for w in W]
    lo, hi = interval(np.array(ref))
    row = slopes.iloc[0]
    assert (row["lo"], row["hi"]) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))
    # without the unit (or an item it lacks) the slope draws its own resamples, as before
    alone, _ = _hard_easy(life, spec)
    assert alone.iloc[0]["slope"] == row["slope"] and alone.iloc[0]["lo"] != row["lo"]
