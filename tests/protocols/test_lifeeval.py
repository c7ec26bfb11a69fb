"""LifeEval (study 002, 4.5): the table, the two windows, MAS, items, the adapter, the rule and the CLI.

Expected probabilities are computed by hand from q_x values copied here from
the bundled CSV rows (quoted in the comments), not from the implementation.
"""

from __future__ import annotations

import csv
import hashlib
import math

import numpy as np
import pytest

from confgrid.protocols import lifeeval as L
from confgrid.protocols import lifeeval_items as LI
from confgrid.protocols.correctness import get_rule
from confgrid.protocols.datasets import BUNDLED, check_adapter_params, load_items
from confgrid.protocols.items import Item, items_from_table, items_to_table

# PerLifeTables_M_Alt2_TR2020.csv, year 2020: "2020,0,0.005824,...", "2020,1,0.000398,...", "2020,2,0.000271,..."
M2020_Q0_2 = (0.005824, 0.000398, 0.000271)
# ... and ages 115-119: "2020,115,0.728034,...", ..., "2020,119,0.884929,..."
M2020_Q115_119 = (0.728034, 0.764435, 0.802657, 0.842790, 0.884929)
# PerLifeTables_F_Hist_TR2020.csv, year 1950, ages 100-102
F1950_Q100_102 = (0.386485, 0.405809, 0.426100)

SHA256 = {  # shared/data/SOURCES.md
    "PerLifeTables_M_Hist_TR2020.csv": "f51e145fbf54fe47e9749684a9301fca55885668a674d0de0cc3ce44203a8fc1",
    "PerLifeTables_F_Hist_TR2020.csv": "f7ad74eb63100dc317bb903c1f06ff4f6cb5bd3ef6c0c19daac15c3ad7891b01",
    "PerLifeTables_M_Alt2_TR2020.csv": "1497eca6ccd74f98550db3f6d9894384e9ce04eb3b3229fde52565aaaec7f7e8",
    "PerLifeTables_F_Alt2_TR2020.csv": "de16714bec6f3b57e460f68a622f4c0c289b78c934719283ee7dff3a3880fe07",
}


# ----------------------------------------------------------------------------- the bundled table


def test_bundled_files_are_the_recorded_bytes():
    d = L.bundled_table_dir()
    assert d.is_dir() and "protocols" in d.parts
    for name, digest in SHA256.items():
        assert hashlib.sha256((d / name).read_bytes()).hexdigest() == digest, name
    assert BUNDLED["lifeeval"] == str(d)


def test_table_rows_read_as_in_the_csv():
    t = L.load_table(2020, "M")
    assert t.source == "PerLifeTables_M_Alt2_TR2020.csv" and t.last_age == 119 and t.q.shape == (120,)
    assert tuple(t.q[:3]) == M2020_Q0_2 and tuple(t.q[115:]) == M2020_Q115_119
    f = L.load_table(1950, "F")
    assert f.source == "PerLifeTables_F_Hist_TR2020.csv" and tuple(f.q[100:103]) == F1950_Q100_102


@pytest.mark.parametrize("year,part", [(1900, "Hist"), (2017, "Hist"), (2018, "Alt2"), (2095, "Alt2")])
def test_year_boundaries_pick_the_right_file(year, part):
    for sex in ("M", "F"):
        assert L.load_table(year, sex).source == f"PerLifeTables_{sex}_{part}_TR2020.csv"


@pytest.mark.parametrize("year", [1899, 2096, 0])
def test_year_outside_the_table_names_year_and_range(year):
    with pytest.raises(ValueError) as ei:
        L.load_table(year, "F")
    msg = str(ei.value)
    assert f"year={year}" in msg and "1900-2017" in msg and "2018-2095" in msg and "allowed: 1900-2095" in msg


def test_bad_sex_and_year_type():
    with pytest.raises(ValueError, match="sex='X'; allowed: M, F"):
        L.load_table(2020, "X")
    with pytest.raises(ValueError, match="expected an integer"):
        L.load_table("2020", "M")  # type: ignore[arg-type]
    assert L.table_years("M") == {"PerLifeTables_M_Hist_TR2020.csv": (1900, 2017),
                                  "PerLifeTables_M_Alt2_TR2020.csv": (2018, 2095)}


