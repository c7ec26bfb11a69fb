"""Dataset adapters on the bundled samples, a hub-schema fixture and user files."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import numpy as np
import pytest

from confgrid.protocols import datasets as D
from confgrid.protocols import adapters_mc as AMC
from confgrid.protocols import dataset_io as DIO
from confgrid.protocols.items import Item, items_from_table, items_to_table

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _check_items(items: list[Item], dataset: str) -> None:
    assert all(isinstance(it, Item) for it in items)
    assert len({it.item_id for it in items}) == len(items), "item ids must be unique"
    for it in items:
        assert it.dataset == dataset
        assert it.question.strip()
        assert it.gold_answers and all(isinstance(g, str) and g for g in it.gold_answers)
        assert it.canonical == it.gold_answers[0]
    # the items survive the Arrow round trip unchanged
    assert items_from_table(items_to_table(items)) == items


def _bundled(dataset: str) -> list[Item]:
    """The bundled sample of ``dataset``: its 150 items, checked."""
    items = D.load_items(dataset)
    assert len(items) == 150
    _check_items(items, dataset)
    return items


# ----------------------------------------------------------------------------- bundled samples


def test_bundled_paths_exist_and_are_package_data():
    assert set(D.BUNDLED) == {"truthfulqa", "triviaqa", "mmlu", "boolq", "agieval_lsat_ar", "agieval_sat_en",
                              "halueval_qa", "mmlu_pro", "lifeeval", "simpleqa", "gsm8k"}
    for name, p in D.BUNDLED.items():
        assert Path(p).exists(), name
        assert "protocols" in Path(p).parts and "data" in Path(p).parts


def test_truthfulqa_bundled():
    it = _bundled("truthfulqa")[0]
    assert it.question == "Where did fortune cookies originate?"
    assert it.canonical == "The precise origin of fortune cookies is unclear"
    assert it.gold_answers[:3] == (
        "The precise origin of fortune cookies is unclear",
        "Fortune cookies originated in San Francisco",
        "Fortune cookies originated in California",
    )
    assert "Fortune cookies originated in China" in it.incorrect_answers
    assert it.metadata["category"] == "Misconceptions" and it.metadata["type"] == "Adversarial"
    assert it.item_id.startswith("truthfulqa-") and len(it.item_id) == len("truthfulqa-") + 10
    assert it.options == () and it.gold_letter is None


def test_truthfulqa_gold_deduplicated_best_first(tmp_path):
    p = tmp_path / "tqa.csv"
    # UTF-8 BOM, a best answer repeated among the correct answers, a quoted field with a comma
    p.write_text(
        "\ufeffType,Category,Question,Best Answer,Correct Answers,Incorrect Answers,Source\n"
        'Adversarial,Misc,"Is it A, or B?",It is A,It is B; It is A; It is B; None,It is C; It is D,src\n',
        encoding="utf-8",
    )
    (it,) = D.load_items("truthfulqa", p)
    assert it.question == "Is it A, or B?"
    assert it.gold_answers == ("It is A", "It is B", "None")  # "None" stays a string
    assert it.incorrect_answers == ("It is C", "It is D")


def test_truthfulqa_id_stable_under_subsetting():
    full = {it.question: it.item_id for it in D.load_items("truthfulqa")}
    sub = D.load_items("truthfulqa", limit=7, seed=3)
    assert all(full[it.question] == it.item_id for it in sub)


def test_triviaqa_flat_bundled():
    it = _bundled("triviaqa")[0]
    assert it.item_id == "test_6654"
    assert it.question == "Cleeve Hill is the highest point in which range of English hills?"
    assert it.canonical == "Cotteswold Hills"
    assert "Cotswolds" in it.gold_answers and it.aliases == it.gold_answers
    assert it.normalized_aliases == ()


def test_triviaqa_hf_schema_fixture():
    items = D.load_items("triviaqa", FIXTURES / "triviaqa_hf_schema.jsonl", dataset_name="tqa_hf")
    assert len(items) == 5
    _check_items(items, "tqa_hf")
    flat = {it.item_id: it for it in D.load_items("triviaqa")}
    for it in items:
        # the fixture was built from the bundled flat rows: same question, value = first alias
        assert it.question == flat[it.item_id].question
        assert it.canonical == flat[it.item_id].canonical
        assert it.aliases == flat[it.item_id].aliases
        assert it.normalized_aliases and all(a == a.lower() for a in it.normalized_aliases)
    assert items[0].normalized_aliases[0] == "cotteswold hills"


def test_mmlu_bundled_directory():
    items = D.load_items("mmlu")
    assert len(items) == 4 * 38
    _check_items(items, "mmlu")
    subjects = [it.metadata["subject"] for it in items]
    assert sorted(set(subjects)) == [
        "high_school_government_and_politics",
        "high_school_physics",
        "miscellaneous",
        "philosophy",
    ]
    assert all(subjects.count(s) == 38 for s in set(subjects))
    for it in items:
        assert len(it.options) == 4 and it.gold_letter in "ABCD"
        assert it.canonical == it.options["ABCD".index(it.gold_letter)]
        assert it.gold_answers == (it.canonical,)
        assert set(it.incorrect_answers) | {it.canonical} == set(it.options)


def test_mmlu_single_file_spot_check():
    path = Path(D.BUNDLED["mmlu"]) / "philosophy_test.csv"
    items = D.load_items("mmlu", path)
    assert len(items) == 38
    it = items[0]
    assert it.question == "According to Singer, compliance with his principle requires:"
    assert it.gold_letter == "D"
    assert it.canonical == "drastic changes to both our personal habits and to our society."
    assert it.metadata["subject"] == "philosophy"
    assert it.item_id.startswith("mmlu-philosophy-")
    assert "modest" not in it.question  # options not appended


def test_limit_is_a_seeded_nested_subset_in_draw_order():
    full = D.load_items("triviaqa")
    order = {it.item_id: k for k, it in enumerate(full)}
    a = D.load_items("triviaqa", limit=20, seed=7)
    b = D.load_items("triviaqa", limit=20, seed=7)
    c = D.load_items("triviaqa", limit=20, seed=8)
    assert [x.item_id for x in a] == [x.item_id for x in b]
    assert [x.item_id for x in a] != [x.item_id for x in c]
    pos = [order[x.item_id] for x in a]
    assert pos == list(np.random.default_rng(7).permutation(150)[:20]) and len(set(pos)) == 20
    assert D.load_items("triviaqa", limit=35, seed=7)[:20] == a  # nested: a larger limit keeps these, in order
    assert len(D.load_items("triviaqa", limit=10_000)) == 150


@pytest.mark.parametrize("limit", [0, -1, 2.5, True])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="limit"):
        D.load_items("triviaqa", limit=limit)


# ----------------------------------------------------------------------------- custom


ROWS = [
    {"qid": "a1", "q": "Capital of France?", "ans": ["Paris"], "alt": ["City of Light"]},
    {"qid": "a2", "q": "2+2?", "ans": ["4", "four"], "alt": []},
    {"qid": "a3", "q": "Largest planet?", "ans": ["Jupiter"], "alt": ["Jove"]},
]


def _expect_custom(items: list[Item]) -> None:
    _check_items(items, "mine")
    assert [it.item_id for it in items] == ["a1", "a2", "a3"]
    assert items[0].gold_answers == ("Paris", "City of Light")
    assert items[1].gold_answers == ("4", "four")
    assert items[2].aliases == ("Jove",)


def test_custom_jsonl_list_columns(tmp_path):
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    items = D.load_items(
        "custom", p, dataset_name="mine", question_column="q", answer_column="ans", id_column="qid", aliases_column="alt"
    )
    _expect_custom(items)


def test_custom_csv_joined_strings(tmp_path):
    p = tmp_path / "mine.csv"
    lines = ["qid,q,ans,alt"] + [f'{r["qid"]},{r["q"]},{"|".join(r["ans"])},{"|".join(r["alt"])}' for r in ROWS]
    p.write_text("\n".join(lines) + "\n")
    items = D.load_items(
        "custom",
        p,
        dataset_name="mine",
        question_column="q",
        answer_column="ans",
        answer_separator="|",
        id_column="qid",
        aliases_column="alt",
    )
    _expect_custom(items)
    assert items[1].gold_answers[0] == "4"  # read as text, not as an integer


def test_custom_tsv_with_canonical_column(tmp_path):
    p = tmp_path / "mine.tsv"
    p.write_text("q\tans\tbest\nWho wrote Hamlet?\tShakespeare; W. Shakespeare\tWilliam Shakespeare\n")
    (it,) = D.load_items("custom", p, question_column="q", answer_column="ans", canonical_column="best")
    assert it.canonical == "William Shakespeare"
    assert it.gold_answers == ("William Shakespeare", "Shakespeare", "W. Shakespeare")


def test_custom_parquet(tmp_path):
    p = tmp_path / "mine.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), p)
    items = D.load_items(
        "custom", p, dataset_name="mine", question_column="q", answer_column="ans", id_column="qid", aliases_column="alt"
    )
    _expect_custom(items)


def test_custom_default_ids_and_several_answer_columns(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"question": "Q?", "a": "x", "b": "y; x"}) + "\n")
    (it,) = D.load_items("custom", p, answer_column=["a", "b"])
    assert it.item_id == "custom-0" and it.gold_answers == ("x", "y")


# ----------------------------------------------------------------------------- errors and registry


def test_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        D.load_items("truthfulqa", missing)
    with pytest.raises(FileNotFoundError, match="nope_dir"):
        D.load_items("mmlu", str(tmp_path / "nope_dir") + "/")


_HIDDEN = {"question": "Q?", "question_id": "q1", "answer": {"value": "<unk>", "aliases": [], "normalized_aliases": []}}


@pytest.mark.parametrize("adapter, name, text, error, match", [
    ("triviaqa", "test_split.jsonl", json.dumps(_HIDDEN) + "\n", ValueError, "hidden"),  # hidden answers
    ("mmlu", "x_test.csv", "Q?,a,b,c,d,E\n", ValueError, "answer='E'"),  # a bad letter
    ("custom", "x.jsonl", json.dumps({"prompt": "Q?", "answer": "A"}) + "\n", KeyError,
     r"'question'.*columns found: \['answer', 'prompt'\]"),  # a missing column lists those found
    ("truthfulqa", "t.csv", "Type,Question,Best Answer\nA,Q?,B\n", KeyError, "Correct Answers"),
    ("custom", "empty.jsonl", "", ValueError, "no items"),  # an empty file
])
def test_bad_file_is_refused(tmp_path, adapter, name, text, error, match):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(error, match=match):
        D.load_items(adapter, p)


def test_mapping_rejected_by_fixed_adapters():
    with pytest.raises(TypeError, match="question_colum"):
        D.load_items("triviaqa", question_colum="q")


def test_registry_errors():
    with pytest.raises(KeyError, match=r"^unknown dataset adapter 'nope'; allowed: agieval_lsat_ar, agieval_sat_en, boolq, custom, gsm8k, halueval_qa, "
                       r"lifeeval, mmlu, mmlu_pro, simpleqa, triviaqa, truthfulqa$"):
        DIO.get_adapter("nope")
    with pytest.raises(ValueError, match="already registered"):
        DIO.register_adapter("mmlu")(lambda *a, **k: [])
    assert DIO.get_adapter("mmlu") is AMC.mmlu


def test_hub_name_goes_to_hub_loader(monkeypatch):
    """A name that is not a path is passed to datasets.load_dataset (no network: stubbed)."""
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        return [
            {"question": "Q?", "question_id": "tc_1", "answer": {"value": "Paris", "aliases": ["Paris", "paris city"], "normalized_aliases": ["paris"]}}
        ]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (it,) = D.load_items("triviaqa", "trivia_qa")
    assert calls == [("trivia_qa", "rc.nocontext", "validation")]
    assert it.item_id == "tc_1" and it.gold_answers == ("Paris", "paris city") and it.normalized_aliases == ("paris",)


def test_hub_style_names_vs_paths(monkeypatch, tmp_path):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        if path == "offline/missing":
            raise ConnectionError("no network")
        return [{"question": "Q?", "subject": "astronomy", "choices": ["a", "b", "c", "d"], "answer": 2}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (it,) = D.load_items("mmlu", "cais/mmlu")
    assert calls == [("cais/mmlu", "all", "test")]
    assert it.gold_letter == "C" and it.canonical == "c" and it.metadata["subject"] == "astronomy"
    with pytest.raises(FileNotFoundError, match="offline/missing.*ConnectionError"):
        D.load_items("custom", "offline/missing")
    for local in ["data/sub/x.jsonl", str(tmp_path / "x"), "./x", "a/b/c"]:
        with pytest.raises(FileNotFoundError, match="no such file"):
            D.load_items("custom", local)
    assert len(calls) == 2  # local-looking paths never reach the hub loader


def test_a_local_file_is_read_without_progress_bars(tmp_path, capfd):
    """A first read of a local file (nothing cached) writes no "Generating train split" bar into the log, and the
    caller's progress-bar setting is left as it was."""
    path = tmp_path / "fresh.csv"
    path.write_text(f"question,answer\nWhat is {tmp_path.name}?,x\n", encoding="utf-8")
    assert datasets.is_progress_bar_enabled()
    assert DIO.load_local(path) == [{"question": f"What is {tmp_path.name}?", "answer": "x"}]
    assert "Generating" not in capfd.readouterr().err
    assert datasets.is_progress_bar_enabled()
