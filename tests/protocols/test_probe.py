"""Supplied-answer probe, pure parts (study 000 section 3.6, Appendix I "Setup.", Table 17)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from confgrid.protocols.correctness import containment
from confgrid.protocols.items import Item
from confgrid.protocols.prompts import get_prompt
from confgrid.protocols.probe import (
    PAIRS,
    PROBE_MAX_NEW_TOKENS,
    SUPPLIED_KINDS,
    Supplied,
    parse_probe_output,
    probe_pairs,
    probe_request,
    supplied_answers,
)

ITEMS = [
    Item("t1", "triviaqa", "Which city is the capital of France?", ("Paris", "Paris, France"), "Paris",
         aliases=("Paris, France", "Paris"), normalized_aliases=("paris france", "paris")),
    Item("t2", "triviaqa", "Who wrote Hamlet?", ("William Shakespeare", "Shakespeare"), "William Shakespeare",
         aliases=("Shakespeare",)),
    Item("t3", "triviaqa", "What is the largest planet?", ("Jupiter",), "Jupiter", aliases=("Jupiter",)),
    Item("t4", "triviaqa", "What colour is the sky?", ("Blue",), "Blue", aliases=("Blue",)),
]


def test_probe_request_and_limit():
    r = probe_request("Q?", "  Paris\nFrance ")
    assert r.user_text == get_prompt("confidence").render("Q?")
    assert r.assistant_prefix == "Guess: Paris France\nProbability:"
    assert r.max_new_tokens == PROBE_MAX_NEW_TOKENS == 12
    assert probe_request("Q?", "B", "mc_confidence").assistant_prefix == "Guess: B\nProbability:"
    with pytest.raises(ValueError, match="answer=''"):
        probe_request("Q?", "")
    with pytest.raises(ValueError, match="confidence_label=None"):
        probe_request("Q?", "x", "bare")


@pytest.mark.parametrize(
    ("continuation", "verbalized", "status", "fallback"),
    [
        (" 0.8", 0.8, "ok", False),
        (" 0.8\n", 0.8, "ok", False),
        (" **0.75**", 0.75, "ok", False),
        (" 85%", 0.85, "ok", False),
        (" high, about 0.8", 0.8, "ok", True),
        (" high", None, "missing_confidence", False),
        ("", None, "missing_confidence", False),
        (None, None, "missing_confidence", False),
        (" 1.5", None, "out_of_range", False),
        (" 1e-5", None, "unparsed_number", False),  # never a wrong value (issue 14 item 5)
        (" 0,8", None, "unparsed_number", False),
    ],
)
def test_parse_probe_output(continuation, verbalized, status, fallback):
    r = parse_probe_output(continuation, "Paris")
    assert r.answer == "Paris" and r.status == status and r.used_fallback is fallback
    assert r.verbalized == (pytest.approx(verbalized) if verbalized is not None else None)


def test_parse_probe_output_reads_only_the_continuation():
    r = parse_probe_output(" high", "0.5")  # a numeric supplied answer is not the confidence
    assert (r.answer, r.verbalized, r.status) == ("0.5", None, "missing_confidence")


def test_parse_probe_output_raises_instead_of_hiding_errors(monkeypatch):
    from confgrid.protocols import probe

    with pytest.raises(KeyError, match="unknown prompt 'nope'"):  # was recorded as missing_both
        parse_probe_output(" 0.8", "Paris", "nope")

    def timeout(*args, **kwargs):
        raise TimeoutError

    monkeypatch.setattr(probe, "parse_output", timeout)
    with pytest.raises(TimeoutError):
        parse_probe_output(" 0.8", "Paris")


def test_parse_probe_output_percent_scale():
    assert parse_probe_output(" 85", "Paris", "confidence_percent").verbalized == pytest.approx(0.85)


def test_supplied_answers_all_kinds():
    others = {
        "zeta": ("Lyon", 0.0),
        "alpha": ("Marseille", 0.0),
        "beta": ("Paris", 1.0),  # correct: not a wrong answer
    }
    got = supplied_answers(ITEMS[0], "Nice", others, 0, ITEMS)
    assert got == [
        Supplied("canonical", "Paris"),
        Supplied("first_alias", "Paris, France"),
        Supplied("plausible_wrong", "Marseille", "alpha"),  # the model whose name sorts first
        Supplied("own", "Nice"),
    ]
    assert [s.kind for s in got] == [k for k in SUPPLIED_KINDS if k in {s.kind for s in got}]


def test_plausible_wrong_differs_from_own_after_normalization():
    others = {"alpha": ("**lyon.**", 0.0), "beta": ("Marseille", 0.0)}
    got = supplied_answers(ITEMS[0], "Lyon", others, 0, ITEMS, kinds=["plausible_wrong"])
    assert got == [Supplied("plausible_wrong", "Marseille", "beta")]
    # NaN / None labels and empty answers do not count as wrong answers
    others = {"a": ("Lyon", float("nan")), "b": ("Nice", None), "c": ("  ", 0.0), "d": (None, 0.0)}
    got = supplied_answers(ITEMS[0], "Paris", others, 0, ITEMS, kinds=["plausible_wrong", "off_type"])
    assert [s.kind for s in got] == ["off_type"]


def test_off_type_only_without_plausible_wrong_and_is_wrong():
    for seed in range(10):
        got = supplied_answers(ITEMS[0], "Paris", {"a": ("Paris", 1.0)}, seed, ITEMS)
        kinds = [s.kind for s in got]
        assert "plausible_wrong" not in kinds and kinds.count("off_type") == 1
        off = next(s for s in got if s.kind == "off_type")
        assert off.source in {"t2", "t3", "t4"} and containment(off.answer, ITEMS[0]) == 0.0
        # deterministic and independent of the order of all_items
        assert supplied_answers(ITEMS[0], "Paris", {}, seed, list(reversed(ITEMS)), kinds=["off_type"]) == [off]
    # an off-type candidate that would count as correct is skipped
    same = Item("t5", "triviaqa", "Capital of France, in one word?", ("Paris",), "Paris")
    for seed in range(10):
        (off,) = supplied_answers(ITEMS[0], None, {}, seed, [ITEMS[0], same, ITEMS[2]], kinds=["off_type"])
        assert off == Supplied("off_type", "Jupiter", "t3")
    assert supplied_answers(ITEMS[0], None, {}, 0, [ITEMS[0]], kinds=["off_type"]) == []


def test_supplied_answers_kinds_and_own():
    assert supplied_answers(ITEMS[2], None, {}, 0, ITEMS, kinds=["canonical", "own"]) == [Supplied("canonical", "Jupiter")]
    with pytest.raises(ValueError, match=r"unknown \['alias'\]"):
        supplied_answers(ITEMS[2], None, {}, 0, ITEMS, kinds=["alias"])


def _table():
    rows = [
        # model m, item t1: own answer wrong
        ("m", "t1", "generated", "Lyon", 0.9, 0.0),
        ("m", "t1", "own", "Lyon", 0.85, 0.0),
        ("m", "t1", "canonical", "Paris", 0.7, 0.0),
        ("m", "t1", "first_alias", "Paris, France", 0.5, 0.0),
        ("m", "t1", "plausible_wrong", "Marseille", 0.6, 0.0),
        # model m, item t2: own answer correct
        ("m", "t2", "generated", "Shakespeare", 0.95, 1.0),
        ("m", "t2", "own", "Shakespeare", 0.95, 1.0),
        ("m", "t2", "canonical", "William Shakespeare", 0.9, 1.0),
        ("m", "t2", "first_alias", "shakespeare", float("nan"), 1.0),  # did not parse: pair dropped
        ("m", "t2", "plausible_wrong", "Marlowe", 0.4, 1.0),
    ]
    return pd.DataFrame(rows, columns=["model", "item_id", "kind", "answer", "verbalized", "own_correct"]).assign(
        dataset="triviaqa"
    )


def test_probe_pairs():
    out = probe_pairs(_table())
    assert list(out.columns) == ["pair", "model", "dataset", "item_id", "a_kind", "b_kind", "a_answer", "b_answer",
                                 "a_verbalized", "b_verbalized", "diff", "strings_differ"]
    got = {(r.pair, r.item_id): round(r.diff, 6) for r in out.itertuples()}
    assert got == {
        ("canonical_vs_first_alias", "t1"): 0.2,
        ("canonical_vs_plausible_wrong", "t1"): 0.1,
        ("canonical_vs_plausible_wrong", "t2"): 0.5,
        ("own_wrong_vs_plausible_wrong", "t1"): 0.25,  # t2 excluded: own answer correct
        ("own_vs_resupplied", "t1"): 0.05,
        ("own_vs_resupplied", "t2"): 0.0,
    }
    assert out.loc[out["pair"] == "canonical_vs_first_alias", "strings_differ"].tolist() == [True]
    assert out.loc[out["pair"] == "own_vs_resupplied", "strings_differ"].tolist() == [False, False]
    assert [p.id for p in PAIRS] == ["canonical_vs_first_alias", "canonical_vs_plausible_wrong",
                                     "own_wrong_vs_plausible_wrong", "own_vs_resupplied"]


def test_probe_pairs_errors():
    t = _table()
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['own_correct'\]"):
        probe_pairs(t.drop(columns="own_correct"))
    assert len(probe_pairs(t.drop(columns="own_correct"), PAIRS[:2])) == 3
    with pytest.raises(ValueError, match="repeat"):
        probe_pairs(pd.concat([t, t.iloc[:1]]))
    empty = probe_pairs(t.iloc[:0])
    assert len(empty) == 0 and "diff" in empty.columns
    assert math.isclose(probe_pairs(t)["diff"].abs().max(), 0.5)