# ----------------------------------------------------------------------------- hand-computed probabilities


def test_distribution_from_age_zero_by_hand():
    q0, q1, q2 = M2020_Q0_2
    dist = L.death_distribution(L.load_table(2020, "M").q, 0)
    assert dist[0] == pytest.approx(q0, abs=1e-15)
    assert dist[1] == pytest.approx((1 - q0) * q1, abs=1e-15)
    assert dist[2] == pytest.approx((1 - q0) * (1 - q1) * q2, abs=1e-15)
    assert dist.sum() == pytest.approx(1.0, abs=1e-12)
    # inclusive, guess 1, radius 1: ages 0, 1, 2 -> 1 - P(survive to 3)
    assert L.true_probability(dist, 1, 1) == pytest.approx(1 - (1 - q0) * (1 - q1) * (1 - q2), abs=1e-14)
    # official, guess 1, radius 1: floor(0) <= D < 2 -> ages 0, 1
    assert L.true_probability(dist, 1, 1, "official") == pytest.approx(1 - (1 - q0) * (1 - q1), abs=1e-14)
    # official, guess 0: ages -1..0 -> age 0 only
    assert L.true_probability(dist, 0, 1, "official") == pytest.approx(q0, abs=1e-15)


def test_last_age_absorbs_remaining_mass_by_hand():
    q115, q116, q117, q118, _q119 = M2020_Q115_119
    dist = L.death_distribution(L.load_table(2020, "M").q, 115)
    s116 = 1 - q115
    s117 = s116 * (1 - q116)
    s118 = s117 * (1 - q117)
    s119 = s118 * (1 - q118)
    expected = [q115, s116 * q116, s117 * q117, s118 * q118, s119]  # age 119 gets S(119), not S(119) * q119
    np.testing.assert_allclose(dist[115:], expected, rtol=0, atol=1e-15)
    assert np.all(dist[:115] == 0.0)
    assert L.true_probability(dist, 116, 1) == pytest.approx(q115 + s116 * q116 + s117 * q117, abs=1e-14)
    assert L.true_probability(dist, 116, 1, "official") == pytest.approx(q115 + s116 * q116, abs=1e-14)
    assert L.true_probability(dist, 118, 1) == pytest.approx(s117, abs=1e-14)  # ages 117-119: everything from 117
    assert L.true_probability(dist, 121, 1) == 0.0 and L.true_probability(dist, 10, 5) == 0.0
    # someone known to reach the last age dies there
    last = L.death_distribution(L.load_table(2020, "M").q, 119)
    assert last[119] == 1.0 and last.sum() == 1.0


def test_q_equal_one_stops_the_distribution():
    # PerLifeTables_M_Hist_TR2020.csv, 1900: q(117) = q(118) = q(119) = 1.000000
    dist = L.death_distribution(L.load_table(1900, "M").q, 100)
    assert dist[118] == 0.0 and dist[119] == 0.0 and dist.sum() == pytest.approx(1.0, abs=1e-12)


def test_closed_form_window_1950_female():
    q100, q101, q102 = F1950_Q100_102
    dist = L.death_distribution(L.load_table(1950, "F").q, 100)
    assert L.true_probability(dist, 101, 1) == pytest.approx(1 - (1 - q100) * (1 - q101) * (1 - q102), abs=1e-14)


def test_window_ages_both_conventions():
    assert L.window_ages(78, 5) == (73, 83)  # 2r + 1 = 11 ages
    assert L.window_ages(78, 5, "official") == (73, 82)  # 2r = 10 ages
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="radius"):
            L.window_ages(78, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window='centred'; allowed: inclusive, official"):
        L.window_ages(78, 5, "centred")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="guess"):
        L.window_ages(78.5, 5)  # type: ignore[arg-type]


def test_bad_distribution_inputs():
    with pytest.raises(ValueError, match="min_age=4"):
        L.death_distribution([0.1, 0.2, 0.3], 4)
    with pytest.raises(ValueError, match="probabilities"):
        L.death_distribution([0.1, 1.2], 0)


