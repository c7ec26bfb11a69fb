"""Adapters of answer-text datasets: TruthfulQA, TriviaQA, SimpleQA, GSM8K, HaluEval QA and a user's own file.

The model answers in words or a number (or, for HaluEval QA, rates an answer it is given); correctness compares text
with the gold answers (GSM8K: the number, rule ``numeric``; HaluEval QA: whether the given answer was the right one).
Definitions: study 000 section 3.4 and Appendix A (TruthfulQA, TriviaQA, custom files), study 002 section 4.4 and
Appendix F.5 (HaluEval QA), study 004 (SimpleQA, GSM8K). Registered on import; load them through
:func:`confgrid.protocols.datasets.load_items`.

Every adapter raises ``FileNotFoundError`` if ``source`` names a file that does not exist and ``KeyError`` naming a
required column that is missing (with the file); each adapter's docstring names its other errors.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from confgrid.protocols.correctness import GIVEN_ANSWER_KEY
from confgrid.protocols.dataset_io import (
    dedup,
    hash_id,
    load_rows,
    register_adapter,
    require_columns,
    row_adapter,
    split_answers,
    unique_ids,
)
from confgrid.protocols.items import Item

__all__ = ["HALUEVAL_SEED", "custom", "gsm8k", "gsm8k_gold", "halueval_given_right", "halueval_qa", "halueval_text",
           "simpleqa", "triviaqa", "truthfulqa"]


# column names of the released CSV and of the hub schema: question, best, correct, incorrect, type, category, source
_TRUTHFULQA_CSV = ("Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Type", "Category", "Source")
_TRUTHFULQA_HUB = ("question", "best_answer", "correct_answers", "incorrect_answers", "type", "category", "source")


@row_adapter("truthfulqa", split="validation", hub_config="generation")
def truthfulqa(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """TruthfulQA generation set (Lin, Hilton and Evans 2022).

    Reads the released ``TruthfulQA.csv`` (columns Type, Category, Question, Best Answer, Correct Answers, Incorrect
    Answers, Source; answers joined by ``"; "``; a leading UTF-8 BOM is fine) or the hub schema of ``truthful_qa``,
    config ``generation`` (``question``, ``best_answer``, ``correct_answers`` list, ...).

    Mapping (study 000 section 3.4): ``canonical`` = best answer; ``gold_answers`` = best answer, then the correct
    answers (deduplicated, order kept); ``aliases`` = ``gold_answers``; ``incorrect_answers`` from the incorrect
    answers; ``item_id`` = ``truthfulqa-<first 10 hex of sha1(question)>``, stable under subsetting; metadata: type,
    category, source, row.
    """
    qc, bc, cc, ic, *meta_cols = _TRUTHFULQA_CSV if "Question" in r or "question" not in r else _TRUTHFULQA_HUB
    require_columns(r, [qc, bc, cc], where)
    q, best = r[qc], (r[bc] or "").strip()
    meta = {k: r.get(c) or "" for k, c in zip(("type", "category", "source"), meta_cols, strict=True)}
    gold = dedup([best, *split_answers(r[cc], ";")])
    return Item(item_id=hash_id("truthfulqa", q), dataset=dataset_name, question=q, gold_answers=gold,
                canonical=best or (gold[0] if gold else ""), aliases=gold,
                incorrect_answers=split_answers(r.get(ic), ";"), metadata={**meta, "row": str(i)})


_TRIVIAQA_HIDDEN = {"", "<unk>"}


@row_adapter("triviaqa", split="validation", hub_config="rc.nocontext")
def triviaqa(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """TriviaQA (Joshi et al. 2017), hub schema or flat alias-list form.

    Two row forms are accepted, detected per row:

    * the Hugging Face ``trivia_qa`` schema (default config ``rc.nocontext``): ``question``, ``question_id``,
      ``answer`` = {``value``, ``aliases``, ``normalized_aliases``, ``normalized_value``, ...}. ``canonical`` =
      ``answer.value``; ``aliases`` = ``answer.aliases`` as released; ``normalized_aliases`` =
      ``answer.normalized_aliases``; ``gold_answers`` = value then aliases (deduplicated, order kept); ``item_id`` =
      ``question_id``.
    * the flat form (FlashRAG, the bundled sample): ``id``, ``question``, ``golden_answers`` (alias list).
      ``canonical`` = first alias; ``aliases`` = ``gold_answers`` = the list; ``normalized_aliases`` empty.

    Metadata: ``category`` = ``"triviaqa"`` (TriviaQA has no categories), ``row``.

    Raises ``KeyError`` if a row has neither ``answer`` nor ``golden_answers``, or no question; ``ValueError`` if a
    row has no answer (the hub's test split hides its answers; use ``split="validation"``).
    """
    require_columns(r, ["question"], where)
    if "answer" in r and isinstance(r["answer"], Mapping):
        ans = r["answer"]
        value = (ans.get("value") or "").strip()
        aliases = split_answers(ans.get("aliases"), "")
        norm = split_answers(ans.get("normalized_aliases"), "")
        if value in _TRIVIAQA_HIDDEN and not aliases:
            raise ValueError(
                f"{where} row {i}: answer.value={ans.get('value')!r} and no aliases; "
                "the answers of this split are hidden (the hub's test split is; use split='validation')"
            )
        gold = dedup([value, *aliases]) if value not in _TRIVIAQA_HIDDEN else dedup(aliases)
        item_id = str(r.get("question_id") or f"{dataset_name}-{i}")
        canonical = value if value not in _TRIVIAQA_HIDDEN else gold[0]
    elif "golden_answers" in r:
        aliases = split_answers(r["golden_answers"], "")
        norm = ()
        gold = dedup(aliases)
        if not gold:
            raise ValueError(f"{where} row {i}: golden_answers is empty; every item needs an answer")
        item_id = str(r.get("id") or f"{dataset_name}-{i}")
        canonical = gold[0]
    else:
        raise KeyError(f"{where}: missing required column 'answer' (hub schema) or 'golden_answers' (flat form); "
                       f"columns found: {sorted(r)}")
    return Item(item_id=item_id, dataset=dataset_name, question=r["question"], gold_answers=gold, canonical=canonical,
                aliases=aliases, normalized_aliases=norm, metadata={"category": "triviaqa", "row": str(i)})


def _one_answer_item(prefix: str, dataset: str, question: str, answer: str, metadata: dict[str, str]) -> Item:
    """An item with one gold answer (also its canonical form and its only alias); id ``<prefix>-<sha1(question)>``."""
    return Item(item_id=hash_id(prefix, question), dataset=dataset, question=question, gold_answers=(answer,),
                canonical=answer, aliases=(answer,), metadata=metadata)


def _simpleqa_metadata(cell: Any, where: str, i: int) -> dict[str, str]:
    """``topic`` and ``answer_type`` of a SimpleQA metadata cell: a Python dict literal (the CSV) or a mapping (hub)."""
    if isinstance(cell, Mapping):
        meta: Any = cell
    elif cell is None or not str(cell).strip():
        meta = {}
    else:
        try:
            meta = ast.literal_eval(str(cell))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            meta = None
        if not isinstance(meta, Mapping):
            raise ValueError(f"{where} row {i}: metadata={str(cell)[:80]!r} is not a dict literal such as "
                             "\"{'topic': 'Art', 'answer_type': 'Person', 'urls': [...]}\"")
    return {k: str(meta.get(k) or "").strip() for k in ("topic", "answer_type")}


@row_adapter("simpleqa", split="test")
def simpleqa(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """SimpleQA (Wei et al. 2024, OpenAI), short fact-seeking questions with one answer each (study 004).

    Reads the released ``simple_qa_test_set.csv`` (columns ``metadata``, ``problem``, ``answer``; 4,326 rows) or a hub
    copy with the same columns (e.g. ``basicv8vc/SimpleQA``, split ``test``). ``metadata`` is a Python dict literal,
    ``{'topic': ..., 'answer_type': ..., 'urls': [...]}`` (read with :func:`ast.literal_eval`, never evaluated as
    code), or a mapping.

    Mapping: ``question`` = problem; ``gold_answers`` = ``aliases`` = (answer,); ``canonical`` = answer (texts
    stripped); ``item_id`` = ``simpleqa-<first 10 hex of sha1(problem)>``. Metadata: ``topic`` (10 values: Science and
    technology, Politics, Art, ...), ``answer_type`` (Date, Person, Number, Place, Other), ``category`` = ``topic``,
    ``row``; the source ``urls`` are dropped. SimpleQA's official grade is a model judge (correct / incorrect / not
    attempted); confgrid grades with its text rules (``containment`` by default), a different, stricter-or-looser
    reading that a report should name.

    Raises ``ValueError`` if a row's problem or answer is empty, or its metadata is not a dict literal.
    """
    require_columns(r, ["problem", "answer"], where)
    q, ans = str(r["problem"] or "").strip(), str(r["answer"] or "").strip()
    if not q or not ans:
        raise ValueError(f"{where} row {i}: {'problem' if not q else 'answer'} is empty; every row needs both")
    meta = _simpleqa_metadata(r.get("metadata"), where, i)
    return _one_answer_item("simpleqa", dataset_name, q, ans, {**meta, "category": meta["topic"], "row": str(i)})


_GSM8K_NUMBER = re.compile(r"[-+]?(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)(?:\.[0-9]+)?")


def gsm8k_gold(answer: str) -> str | None:
    """The gold number of a GSM8K answer: the text after the last ``####``, stripped, commas removed.

    ``"... #### 1,450,000"`` -> ``"1450000"``, ``"#### -3"`` -> ``"-3"``. None when there is no ``####`` or what
    follows is not a number (an optional sign, digits or comma-grouped thousands, an optional decimal part).

    Examples
    --------
    >>> gsm8k_gold("She makes 9 * 2 = $18.\\n#### 18"), gsm8k_gold("#### 2,125"), gsm8k_gold("no marker")
    ('18', '2125', None)
    """
    head, marker, tail = (answer or "").rpartition("####")
    gold = tail.strip()
    return gold.replace(",", "") if marker and _GSM8K_NUMBER.fullmatch(gold) else None


@row_adapter("gsm8k", split="test", hub_config="main")
def gsm8k(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """GSM8K (Cobbe et al. 2021), grade-school math word problems with a numeric answer (study 004).

    Reads the released JSON Lines (``grade_school_math/data/test.jsonl``: ``question``, ``answer`` = the worked
    solution ending ``#### <number>``; 1,319 test rows) or the hub copy ``openai/gsm8k`` (config ``main``).

    Mapping: ``question`` (surrounding whitespace stripped); ``gold_answers`` = ``aliases`` = (the gold number,) and
    ``canonical`` = it: the text after ``####`` with its thousands separators removed (:func:`gsm8k_gold`; ``"2,125"``
    -> ``"2125"``); ``item_id`` = ``gsm8k-<first 10 hex of sha1(question)>``. Metadata: ``solution`` (the worked
    solution before ``####``, calculator annotations ``<<...>>`` kept; about 300 characters), ``category`` =
    ``"gsm8k"`` (GSM8K has no categories), ``row``. Grade with the rule ``numeric``
    (:func:`confgrid.protocols.correctness.numeric`) and a worked-solution prompt (``gsm8k_boxed``,
    ``gsm8k_boxed_confidence``).

    Raises ``ValueError`` if a row's question is empty, or its answer has no ``####`` followed by a number.
    """
    require_columns(r, ["question", "answer"], where)
    q, text = str(r["question"] or "").strip(), str(r["answer"] or "")
    gold = gsm8k_gold(text)
    if not q or gold is None:
        raise ValueError(f"{where} row {i}: " + ("question is empty" if not q else
                         f"answer={text[-60:]!r} does not end with '#### <number>'"))
    meta = {"solution": text[: text.rfind("####")].strip(), "category": "gsm8k", "row": str(i)}
    return _one_answer_item("gsm8k", dataset_name, q, gold, meta)


@register_adapter("custom")
def custom(
    source: str,
    *,
    split: str = "train",
    dataset_name: str = "custom",
    hub_config: str | None = None,
    question_column: str = "question",
    answer_column: str | Sequence[str] = "answer",
    answer_separator: str = ";",
    id_column: str | None = None,
    aliases_column: str | None = None,
    canonical_column: str | None = None,
) -> list[Item]:
    """A user's own JSONL / JSON / CSV / Parquet file (or hub dataset) with a column mapping.

    Metadata: ``category`` = ``dataset_name`` (a custom file has no category column), ``row``. Raises ``KeyError`` if
    a mapped column is missing (named, with the columns found); ``ValueError`` if a row has no answer.

    Parameters
    ----------
    source : str
        Path of a ``.jsonl``/``.json``/``.csv``/``.tsv``/``.parquet`` file, or a hub name.
    question_column : str, default "question"
        Column holding the question text.
    answer_column : str or sequence of str, default "answer"
        Column(s) holding accepted answers. Each cell is a list, or a string split on ``answer_separator``. With
        several columns their answers are concatenated in column order (deduplicated).
    answer_separator : str, default ";"
        Separator of answers packed in one string cell; ``""`` keeps the cell whole.
    id_column : str or None
        Column holding item ids; None gives ``<dataset_name>-<row index>``.
    aliases_column : str or None
        Column of alternative spellings (list or separator-joined); added to ``gold_answers`` after the answers and
        stored in ``aliases``.
    canonical_column : str or None
        Column of the canonical answer; None uses the first answer.
    """
    answer_columns = [answer_column] if isinstance(answer_column, str) else list(answer_column)
    if not answer_columns:
        raise ValueError("answer_column=[]: give at least one answer column")
    rows = load_rows(source, split, hub_config)
    required = [question_column, *answer_columns]
    required += [c for c in (id_column, aliases_column, canonical_column) if c]
    items = []
    for i, r in enumerate(rows):
        require_columns(r, required, f"custom {source!r}")
        answers = [a for c in answer_columns for a in split_answers(r[c], answer_separator)]
        aliases = split_answers(r[aliases_column], answer_separator) if aliases_column else ()
        gold = dedup([*answers, *aliases])
        if not gold:
            raise ValueError(f"custom {source!r} row {i}: no answer in column(s) {answer_columns}")
        canonical = str(r[canonical_column]).strip() if canonical_column and r[canonical_column] else gold[0]
        q = r[question_column]
        items.append(
            Item(
                item_id=str(r[id_column]) if id_column else f"{dataset_name}-{i}",
                dataset=dataset_name,
                question="" if q is None else str(q),
                gold_answers=gold if canonical in gold else (canonical, *gold),
                canonical=canonical,
                aliases=aliases or gold,
                metadata={"category": dataset_name, "row": str(i)},
            )
        )
    return unique_ids(items)


#: Seed of the right/hallucinated answer assignment of :func:`halueval_qa`.
HALUEVAL_SEED = 0

_HALUEVAL_COLUMNS = ("knowledge", "question", "right_answer", "hallucinated_answer")


def halueval_given_right(keys: Sequence[str], seed: int = HALUEVAL_SEED) -> list[bool]:
    """Which rows are given their right answer: exactly ``len(keys) // 2`` of them.

    Rule: each row's key is hashed, ``sha256(f"{seed}\\x1f{key}")``; the rows are ranked by that digest (ties, i.e.
    repeated keys, by row index) and the first ``n // 2`` in that ranking get the right answer, the other
    ``n - n // 2`` the hallucinated one (so an odd count has one more hallucinated answer). The assignment depends
    only on the set of keys, not on the order of the rows.

    Parameters
    ----------
    keys : sequence of str
        One key per row (:func:`halueval_qa` uses question and knowledge).
    seed : int, default :data:`HALUEVAL_SEED`

    Returns
    -------
    list of bool
        ``True`` where the row is given its right answer; ``sum`` is ``len(keys) // 2``.
    """
    digests = [hashlib.sha256(f"{int(seed)}\x1f{k}".encode("utf-8")).hexdigest() for k in keys]
    ranked = sorted(range(len(keys)), key=lambda i: (digests[i], i))
    right = set(ranked[: len(keys) // 2])
    return [i in right for i in range(len(keys))]


def halueval_text(knowledge: str, question: str, given_answer: str) -> str:
    """The text of a HaluEval QA item (study 002 Appendix F.5), one line each::

        Context: <knowledge>
        Question: <question>
        Candidate Answer: <given answer>

    The ``Context:`` line is left out when ``knowledge`` is empty.
    """
    lines = [f"Context: {knowledge}"] if knowledge else []
    lines += [f"Question: {question}", f"Candidate Answer: {given_answer}"]
    return "\n".join(lines)


def _halueval_rows(rows: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Each row's texts, stripped, and ``given_right``: whether it shows its right answer (:func:`halueval_given_right`
    over every row)."""
    for r in rows:
        require_columns(r, _HALUEVAL_COLUMNS, where)
    texts = [{c: str(r[c] or "").strip() for c in _HALUEVAL_COLUMNS} for r in rows]
    right = halueval_given_right([f"{t['question']}\x1f{t['knowledge']}" for t in texts])
    return [{**t, "given_right": is_right} for t, is_right in zip(texts, right, strict=True)]


