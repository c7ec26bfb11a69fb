"""Prompt ablation, generating contexts, contexts from YAML, and Qwen3 snapshots of every built-in context
(study 000 section 3.4, Appendix A "Prompts and contexts", Appendix C "Design.")."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from confgrid.protocols import chat
from confgrid.protocols import prompts as P
from confgrid.protocols.contexts import (
    ABLATION_MARKERS,
    ABLATION_PROMPTS,
    CONTEXTS,
    ScoringContext,
    ablation_cells,
    contexts_from_mappings,
    generating_context,
    get_context,
    load_context_file,
    same_context,
)
from confgrid.protocols.items import Item
from confgrid.protocols.prompts import get_prompt

SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "snapshots" / "qwen3_contexts.json"
Q = "What is the capital of France?"
ANSWER = "Paris"
MC_ITEM = Item("mc-1", "toy", "Which city is the capital of France?", ("Paris",), "Paris",
               options=("Rome", "Paris", "Berlin", "Madrid"), gold_letter="B")
MAIN = ("bare", "answer_slot", "guess_slot")
IM_START = 151644


# ----------------------------------------------------------------------------- ablation declarations


def test_ablation_cells_declared():
    cells = ablation_cells()
    assert [c.context_id for c in cells] == [
        "abl_question_answer", "abl_question_guess",
        "abl_instruction_answer", "abl_instruction_guess",
        "abl_noprob_answer", "abl_noprob_guess",
        "abl_confidence_answer", "abl_confidence_guess",
    ]
    assert list(ABLATION_PROMPTS.values()) == [
        "question", "answer_only_instruction", "confidence_no_probability", "confidence"
    ]
    assert ABLATION_MARKERS == {"answer": "Answer:", "guess": "Guess:"}
    for c in cells:
        ctx = get_context(c.context_id)
        assert re.fullmatch(r"[a-z_]+", c.context_id)  # valid in file names and MLflow keys
        assert (ctx.user_prompt, ctx.assistant_prefix, ctx.separator) == (c.user_prompt, c.assistant_prefix, " ")
        assert ABLATION_PROMPTS[c.prompt] == c.user_prompt and ABLATION_MARKERS[c.marker] == c.assistant_prefix
    # three cells are main contexts (study 000 Appendix C, "Design.")
    assert {c.context_id: c.same_as for c in cells if c.same_as} == {
        "abl_question_answer": "answer_slot",
        "abl_instruction_answer": "answer_only",
        "abl_confidence_guess": "guess_slot",
    }
    assert {c.context_id: same_context(c.context_id) for c in cells} == {
        c.context_id: c.same_as or c.context_id for c in cells
    }


def test_no_probability_prompt_is_derived_by_deletions():
    conf = get_prompt("confidence")
    derived = get_prompt("confidence_no_probability")
    assert derived.template == conf.without_probability_request().template
    text = conf.template
    for d in conf.deletions:
        assert text.count(d) == 1
        text = text.replace(d, "")
    assert derived.template == text
    assert "probab" not in derived.template.lower() and "Guess:" in derived.template


def test_generating_contexts():
    assert generating_context("confidence") is get_context("guess_slot")
    assert generating_context("bare") is get_context("bare")
    gen = generating_context("answer_only")
    assert gen.id == "gen_answer_only" and gen.coordinates == ("answer_only", "", "", "open")
    assert generating_context("confidence_percent") is get_context("guess_slot_percent")
    assert generating_context("mc_letter") is get_context("mc_bare")
    assert generating_context("mc_confidence") is get_context("mc_guess_slot")
    assert generating_context("confidence_no_probability") is get_context("abl_noprob_guess")
    # a combination no registered context has gives a fresh context that is not registered
    P.register_prompt(P.Prompt("test_gen_prompt", "Q: {question}\nGuess: <answer>", answer_label="Guess:"))
    try:
        ctx = generating_context("test_gen_prompt")
        assert ctx.id == "gen_test_gen_prompt" and ctx.id not in CONTEXTS
        assert (ctx.assistant_prefix, ctx.separator, ctx.item_format) == ("Guess:", " ", "open")
    finally:
        P.PROMPTS.unregister("test_gen_prompt", missing_ok=True)
    with pytest.raises(ValueError, match="answer_label=None"):
        generating_context("question")
    with pytest.raises(KeyError, match="unknown prompt 'nope'"):
        generating_context("nope")


def test_mc_contexts_render_options():
    ctx = get_context("mc_answer_slot")
    assert ctx.item_format == "mc" and ctx.user_prompt == "mc_letter_instruction"
    text = ctx.item_text(MC_ITEM)
    assert text.endswith("Question: Which city is the capital of France?\nA. Rome\nB. Paris\nC. Berlin\nD. Madrid")
    assert get_context("mc_bare").item_text(MC_ITEM).endswith("D. Madrid\nAnswer:")
    assert get_context("guess_slot").item_text(MC_ITEM).endswith("Question: " + MC_ITEM.question)  # open format
    with pytest.raises(ValueError, match="no options"):
        ctx.item_text(Item("x", "toy", "Q?", ("a",), "a"))


# ----------------------------------------------------------------------------- contexts from YAML


def test_load_context_file(tmp_path):
    p = tmp_path / "ctx.yaml"
    p.write_text(
        "- id: test_answer_newline\n"
        "  user_prompt: question\n"
        "  assistant_prefix: \"Answer:\\n\"\n"
        "  separator: ''\n"
        "  description: Answer on its own line.\n"
        "- id: test_mc_guess\n"
        "  user_prompt: mc_confidence\n"
        "  assistant_prefix: 'Guess:'\n"
        "  separator: ' '\n"
        "  item_format: mc\n"
    )
    try:
        got = load_context_file(p)
        assert [c.id for c in got] == ["test_answer_newline", "test_mc_guess"]
        assert get_context("test_answer_newline").assistant_prefix == "Answer:\n"
        assert get_context("test_mc_guess").item_format == "mc"
        with pytest.raises(ValueError, match="already registered"):
            load_context_file(p)
    finally:
        CONTEXTS.unregister("test_answer_newline", missing_ok=True)
        CONTEXTS.unregister("test_mc_guess", missing_ok=True)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"id": "t1", "user_prompt": "question", "sepparator": " "}, r"unknown key\(s\) \['sepparator'\]"),
        ({"id": "t1", "user_prompt": "nope"}, r"user_prompt='nope'.*'answer_only'.*'question'"),
        ({"id": "t1", "user_prompt": "question", "separator": "\n"}, r"separator='\\n'.*tokenized with the answer"),
        ({"id": "t 1", "user_prompt": "question"}, r"id='t 1'.*allowed characters"),
        ({"id": "t1", "user_prompt": "question", "item_format": "cloze"}, r"item_format='cloze'"),
        ({"id": "bare", "user_prompt": "question"}, "already registered"),
        ({"user_prompt": "question"}, "'id' must be a non-empty string"),
        ({"id": "t1", "user_prompt": "question", "separator": 1}, "'separator' must be a string"),
    ],
)
def test_context_mapping_errors(entry, message):
    with pytest.raises(ValueError, match=message):
        contexts_from_mappings([entry])
    assert "t1" not in CONTEXTS


def test_context_mappings_validate_all_before_registering():
    with pytest.raises(ValueError, match=r"contexts\[1\].*declared"):
        contexts_from_mappings([{"id": "t2", "user_prompt": "question"}, {"id": "t2", "user_prompt": "bare"}])
    assert "t2" not in CONTEXTS
    (ctx,) = contexts_from_mappings({"id": "t3", "user_prompt": "bare"}, register=False)
    assert ctx == ScoringContext("t3", "bare") and "t3" not in CONTEXTS
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        load_context_file("missing.yaml")


# ----------------------------------------------------------------------------- Qwen3 snapshots


def _snapshot_ids() -> list[str]:
    return [*MAIN, "answer_only", "gen_answer_only", "guess_slot_percent", "mc_bare", "mc_answer_slot",
            "mc_guess_slot", *(c.context_id for c in ablation_cells())]


def _render(tok, cid: str) -> dict:
    ctx = get_context(cid)
    question = ctx.question_text(MC_ITEM) if ctx.item_format == "mc" else Q
    answer = "B" if ctx.item_format == "mc" else ANSWER
    ids, ans = chat.scoring_request(tok, ctx, question, answer, True)
    return {
        "question": question,
        "answer": answer,
        "context_ids": ids,
        "answer_ids": ans,
        "context_text": tok.decode(ids),
    }


def test_qwen3_snapshots(qwen3):
    got = {cid: _render(qwen3, cid) for cid in _snapshot_ids()}
    if os.environ.get("CONFGRID_UPDATE_SNAPSHOTS") == "1":  # regenerate, then review the diff
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(got, indent=1, ensure_ascii=False)
        text = re.sub(r"\[\s*([-\d,\s]+?)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text)
        SNAPSHOT.write_text(text + "\n", encoding="utf-8")
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert sorted(expected) == sorted(got)
    for cid in got:
        assert got[cid] == expected[cid], cid


def test_qwen3_snapshot_invariants(qwen3):
    snap = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    for cid, rec in snap.items():
        ctx = get_context(cid)
        # the decoded context is the chat template around the rendered user turn, then the prefix
        assert rec["context_text"] == (
            "<|im_start|>user\n" + ctx.user_text(rec["question"]) + "<|im_end|>\n" + think + ctx.assistant_prefix
        ), cid
        assert rec["context_ids"].count(IM_START) == 2  # one user turn, one assistant turn, no system turn
        assert qwen3.decode(rec["context_ids"] + rec["answer_ids"]) == rec["context_text"] + ctx.separator + rec["answer"]
    # coinciding cells render the same ids as their main contexts
    for c in ablation_cells():
        if c.same_as:
            assert snap[c.context_id]["context_ids"] == snap[c.same_as]["context_ids"]
    # the answer's ids are the same in every context that puts a space before it
    spaced = {cid: rec["answer_ids"] for cid, rec in snap.items() if get_context(cid).separator == " "}
    open_ids = {tuple(v) for cid, v in spaced.items() if get_context(cid).item_format == "open"}
    assert open_ids == {(12095,)}  # "ĠParis"
    assert snap["bare"]["answer_ids"] == [59604]  # "Paris", no space
    mc_ids = {tuple(v) for cid, v in spaced.items() if get_context(cid).item_format == "mc"}
    assert mc_ids == {tuple(chat.answer_ids(qwen3, "B", " "))}
    # the marker is the last thing before the answer
    assert qwen3.convert_ids_to_tokens(snap["abl_question_guess"]["context_ids"][-2:]) == ["Guess", ":"]
    assert qwen3.convert_ids_to_tokens(snap["abl_confidence_answer"]["context_ids"][-2:]) == ["Answer", ":"]
