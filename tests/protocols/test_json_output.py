"""JSON replies (studies 002 and 003): answer and probability, option probabilities, letter token
probabilities, tie scoring and the chance letters, each against hand-computed values."""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import pytest

from confgrid.protocols.correctness import get_rule
from confgrid.protocols.items import Item
from confgrid.protocols.json_output import (
    chance_answer,
    favoured_letters,
    favoured_score,
    find_json,
    json_objects,
    letter_distribution,
    parse_json_answer,
    parse_option_probabilities,
)
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.parsing import STATUSES
from confgrid.protocols.prompts import Prompt, get_prompt


@pytest.mark.parametrize("text, answer, prob", [
    ('{"answer": "B", "probability": 80}', "B", 0.8),
    ('```json\n{"answer": "B", "probability": 80}\n```', "B", 0.8),
    ("{'answer': 'c', 'probability': '60'}", "C", 0.6),  # single quotes, a number as a string, lower case
    ('Sure. {"answer": "D", "probability": 5} Hope this helps!', "D", 0.05),  # trailing prose
    ('{"Answer": "(A)", "Probability": "100"}', "A", 1.0),
    ('{"answer": "A", "probability": 0}', "A", 0.0),
    ('{"answer": "A", "probability": 10}', "A", 0.1),
    ('{"answer": "A", "probability": "25%"}', "A", 0.25),
    ('draft {"answer": "A", "probability": 75} final {"answer": "C", "probability": 40}', "C", 0.4),  # the last
    ('{"reasoning": "a {nested} brace and it\'s fine", "answer": "B", "probability": 70}', "B", 0.7),
    ('{"answer": "B", "probability": 70.0, "extra": [1, {"x": 2}]}', "B", 0.7),
])
def test_json_answer_ok(text, answer, prob):
    r = parse_json_answer(text, n_options=4)
    assert (r.answer, r.status) == (answer, "ok")
    assert r.probability == pytest.approx(prob, abs=1e-12)


@pytest.mark.parametrize("text, status", [
    ('{"answer": "E", "probability": 60}', "refusal"),  # a letter beyond the 4 options
    ('{"answer": null, "probability": 25}', "refusal"),
    ('{"answer": "", "probability": 25}', "refusal"),
    ('{"answer": "I do not know", "probability": 25}', "refusal"),
    ("I'm sorry, but I can't help with reproducing that text.", "refusal"),
    ("I cannot answer this question.", "refusal"),
    ("The answer is B with 80% certainty", "unparseable"),  # free text without JSON, not declining
    ('{"probability": 80}', "unparseable"),  # no answer key
    ('{"answer": "B", "probability": 80', "unparseable"),  # never closed
    ("", "empty"),
    ("   \n", "empty"),
    ('{"answer": "B"}', "missing_confidence"),
    ('{"answer": "B", "probability": 120}', "out_of_range"),
    ('{"answer": "B", "probability": -5}', "out_of_range"),
    ('{"answer": "B", "probability": "1e2"}', "unparsed_number"),
    ('{"answer": "B", "probability": true}', "unparsed_number"),
    ('{"answer": "B", "probability": "high"}', "unparsed_number"),
])
def test_json_answer_statuses(text, status):
    r = parse_json_answer(text, n_options=4)
    assert r.status == status
    assert r.status in STATUSES
    if status != "ok":
        assert r.probability is None or status == "refusal"


def test_json_answer_scale_and_free_answers():
    # on a unit prompt 0.75 is 0.75; on a 0-100 prompt it is 0.0075 (the scale is never guessed)
    assert parse_json_answer('{"answer": "A", "probability": 0.75}', scale="unit", n_options=4).probability == 0.75
    assert parse_json_answer('{"answer": "A", "probability": 0.75}', n_options=4).probability == pytest.approx(0.0075)
    # a free answer (an age, True/False): any non-empty value, numbers written back as text
    r = parse_json_answer('{"Answer": 78, "Confidence": 0.35}', answer_key="Answer", confidence_key="Confidence",
                          scale="unit")
    assert (r.answer, r.probability, r.status) == ("78", 0.35, "ok")
    assert parse_json_answer('{"Answer": 78.0, "Confidence": 0.3}', answer_key="answer", confidence_key="confidence",
                             scale="unit").answer == "78"
    with pytest.raises(ValueError, match="scale='half'"):
        parse_json_answer("{}", scale="half")