@row_adapter("halueval_qa", split="data", hub_config="qa", prepare=_halueval_rows)
def halueval_qa(t: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """HaluEval QA (Li et al. 2023), asked as "rate this given answer" (study 002 section 4.4, Appendix F.5).

    Reads the released QA file (``data/qa_data.json``, 10,000 rows, or the generation-stage ``qa_one-turn_data.json``:
    JSON Lines despite the suffix) or a hub copy with the same columns (``pminervini/HaluEval``, config ``qa``, split
    ``data``): ``knowledge``, ``question``, ``right_answer``, ``hallucinated_answer``.

    Each row becomes one item that shows the model one candidate answer, the right one or the hallucinated one, and
    asks only for a confidence that it is correct. Exactly half of the rows (``n // 2``; the extra row of an odd count
    is hallucinated) are given the right answer, chosen by :func:`halueval_given_right` with :data:`HALUEVAL_SEED`
    from the hash of question and knowledge, so the choice is the same whatever the row order.
    :func:`~confgrid.protocols.datasets.load_items` keeps the balance when it draws a ``limit`` subset (it draws each
    half separately).

    Mapping (every text stripped of surrounding whitespace): ``question`` = :func:`halueval_text` (Context / Question
    / Candidate Answer lines); ``gold_answers`` = ``aliases`` = (right answer,); ``canonical`` = right answer;
    ``incorrect_answers`` = (hallucinated answer,); no options. Metadata: ``given_answer``, ``given_answer_correct``
    (``"1"`` right answer shown, ``"0"`` hallucinated), ``knowledge``, ``category`` = ``"halueval_qa"``, ``row``.
    ``item_id`` = ``halueval_qa-<first 10 hex of sha1(question, knowledge)>``. Grade with the correctness rule
    ``given_answer`` (:func:`confgrid.protocols.correctness.given_answer`): the target is whether the shown answer is
    right, not the text the model writes.

    Raises ``ValueError`` if a row's question, right answer or hallucinated answer is empty.
    """
    for c in ("question", "right_answer", "hallucinated_answer"):
        if not t[c]:
            raise ValueError(f"{where} row {i}: {c} is empty; every row needs a question and both answers")
    given = t["right_answer"] if t["given_right"] else t["hallucinated_answer"]
    return Item(
        item_id=hash_id("halueval_qa", t["question"], t["knowledge"]),
        dataset=dataset_name,
        question=halueval_text(t["knowledge"], t["question"], given),
        gold_answers=(t["right_answer"],),
        canonical=t["right_answer"],
        aliases=(t["right_answer"],),
        incorrect_answers=(t["hallucinated_answer"],),
        metadata={"given_answer": given, GIVEN_ANSWER_KEY: "1" if t["given_right"] else "0",
                  "knowledge": t["knowledge"], "category": "halueval_qa", "row": str(i)},
    )
