"""Tests of the committed fixture model (actors/fixture_model) and its build script (tools/fixture.py)."""

from __future__ import annotations

import json

import pytest

from confgrid.actors.named_models import FIXTURE_MODEL_DIR
from tools.fixture import (
    chat_prompt_ids,
    is_correct,
    load_bundled_questions,
    normalize_answer,
    parse_confidence_output,
    render_prompt,
    split_questions,
)


@pytest.fixture(scope="module")
def backend():
    from confgrid.actors.transformers_backend import TransformersBackend

    return TransformersBackend(str(FIXTURE_MODEL_DIR), dtype="float32", device="cpu")


def test_files_and_size():
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "README.md", "split.json"):
        assert (FIXTURE_MODEL_DIR / name).is_file(), name
    total = sum(p.stat().st_size for p in FIXTURE_MODEL_DIR.iterdir() if p.is_file())
    assert total < 8_000_000
    assert "say nothing about real LLMs" in (FIXTURE_MODEL_DIR / "README.md").read_text()


def test_loads_through_from_pretrained():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(FIXTURE_MODEL_DIR))
    tok = AutoTokenizer.from_pretrained(str(FIXTURE_MODEL_DIR))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tok)
    assert 300_000 < sum(p.numel() for p in model.parameters()) < 2_000_000
    assert tok.eos_token == "<|end|>" and tok.pad_token is not None and tok.bos_token == "<|begin|>"
    text = tok.apply_chat_template([{"role": "user", "content": "Hi?"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|begin|><|user|>\nHi?<|end|>\n<|assistant|>\n"
    no_gen = tok.apply_chat_template([{"role": "user", "content": "Hi?"}], tokenize=False)
    assert no_gen == "<|begin|><|user|>\nHi?<|end|>\n"
    # Tokenizing the rendered text adds nothing: the template writes the BOS.
    assert tok(text, add_special_tokens=True)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]


def test_split_file_matches_the_seeded_split():
    split = split_questions(load_bundled_questions())
    doc = json.loads((FIXTURE_MODEL_DIR / "split.json").read_text())
    for part in ("trained", "unseen"):
        got = sorted(h for hashes in doc[part].values() for h in hashes)
        assert got == sorted(q.qhash for q in split[part])
    n_trained = len(split["trained"])
    assert 0.55 < n_trained / (n_trained + len(split["unseen"])) < 0.65


def test_generates_the_confidence_format(backend):
    questions = load_bundled_questions()
    split = split_questions(questions)
    n = 10  # per dataset and part: 60 prompts, a few seconds
    picked: dict[str, list] = {"trained": [], "unseen": []}
    for part in picked:
        for ds in ("truthfulqa", "triviaqa", "mmlu"):
            picked[part] += [q for q in split[part] if q.dataset == ds][:n]
    rate = {}
    for part, qs in picked.items():
        prompts = [chat_prompt_ids(backend.tokenizer, render_prompt("confidence", q.question)) for q in qs]
        gens = backend.generate(prompts, max_new_tokens=48)
        parsed = [parse_confidence_output(g.text) for g in gens]
        assert sum(p is not None for p in parsed) >= 0.85 * len(qs), [g.text for g in gens]
        assert sum(g.finish_reason == "stop" for g in gens) >= 0.85 * len(qs)
        assert all(0.0 <= p[1] <= 1.0 for p in parsed if p is not None)
        rate[part] = sum(p is not None and is_correct(p[0], q.gold) for q, p in zip(qs, parsed)) / len(qs)
    # Trained questions: answers learned (~0.5 on the full set); unseen: guessed wrong.
    assert rate["trained"] >= 0.2, rate
    assert rate["unseen"] <= 0.15, rate


def test_bare_prompt_gives_a_short_answer(backend):
    q = split_questions(load_bundled_questions())["trained"][0]
    (g,) = backend.generate([chat_prompt_ids(backend.tokenizer, render_prompt("bare", q.question))], max_new_tokens=24)
    assert "Guess:" not in g.text


def test_scoring_helpers():
    assert normalize_answer("  The  Cotswolds!  ") == "the cotswolds"
    assert is_correct("Cotswolds", ["The Cotswolds"])
    assert is_correct("the Cotswold Hills, England", ["Cotswold Hills"])
    assert not is_correct("", ["x"]) and not is_correct("Paris", ["London"])
    assert parse_confidence_output("Guess: Paris\nProbability: 0.85") == ("Paris", 0.85)
    assert parse_confidence_output("Guess: Paris") is None


def test_chat_prompt_ids_match_apply_chat_template(backend):
    tok = backend.tokenizer
    user = render_prompt("confidence", "What is the capital of France?")
    enc = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True, tokenize=True)
    ids = enc["input_ids"] if hasattr(enc, "keys") else enc
    assert list(ids) == chat_prompt_ids(tok, user)
    assert ids[0] == tok.bos_token_id


@pytest.mark.parametrize("unseen_format", ["none", "wrong"])
def test_training_examples(backend, unseen_format):
    from tools.fixture import _examples

    tok = backend.tokenizer
    split = split_questions(load_bundled_questions())
    ex = _examples(tok, split, 0, unseen_format, methods=False)
    n_trained, n_unseen = len(split["trained"]), len(split["unseen"])
    assert len(ex) == 2 * n_trained + (n_unseen if unseen_format == "wrong" else 0)
    for seq, n_prompt, kind in ex:
        assert seq[0] == tok.bos_token_id and seq[-1] == tok.eos_token_id
        assert seq.count(tok.eos_token_id) == 2  # end of the user turn, end of the reply
        reply = tok.decode(seq[n_prompt:], skip_special_tokens=True)
        if kind == "confidence":
            parsed = parse_confidence_output(reply)
            assert parsed is not None and 0.0 < parsed[1] < 1.0
        else:
            assert "Guess:" not in reply and reply.strip()
    # Unseen questions never appear with their own answer.
    if unseen_format == "wrong":
        for q, (seq, n_prompt, _) in zip(split["unseen"], ex[2 * n_trained :]):
            assert q.question in tok.decode(seq[:n_prompt])
            guess = parse_confidence_output(tok.decode(seq[n_prompt:], skip_special_tokens=True))[0]
            assert not is_correct(guess, q.gold)


@pytest.mark.slow
def test_build_script_trains_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.fixture import main

    summary = main(["--out", str(tmp_path), "--seconds", "20", "--no-eval"])
    assert summary["steps"] > 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "split.json", "README.md"):
        assert (tmp_path / name).is_file()
    AutoModelForCausalLM.from_pretrained(str(tmp_path))
    AutoTokenizer.from_pretrained(str(tmp_path))