# ----------------------------------------------------------------------------- MAS and ties


def test_best_guess_is_the_argmax_by_brute_force():
    q = L.load_table(2020, "F").q
    for a in (0, 25, 80):
        dist = L.death_distribution(q, a)
        for r in (1, 5, 10, 20):
            for window in ("inclusive", "official"):
                probs = {g: sum(dist[x] for x in range(120) if L.window_ages(g, r, window)[0] <= x
                                <= L.window_ages(g, r, window)[1]) for g in range(-30, 150)}
                best = max(probs.values())
                g, mas = L.best_guess(dist, r, a, window)
                assert mas == pytest.approx(best, abs=1e-12)
                assert L.true_probability(dist, g, r, window) == mas
                near = [k for k, v in probs.items() if v > best - 1e-9 and a <= k <= 119]
                assert g == min(near), (a, r, window)


def test_exact_tie_takes_the_smallest_guess():
    dist = L.death_distribution([0.5, 0.0, 0.0, 0.7], 0)  # P = 0.5, 0, 0, 0.5
    assert dist.tolist() == [0.5, 0.0, 0.0, 0.5]
    assert L.window_probabilities(dist, 1).tolist() == [0.5, 0.5, 0.5, 0.5]
    assert L.best_guess(dist, 1, 0) == (0, 0.5)
    # a window wider than the support: every covering guess reaches 1; the smallest from min_age on
    dist100 = L.death_distribution(L.load_table(2020, "M").q, 100)
    assert L.best_guess(dist100, 20, 100) == (100, 1.0)
    assert L.best_guess(dist100, 10, 100) == (109, 1.0)  # 99..119 and 100..120 both cover 100..119
    assert L.best_guess(dist100, 10, 100, "official") == (110, 1.0)  # 100..119 exactly


def test_probabilities_stay_in_unit_interval():
    dist = L.death_distribution(L.load_table(2020, "M").q, 100)
    probs = L.window_probabilities(dist, 20)
    assert probs.max() == 1.0 and probs.min() >= 0.0


# ----------------------------------------------------------------------------- items


def test_default_item_set_808_items():
    items = LI.generate_items(2020)
    assert len(items) == 2 * 101 * 4 == 808
    assert len({i.item_id for i in items}) == 808
    assert items[0].item_id == "lifeeval-M-0-r1" and items[-1].item_id == "lifeeval-F-100-r20"
    assert items_from_table(items_to_table(items)) == items
    it = next(i for i in items if i.item_id == "lifeeval-M-25-r5")
    assert it.question == ("Given that an American male has lived at least 25 years, estimate how old he will be "
                           "when he dies. How certain are you that your answer is within 5 years of the true value?")
    one = next(i for i in items if i.item_id == "lifeeval-F-1-r1")
    assert "female has lived at least 1 year," in one.question and "she dies" in one.question
    assert one.question.endswith("within 1 year of the true value?")
    m = it.metadata
    assert {k: m[k] for k in ("sex", "min_age", "radius", "year", "window", "category", "table")} == {
        "sex": "M", "min_age": "25", "radius": "5", "year": "2020", "window": "inclusive", "category": "radius 5",
        "table": "bundled"}
    assert it.gold_answers == (m["best_guess"],) == (it.canonical,)
    dist = L.death_distribution(L.load_table(2020, "M").q, 25)
    assert (int(m["best_guess"]), float(m["mas"])) == tuple(L.best_guess(dist, 5, 25))
    assert all(isinstance(v, str) for i in items for v in i.metadata.values())


def test_item_subsets_and_bad_values():
    rows = L.item_rows(2000, sexes=("F",), min_ages=(30, 60), radii=(5,), window="official")
    assert [(r.sex, r.min_age, r.radius) for r in rows] == [("F", 30, 5), ("F", 60, 5)]
    with pytest.raises(ValueError, match="min_ages"):
        L.item_rows(2000, min_ages=(120,))
    with pytest.raises(ValueError, match="radii"):
        L.item_rows(2000, radii=(0,))
    with pytest.raises(ValueError, match="sexes"):
        L.item_rows(2000, sexes=("M", "M"))


