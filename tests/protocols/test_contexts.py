"""Scoring contexts rendered with the real Qwen3 tokenizer (study 000 Appendix A, "Chat templates",
"Prompts and contexts")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from confgrid.protocols import chat
from confgrid.protocols.contexts import CONTEXTS, ScoringContext, get_context, register_context

QWEN3_DIR = Path(__file__).parents[1] / "fixtures" / "qwen3_tokenizer"
Q = "What is the capital of France?"
THINK = "<think>\n\n</think>\n\n"
THINK_IDS = [151667, 271, 151668, 271]  # <think> \n\n </think> \n\n


# the session-scoped ``qwen3`` tokenizer fixture lives in tests/conftest.py


# ----------------------------------------------------------------------------- declarations


def test_builtin_contexts_declared():
    assert (get_context("bare").user_prompt, get_context("bare").assistant_prefix, get_context("bare").separator) == (
        "bare", "", "",
    )
    a = get_context("answer_slot")
    assert (a.user_prompt, a.assistant_prefix, a.separator) == ("question", "Answer:", " ")
    g = get_context("guess_slot")
    assert (g.user_prompt, g.assistant_prefix, g.separator) == ("confidence", "Guess:", " ")
    o = get_context("answer_only")
    assert (o.user_prompt, o.assistant_prefix, o.separator) == ("answer_only_instruction", "Answer:", " ")


def test_context_registry_and_validation():
    with pytest.raises(KeyError, match=r"^unknown scoring context 'nope'; allowed: .*\banswer_slot\b"):
        get_context("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_context(ScoringContext("bare", "bare"))
    with pytest.raises(KeyError, match="unknown prompt 'no_such_prompt'"):
        register_context(ScoringContext("ctx_with_missing_prompt", "no_such_prompt"))
    assert "ctx_with_missing_prompt" not in CONTEXTS
    with pytest.raises(ValueError, match=r"separator='\\n'"):
        ScoringContext("x", "bare", "Answer:", "\n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_context("bare").separator = " "  # type: ignore[misc]


# ----------------------------------------------------------------------------- Qwen3 snapshots


def _text(tok, context_id: str) -> str:
    ctx = get_context(context_id)
    return chat.render_prompt_text(tok, ctx.user_text(Q), use_chat_template=True, assistant_prefix=ctx.assistant_prefix)


def test_rendered_text_snapshots(qwen3):
    assert _text(qwen3, "bare") == (
        "<|im_start|>user\nWhat is the capital of France?\nAnswer:<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert _text(qwen3, "answer_slot") == (
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:"
    )
    assert _text(qwen3, "guess_slot") == (
        "<|im_start|>user\nGive your best short answer to the question below and the probability that it is "
        "correct (0.0 to 1.0). Write nothing else: no sentence, no explanation. Use this format:\n\n"
        "Guess: <your answer, a few words at most>\nProbability: <a number from 0.0 to 1.0>\n\n"
        "Question: What is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nGuess:"
    )


def test_token_id_snapshots(qwen3):
    ctx, ans = chat.scoring_request(qwen3, get_context("bare"), Q, "Paris", True)
    assert ctx == [151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 5267, 16141, 25, 151645, 198,
                   151644, 77091, 198, *THINK_IDS]
    assert ans == [59604]  # "Paris", no leading space
    ctx, ans = chat.scoring_request(qwen3, get_context("answer_slot"), Q, "Paris", True)
    assert ctx == [151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645, 198,
                   151644, 77091, 198, *THINK_IDS, 16141, 25]  # ... "Answer" ":"
    assert ans == [12095]  # "ĠParis"
    ctx, ans = chat.scoring_request(qwen3, get_context("guess_slot"), Q, "Paris", True)
    assert ctx[:3] == [151644, 872, 198] and ctx[-9:] == [151644, 77091, 198, *THINK_IDS, 45730, 25]  # "Guess" ":"
    assert ans == [12095]


@pytest.mark.parametrize("answer", ["Paris", "The Cotswold Hills", "1889", "Tina Turner's", "**Paris**", "Zürich"])
def test_answer_ids_shared_by_slots_and_join_is_exact(qwen3, answer):
    got = {}
    for cid in ("bare", "answer_slot", "guess_slot", "answer_only"):
        ctx_obj = get_context(cid)
        ctx, ans = chat.scoring_request(qwen3, ctx_obj, Q, answer, True)
        got[cid] = ans
        # the joined ids decode to the context text followed by separator + answer
        assert qwen3.decode(ctx + ans) == _text(qwen3, cid) + ctx_obj.separator + answer
        # exactly one empty think block, right before the prefix, and no BOS (Qwen has none)
        assert qwen3.decode(ctx).count(THINK) == 1 and qwen3.decode(ctx).endswith(THINK + ctx_obj.assistant_prefix)
        assert ctx.count(151644) == 2  # <|im_start|> user, <|im_start|> assistant
    assert got["answer_slot"] == got["guess_slot"] == got["answer_only"]
    assert got["answer_slot"] == chat.answer_ids(qwen3, answer, " ")
    assert got["bare"] == chat.answer_ids(qwen3, answer, "")


def test_bare_and_slot_first_tokens_differ(qwen3):
    assert qwen3.convert_ids_to_tokens(chat.answer_ids(qwen3, "Paris", "")) == ["Paris"]
    assert qwen3.convert_ids_to_tokens(chat.answer_ids(qwen3, "Paris", " ")) == ["\u0120Paris"]


def test_system_prompt_recording(qwen3, monkeypatch):
    assert not chat.adds_bos(qwen3)
    assert chat.template_preamble(qwen3) == "<|im_start|>user\n"
    assert chat.default_system_prompt(qwen3) is None  # Qwen3 adds no system prompt
    text = chat.render_prompt_text(qwen3, "Hi", use_chat_template=True, system_prompt="Be brief.")
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" + THINK
    # a Qwen2.5-style template that inserts a default system prompt
    qwen25 = (
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
        "{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    monkeypatch.setattr(qwen3, "chat_template", qwen25)
    assert chat.default_system_prompt(qwen3) == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    # the template ignores enable_thinking: no think block, default system prompt kept
    assert chat.render_prompt_text(qwen3, "Hi", use_chat_template=True, assistant_prefix="Answer:") == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nAnswer:"
    )


def test_plain_text_mode(qwen3):
    ids = chat.render_prompt_ids(qwen3, "Q?", use_chat_template=False, assistant_prefix="Answer:")
    assert ids == qwen3("Q?\nAnswer:", add_special_tokens=False)["input_ids"]
    assert chat.render_prompt_ids(qwen3, "Q?", use_chat_template=False) == qwen3("Q?")["input_ids"]
    with pytest.raises(ValueError, match="system_prompt"):
        chat.render_prompt_ids(qwen3, "Q?", use_chat_template=False, system_prompt="x")


def test_errors(qwen3, monkeypatch):
    with pytest.raises(ValueError, match="answer=''"):
        chat.scoring_request(qwen3, get_context("answer_slot"), Q, "", True)
    monkeypatch.setattr(qwen3, "chat_template", None)
    with pytest.raises(ValueError, match="no chat_template"):
        chat.render_prompt_ids(qwen3, "Q?", use_chat_template=True)


# ----------------------------------------------------------------------------- BOS policy (stub tokenizer)


class _BosStub:
    """Character-level tokenizer that adds BOS (id 1) by default; '<s>' in text is BOS."""

    bos_token_id = 1

    def __init__(self, template_writes_bos: bool):
        self.chat_template = "stub"
        self.template_writes_bos = template_writes_bos

    def __call__(self, text, add_special_tokens=True):
        ids, i = [], 0
        while i < len(text):
            if text.startswith("<s>", i):
                ids.append(1)
                i += 3
            else:
                ids.append(ord(text[i]))
                i += 1
        return {"input_ids": ([1] if add_special_tokens else []) + ids}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kw):
        body = "".join(f"[{m['role']}]{m['content']}" for m in messages) + ("[assistant]" if add_generation_prompt else "")
        return ("<s>" if self.template_writes_bos else "") + body


@pytest.mark.parametrize("writes_bos", [True, False])
@pytest.mark.parametrize("use_chat", [True, False])
def test_single_bos(writes_bos, use_chat):
    tok = _BosStub(writes_bos)
    ids = chat.render_prompt_ids(tok, "Q?", use_chat_template=use_chat, assistant_prefix="Answer:")
    assert ids[0] == 1 and ids.count(1) == 1
    assert 1 not in chat.answer_ids(tok, "Paris", " ")