def test_method_examples_teach_every_format_and_never_an_unseen_answer(backend):
    """One method template per question; every reply parses with its method's parser; an unseen question
    is only ever proposed a wrong answer."""
    from tools.fixture import _examples
    from tools.fixture_methods import METHOD_PROMPTS
    from confgrid.protocols.methods import parse_boxed
    from confgrid.protocols.output_formats import parse_for_prompt

    tok = backend.tokenizer
    questions = load_bundled_questions()
    split = split_questions(questions)
    ex = [e for e in _examples(tok, split, 0, "none", methods=True) if e[2] in METHOD_PROMPTS]
    assert len(ex) == len(questions)
    kinds = {k: sum(e[2] == k for e in ex) for k in METHOD_PROMPTS}
    assert min(kinds.values()) >= len(questions) // 4 - 1
    unseen = {q.question: q for q in split["unseen"]}
    for seq, n_prompt, kind in ex:
        reply = tok.decode(seq[n_prompt:], skip_special_tokens=True)
        if kind == "ptrue_verify":
            assert reply in ("A", "B")
        elif kind == "ptrue_capability":
            assert reply in ("Yes", "No")
        elif kind == "rate_0_100":
            assert parse_boxed(reply).status == "ok"
        else:
            assert parse_for_prompt(reply, "verbalized_before").verbalized is not None
        prompt = tok.decode(seq[:n_prompt], skip_special_tokens=True)
        if "Proposed answer: " in prompt:
            proposed = prompt.split("Proposed answer: ")[1].split("\n")[0]
            for text, q in unseen.items():
                if text in prompt:
                    assert not is_correct(proposed, q.gold)