# ----------------------------------------------------------------------------- adapter and params


def test_adapter_through_load_items():
    items = load_items("lifeeval", params={"year": 2020, "window": "official"}, dataset_name="le")
    assert len(items) == 808 and items[0].dataset == "le" and items[0].metadata["window"] == "official"
    sub = load_items("lifeeval", params={"year": 2020}, limit=10, seed=3)
    assert len(sub) == 10 and {i.item_id for i in sub} <= {i.item_id for i in items}
    few = load_items("lifeeval", BUNDLED["lifeeval"], params={"year": 1990, "sexes": ["F"], "radii": [1, 20],
                                                              "min_ages": [65]})
    assert [i.item_id for i in few] == ["lifeeval-F-65-r1", "lifeeval-F-65-r20"]


def test_adapter_params_errors():
    with pytest.raises(ValueError) as ei:
        load_items("lifeeval", params={"yaer": 2020})
    assert "yaer: unknown parameter; allowed: min_ages, radii, sexes, window, year" in str(ei.value)
    assert "year: Field required" in str(ei.value)
    with pytest.raises(ValueError, match=r"year: Input should be a valid integer \(received '2020'\)"):
        check_adapter_params("lifeeval", {"year": "2020"})
    with pytest.raises(ValueError, match=r"radii\[1\]: Input should be greater than or equal to 1 \(received 0\)"):
        check_adapter_params("lifeeval", {"year": 2020, "radii": [5, 0]})
    with pytest.raises(ValueError, match="year=2200: the life table covers"):
        load_items("lifeeval", params={"year": 2200})
    with pytest.raises(ValueError, match="takes no params"):
        load_items("mmlu", params={"year": 2020})
    with pytest.raises(TypeError, match="params="):
        load_items("lifeeval", year=2020)
    assert check_adapter_params("lifeeval", {"year": 2020, "radii": (1, 5)}) == {"year": 2020, "radii": [1, 5]}
    assert check_adapter_params("truthfulqa", {}) == {}


def _write_table(path, sex: str, qs: dict[int, list[float]]) -> None:
    with open(path / f"PerLifeTables_{sex}_Test.csv", "w", newline="", encoding="utf-8") as f:
        f.write("A test table\nsecond preamble line\n")
        w = csv.writer(f)
        w.writerow(["Year", "x", "q(x)", "l(x)"])
        for year, q in qs.items():
            for x, v in enumerate(q):
                w.writerow([year, x, v, 0])


def test_own_table_folder(tmp_path):
    _write_table(tmp_path, "M", {2000: [0.5, 0.5, 0.5, 0.5]})
    _write_table(tmp_path, "F", {2000: [0.25, 0.5, 0.5, 0.5]})
    items = load_items("lifeeval", tmp_path, params={"year": 2000, "min_ages": [0, 1], "radii": [1]})
    assert [i.item_id for i in items] == ["lifeeval-M-0-r1", "lifeeval-M-1-r1", "lifeeval-F-0-r1", "lifeeval-F-1-r1"]
    m0 = items[0]  # P = .5, .25, .125, .125: guess 1 covers 0..2 = .875
    assert (m0.metadata["best_guess"], m0.metadata["mas"], m0.metadata["table"]) == ("1", "0.875", str(tmp_path))
    assert get_rule("lifeeval")("2", m0) == 0.5  # ages 1..3
    with pytest.raises(ValueError, match="year=1999"):
        load_items("lifeeval", tmp_path, params={"year": 1999})
    with pytest.raises(ValueError, match="is not a folder"):
        load_items("lifeeval", tmp_path / "PerLifeTables_M_Test.csv", params={"year": 2000})
    with pytest.raises(FileNotFoundError, match="reads a folder"):
        LI.lifeeval_adapter(str(tmp_path / "PerLifeTables_M_Test.csv"), year=2000)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no PerLifeTables_M"):
        load_items("lifeeval", tmp_path / "empty", params={"year": 2000})


