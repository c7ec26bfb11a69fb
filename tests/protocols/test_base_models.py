"""Base models (study 000 Appendix B.3): plain-text rendering, the answer after a space, and the BOS rule
(generation without BOS, scoring with it), with a tiny byte-level tokenizer that adds BOS, saved and reloaded."""

from __future__ import annotations

import pytest

from confgrid.protocols import chat
from confgrid.protocols.chat import effective_separator
from confgrid.protocols.contexts import ablation_cells, get_context
from confgrid.protocols.prompts import get_prompt
from reference.render_policy import RenderPolicy

Q = "What is the capital of France?"


@pytest.fixture(scope="module")
def bos_tok(tmp_path_factory):
    """Byte-level BPE without merges (one token per byte), BOS ``<s>`` added by a TemplateProcessing post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<s>": 0, "</s>": 1, **{ch: k + 2 for k, ch in enumerate(sorted(alphabet))}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    path = tmp_path_factory.mktemp("bos_tokenizer")
    fast.save_pretrained(str(path))
    loaded = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    assert loaded.bos_token_id == 0 and loaded("ab")["input_ids"] == [0, *loaded("ab", add_special_tokens=False)["input_ids"]]
    return loaded


def _text(tok, ids):
    return tok.decode(ids)


def test_tokenizer_adds_bos(bos_tok):
    assert chat.adds_bos(bos_tok)
    assert chat.render_prompt_ids(bos_tok, "Q?", use_chat_template=False)[0] == 0


@pytest.mark.parametrize(("add_bos", "first_is_bos"), [(None, True), (True, True), (False, False)])
def test_render_prompt_ids_add_bos(bos_tok, add_bos, first_is_bos):
    ids = chat.render_prompt_ids(bos_tok, "Q?", use_chat_template=False, assistant_prefix="Answer:", add_bos=add_bos)
    assert ids.count(0) == int(first_is_bos) and (ids[0] == 0) is first_is_bos
    assert _text(bos_tok, [i for i in ids if i != 0]) == "Q?\nAnswer:"


def test_add_bos_true_needs_a_bos_token():
    class NoBos:
        bos_token_id = None

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [ord(c) for c in text]}

    with pytest.raises(ValueError, match="add_bos=True.*no bos_token_id"):
        chat.render_prompt_ids(NoBos(), "Q?", use_chat_template=False, add_bos=True)
    assert chat.render_prompt_ids(NoBos(), "Q?", use_chat_template=False, add_bos=False) == [81, 63]


def test_effective_separator():
    assert [effective_separator(s, c) for s in ("", " ") for c in (True, False)] == ["", " ", " ", " "]


def test_plain_text_contexts(bos_tok):
    """Without a chat template prompt and answer form one text; the answer always follows a space."""
    policy = RenderPolicy.base_model()
    assert policy == RenderPolicy(use_chat_template=False, generation_bos=False, scoring_bos=True)
    joined = {}
    for cid in ("bare", "answer_slot", "guess_slot", "answer_only", *(c.context_id for c in ablation_cells())):
        ctx = get_context(cid)
        c_ids, a_ids = policy.scoring_request(bos_tok, ctx, Q, "Paris")
        assert c_ids[0] == 0 and c_ids.count(0) == 1 and 0 not in a_ids  # scored with exactly one BOS
        assert _text(bos_tok, a_ids) == " Paris"
        text = _text(bos_tok, c_ids[1:] + a_ids)
        expected = ctx.user_text(Q) + ("\n" + ctx.assistant_prefix if ctx.assistant_prefix else "") + " Paris"
        assert text == expected, cid
        joined[cid] = c_ids + a_ids
    # the Answer: slot is the bare context (study 000 Appendix B.3)
    assert joined["answer_slot"] == joined["bare"]
    assert _text(bos_tok, joined["bare"][1:]) == Q + "\nAnswer: Paris"
    # the Guess: slot is the confidence prompt, a newline and Guess:
    assert _text(bos_tok, joined["guess_slot"][1:]) == get_prompt("confidence").render(Q) + "\nGuess: Paris"


def test_generation_without_bos(bos_tok):
    policy = RenderPolicy.base_model()
    prompt = get_prompt("confidence").render(Q)
    ids = policy.generation_ids(bos_tok, prompt)
    assert 0 not in ids and _text(bos_tok, ids) == prompt
    # the declared default (None) keeps the tokenizer's behaviour
    assert RenderPolicy(use_chat_template=False).generation_ids(bos_tok, "Q?")[0] == 0


_BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.mark.parametrize(("add_bos", "n_bos"), [(None, 1), (True, 1), (False, 0)])
def test_template_that_writes_bos_gets_no_second_one(bos_tok, monkeypatch, add_bos, n_bos):
    monkeypatch.setattr(bos_tok, "chat_template", _BOS_TEMPLATE)
    ids = chat.render_prompt_ids(bos_tok, "Q?", use_chat_template=True, assistant_prefix="Answer:", add_bos=add_bos)
    assert ids.count(0) == n_bos and (ids[0] == 0) is bool(n_bos)
    assert _text(bos_tok, [i for i in ids if i != 0]) == "[user]Q?\n[assistant]Answer:"
    # with a chat template the declared separator is kept: the bare context has none
    c_ids, a_ids = chat.scoring_request(bos_tok, get_context("bare"), "Q?", "Paris", True, add_bos=add_bos)
    assert _text(bos_tok, a_ids) == "Paris" and c_ids.count(0) == n_bos


def test_render_policy_validation():
    with pytest.raises(ValueError, match="scoring_bos='yes'"):
        RenderPolicy(scoring_bos="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use_chat_template=1"):
        RenderPolicy(use_chat_template=1)  # type: ignore[arg-type]
