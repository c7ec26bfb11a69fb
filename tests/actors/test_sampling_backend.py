"""Sampling, next-token distributions and hidden states of the transformers backend (issue 9).

A random tiny Llama saved with save_pretrained and loaded through from_pretrained, as in
tests/actors/test_transformers_backend.py. Every expected value is recomputed independently from the model's
own forward pass.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from confgrid.actors.backend import check_sampling
from confgrid.actors.transformers_backend import TransformersBackend
from tests.actors.test_transformers_backend import _random_ids, _save_tiny, tokenizer  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def backend(tmp_path_factory, tokenizer):  # noqa: F811
    return TransformersBackend(str(_save_tiny(tmp_path_factory.mktemp("tiny"), tokenizer)), dtype="float32",
                               device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def prompts(backend):
    rng = random.Random(3)
    vocab = len(backend.tokenizer)
    return [_random_ids(rng, rng.randint(2, 30), vocab) for _ in range(7)]


def _texts(samples):
    return [[g.token_ids for g in ss] for ss in samples]


def test_same_seed_same_samples_different_seed_different(backend, prompts):
    a = backend.generate_samples(prompts, n=4, max_new_tokens=12, temperature=1.0, seed=11)
    b = backend.generate_samples(prompts, n=4, max_new_tokens=12, temperature=1.0, seed=11)
    c = backend.generate_samples(prompts, n=4, max_new_tokens=12, temperature=1.0, seed=12)
    assert _texts(a) == _texts(b)
    assert _texts(a) != _texts(c)
    assert all(len(ss) == 4 for ss in a) and len(a) == len(prompts)
    # the 4 samples of one prompt differ from each other (at temperature 1 on a random model)
    assert all(len({g.token_ids for g in ss}) > 1 for ss in a)


def test_samples_do_not_depend_on_batch_company_or_order(backend, prompts):
    together = backend.generate_samples(prompts, n=3, max_new_tokens=10, temperature=0.8, top_p=0.9, seed=5)
    reversed_ = backend.generate_samples(prompts[::-1], n=3, max_new_tokens=10, temperature=0.8, top_p=0.9,
                                         seed=5)[::-1]
    alone = [backend.generate_samples([p], n=3, max_new_tokens=10, temperature=0.8, top_p=0.9, seed=5)[0]
             for p in prompts]
    assert _texts(together) == _texts(reversed_) == _texts(alone)


def test_degenerate_sampling_equals_greedy(backend, prompts):
    greedy = [g.token_ids for g in backend.generate(prompts, max_new_tokens=10)]
    top1 = backend.generate_samples(prompts, n=2, max_new_tokens=10, temperature=1.3, top_k=1, seed=0)
    nucleus = backend.generate_samples(prompts, n=2, max_new_tokens=10, temperature=1.0, top_p=1e-9, seed=0)
    cold = backend.generate_samples(prompts, n=2, max_new_tokens=10, temperature=1e-4, seed=0)
    for ss in (top1, nucleus, cold):
        assert [[g.token_ids for g in s] for s in ss] == [[t, t] for t in greedy]


def test_sampling_follows_the_distribution(backend):
    """One-step samples of one prompt: the empirical frequencies match softmax(logits / T) (chi-square)."""
    from scipy.stats import chisquare

    p = [9, 10, 11, 12]
    with torch.no_grad():
        logits = backend.model(input_ids=torch.tensor([p])).logits[0, -1].double()
    probs = torch.softmax(logits / 2.0, dim=-1).numpy()
    draws = backend.generate_samples([p], n=2000, max_new_tokens=1, temperature=2.0, seed=1)[0]
    counts = np.bincount([g.token_ids[0] for g in draws], minlength=probs.size)
    keep = probs * 2000 >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(probs[keep], probs[~keep].sum()) * 2000
    assert chisquare(obs, exp).pvalue > 1e-4


def test_top_k_and_top_p_keep_only_allowed_tokens(backend):
    p = [9, 10, 11, 12]
    with torch.no_grad():
        lp = torch.log_softmax(backend.model(input_ids=torch.tensor([p])).logits[0, -1].double(), -1).numpy()
    order = np.argsort(-lp)
    k3 = {g.token_ids[0] for g in backend.generate_samples([p], n=300, max_new_tokens=1, temperature=1.0,
                                                           top_k=3, seed=2)[0]}
    assert k3 <= set(order[:3].tolist()) and len(k3) > 1
    probs = np.exp(lp[order])
    m = int(np.searchsorted(np.cumsum(probs), 0.5) + 1)  # smallest set reaching 0.5
    nuc = {g.token_ids[0] for g in backend.generate_samples([p], n=300, max_new_tokens=1, temperature=1.0,
                                                            top_p=0.5, seed=2)[0]}
    assert nuc <= set(order[:m].tolist())


@pytest.mark.parametrize("kw, msg", [
    (dict(temperature=-1.0, top_p=1.0, top_k=0, n=1), "temperature"),
    (dict(temperature=1.0, top_p=0.0, top_k=0, n=1), "top_p"),
    (dict(temperature=1.0, top_p=1.0, top_k=-2, n=1), "top_k"),
    (dict(temperature=1.0, top_p=1.0, top_k=0, n=0), "n must be"),
    (dict(temperature=0.0, top_p=0.9, top_k=0, n=1), "top_p must be 1.0 with temperature=0"),
    (dict(temperature=0.0, top_p=1.0, top_k=5, n=1), "top_k must be 0 with temperature=0"),
    (dict(temperature=0.0, top_p=1.0, top_k=0, n=3), "n must be 1 with temperature=0"),
])
def test_contradictory_decoding_is_refused_not_rewritten(kw, msg):
    with pytest.raises(ValueError, match=msg):
        check_sampling(**kw)


def test_next_token_equals_log_softmax_of_the_logits(backend, prompts):
    got = backend.next_token(prompts, top_k=7)
    for p, d in zip(prompts, got, strict=True):
        with torch.no_grad():
            lp = torch.log_softmax(backend.model(input_ids=torch.tensor([p])).logits[0, -1].float(), -1).double()
        want = np.lexsort((np.arange(lp.numel()), -lp.numpy()))[:7]
        assert list(d.token_ids) == want.tolist()
        np.testing.assert_allclose(d.logprobs, lp.numpy()[want], atol=1e-5)
        assert list(d.logprobs) == sorted(d.logprobs, reverse=True)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        backend.next_token(prompts, top_k=0)


def test_hidden_states_shape_layers_and_values(backend, prompts):
    n_layers = backend.model.config.num_hidden_layers
    hidden = backend.model.config.hidden_size
    states = backend.hidden_states(prompts)
    for p, h in zip(prompts, states, strict=True):
        assert h.shape == (n_layers + 1, hidden) and h.dtype == np.float32
        with torch.no_grad():
            ref = backend.model(input_ids=torch.tensor([p]), output_hidden_states=True).hidden_states
        np.testing.assert_allclose(h, np.stack([r[0, -1].numpy() for r in ref]), atol=1e-5)
    last = backend.hidden_states(prompts[:2], layers=[-1, 0])
    np.testing.assert_array_equal(last[0], states[0][[n_layers, 0]])
    with pytest.raises(ValueError, match="out of range"):
        backend.hidden_states(prompts[:1], layers=[n_layers + 1])


def test_shared_prefill_draws_the_same_samples(backend, prompts):
    """n samples of a prompt share one prefill; sample j equals the same draw made without sharing."""
    shared = backend.generate_samples(prompts, n=4, max_new_tokens=8, temperature=1.0, seed=21)
    from confgrid.actors.backend import request_seed

    for i, p in enumerate(prompts):
        for j in range(4):
            alone = backend._decode([list(p)], 8, ([request_seed(21, list(p), j)], 1.0, 1.0, 0))[0]
            assert alone.token_ids == shared[i][j].token_ids