def test_json_scan_is_linear_and_never_raises():
    t0 = time.perf_counter()
    for text in ("{" * 200_000, '{"a": "' + "x" * 500_000, "}" * 300_000, "'" * 100_000, "{'" * 100_000):
        assert parse_json_answer(text, n_options=4).status in ("unparseable", "refusal", "empty")
    assert time.perf_counter() - t0 < 20  # generous: ~0.3 s on 2 cores
    assert list(json_objects('a {"x": "}"} b {"y": 1}')) == ['{"x": "}"}', '{"y": 1}']
    assert find_json('{"A": 1} {"b": 2}', ("B",)) == {"b": 2}
    assert find_json(None, ("a",)) is None


def test_option_probabilities_normalized_with_ties():
    r = parse_option_probabilities('{"A": 0.1, "B": 0.6, "C": 0.2, "D": 0.1}', 4)
    assert r.status == "ok" and r.favoured == ("B",) and r.confidence == pytest.approx(0.6)
    # 0-100 values and strings; a missing letter counts as 0; sums not 1 are normalized
    r = parse_option_probabilities('{"Reasoning": "...", "a": 10, "B": "30", "C": 60}', 4)
    assert r.probabilities == pytest.approx({"A": 0.1, "B": 0.3, "C": 0.6, "D": 0.0})
    assert (r.n_missing, r.raw_sum) == (1, 100.0)
    # a tie of two: both favoured, confidence = their common probability
    r = parse_option_probabilities('{"A": 0.4, "B": 0.1, "C": 0.4, "D": 0.1}', 4)
    assert r.favoured == ("A", "C") and r.confidence == pytest.approx(0.4)
    # all zero: a status, never a division
    z = parse_option_probabilities('{"A": 0, "B": 0.0, "C": "0", "D": 0}', 4)
    assert z.status == "zero_sum" and z.confidence is None and z.probabilities == {}
    assert parse_option_probabilities('{"A": -0.1, "B": 1.1}', 2).status == "out_of_range"
    assert parse_option_probabilities('{"A": "lots", "B": 1}', 2).status == "unparsed_number"
    assert parse_option_probabilities("no json here", 4).status == "unparseable"
    assert parse_option_probabilities("I'm sorry, I cannot answer.", 4).status == "refusal"
    assert parse_option_probabilities("", 4).status == "empty"
    # one option at 1.0 exactly, ten options
    r = parse_option_probabilities('{"J": 1.0}', 10)
    assert r.favoured == ("J",) and r.confidence == 1.0 and r.n_missing == 9
    for bad in (0, 27, 2.0, True):
        with pytest.raises(ValueError, match="n_options"):
            parse_option_probabilities("{}", bad)


def test_letter_distribution_renormalizes_and_counts_absent():
    # E.1 by hand: p = (0.5, 0.2, absent, 0.1) -> mass 0.8 -> (0.625, 0.25, 0, 0.125)
    d = letter_distribution({"A": 0.5, "B": 0.2, "C": None, "D": 0.1})
    assert d.probabilities == pytest.approx({"A": 0.625, "B": 0.25, "C": 0.0, "D": 0.125})
    assert (d.favoured, d.n_absent, d.status) == (("A",), 1, "ok")
    assert d.mass == pytest.approx(0.8) and d.confidence == pytest.approx(0.625)
    t = letter_distribution({"A": 0.3, "B": 0.3})
    assert t.favoured == ("A", "B") and t.confidence == pytest.approx(0.5)
    a = letter_distribution({"A": None, "B": None})
    assert (a.status, a.confidence, a.n_absent) == ("all_absent", None, 2)
    with pytest.raises(ValueError, match=r"letter_probs\['A'\]=1.5"):
        letter_distribution({"A": 1.5})


def test_tie_scoring_and_rule():
    assert favoured_score(("A", "C"), "C") == 0.5
    assert favoured_score(("A", "B", "C"), "B") == pytest.approx(1 / 3)
    assert favoured_score(("A",), "B") == 0.0 and favoured_score(("B",), "B") == 1.0
    assert favoured_score((), "B") == 0.0 and math.isnan(favoured_score(("A",), None))
    assert favoured_letters("A|c") == ("A", "C") and favoured_letters(None) == ()
    item = Item("q1", "d", "Q?", ("x",), "x", options=("w", "x", "y", "z"), gold_letter="B")
    rule = get_rule("mc_favoured")
    assert rule("A|B", item) == 0.5 and rule("B", item) == 1.0 and rule("C", item) == 0.0
    assert rule("A|E", item) == 0.0  # E is not an option of this item
    assert math.isnan(rule("A", Item("q2", "d", "Q?", ("x",), "x")))