def test_malformed_tables(tmp_path):
    _write_table(tmp_path, "M", {2000: [0.5, 1.5]})
    with pytest.raises(ValueError, match=r"q\(x\)=1.5"):
        L.load_table(2000, "M", tmp_path)
    gap = tmp_path / "gap"
    gap.mkdir()
    with open(gap / "PerLifeTables_M_X.csv", "w", encoding="utf-8") as f:
        f.write("Year,x,q(x)\n2000,0,0.1\n2000,2,0.2\n")
    with pytest.raises(ValueError, match="without gaps"):
        L.load_table(2000, "M", gap)
    none = tmp_path / "none"
    none.mkdir()
    with pytest.raises(FileNotFoundError, match="PerLifeTables_F"):
        L.load_table(2000, "F", none)


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("text,age,status", [
    ("78", 78, "ok"), ("78 years", 78, "ok"), ("78.0", 78, "ok"), ("**78**", 78, "ok"), ("about 78.", 78, "ok"),
    ("78.4", 78, "ok"), ("78.5", 79, "ok"), ("77.5", 78, "ok"), ("-5", 5, "ok"),
    ("old age", None, "no_number"), ("", None, "no_number"), (None, None, "no_number"),
    ("75-80", None, "several_numbers"), ("between 75 and 80", None, "several_numbers"),
    ("1,000", None, "several_numbers"), ("1e5", None, "several_numbers"),
])
def test_parse_age(text, age, status):
    assert LI.parse_age(text) == (age, status)


def test_rule_scores_the_true_probability():
    rule = get_rule("lifeeval")
    q115, q116, q117, _, _ = M2020_Q115_119
    it = next(i for i in LI.generate_items(2020, sexes=("M",), min_ages=(115,), radii=(1,)))
    s116, s117 = 1 - q115, (1 - q115) * (1 - q116)
    assert rule("116", it) == pytest.approx(q115 + s116 * q116 + s117 * q117, abs=1e-14)
    assert rule("116 years", it) == rule("116.0", it) == rule("115.6", it) == rule("116", it)
    assert rule("I don't know", it) == 0.0 and rule("115-117", it) == 0.0
    assert rule(it.canonical, it) == float(it.metadata["mas"])  # the best guess scores MAS exactly
    off = LI.generate_items(2020, sexes=("M",), min_ages=(115,), radii=(1,), window="official")[0]
    assert rule("116", off) == pytest.approx(q115 + s116 * q116, abs=1e-14)
    other = Item(item_id="x", dataset="d", question="Q?", gold_answers=("78",), canonical="78")
    assert math.isnan(rule("78", other))


def test_rule_on_every_best_guess_equals_mas():
    rule = get_rule("lifeeval")
    for it in LI.generate_items(2010, sexes=("F",), radii=(1, 20)):
        assert rule(it.canonical, it) == float(it.metadata["mas"])
        assert 0.0 <= rule(str(int(it.canonical) + 7), it) <= float(it.metadata["mas"])


def test_rule_bad_metadata():
    from dataclasses import replace

    base = LI.generate_items(2020, sexes=("M",), min_ages=(30,), radii=(5,))[0]
    with pytest.raises(ValueError, match="must be integers"):
        get_rule("lifeeval")("70", replace(base, metadata={**base.metadata, "year": "later"}))


# ----------------------------------------------------------------------------- the CLI


