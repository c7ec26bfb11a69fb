"""The BoolQ, AGIEval, HaluEval QA and MMLU-Pro adapters, their bundled samples and the given_answer rule.

References are independent of the adapters: the bundled files are re-read here
with ``json``, and the expected letters, counts and texts are written out by hand.
"""

from __future__ import annotations

import json
import math
import random
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from confgrid.protocols import correctness as C
from confgrid.protocols import datasets as D
from confgrid.protocols.items import Item, items_from_table, items_to_table

NEW = ["boolq", "agieval_lsat_ar", "agieval_sat_en", "halueval_qa", "mmlu_pro"]


def _raw(adapter: str) -> list[dict]:
    """The bundled file's rows, read with json alone."""
    with open(D.BUNDLED[adapter], encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- bundled samples


@pytest.mark.parametrize(
    ("adapter", "count", "n_options", "categories"),
    [
        ("boolq", 150, {2}, {"boolq"}),
        ("agieval_lsat_ar", 150, {5}, {"lsat-ar"}),
        ("agieval_sat_en", 100, {4}, {"sat-en"}),
        ("halueval_qa", 150, {0}, {"halueval_qa"}),
        ("mmlu_pro", 150, {4, 5, 6, 7, 8, 9, 10}, None),
    ],
)
def test_bundled_sample_shape(adapter, count, n_options, categories):
    items = D.load_items(adapter)
    assert len(items) == count == len(_raw(adapter))
    assert {len(it.options) for it in items} == n_options
    assert len({it.item_id for it in items}) == count
    assert all(it.dataset == adapter and it.metadata["category"] for it in items)
    if categories is not None:
        assert {it.metadata["category"] for it in items} == categories
    for it in items:
        if it.options:
            assert it.gold_letter in string.ascii_uppercase[: len(it.options)]
            assert it.gold_answers == (it.options[string.ascii_uppercase.index(it.gold_letter)],)
            assert sorted(it.incorrect_answers + it.gold_answers) == sorted(it.options)
        else:
            assert it.gold_letter is None
        assert it.canonical == it.gold_answers[0]
    # stable: a second load gives the same items; they survive the Arrow round trip
    assert D.load_items(adapter) == items
    assert items_from_table(items_to_table(items)) == items


@pytest.mark.parametrize("adapter", NEW)
def test_ids_do_not_depend_on_the_other_rows(adapter, tmp_path):
    """Ids hash the item's own content: a file of the last 7 rows gives the same ids as in the whole sample."""
    raw = _raw(adapter)
    part = D.load_items(adapter, _write_jsonl(tmp_path / "part.jsonl", raw[-7:]))
    assert [it.item_id for it in part] == [it.item_id for it in D.load_items(adapter)[-7:]]


def test_boolq_bundled_against_raw_rows():
    raw = _raw("boolq")
    items = D.load_items("boolq")
    assert [it.gold_letter for it in items] == ["A" if r["label"] == "true" else "B" for r in raw]
    assert sum(r["label"] == "true" for r in raw) == 100  # the sample's share of true answers, 2/3
    it, r = items[1], raw[1]
    assert r["question"] == "is the other boleyn girl part of a series"
    assert it.question == "Passage: " + r["passage"] + "\nQuestion: is the other boleyn girl part of a series?"
    assert it.options == ("True", "False") and it.gold_answers == ("True",) and it.incorrect_answers == ("False",)
    assert it.metadata["title"] == "The Other Boleyn Girl" and it.metadata["idx"] == str(r["idx"])


def test_agieval_bundled_against_raw_rows():
    for adapter, label in (("agieval_lsat_ar", "Context"), ("agieval_sat_en", "Passage")):
        raw = _raw(adapter)
        items = D.load_items(adapter)
        assert [it.gold_letter for it in items] == [r["label"] for r in raw]
        for it, r in zip(items, raw, strict=True):
            assert it.question == f"{label}: {r['passage'].strip()}\nQuestion: {r['question'].strip()}"
            assert [f"({string.ascii_uppercase[k]}){o}" for k, o in enumerate(it.options)] == [o.strip() for o in r["options"]]
        # questions on one passage share its passage_id
        by_passage = {}
        for it, r in zip(items, raw, strict=True):
            by_passage.setdefault(r["passage"], set()).add(it.metadata["passage_id"])
        assert all(len(ids) == 1 for ids in by_passage.values())
        assert len({next(iter(v)) for v in by_passage.values()}) == len(by_passage)
    lsat = D.load_items("agieval_lsat_ar")[1]
    assert lsat.options[1] == "Helen and Nina" and lsat.gold_letter == "B"


def test_mmlu_pro_bundled_against_raw_rows():
    raw = _raw("mmlu_pro")
    items = D.load_items("mmlu_pro")
    for it, r in zip(items, raw, strict=True):
        assert it.item_id == f"mmlu_pro-{r['question_id']}"
        assert it.options == tuple(r["options"]) and it.gold_letter == r["answer"]
        assert it.metadata["category"] == r["category"] and it.metadata["src"] == r["src"]
    assert sum(len(r["options"]) < 10 for r in raw) == 25  # options length varies; all are kept
    assert len({it.metadata["category"] for it in items}) == 14


def test_halueval_bundled_is_exactly_half_right():
    raw = _raw("halueval_qa")
    items = D.load_items("halueval_qa")
    flags = [it.metadata["given_answer_correct"] for it in items]
    assert flags.count("1") == flags.count("0") == 75
    for it, r in zip(items, raw, strict=True):
        r = {k: v.strip() for k, v in r.items()}  # the adapter strips surrounding whitespace
        right = it.metadata["given_answer_correct"] == "1"
        given = r["right_answer"] if right else r["hallucinated_answer"]
        assert it.metadata["given_answer"] == given and it.metadata["knowledge"] == r["knowledge"]
        assert it.question == f"Context: {r['knowledge']}\nQuestion: {r['question']}\nCandidate Answer: {given}"
        assert it.gold_answers == (r["right_answer"],) and it.incorrect_answers == (r["hallucinated_answer"],)
        assert it.options == ()


def test_mmlu_and_triviaqa_carry_a_category():
    mmlu = D.load_items("mmlu")
    assert all(it.metadata["category"] == it.metadata["subject"] for it in mmlu)
    assert all(it.options and it.gold_letter for it in mmlu)  # options shown by an answer set with format: mc
    assert {it.metadata["category"] for it in D.load_items("triviaqa")} == {"triviaqa"}


# ----------------------------------------------------------------------------- limit draws


def test_halueval_limit_draw_stays_balanced():
    for limit in (1, 2, 3, 10, 51, 100, 149):
        for seed in (0, 1, 7):
            flags = [it.metadata["given_answer_correct"] for it in D.load_items("halueval_qa", limit=limit, seed=seed)]
            assert len(flags) == limit
            assert flags.count("1") == limit // 2 and flags.count("0") == limit - limit // 2, (limit, seed)
    a = D.load_items("halueval_qa", limit=40, seed=3)
    assert a == D.load_items("halueval_qa", limit=40, seed=3)
    assert [it.item_id for it in a] != [it.item_id for it in D.load_items("halueval_qa", limit=40, seed=4)]
    # nested: a larger limit keeps every item of a smaller one, in the same (draw) order
    assert D.load_items("halueval_qa", limit=60, seed=3)[:40] == a


def test_limit_draws_are_nested_so_a_larger_limit_reuses_the_shards():
    """Issue 22: a run with limit 48 and a later one with limit 96 share the first 48 items in the same order, so
    every chunk of execution.shard_size items of the first is a chunk of the second (the same shard keys)."""
    small, large = D.load_items("mmlu_pro", limit=48, seed=2), D.load_items("mmlu_pro", limit=96, seed=2)
    assert large[:48] == small
    rows = [int(it.metadata.get("row", i)) for i, it in enumerate(large)]
    assert rows != sorted(rows)  # draw order, not file order
    assert D.load_items("mmlu_pro", limit=500, seed=2) == D.load_items("mmlu_pro")  # >= n: all, in file order


def test_limit_draw_of_other_adapters_is_the_plain_draw():
    items = D.load_items("mmlu_pro")
    keep = np.random.default_rng(5).permutation(150)[:20]
    assert D.load_items("mmlu_pro", limit=20, seed=5) == [items[int(k)] for k in keep]


def test_stratified_draw_unequal_strata():
    # 6 "a" and 3 "b", limit 4: shares 2.67 and 1.33 -> 3 and 1
    labels = ["a", "b", "a", "a", "b", "a", "a", "b", "a"]
    for seed in range(5):
        keep = D._stratified_draw(labels, 4, np.random.default_rng(seed))
        assert sorted(labels[k] for k in keep) == ["a", "a", "a", "b"]
        assert len(set(keep)) == 4
        full = D._stratified_draw(labels, 9, np.random.default_rng(seed))
        assert list(full[:4]) == list(keep) and sorted(full) == list(range(9))  # nested, and all at n
        for k in range(1, 10):  # every prefix within one item of its share
            n_a = sum(labels[i] == "a" for i in full[:k])
            assert abs(n_a - k * 6 / 9) < 1


# ----------------------------------------------------------------------------- upstream formats


def test_boolq_row_forms(tmp_path, monkeypatch):
    p = _write_jsonl(tmp_path / "val.jsonl", [
        {"question": "is it true", "passage": "T -- It is.", "idx": 0, "label": True},      # SuperGLUE
        {"question": "is it false?", "passage": "It is not.", "idx": 1, "label": "false"},  # OpenCompass
    ])
    a, b = D.load_items("boolq", p)
    assert (a.gold_letter, a.gold_answers, a.incorrect_answers) == ("A", ("True",), ("False",))
    assert (b.gold_letter, b.gold_answers) == ("B", ("False",))
    assert a.question == "Passage: T -- It is.\nQuestion: is it true?"
    assert b.question == "Passage: It is not.\nQuestion: is it false?"  # no second "?"
    assert a.metadata == {"category": "boolq", "title": "T", "idx": "0", "row": "0"}
    assert b.metadata["title"] == ""

    import datasets

    calls = []

    def fake(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        if path == "google/boolq":
            return [{"question": "is it true", "passage": "T -- It is.", "answer": True}]
        return [{"question": "q", "passage": "p", "idx": 0, "label": -1}]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    (h,) = D.load_items("boolq", "google/boolq")
    assert calls == [("google/boolq", None, "validation")]
    assert h.item_id == a.item_id and h.gold_letter == "A"  # same id from either row form
    with pytest.raises(ValueError, match=r"label=-1.*validation split"):
        D.load_items("boolq", "super_glue", hub_config="boolq", split="test")


def test_boolq_errors_name_the_column_and_file(tmp_path):
    p = _write_jsonl(tmp_path / "noanswer.jsonl", [{"question": "q", "passage": "p"}])
    with pytest.raises(KeyError, match=r"boolq '.*noanswer\.jsonl': missing required column 'label'"):
        D.load_items("boolq", p)
    p = _write_jsonl(tmp_path / "nopassage.jsonl", [{"question": "q", "label": "true"}])
    with pytest.raises(KeyError, match=r"nopassage\.jsonl.*missing required column 'passage'"):
        D.load_items("boolq", p)
    p = _write_jsonl(tmp_path / "badlabel.jsonl", [{"question": "q", "passage": "p", "label": "maybe"}])
    with pytest.raises(ValueError, match=r"row 0: label='maybe'"):
        D.load_items("boolq", p)


def _agieval_row(**kw):
    row = {"passage": "Six people sit in a row.", "question": "Who sits first?",
           "options": ["(A)Ann", "(B) Bo ", "(C)Cy", "(D)Di", "(E)Ed"], "label": "B", "answer": None, "other": None}
    row.update(kw)
    return row


def test_agieval_upstream_format(tmp_path):
    p = _write_jsonl(tmp_path / "lsat-ar.jsonl", [_agieval_row(), _agieval_row(passage=None, label=["E"])])
    a, b = D.load_items("agieval_lsat_ar", p)
    assert a.options == ("Ann", "Bo", "Cy", "Di", "Ed") and a.gold_letter == "B" and a.gold_answers == ("Bo",)
    assert a.question == "Context: Six people sit in a row.\nQuestion: Who sits first?"
    assert a.metadata["category"] == "lsat-ar" and a.item_id.startswith("agieval-lsat-ar-")
    assert b.question == "Who sits first?" and b.gold_letter == "E" and b.metadata["passage_id"] == ""
    (s,) = D.load_items("agieval_sat_en", _write_jsonl(tmp_path / "sat-en.jsonl", [_agieval_row(options=["(A)x", "(B)y"])]))
    assert s.question.startswith("Passage: Six people") and s.metadata["category"] == "sat-en"
    # options without a prefix are kept as they are
    (n,) = D.load_items("agieval_sat_en", _write_jsonl(tmp_path / "plain.jsonl", [_agieval_row(options=["x", "y"])]))
    assert n.options == ("x", "y")


def test_agieval_errors(tmp_path):
    p = _write_jsonl(tmp_path / "hub_schema.jsonl", [{"query": "Q: ...", "choices": ["(A)a"], "gold": [0]}])
    with pytest.raises(KeyError, match=r"agieval_lsat_ar '.*hub_schema\.jsonl': missing required column 'passage'"):
        D.load_items("agieval_lsat_ar", p)
    with pytest.raises(ValueError, match=r"row 0: label='F'"):
        D.load_items("agieval_lsat_ar", _write_jsonl(tmp_path / "l.jsonl", [_agieval_row(label="F")]))
    with pytest.raises(ValueError, match=r"option 2 is '\(C\)b'"):
        D.load_items("agieval_sat_en", _write_jsonl(tmp_path / "o.jsonl", [_agieval_row(options=["(A)a", "(C)b"])]))


def _halueval_rows(n):
    return [{"knowledge": f"K{i}.", "question": f"Q{i}?", "right_answer": f"R{i}", "hallucinated_answer": f"H{i}"}
            for i in range(n)]


def test_halueval_upstream_format_and_balance(tmp_path):
    # the released files are JSON Lines with a .json suffix
    rows = _halueval_rows(5)
    items = D.load_items("halueval_qa", _write_jsonl(tmp_path / "qa_data.json", rows))
    flags = [it.metadata["given_answer_correct"] for it in items]
    assert flags.count("1") == 2 and flags.count("0") == 3  # n // 2 right; the odd one hallucinated
    for it, i in zip(items, range(5), strict=True):
        given = f"R{i}" if it.metadata["given_answer_correct"] == "1" else f"H{i}"
        assert it.question == f"Context: K{i}.\nQuestion: Q{i}?\nCandidate Answer: {given}"
        assert it.gold_answers == (f"R{i}",) and it.incorrect_answers == (f"H{i}",)
    # the assignment follows the rows' content, not their order
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    again = D.load_items("halueval_qa", _write_jsonl(tmp_path / "shuffled.json", shuffled))
    assert {it.item_id: it.metadata["given_answer_correct"] for it in again} == {
        it.item_id: it.metadata["given_answer_correct"] for it in items}
    # exact half for every count
    for n in (1, 2, 3, 8, 9):
        got = D.load_items("halueval_qa", _write_jsonl(tmp_path / f"n{n}.jsonl", _halueval_rows(n)))
        assert sum(it.metadata["given_answer_correct"] == "1" for it in got) == n // 2
    # no knowledge: no Context line
    (nk,) = D.load_items("halueval_qa", _write_jsonl(tmp_path / "nk.jsonl", [dict(rows[0], knowledge="")]))
    assert nk.question.startswith("Question: Q0?\n")


def test_halueval_errors_and_hub(tmp_path, monkeypatch):
    bad = [{"knowledge": "k", "question": "q", "right_answer": "r"}]
    with pytest.raises(KeyError, match=r"halueval_qa '.*bad\.jsonl': missing required column 'hallucinated_answer'"):
        D.load_items("halueval_qa", _write_jsonl(tmp_path / "bad.jsonl", bad))
    empty = [dict(_halueval_rows(1)[0], right_answer=" ")]
    with pytest.raises(ValueError, match=r"row 0: right_answer is empty"):
        D.load_items("halueval_qa", _write_jsonl(tmp_path / "empty.jsonl", empty))

    import datasets

    calls = []

    def fake(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        return _halueval_rows(2)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    assert len(D.load_items("halueval_qa", "pminervini/HaluEval")) == 2
    assert calls == [("pminervini/HaluEval", "qa", "data")]


def test_mmlu_pro_upstream_formats(tmp_path):
    opts = [f"o{k}" for k in range(10)]
    rows = [
        {"question_id": 70, "question": "Q1", "options": opts, "answer": "J", "answer_index": 9, "category": "law", "src": "s"},
        {"question_id": 71, "question": "Q2", "options": ["a", "b", "c"], "answer_index": 2, "category": "math", "src": "t"},
        # "N/A" padding is removed as the official evaluation does; a gold after it is re-lettered
        {"question_id": 72, "question": "Q3", "options": ["a", "N/A", "b", "c", "N/A"], "answer": "D", "answer_index": 3,
         "category": "math", "src": "t"},
    ]
    a, b, c = D.load_items("mmlu_pro", _write_jsonl(tmp_path / "test.jsonl", rows))
    assert (a.item_id, len(a.options), a.gold_letter, a.gold_answers) == ("mmlu_pro-70", 10, "J", ("o9",))
    assert a.metadata == {"category": "law", "src": "s", "question_id": "70", "row": "0"}
    assert (b.options, b.gold_letter, b.gold_answers) == (("a", "b", "c"), "C", ("c",))
    assert (c.options, c.gold_letter, c.gold_answers) == (("a", "b", "c"), "C", ("c",))
    # the official evaluation outputs: one JSON list with model fields, which are ignored
    outputs = tmp_path / "model_outputs.json"
    outputs.write_text(json.dumps([dict(rows[0], pred="J", generated_text="...")]), encoding="utf-8")
    (j,) = D.load_items("mmlu_pro", outputs)
    assert j == a


def test_mmlu_pro_errors(tmp_path):
    def load(rows, name="x.jsonl"):
        return D.load_items("mmlu_pro", _write_jsonl(tmp_path / name, rows))

    with pytest.raises(KeyError, match=r"mmlu_pro '.*noq\.jsonl': missing required column 'question'"):
        load([{"options": ["a"], "answer": "A"}], "noq.jsonl")
    with pytest.raises(KeyError, match=r"missing required column 'answer' \(or 'answer_index'\)"):
        load([{"question": "Q", "options": ["a", "b"]}])
    with pytest.raises(ValueError, match=r"row 0: answer='C'.*allowed: letters \['A', 'B'\]"):
        load([{"question": "Q", "options": ["a", "b"], "answer": "C"}])
    with pytest.raises(ValueError, match=r"row 0: options='a; b'"):
        load([{"question": "Q", "options": "a; b", "answer": "A"}])
    with pytest.raises(ValueError, match=r"the answer B is an 'N/A' option"):
        load([{"question": "Q", "options": ["a", "N/A"], "answer": "B"}])


def test_new_adapters_reject_a_column_mapping():
    for adapter in NEW:
        with pytest.raises(TypeError, match="question_column"):
            D.load_items(adapter, question_column="q")


# ----------------------------------------------------------------------------- the given_answer rule


def _item(item_id: str = "x", **meta) -> Item:
    return Item(item_id=item_id, dataset="d", question="Q?", gold_answers=("Paris",), canonical="Paris",
                incorrect_answers=("Lyon",), metadata=meta)


def test_given_answer_rule_reads_the_item_not_the_answer():
    rule = C.get_rule("given_answer")
    assert rule is C.given_answer
    for answer in (None, "", "Paris", "Lyon", "0.9", "I am not sure"):
        assert rule(answer, _item(given_answer_correct="1")) == 1.0
        assert rule(answer, _item(given_answer_correct="0")) == 0.0
    assert math.isnan(rule("Paris", _item()))  # not a HaluEval item
    assert math.isnan(rule("Paris", _item(given_answer_correct="yes")))
    assert math.isnan(rule("B", D.load_items("mmlu", limit=1)[0]))


def test_given_answer_on_the_bundled_halueval_sample():
    items = D.load_items("halueval_qa")
    labels = [C.given_answer(None, it) for it in items]
    assert labels == [float(it.metadata["given_answer"] == it.gold_answers[0]) for it in items]
    assert sum(labels) == 75


def test_grade_stage_labels_rows_without_an_answer_under_given_answer():
    from confgrid.flows.stages.grade import grade_answers

    right, wrong = _item("r", given_answer_correct="1"), _item("w", given_answer_correct="0")
    parsed = pd.DataFrame({"item_id": ["r", "w", "r"], "answer": [None, "", "Paris"]})
    out = grade_answers(parsed, [right, wrong], ("given_answer", "containment"), "given_answer")
    assert out["correct_given_answer"].tolist() == [1.0, 0.0, 1.0]
    assert out["correct"].tolist() == [1.0, 0.0, 1.0]
    c = out["correct_containment"].tolist()
    assert math.isnan(c[0]) and math.isnan(c[1]) and c[2] == 1.0


# ----------------------------------------------------------------------------- purity


def test_datasets_module_imports_no_torch_or_ray():
    code = "import sys, confgrid.protocols.datasets; print(sorted(m for m in ('torch', 'ray', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # datasets (the library) is imported only when rows are read
