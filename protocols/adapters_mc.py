"""Adapters of datasets with options: MMLU, MMLU-Pro, AGIEval LSAT-AR and SAT-EN, BoolQ.

Every item keeps its options in listed order and the letter of the correct one (``options``, ``gold_letter``), so an
answer set with ``format: mc`` shows them lettered (protocols/mc.py) and the ``mc_letter`` rule grades the letter;
``gold_answers`` is the correct option's text, so the same items can also be asked as open questions. Definitions:
study 000 section 3.4 (MMLU), study 002 sections 4.1-4.3 and Appendix F.1, F.3, F.4 (BoolQ, SAT-EN, LSAT-AR), study
003 (MMLU-Pro, MMLU with options shown). Registered on import; load them through
:func:`confgrid.protocols.datasets.load_items`.

Every adapter raises ``FileNotFoundError`` if ``source`` names a file that does not exist and ``KeyError`` naming a
required column that is missing (with the file); each adapter's docstring names its other errors.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confgrid.protocols.dataset_io import (
    hash_id,
    load_local,
    load_rows,
    no_mapping,
    register_adapter,
    require_columns,
    row_adapter,
    unique_ids,
)
from confgrid.protocols.items import Item

__all__ = ["agieval_lsat_ar", "agieval_sat_en", "boolq", "boolq_text", "mmlu", "mmlu_pro"]


def _choice_item(
    *,
    item_id: str,
    dataset: str,
    question: str,
    options: tuple[str, ...],
    letter: str,
    metadata: dict[str, str],
) -> Item:
    """An item whose gold answer is option ``letter`` of ``options`` (the others are its incorrect answers)."""
    k = string.ascii_uppercase.index(letter)
    correct = options[k]
    return Item(
        item_id=item_id,
        dataset=dataset,
        question=question,
        gold_answers=(correct,),
        canonical=correct,
        aliases=(correct,),
        incorrect_answers=tuple(o for j, o in enumerate(options) if j != k),
        options=options,
        gold_letter=letter,
        metadata=metadata,
    )


# ----------------------------------------------------------------------------- MMLU


_MMLU_COLUMNS = ("question", "A", "B", "C", "D", "answer")
_LETTERS = "ABCD"


def _mmlu_item(r: Mapping[str, Any], i: int, subject: str, dataset_name: str, where: str) -> Item:
    require_columns(r, ["question", "answer"] if "choices" in r else _MMLU_COLUMNS, f"mmlu {where}")
    if "choices" in r:  # hub schema (cais/mmlu): choices list, answer int 0-3
        options = tuple(str(c) for c in r["choices"])
        ans = r["answer"]
        letter = _LETTERS[int(ans)] if not isinstance(ans, str) or ans.isdigit() else ans.strip().upper()
        subject = r.get("subject") or subject
    else:
        options = tuple(str(r[k]) for k in _LETTERS)
        letter = (r["answer"] or "").strip().upper()
    if letter not in _LETTERS[: len(options)]:
        raise ValueError(f"mmlu {where} row {i}: answer={r['answer']!r}; allowed: letters {list(_LETTERS[:len(options)])}")
    return _choice_item(
        item_id=hash_id(f"mmlu-{subject}" if subject else "mmlu", r["question"], *options),
        dataset=dataset_name,
        question=r["question"],
        options=options,
        letter=letter,
        metadata={"subject": subject, "category": subject, "row": str(i)},
    )


@register_adapter("mmlu")
def mmlu(
    source: str,
    *,
    split: str = "test",
    dataset_name: str = "mmlu",
    hub_config: str | None = None,
    **mapping: Any,
) -> list[Item]:
    """MMLU (Hendrycks et al. 2021), asked as an open question.

    ``source`` is one headerless CSV (``question,A,B,C,D,answer``), a directory of ``<subject>_test.csv`` files (read
    in sorted file-name order; the subject comes from the file name), or a hub name with the ``cais/mmlu`` schema
    (``question``, ``subject``, ``choices``, ``answer`` index; config ``all``).

    Mapping (study 000 section 3.4): ``question`` = the question text alone, options NOT appended; ``canonical`` =
    text of the correct option; ``gold_answers`` = (that text,); ``incorrect_answers`` = the other option texts;
    ``options`` and ``gold_letter`` kept for the multiple-choice format; ``item_id`` = ``mmlu-<subject>-<first 10 hex
    of sha1(question, options)>``; metadata: ``subject`` and ``category`` (both the subject), ``row``. An answer set
    with ``format: mc`` shows the options (protocols/mc.py).

    Raises ``FileNotFoundError`` also for a directory without ``*_test.csv`` (or ``*.csv``) files; ``ValueError`` if
    an answer is not one of the option letters.
    """
    no_mapping("mmlu", mapping)
    path = Path(source).expanduser()
    if path.is_dir():  # (subject, rows, where) per file, each read when its turn comes
        files = sorted(path.glob("*_test.csv")) or sorted(path.glob("*.csv"))
        if not files:
            raise FileNotFoundError(f"path={source!r}: directory has no <subject>_test.csv files")
        parts = ((f.stem.removesuffix("_test"), load_local(f, header=_MMLU_COLUMNS), repr(str(f))) for f in files)
    else:
        is_csv = path.suffix.lower() == ".csv"
        rows = load_rows(source, split, hub_config or "all", **({"header": _MMLU_COLUMNS} if is_csv else {}))
        parts = [(path.stem.removesuffix("_test") if is_csv else "", rows, repr(source))]
    return unique_ids([_mmlu_item(r, i, subject, dataset_name, where)
                       for subject, rows, where in parts for i, r in enumerate(rows)])


# ----------------------------------------------------------------------------- MMLU-Pro

_MMLU_PRO_MISSING = "N/A"


@row_adapter("mmlu_pro", split="test")
def mmlu_pro(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """MMLU-Pro (Wang et al. 2024): up to 10 options per question, with its category (study 003).

    Reads the hub schema of ``TIGER-Lab/MMLU-Pro`` (split ``test`` or ``validation``) from the hub, a local
    Parquet/JSON Lines export of it, or the JSON list of the official evaluation outputs
    (``eval_results/model_outputs_*.json`` of TIGER-AI-Lab/MMLU-Pro, unzipped; the model-output fields are ignored):
    ``question_id``, ``question``, ``options`` (list), ``answer`` (letter), ``answer_index``, ``category``, ``src``.

    Mapping: ``options`` as listed, options equal to ``"N/A"`` (padding in some releases) removed as the official
    evaluation does; most questions have 10 options, some fewer (3 to 9), and they are kept with their own count.
    ``gold_letter`` = ``answer`` (the letter the official evaluation compares with; re-lettered if an ``"N/A"`` before
    it was removed), or the letter of ``answer_index`` when there is no ``answer`` column. One test question
    (question_id 3983) has ``answer`` C but ``answer_index`` 1; the letter wins. ``gold_answers`` = (correct option
    text,); ``incorrect_answers`` = the other options. ``item_id`` = ``mmlu_pro-<question_id>`` (a hash of question
    and options without that column). Metadata: ``category``, ``src``, ``question_id``, ``row``.

    Raises ``KeyError`` if ``question`` or ``options`` is missing, or both ``answer`` and ``answer_index`` are;
    ``ValueError`` if ``options`` is not a non-empty list, or the answer is not one of its letters (or names an
    ``"N/A"`` option).
    """
    require_columns(r, ["question", "options"], where)
    if "answer" not in r and "answer_index" not in r:
        raise KeyError(f"{where}: missing required column 'answer' (or 'answer_index'); columns found: {sorted(r)}")
    raw = r["options"]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"{where} row {i}: options={raw!r}; expected a non-empty list of option texts")
    letters = string.ascii_uppercase[: len(raw)]
    ans = r.get("answer")
    if ans is not None and str(ans).strip():
        letter = str(ans).strip().upper()
    elif isinstance(r.get("answer_index"), int) and 0 <= r["answer_index"] < len(raw):
        letter = letters[r["answer_index"]]
    else:
        letter = ""
    if letter not in letters:
        raise ValueError(
            f"{where} row {i}: answer={ans!r}, answer_index={r.get('answer_index')!r}; "
            f"allowed: letters {list(letters)} (or indices 0-{len(raw) - 1})"
        )
    kept = [k for k, o in enumerate(raw) if str(o).strip() != _MMLU_PRO_MISSING]
    if letters.index(letter) not in kept:
        raise ValueError(f"{where} row {i}: the answer {letter} is an {_MMLU_PRO_MISSING!r} option")
    options = tuple(str(raw[k]) for k in kept)
    qid = r.get("question_id")
    has_id = qid is not None and str(qid) != ""
    return _choice_item(
        item_id=f"mmlu_pro-{qid}" if has_id else hash_id("mmlu_pro", r["question"], *options),
        dataset=dataset_name,
        question=r["question"],
        options=options,
        letter=string.ascii_uppercase[kept.index(letters.index(letter))],
        metadata={"category": str(r.get("category") or ""), "src": str(r.get("src") or ""),
                  "question_id": str(qid) if has_id else "", "row": str(i)},
    )


# ----------------------------------------------------------------------------- AGIEval

_AGIEVAL_COLUMNS = ("passage", "question", "options", "label")
_OPTION_PREFIX = re.compile(r"^\s*\(([A-Za-z])\)\s*")


def _agieval(r: Mapping[str, Any], i: int, where: str, dataset_name: str, task: str, passage_label: str) -> Item:
    """The item of one row of an AGIEval v1 multiple-choice file (see :func:`agieval_lsat_ar`)."""
    require_columns(r, _AGIEVAL_COLUMNS, where)
    raw = r["options"]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"{where} row {i}: options={raw!r}; expected a non-empty list of '(A)...' strings")
    options = []
    for k, o in enumerate(raw):
        m = _OPTION_PREFIX.match(str(o))
        if m and m.group(1).upper() != string.ascii_uppercase[k]:
            raise ValueError(f"{where} row {i}: option {k + 1} is {o!r}; expected the prefix "
                             f"({string.ascii_uppercase[k]}) or none")
        options.append(str(o)[m.end():].strip() if m else str(o).strip())
    label = r["label"]
    if isinstance(label, (list, tuple)) and len(label) == 1:
        label = label[0]
    letter = str(label or "").strip().upper()
    letters = string.ascii_uppercase[: len(options)]
    if len(letter) != 1 or letter not in letters:
        raise ValueError(f"{where} row {i}: label={r['label']!r}; allowed: one of the letters {list(letters)}")
    passage = str(r["passage"] or "").strip()
    question = str(r["question"] or "").strip()
    return _choice_item(
        item_id=hash_id(f"agieval-{task}", passage, question, *options),
        dataset=dataset_name,
        question=f"{passage_label}: {passage}\nQuestion: {question}" if passage else question,
        options=tuple(options),
        letter=letter,
        metadata={"category": task, "passage_id": hash_id(task, passage) if passage else "", "row": str(i)},
    )


@row_adapter("agieval_lsat_ar", split="test")
def agieval_lsat_ar(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """AGIEval LSAT analytical reasoning (Zhong et al. 2023; AR-LSAT): 5 options (study 002 section 4.2).

    Reads AGIEval's v1 file ``data/v1/lsat-ar.jsonl`` (230 rows; columns ``passage``, ``question``, ``options`` =
    ``["(A)...", ...]``, ``label`` = the letter, ``answer``, ``other``), or a hub dataset with those columns. (The
    ``*/agieval-lsat-ar`` hub copies used by lm-evaluation-harness have ``query``/``choices``/``gold`` instead: export
    the v1 file.)

    Mapping (study 002 Appendix F.4): ``question`` = ``"Context: <passage>\\nQuestion: <question>"`` (the question
    alone when the passage is empty); ``options`` = the options with their ``(A)`` prefixes removed; ``gold_letter`` =
    ``label``; ``gold_answers`` = (correct option text,); ``incorrect_answers`` = the other options. ``item_id`` =
    ``agieval-lsat-ar-<first 10 hex of sha1(passage, question, options)>``. Metadata: ``category`` = ``"lsat-ar"``,
    ``passage_id`` (a hash of the passage: questions of one logic game share it), ``row``.

    Raises ``ValueError`` if ``label`` is not one of the option letters, or an option's prefix letter is out of place.
    """
    return _agieval(r, i, where, dataset_name, task="lsat-ar", passage_label="Context")


@row_adapter("agieval_sat_en", split="test")
def agieval_sat_en(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """AGIEval SAT English (Zhong et al. 2023): a passage and 4 options (study 002 section 4.3).

    Reads AGIEval's v1 file ``data/v1/sat-en.jsonl`` (206 rows; columns ``passage``, ``question``, ``options`` =
    ``["(A)...", ...]``, ``label``, ``other`` = {``solution``}), or a hub dataset with those columns.

    Mapping (study 002 Appendix F.3): ``question`` = ``"Passage: <passage>\\nQuestion: <question>"``; otherwise as
    :func:`agieval_lsat_ar`. ``item_id`` = ``agieval-sat-en-<hash>``. Metadata: ``category`` = ``"sat-en"``,
    ``passage_id`` (about 4-5 questions share each passage), ``row``.

    Errors as :func:`agieval_lsat_ar`.
    """
    return _agieval(r, i, where, dataset_name, task="sat-en", passage_label="Passage")


# ----------------------------------------------------------------------------- BoolQ

_BOOLQ_OPTIONS = ("True", "False")
_BOOLQ_TRUE = {"true", "1", "yes"}
_BOOLQ_FALSE = {"false", "0", "no"}


def boolq_text(passage: str, question: str) -> str:
    """The text of a BoolQ item: ``"Passage: <passage>\\nQuestion: <question>?"``.

    A ``?`` is added when the question does not end with one (BoolQ's questions are lower-case search queries without
    it); nothing else is changed.
    """
    q = question.strip()
    return f"Passage: {passage.strip()}\nQuestion: {q if q.endswith('?') else q + '?'}"


def _boolq_label(value: Any, where: str, i: int) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    s = str(value).strip().lower()
    if s in _BOOLQ_TRUE:
        return True
    if s in _BOOLQ_FALSE:
        return False
    hint = " (the SuperGLUE test split hides its labels as -1; use the validation split)" if s == "-1" else ""
    raise ValueError(f"{where} row {i}: label={value!r}; allowed: true/false, 1/0 or a JSON boolean{hint}")


@row_adapter("boolq", split="validation")
def boolq(r: Mapping[str, Any], i: int, where: str, dataset_name: str) -> Item:
    """BoolQ (Clark et al. 2019): a passage and a yes/no question, asked as True/False (study 002 section 4.1, F.1).

    Two row forms, detected per row: SuperGLUE's ``BoolQ/val.jsonl`` (``question``, ``passage``, ``idx``, ``label``: a
    JSON boolean, the strings ``"true"``/``"false"`` of the OpenCompass copy, or 1/0 as in the hub's
    ``super_glue``/``boolq``), and the hub's ``google/boolq`` (``question``, ``passage``, ``answer`` boolean; splits
    ``train`` and ``validation``).

    Mapping: ``question`` = :func:`boolq_text` (``"Passage: ...\\nQuestion: ...?"``; study 002 F.1 shows the statement
    alone, the passage is given here so that the question is answerable); ``options`` = ``("True", "False")``;
    ``gold_letter`` ``"A"`` for true, ``"B"`` for false; ``gold_answers`` = ``("True",)`` or ``("False",)``;
    ``incorrect_answers`` = the other. ``item_id`` = ``boolq-<first 10 hex of sha1(question, passage)>`` (the same for
    both row forms). Metadata: ``category`` = ``"boolq"`` (BoolQ has no categories), ``title`` (the Wikipedia title
    that opens the passage, before ``" -- "``; empty if none), ``idx`` (when given), ``row``.

    Raises ``KeyError`` if ``question``, ``passage`` or both ``label`` and ``answer`` are missing; ``ValueError`` if a
    label is not a boolean (e.g. the hidden ``-1`` labels of a test split).
    """
    require_columns(r, ["question", "passage"], where)
    if "label" not in r and "answer" not in r:
        raise KeyError(f"{where}: missing required column 'label' (or 'answer'); columns found: {sorted(r)}")
    value = _boolq_label(r["label"] if "label" in r else r["answer"], where, i)
    passage, question = str(r["passage"] or ""), str(r["question"] or "")
    title = passage.split(" -- ", 1)[0].strip() if " -- " in passage else ""
    meta = {"category": "boolq", "title": title, "row": str(i)}
    if r.get("idx") is not None:
        meta["idx"] = str(r["idx"])
    return _choice_item(item_id=hash_id("boolq", question.strip(), passage.strip()), dataset=dataset_name,
                        question=boolq_text(passage, question), options=_BOOLQ_OPTIONS, letter="A" if value else "B",
                        metadata=meta)