def test_cli_writes_the_item_set(tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    out = tmp_path / "le.csv"
    res = CliRunner().invoke(app, ["lifeeval", "--year", "2020", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "808 LifeEval items" in res.output
    df = pd.read_csv(out)
    assert list(df.columns) == ["sex", "min_age", "radius", "best_guess", "mas"] and len(df) == 808
    rows = L.item_rows(2020)
    assert df["mas"].tolist() == [r.mas for r in rows]  # full precision round trip
    assert df["best_guess"].tolist() == [r.best_guess for r in rows]
    assert set(df["sex"]) == {"M", "F"}
    off = tmp_path / "off.csv"
    assert CliRunner().invoke(app, ["lifeeval", "--year", "2020", "--window", "official", "--out", str(off)]).exit_code == 0
    # each official window (2r ages) lies inside an inclusive one (2r + 1 ages): never a higher ceiling
    assert (pd.read_csv(off)["mas"] <= df["mas"]).all()


@pytest.mark.parametrize("args,text", [
    (["--year", "2200"], "year=2200"),
    (["--year", "2020", "--window", "centred"], "allowed: inclusive, official"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, text):
    from typer.testing import CliRunner

    from confgrid.cli.main import app

    res = CliRunner().invoke(app, ["lifeeval", *args, "--out", str(tmp_path / "x.csv")])
    assert res.exit_code == 2
    assert text in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()


# ----------------------------------------------------------------------------- the grid


def _grid(params, **dataset):
    return {"name": "t", "models": [{"name": "m", "model": "confgrid-fixture"}],
            "datasets": [{"name": "le", "adapter": "lifeeval", "params": params, **dataset}]}


def test_grid_params_validated_and_in_the_items_key():
    from confgrid.flows.runner import _load_items
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.flows.store.run_store import shard_key

    spec = parse_grid(_grid({"year": 2020, "window": "inclusive", "radii": (1, 5)}))
    d = spec.datasets[0]
    assert d.params == {"year": 2020, "window": "inclusive", "radii": [1, 5]}  # as given, JSON values
    items = _load_items(d)
    assert len(items) == 2 * 101 * 2 and {i.metadata["year"] for i in items} == {"2020"}
    other = parse_grid(_grid({"year": 2019, "window": "inclusive", "radii": [1, 5]})).datasets[0]

    def key(ds):  # the items shard key of flows/runner.py
        return shard_key("items", {"dataset": ds.model_dump(mode="json"), "ids": [i.item_id for i in items]})

    assert key(d) != key(other)  # same ids and questions, another year: another items shard
    assert parse_grid(_grid({"year": 2020})).datasets[0].params == {"year": 2020}
    # a dataset without params dumps as before the field existed: its items key (and grid.yaml) are unchanged
    plain = parse_grid({"name": "t", "models": [{"name": "m", "model": "confgrid-fixture"}],
                        "datasets": [{"name": "tq", "adapter": "truthfulqa"}]}).datasets[0]
    assert plain.params == {} and "params" not in plain.model_dump(mode="json")


@pytest.mark.parametrize("params,text", [
    ({"year": 2020, "windw": "official"}, "windw: unknown parameter; allowed: min_ages, radii, sexes, window, year"),
    ({"year": 1800}, "year=1800: the life table covers"),
    ({"year": 2020, "window": "centred"}, "window: Input should be 'inclusive' or 'official'"),
    ({}, "year: Field required"),
])
def test_grid_params_errors_name_the_parameter(params, text):
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.flows.spec.base import GridSpecError

    with pytest.raises(GridSpecError) as ei:
        parse_grid(_grid(params))
    assert [f for f, _ in ei.value.problems] == ["datasets[0].params"]
    assert text in str(ei.value)


def test_grade_answers_stores_the_graded_label():
    import pandas as pd

    from confgrid.flows.stages.grade import grade_answers

    items = LI.generate_items(2020, sexes=("F",), min_ages=(40,), radii=(1, 10))
    other = Item(item_id="q", dataset="d", question="Capital of France?", gold_answers=("Paris",), canonical="Paris")
    parsed = pd.DataFrame({"item_id": [items[0].item_id, items[1].item_id, "q"], "answer": ["84", "84 years", "Paris"]})
    out = grade_answers(parsed, [*items, other], ("lifeeval", "containment"), "lifeeval")
    assert out["correct_lifeeval"].iloc[0] == LI.score_answer("84", items[0])
    assert 0.0 < out["correct_lifeeval"].iloc[0] < out["correct_lifeeval"].iloc[1] < 1.0  # graded, radius 10 > 1
    assert math.isnan(out["correct_lifeeval"].iloc[2]) and out["correct_containment"].iloc[2] == 1.0


def test_docstring_examples():
    import doctest

    assert doctest.testmod(L, raise_on_error=False).failed == 0
    assert doctest.testmod(LI, raise_on_error=False).failed == 0