def test_chance_letters_are_seeded_and_uniform():
    assert chance_answer(0, "q1", 4) == chance_answer(0, "q1", 4)
    draws = Counter(chance_answer(0, f"q{i}", 4) for i in range(4000))
    assert set(draws) == set("ABCD") and all(900 < c < 1100 for c in draws.values())
    runs = [chance_answer(0, "q1", 4, f"run{r}") for r in range(50)]
    assert len(set(runs)) > 1  # each run draws its own
    with pytest.raises(ValueError, match="n_options=0"):
        chance_answer(0, "q", 0)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_chance_letters_are_independent_across_runs_and_items(k):
    """Issue 23 item 1: a checksum modulo k made run1 and run3 agree on every item and run1 and run2 on none
    (k = 4), and at k = 2 repeated the letter four ids back 82% of the time. Independent draws agree with
    probability 1/k; the counts must lie in a 4.5-sigma binomial band around n/k."""
    from scipy.stats import binom

    n = 8000
    ids = [f"q{i}" for i in range(n)]
    runs = {r: np.array([chance_answer(7, q, k, r) for q in ids]) for r in ("run1", "run2", "run3")}
    lo, hi = binom.ppf(3.4e-6, n, 1 / k), binom.isf(3.4e-6, n, 1 / k)
    for a, b in (("run1", "run2"), ("run1", "run3"), ("run2", "run3")):
        agree = int((runs[a] == runs[b]).sum())
        assert lo <= agree <= hi, (a, b, agree, n / k)
    for lag in (1, 2, 4):  # serial repeats within a run
        x = runs["run1"]
        rep = int((x[lag:] == x[:-lag]).sum())
        lo_l, hi_l = binom.ppf(3.4e-6, n - lag, 1 / k), binom.isf(3.4e-6, n - lag, 1 / k)
        assert lo_l <= rep <= hi_l, (lag, rep, (n - lag) / k)
    counts = Counter(runs["run2"])  # and every letter about n/k times
    assert set(counts) == set("ABCDE"[:k]) and all(lo <= c <= hi for c in counts.values())


def test_prompts_declare_their_output():
    p = get_prompt("json_answer_probability")
    assert (p.output, p.scale, p.answer_key, p.confidence_key) == ("json", "percent", "answer", "probability")
    r = parse_for_prompt('{"answer": "C", "probability": 70}', p, n_options=4)
    assert (r.answer, r.verbalized, r.status, r.used_fallback) == ("C", 0.7, "ok", False)
    o = parse_for_prompt('{"A": 0.5, "B": 0.5}', "json_option_probabilities", n_options=2)
    assert (o.answer, o.verbalized) == ("A|B", 0.5)
    assert parse_for_prompt('{"A": 1}', "json_option_probabilities").status == "unparseable"  # options not shown
    g = parse_for_prompt('{"Confidence": 0.15}', "json_confidence_given")
    assert (g.answer, g.verbalized, g.status) == (None, 0.15, "ok")
    assert not get_prompt("json_confidence_given").asks_answer
    with pytest.raises(ValueError, match="output='yaml'"):
        Prompt("x", "{question}", output="yaml")
    with pytest.raises(ValueError, match="needs scale"):
        Prompt("x", "{question}", output="json")
    with pytest.raises(ValueError, match="needs confidence_key"):
        Prompt("x", "{question}", output="json", scale="unit", confidence_key=None)


def test_a_supplied_answer_is_rated_and_graded_by_the_item():
    import pandas as pd

    from confgrid.flows.stages.grade import grade_answers, parse_generations
    from confgrid.protocols.datasets import load_items

    items = load_items("halueval_qa", limit=4, seed=0, dataset_name="halu")
    gen = pd.DataFrame({"item_id": [it.item_id for it in items],
                        "raw_output": ['{"Confidence": 0.9}', "```json\n{'confidence': '0.2'}\n```", "no idea", ""]})
    parsed = parse_generations(gen, "json_confidence_given", items=items)
    assert parsed["answer"].tolist() == [it.metadata["given_answer"] for it in items]
    assert parsed["parse_status"].tolist() == ["ok", "ok", "unparseable", "empty"]
    assert parsed["verbalized"].tolist()[:2] == [0.9, 0.2]
    graded = grade_answers(parsed, items, ("given_answer",), "given_answer")
    assert graded["correct"].tolist() == [float(it.metadata["given_answer_correct"]) for it in items]
