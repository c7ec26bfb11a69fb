r"""Study 004's datasets (SimpleQA, GSM8K), the ``numeric`` rule and the ``boxed`` reply of worked solutions.

References are independent of the code under test: the bundled files are
re-read with ``csv`` / ``json`` / ``ast``, gold numbers and expected labels are
written out by hand, and draws are recomputed with numpy.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import time

import numpy as np
import pandas as pd
import pytest

from confgrid.protocols import correctness as C
from confgrid.protocols import datasets as D
from confgrid.protocols.items import Item, items_from_table, items_to_table
from confgrid.protocols.numeric import final_number, format_number, gold_number, numbers_match, parse_boxed_output
from confgrid.protocols.output_formats import parse_for_prompt
from confgrid.protocols.prompts import get_prompt


def _simpleqa_rows() -> list[dict]:
    with open(D.BUNDLED["simpleqa"], newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _gsm8k_rows() -> list[dict]:
    with open(D.BUNDLED["gsm8k"], encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _item(*golds: str) -> Item:
    return Item(item_id="x", dataset="d", question="Q?", gold_answers=golds, canonical=golds[0])


# ----------------------------------------------------------------------------- bundled samples


def test_simpleqa_bundled_against_raw_rows():
    raw = _simpleqa_rows()
    items = D.load_items("simpleqa")
    assert len(items) == len(raw) == 200
    assert len({it.item_id for it in items}) == 200
    for k, (it, r) in enumerate(zip(items, raw, strict=True)):
        meta = ast.literal_eval(r["metadata"])
        assert it.question == r["problem"].strip() and it.gold_answers == (r["answer"].strip(),)
        assert it.canonical == it.gold_answers[0] and it.aliases == it.gold_answers and it.options == ()
        assert it.metadata == {"topic": meta["topic"], "answer_type": meta["answer_type"],
                               "category": meta["topic"], "row": str(k)}
    first = items[0]
    assert first.question == "Who received the IEEE Frank Rosenblatt Award in 2010?"
    assert first.gold_answers == ("Michio Sugeno",)
    assert (first.metadata["topic"], first.metadata["answer_type"]) == ("Science and technology", "Person")
    assert {it.metadata["answer_type"] for it in items} == {"Date", "Person", "Number", "Place", "Other"}
    assert len({it.metadata["topic"] for it in items}) == 10  # every SimpleQA topic is in the sample
    assert D.load_items("simpleqa") == items and items_from_table(items_to_table(items)) == items


def test_gsm8k_bundled_against_raw_rows():
    raw = _gsm8k_rows()
    items = D.load_items("gsm8k")
    assert len(items) == len(raw) == 200
    assert len({it.item_id for it in items}) == 200
    for it, r in zip(items, raw, strict=True):
        head, _, tail = r["answer"].rpartition("####")
        assert it.gold_answers == (tail.strip().replace(",", ""),) == (it.canonical,)
        assert it.question == r["question"].strip() and it.metadata["solution"] == head.strip()
        assert it.metadata["category"] == "gsm8k"
        int(it.canonical)  # every GSM8K test answer is an integer
    assert items[0].canonical == "70000"  # "#### 70000" after "...=$<<200000-130000=70000>>70,000"
    assert any("," in r["answer"].rpartition("####")[2] for r in raw)  # the sample has a comma-grouped gold
    assert items_from_table(items_to_table(items)) == items


def test_gsm8k_gold_worked_solutions_grade_correct_under_numeric():
    """The upstream worked solution ends in '#### <gold>': its last number is the gold, so the rule says 1."""
    raw = _gsm8k_rows()
    items = D.load_items("gsm8k")
    assert [C.numeric(r["answer"], it) for r, it in zip(raw, items, strict=True)] == [1.0] * 200
    # and the next item's gold is wrong for (almost) every item
    shifted = [C.numeric(r["answer"], it) for r, it in zip(raw[1:], items, strict=False)]
    assert sum(shifted) <= 5


@pytest.mark.parametrize("adapter", ["simpleqa", "gsm8k"])
def test_limit_and_seed_draws(adapter):
    items = D.load_items(adapter)
    keep = np.random.default_rng(5).permutation(200)[:20]
    sub = D.load_items(adapter, limit=20, seed=5)
    assert sub == [items[int(k)] for k in keep]  # draw order: nested in a larger limit's draw
    assert D.load_items(adapter, limit=30, seed=5)[:20] == sub
    assert [it.item_id for it in D.load_items(adapter, limit=20, seed=6)] != [it.item_id for it in sub]
    assert D.load_items(adapter, limit=200) == items == D.load_items(adapter, limit=10_000)
    assert len(D.load_items(adapter, limit=1, seed=3)) == 1
    with pytest.raises(ValueError, match="limit=0"):
        D.load_items(adapter, limit=0)


def test_ids_do_not_depend_on_the_other_rows(tmp_path):
    raw = _gsm8k_rows()
    p = tmp_path / "part.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in raw[-7:]), encoding="utf-8")
    assert [it.item_id for it in D.load_items("gsm8k", p)] == [it.item_id for it in D.load_items("gsm8k")[-7:]]
    rows = _simpleqa_rows()[-5:]
    q = tmp_path / "part.csv"
    with open(q, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["metadata", "problem", "answer"])
        w.writeheader()
        w.writerows(rows)
    assert [it.item_id for it in D.load_items("simpleqa", q)] == [it.item_id for it in D.load_items("simpleqa")[-5:]]


# ----------------------------------------------------------------------------- upstream formats and errors


def test_gsm8k_gold_and_errors(tmp_path):
    from confgrid.protocols.adapters_qa import gsm8k_gold

    assert gsm8k_gold("a\n#### 18") == "18" and gsm8k_gold("#### 1,450,000") == "1450000"
    assert gsm8k_gold("x #### -3 ") == "-3" and gsm8k_gold("#### 2.5") == "2.5"
    assert gsm8k_gold("#### 1 #### 2") == "2"  # the last marker
    for bad in ("no marker", "#### ", "#### eighteen", "#### 1,23", "#### 18 apples"):
        assert gsm8k_gold(bad) is None, bad
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"question": "Q?", "answer": "so 4\n#### four"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"row 0: answer=.*'#### <number>'"):
        D.load_items("gsm8k", p)
    p.write_text(json.dumps({"question": "Q?", "solution": "#### 4"}) + "\n", encoding="utf-8")
    with pytest.raises(KeyError, match="missing required column 'answer'"):
        D.load_items("gsm8k", p)
    p.write_text(json.dumps({"question": "  ", "answer": "#### 4"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="question is empty"):
        D.load_items("gsm8k", p)
    with pytest.raises(TypeError, match="question_column"):
        D.load_items("gsm8k", question_column="q")


def test_simpleqa_metadata_forms_and_errors(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text('metadata,problem,answer\n"{\'topic\': \'Art\', \'answer_type\': \'Date\', \'urls\': []}",Q1?,1999\n'
                 ',Q2?, Paris \n', encoding="utf-8")
    a, b = D.load_items("simpleqa", p)
    assert a.metadata == {"topic": "Art", "answer_type": "Date", "category": "Art", "row": "0"}
    assert b.metadata == {"topic": "", "answer_type": "", "category": "", "row": "1"} and b.gold_answers == ("Paris",)
    p.write_text('metadata,problem,answer\n"__import__(\'os\')",Q?,A\n', encoding="utf-8")
    with pytest.raises(ValueError, match="row 0: metadata=.*not a dict literal"):
        D.load_items("simpleqa", p)  # a literal only: nothing is evaluated
    p.write_text("metadata,problem,answer\n,Q?,\n", encoding="utf-8")
    with pytest.raises(ValueError, match="row 0: answer is empty"):
        D.load_items("simpleqa", p)
    p.write_text("metadata,question,answer\n,Q?,A\n", encoding="utf-8")
    with pytest.raises(KeyError, match="missing required column 'problem'"):
        D.load_items("simpleqa", p)


def test_hub_names_and_defaults(monkeypatch):
    import datasets

    calls = []

    def fake(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        if path == "openai/gsm8k":
            return [{"question": "Q?", "answer": "2+2=4\n#### 4"}]
        return [{"metadata": {"topic": "Music", "answer_type": "Person"}, "problem": "Who?", "answer": "Me"}]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    (g,) = D.load_items("gsm8k", "openai/gsm8k")
    (s,) = D.load_items("simpleqa", "basicv8vc/SimpleQA")
    assert calls == [("openai/gsm8k", "main", "test"), ("basicv8vc/SimpleQA", None, "test")]
    assert g.gold_answers == ("4",) and s.metadata["category"] == "Music"


# ----------------------------------------------------------------------------- the numeric rule


@pytest.mark.parametrize(("answer", "gold", "label"), [
    (r"9 * 2 = 18, so she makes \boxed{18} dollars.", "18", 1.0),
    (r"First 16 - 3 - 4 = 9 eggs; \boxed{18}. Check: 9 * 2 = 18 and 20", "18", 1.0),  # the box wins over the last number
    (r"\boxed{17} is wrong, the answer is 18", "18", 0.0),  # a box, even if the text says otherwise
    ("Janet sells 9 eggs at $2, making 18", "18", 1.0),  # no box: the last number
    ("18 eggs, then 9 * 2 = 16", "18", 0.0),  # no box: the last number, not the first
    (r"\boxed{5} at first; then \boxed{18}", "18", 1.0),  # several boxes: the last
    (r"\boxed{18} at first; then \boxed{5}", "18", 0.0),
    (r"\boxed{1,450,000}", "1450000", 1.0),  # thousands separators, and the gold as the adapter writes it
    ("The total is 1,450,000.", "1450000", 1.0),
    (r"\boxed{1{,}450{,}000}", "1450000", 1.0),  # LaTeX comma
    (r"\boxed{1\,450\,000}", "1450000", 1.0),  # LaTeX thin space
    (r"\boxed{-3}", "-3", 1.0),
    ("the change is -3 degrees", "-3", 1.0),
    ("from 5 to 3-3", "-3", 0.0),  # "3-3" is 3 and 3, never -3
    ("the change is \u22123", "-3", 1.0),  # U+2212 minus sign
    (r"\boxed{3}", "-3", 0.0),
    (r"\boxed{2.50}", "2.5", 1.0),
    (r"\boxed{.5}", "0.5", 1.0),
    (r"\boxed{\$18}", "18", 1.0),
    (r"\boxed{$18.00}", "18", 1.0),
    ("It costs $18.", "18", 1.0),
    (r"\boxed{25\%}", "25", 1.0),  # a percent sign changes nothing: GSM8K golds are plain numbers
    ("an increase of 25%", "25", 1.0),
    ("an increase of 25%", "0.25", 0.0),
    (r"\boxed{3/4}", "0.75", 1.0),
    (r"\boxed{\frac{3}{4}}", "0.75", 1.0),
    (r"\boxed{\dfrac{-3}{4}}", "-0.75", 1.0),
    (r"\boxed{-\frac{3}{4}}", "-0.75", 1.0),
    ("3/4", "0.75", 0.0),  # a fraction outside a box is two numbers: the last, 4
    (r"\boxed{5/0}", "5", 0.0),  # a zero denominator is no number
    (r"\boxed{\text{18 dollars}}", "18", 1.0),
    (r"\boxed{\frac{1}{3}}", "0.333333", 1.0),  # 1/3 - 0.333333 = 3.3e-7 <= 1e-6 (gold below 1: absolute)
    (r"\boxed{\frac{1}{3}}", "0.33333", 0.0),  # 3.3e-6 > 1e-6
    ("I do not know.", "18", 0.0),  # no number
    (r"\boxed{}", "18", 0.0),
    (r"So 18. \boxed{\text{unknown}}", "18", 0.0),  # a box without a number: nothing outside it is read
    (r"\boxed{18", "18", 1.0),  # an unclosed box is not a box; the last number is 18
    ("x2 + item_3 = 1e5", "1", 1.0),  # x2, item_3 and the 5 of 1e5 are not numbers: the last is 1
    ("", "18", 0.0),
    (None, "18", 0.0),
])
def test_numeric_rule_cases(answer, gold, label):
    assert C.get_rule("numeric") is C.numeric
    assert C.numeric(answer, _item(gold)) == label


def test_numeric_rule_tolerance_edges_and_golds():
    # |a - g| <= 1e-6 * max(1, |g|): relative for |g| >= 1, absolute below
    assert C.numeric("1000000.9", _item("1000000")) == 1.0 and C.numeric("1000001.1", _item("1000000")) == 0.0
    assert C.numeric("0.0000009", _item("0")) == 1.0 and C.numeric("0.0000011", _item("0")) == 0.0
    assert C.numeric("0.5000009", _item("0.5")) == 1.0 and C.numeric("0.5000011", _item("0.5")) == 0.0
    assert numbers_match(1000.001, 1000.0) and not numbers_match(1000.0011, 1000.0)
    assert numbers_match(-1000.001, -1000.0) and not numbers_match(1000.0, -1000.0)
    assert numbers_match(2.0, 1.0, tolerance=1.0) and not numbers_match(2.0, 1.0, tolerance=0.999)
    # any gold that is a number matches; golds in words are skipped; no numeric gold: undefined (NaN)
    assert C.numeric("the answer is 7", _item("seven", "7")) == 1.0
    assert math.isnan(C.numeric("7", _item("seven")))
    assert math.isnan(C.numeric("Paris", D.load_items("simpleqa")[0]))  # gold "Michio Sugeno"
    assert [gold_number(g) for g in ("18", " 1,450,000 ", "-3", "$5.50", "3/4", "25%", "5 km", "", "1/0")] == [
        18.0, 1450000.0, -3.0, 5.5, 0.75, 25.0, None, None, None]


def test_final_number_sources_and_format():
    assert final_number(r"\boxed{18}") == (18.0, "18", "boxed")
    assert final_number(r"\boxed{\boxed{5}} then 7") == (5.0, "5", "boxed")  # the box closing last: the outer
    assert final_number("then 7.") == (7.0, "7", "last_number")
    assert final_number(r"\boxed{none}").source == "boxed_no_number"
    assert final_number("nothing") == (None, None, "none") == final_number(12)
    assert final_number("1" * 400).value is None  # too large for a float: no number
    for v in (18.0, -3.0, 0.75, 1234.5, 0.1, 1e20, 1 / 3, 5e-7):
        s = format_number(v)
        assert "e" not in s and final_number(s).value == v, s
    assert (format_number(18.0), format_number(-0.0), format_number(1e20)) == ("18", "0", "1" + "0" * 20)
    with pytest.raises(ValueError, match="value=inf"):
        format_number(float("inf"))


def test_numeric_reads_long_texts_in_linear_time():
    text = ("{" * 50_000) + r"\boxed{" * 20_000 + "7" + "}" * 10 + " 1,2" * 50_000
    t0 = time.perf_counter()
    assert final_number(text).value == 7.0  # the box closing last holds 9 boxes around the 7
    assert time.perf_counter() - t0 < 2.0


# ----------------------------------------------------------------------------- the boxed reply


def test_boxed_reply_statuses():
    lab = {"confidence_label": "Probability:"}
    assert parse_boxed_output("9 * 2 = 18.\n\\boxed{18}\nProbability: 0.9", **lab) == ("18", 0.9, "ok", False)
    # the confidence line is cut out before the answer is read; the last labelled number counts
    assert parse_boxed_output("18 eggs.\nProbability: 0.2", **lab) == ("18", 0.2, "ok", False)
    assert parse_boxed_output("Probability: 0.5 of red. \\boxed{3}\n**Probability:** 85%", **lab) == (
        "3", 0.85, "ok", False)
    assert parse_boxed_output("\\boxed{1,234}\nProbability: \\boxed{0.7}", **lab) == ("1234", 0.7, "ok", False)
    assert parse_boxed_output("\\boxed{3/4}", **lab) == ("0.75", None, "missing_confidence", False)
    assert parse_boxed_output("I give up.\nProbability: 0.1", **lab) == (None, 0.1, "missing_answer", False)
    assert parse_boxed_output("\\boxed{x}\nProbability: 0.1", **lab).status == "missing_answer"
    assert parse_boxed_output("I give up.", **lab) == (None, None, "missing_both", False)
    assert parse_boxed_output("\\boxed{4}\nProbability: 1.5", **lab) == ("4", None, "out_of_range", False)
    assert parse_boxed_output("\\boxed{4}\nProbability: 1e-5", **lab) == ("4", None, "unparsed_number", False)
    # no unlabelled fallback: 0.5 in a solution is not a confidence
    assert parse_boxed_output("half is 0.5, so \\boxed{4}", **lab) == ("4", None, "missing_confidence", False)
    assert parse_boxed_output("   ", **lab) == (None, None, "empty", False) == parse_boxed_output(None)
    assert parse_boxed_output("\\boxed{4}\nProbability: 85", confidence_label="Probability:", scale="percent") == (
        "4", 0.85, "ok", False)
    assert parse_boxed_output("\\boxed{4}\nConfiance : 0,8", confidence_label="Confiance:",
                              decimal_comma=True) == ("4", 0.8, "ok", False)
    assert parse_boxed_output("\\boxed{4}\nProbability: 0.9") == ("4", None, "missing_confidence", False)
    with pytest.raises(ValueError, match="confidence_label=''"):
        parse_boxed_output("x", confidence_label="")
    with pytest.raises(ValueError, match="max_chars=0"):
        parse_boxed_output("x", max_chars=0)


def test_gsm8k_prompts_parse_through_parse_for_prompt():
    p, q = get_prompt("gsm8k_boxed"), get_prompt("gsm8k_boxed_confidence")
    assert (p.output, p.confidence_label, q.output, q.confidence_label, q.scale) == (
        "boxed", None, "boxed", "Probability:", "unit")
    assert "\\boxed{}" in p.render("Q") and p.render("What is 2+2?").endswith("Problem: What is 2+2?")
    reply = "2 + 2 = 4\n\\boxed{4}\nProbability: 0.95"
    assert parse_for_prompt(reply, q) == ("4", 0.95, "ok", False) == parse_for_prompt(reply, "gsm8k_boxed_confidence")
    # without a confidence label the Probability line is just text; its number is not the last one in a box
    assert parse_for_prompt(reply, p) == ("4", None, "missing_confidence", False)
    # the labels reading of the same reply would take its first line as the answer
    assert parse_for_prompt(reply, "answer_only").answer == "2 + 2 = 4"
    from confgrid.protocols.prompts import Prompt

    with pytest.raises(ValueError, match="output 'boxed' with a confidence_label needs scale"):
        Prompt(id="b", template="{question}", output="boxed", confidence_label="Probability:")


# ----------------------------------------------------------------------------- end to end through the stages


def test_grading_through_the_runner_stages():
    """parse_generations and grade_answers, the functions the runner calls, on GSM8K replies."""
    from confgrid.flows.stages.grade import grade_answers, parse_generations

    items = D.load_items("gsm8k", limit=4, seed=0)
    golds = [it.canonical for it in items]
    outputs = [
        f"Step by step ... so \\boxed{{{int(golds[0]):,}}}\nProbability: 0.8",  # comma-grouped, right
        f"<think>maybe {golds[1]}</think>\nThe answer is \\boxed{{{int(golds[1]) + 1}}}\nProbability: 0.6",  # wrong
        "I cannot solve this.\nProbability: 0.3",  # no number
        f"<think>still thinking about {golds[3]}",  # reasoning never ended
    ]
    gen = pd.DataFrame({"item_id": [it.item_id for it in items], "raw_output": outputs})
    parsed = parse_generations(gen, "gsm8k_boxed_confidence", None, items)
    answers = [None if pd.isna(a) else a for a in parsed["answer"]]
    assert answers == [golds[0], str(int(golds[1]) + 1), None, None]
    assert parsed["parse_status"].tolist() == ["ok", "ok", "missing_answer", "reasoning_unterminated"]
    assert parsed["verbalized"].tolist()[:3] == [0.8, 0.6, 0.3]
    graded = grade_answers(parsed, items, ("numeric", "containment"), "numeric")
    c = graded["correct"].tolist()
    assert c[:2] == [1.0, 0.0] and math.isnan(c[2]) and math.isnan(c[3])  # no answer: no label (NaN)
    assert graded["correct_rule"].tolist() == ["numeric"] * 4


# ----------------------------------------------------------------------------- the grid


def test_grid_accepts_the_datasets_rule_and_prompts():
    from confgrid.flows.plan.grid_plan import check_items
    from confgrid.flows.spec.grid import parse_grid
    from confgrid.flows.spec.base import GridSpecError

    raw = {
        "name": "cap",
        "models": [{"name": "m", "model": "confgrid-fixture"}],
        "datasets": [{"name": "gsm8k", "adapter": "gsm8k", "limit": 5}, {"name": "sqa", "adapter": "simpleqa"}],
        "elicitation": {"prompt": "gsm8k_boxed_confidence", "max_new_tokens": 512},
        "scoring": {"contexts": []},
        "correctness": {"rules": ["numeric", "containment"], "primary": "numeric"},
        "answer_sets": [{"id": "plain", "prompt": "gsm8k_boxed"}],
        "methods": [{"id": "ea", "kind": "expected_accuracy", "k": 4}],
    }
    spec = parse_grid(raw)
    assert [d.adapter for d in spec.datasets] == ["gsm8k", "simpleqa"] and spec.correctness.primary == "numeric"
    plain = spec.answer_sets[0]
    assert (plain.new_tokens, plain.verbalized_source(), plain.scoring_contexts(("bare",))) == (512, "none", ())
    assert spec.all_answer_sets()[0].verbalized_source() == "stated"
    items = {d.name: D.load_items(d.adapter, limit=d.limit, seed=d.seed) for d in spec.datasets}
    assert check_items(spec, items) == []
    # a worked solution under the default budget of 32 new tokens is an error, not a silent cut
    no_budget = {**raw, "elicitation": {"prompt": "gsm8k_boxed"}}
    with pytest.raises(GridSpecError, match="elicitation.*max_new_tokens"):
        parse_grid(no_budget)
    # the probe would re-ask after a Guess: label the boxed prompt does not have: an error before anything runs
    for extra in ({"answer_sets": [{"id": "ao", "prompt": "answer_only"}]}, {"probe": {"enabled": True}}):
        with pytest.raises(GridSpecError, match="supplied-answer probe re-asks under the elicitation prompt "
                                                "'gsm8k_boxed_confidence'"):
            parse_grid({**raw, **extra})
    assert parse_grid({**raw, "answer_sets": [{"id": "ao", "prompt": "answer_only", "verbalized": "none"}]})
    with pytest.raises(GridSpecError, match="unknown correctness rule 'numerical'"):
        parse_grid({**raw, "correctness": {"rules": ["numerical"], "primary": "numerical"}})


def test_agreement_under_numeric_keeps_the_sign_and_reads_the_final_number():
    from confgrid.protocols.correctness import agreement_key, normalize
    from confgrid.protocols.methods import majority_share

    key = agreement_key("numeric")
    assert key("so the answer is \\boxed{-3}") == "-3" != key("3")
    assert key("1,234") == key("\\boxed{1234}") == "1234"
    assert key("no number here") == normalize("no number here")
    assert agreement_key("containment") is normalize
    c = majority_share(["\\boxed{-3}", "3", "-3.0", None], key)
    assert (c.value, c.rated) == (0.5, "\\boxed{-3}")
