"""Tests of TransformersBackend on a random tiny Llama loaded through from_pretrained."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from confgrid.actors.backend import Backend, Generation
from reference.tiny_llama import CORPUS, tiny_llama
from tools.fixture import build_tokenizer
from confgrid.actors.transformers_backend import TransformersBackend

def _save_tiny(path, tokenizer, *, seed=0, extra_eos=None):
    model = tiny_llama(tokenizer, "small", seed=seed)
    if extra_eos is not None:
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, int(extra_eos)]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return str(_save_tiny(tmp_path_factory.mktemp("tiny_llama"), tokenizer))


@pytest.fixture(scope="module")
def backend(model_dir):
    return TransformersBackend(model_dir, dtype="float32", device="cpu", batch_size=16)


def _random_ids(rng, n, vocab):
    return [rng.randrange(5, vocab) for _ in range(n)]  # ids 0..4 are special tokens


def _requests(vocab, n=23, seed=1):
    rng = random.Random(seed)
    return [(_random_ids(rng, rng.randint(1, 60), vocab), _random_ids(rng, rng.randint(1, 12), vocab)) for _ in range(n)]


def test_is_a_backend(backend):
    assert isinstance(backend, Backend)
    prov = backend.provenance()
    for key in ("backend", "backend_version", "dtype", "device", "model", "revision"):
        assert isinstance(prov[key], str) and prov[key]
    assert prov["backend"] == "transformers"
    assert prov["dtype"] == "float32"
    assert prov["device"] == "cpu"
    assert prov["revision"] == "local"


def test_score_shapes_and_dtype(backend, tokenizer):
    reqs = _requests(len(tokenizer), n=5)
    scores = backend.score(reqs)
    assert len(scores) == len(reqs)
    for (ctx, ans), s in zip(reqs, scores):
        assert isinstance(s, np.ndarray) and s.dtype == np.float64 and s.shape == (len(ans),)
        assert np.all(s <= 0) and np.all(np.isfinite(s))


def test_score_batch_invariance(model_dir, backend, tokenizer):
    reqs = _requests(len(tokenizer), n=23)
    batched = backend.score(reqs)
    single = TransformersBackend(model_dir, dtype="float32", device="cpu", batch_size=1).score(reqs)
    for b, s in zip(batched, single):
        np.testing.assert_allclose(b, s, rtol=0, atol=1e-5)
    # Order and company do not matter either.
    rev = backend.score(reqs[::-1])[::-1]
    for b, r in zip(batched, rev):
        np.testing.assert_allclose(b, r, rtol=0, atol=1e-5)


def test_score_matches_independent_forward(model_dir, backend, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    reqs = _requests(len(tokenizer), n=6, seed=7)
    scores = backend.score(reqs)
    for (ctx, ans), got in zip(reqs, scores):
        ids = torch.tensor([ctx + ans])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        want = [logp[len(ctx) - 1 + j, tok].item() for j, tok in enumerate(ans)]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_score_of_text_via_tokenizer(backend, tokenizer):
    ctx = tokenizer("Question: What is the capital of France?\nGuess:", add_special_tokens=False)["input_ids"]
    ans = tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    (s,) = backend.score([(ctx, ans)])
    assert s.shape == (len(ans),)


def test_generate_left_padding_equals_one_at_a_time(model_dir, backend, tokenizer):
    rng = random.Random(3)
    prompts = [[tokenizer.bos_token_id] + _random_ids(rng, n, len(tokenizer)) for n in (1, 5, 17, 9, 30, 2)]
    batched = backend.generate(prompts, max_new_tokens=10)
    one = TransformersBackend(model_dir, dtype="float32", device="cpu", batch_size=1)
    singles = [one.generate([p], max_new_tokens=10)[0] for p in prompts]
    assert batched == singles
    for g in batched:
        assert isinstance(g, Generation)
        assert g.finish_reason in ("stop", "length")
        assert len(g.token_ids) <= 10
        assert g.text == tokenizer.decode(list(g.token_ids), skip_special_tokens=True)


def test_generate_is_greedy(model_dir, backend, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = [tokenizer.bos_token_id] + tokenizer("What is the capital", add_special_tokens=False)["input_ids"]
    (g,) = backend.generate([prompt], max_new_tokens=6)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(len(g.token_ids)):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert tuple(ids[len(prompt) :]) == g.token_ids


def test_finish_reason(tmp_path, backend, tokenizer):
    rng = random.Random(5)
    prompts = [[tokenizer.bos_token_id] + _random_ids(rng, n, len(tokenizer)) for n in (4, 11)]
    free = backend.generate(prompts, max_new_tokens=8)
    for g in free:
        if g.finish_reason == "length":
            assert len(g.token_ids) == 8 and not set(g.token_ids) & backend.eos_token_ids
    # Declare the 3rd token the model emits for prompt 0 an extra EOS id (via the saved
    # generation config), so the same weights now stop there.
    stop_tok = free[0].token_ids[2]
    cut = free[0].token_ids.index(stop_tok) + 1
    stopping = TransformersBackend(str(_save_tiny(tmp_path / "m", tokenizer, extra_eos=stop_tok)), device="cpu")
    assert stop_tok in stopping.eos_token_ids
    g0, g1 = stopping.generate(prompts, max_new_tokens=8)
    assert g0.finish_reason == "stop"
    assert g0.token_ids == free[0].token_ids[:cut]
    assert g0.token_ids[-1] == stop_tok
    if stop_tok not in free[1].token_ids:
        assert g1 == free[1]


def test_pad_token_defaults_to_eos(tmp_path, tokenizer):
    tok = build_tokenizer(CORPUS, vocab_size=300)
    path = _save_tiny(tmp_path / "nopad", tok)
    tok.pad_token = None
    tok.save_pretrained(path)
    be = TransformersBackend(str(path), device="cpu")
    assert be.tokenizer.pad_token_id == be.tokenizer.eos_token_id
    gens = be.generate([[1, 10, 11], [1, 12]], max_new_tokens=3)
    assert len(gens) == 2


def test_errors(backend):
    with pytest.raises(ValueError, match="request 1"):
        backend.score([([5, 6], [7]), ([5, 6], [])])
    with pytest.raises(ValueError, match="request 0"):
        backend.score([([], [7])])
    with pytest.raises(ValueError, match="prompt 2"):
        backend.generate([[1, 5], [1], []])
    with pytest.raises(ValueError):
        backend.generate([[1, 5]], max_new_tokens=0)
    with pytest.raises(ValueError):
        TransformersBackend("unused", dtype="float8")
    assert backend.score([]) == [] and backend.generate([]) == []


def test_score_in_chunks_of_the_vocabulary_equals_one_pass(backend, tokenizer, monkeypatch):
    # score() bounds the float32 log-probabilities it holds at once (answer positions x vocabulary); a chunk of one
    # position, or of a few that split requests, gives bit-identical scores to one chunk per batch
    from confgrid.actors import transformers_backend

    reqs = _requests(len(tokenizer), n=9, seed=3)
    whole = backend.score(reqs)
    for positions in (1, 3):
        monkeypatch.setattr(transformers_backend, "_SCORE_CHUNK_ELEMENTS", positions * len(tokenizer))
        for a, b in zip(whole, backend.score(reqs), strict=True):
            np.testing.assert_array_equal(a, b)


def _one_forward_each(model_dir, reqs):
    # the reference: one unpadded forward per request, log_softmax in float32, the answer ids gathered
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for ctx, ans in reqs:
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([list(ctx) + list(ans)])).logits[0].float(), dim=-1)
        out.append(np.array([logp[len(ctx) - 1 + j, int(tok)].item() for j, tok in enumerate(ans)]))
    return out


def test_score_chunks_that_split_requests_match_one_forward_each(model_dir, tokenizer, monkeypatch):
    # answers of 1 to 40 tokens next to one another in a batch, batches of 1, 3 and all, and chunks of 1 or 2.5
    # answer positions (so chunk boundaries fall inside requests and inside batches); and a single request
    from confgrid.actors import transformers_backend

    vocab, rng = len(tokenizer), random.Random(11)
    mixed = [(_random_ids(rng, c, vocab), _random_ids(rng, a, vocab))
             for c, a in [(1, 1), (50, 1), (2, 40), (30, 3), (1, 17), (20, 1), (3, 2)]]
    single = [(_random_ids(rng, 4, vocab), _random_ids(rng, 5, vocab))]
    want = {"mixed": _one_forward_each(model_dir, mixed), "single": _one_forward_each(model_dir, single)}
    for batch_size in (1, 3, 64):
        be = TransformersBackend(model_dir, dtype="float32", device="cpu", batch_size=batch_size)
        for chunk in (vocab, int(2.5 * vocab)):
            monkeypatch.setattr(transformers_backend, "_SCORE_CHUNK_ELEMENTS", chunk)
            for name, reqs in (("mixed", mixed), ("single", single)):
                got = be.score(reqs)
                assert [g.shape for g in got] == [(len(a),) for _, a in reqs], (batch_size, chunk, name)
                for g, w in zip(got, want[name], strict=True):
                    np.testing.assert_allclose(g, w, rtol=0, atol=1e-5, err_msg=f"{batch_size=} {chunk=} {name}")


def test_score_takes_ids_as_arrays_and_tuples(backend, tokenizer):
    # ids given as numpy arrays, tensors or tuples score as lists do (the batch's answer ids are collected with
    # extend: `list += ndarray` would add the ids elementwise, or fail on a length mismatch)
    reqs = _requests(len(tokenizer), n=6, seed=4)
    want = backend.score(reqs)
    for convert in (np.array, torch.tensor, tuple):
        got = backend.score([(convert(c), convert(a)) for c, a in reqs])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
