"""The model worker's engine calls (in process, the fixture model): every call kind returns typed
outputs per shard, with the sampling parameters it was given."""

from __future__ import annotations

import numpy as np
import pytest

from confgrid.actors.calls import EngineCall, GenerateRequest, Sampling, SamplesOutput, ShardWork


@pytest.fixture(scope="module")
def worker():
    from confgrid.actors.model_actor import ModelConfig, ModelWorker

    return ModelWorker(ModelConfig(name="fixture", model="confgrid-fixture", batch_size=8))


REQS = tuple(GenerateRequest(f"Give your best short answer to the question below.\n\nQuestion: {q}")
             for q in ("What is the capital of France?", "Who wrote Hamlet?", "How many legs has a spider?"))


def test_sampled_generate_call(worker):
    call = EngineCall(kind="generate", shards=(ShardWork("k1", REQS[:2]), ShardWork("k2", REQS[2:])),
                      max_new_tokens=16, sampling=Sampling(temperature=1.0, n=5, seed=3))
    res = worker.run(call)
    assert set(res.outputs) == {"k1", "k2"} and len(res.outputs["k1"]) == 2 and len(res.outputs["k2"]) == 1
    assert all(isinstance(o, SamplesOutput) and len(o.samples) == 5 for o in res.outputs["k1"])
    again = worker.run(call)
    assert again.outputs == res.outputs  # same seed, same samples
    greedy = worker.run(EngineCall(kind="generate", shards=(ShardWork("g", REQS),), max_new_tokens=16))
    assert [o.text for o in greedy.outputs["g"]] == [o.text for o in worker.generate([r.user_text for r in REQS], 16)]


def test_next_token_and_hidden_states_calls(worker):
    nt = worker.run(EngineCall(kind="next_token", shards=(ShardWork("n", REQS),), top_logprobs=5)).outputs["n"]
    assert all(len(o.token_ids) == 5 and o.logprobs[0] >= o.logprobs[-1] for o in nt)
    hs = worker.run(EngineCall(kind="hidden_states", shards=(ShardWork("h", REQS),))).outputs["h"]
    n_layers = worker.backend.model.config.num_hidden_layers
    assert all(o.states.shape == (n_layers + 1, worker.backend.model.config.hidden_size) for o in hs)
    assert hs[0].layers == tuple(range(n_layers + 1)) and hs[0].states.dtype == np.float32
    with pytest.raises(ValueError, match="unknown engine call .nope.; allowed: generate, hidden_states, next_token, score"):
        worker.run(EngineCall(kind="nope", shards=()))  # type: ignore[arg-type]


def test_chat_template_kwargs_reach_the_template(worker):
    from confgrid.protocols.chat import render_prompt_text

    text = render_prompt_text(worker.tokenizer, "hi", use_chat_template=True, template_kwargs={"unused_flag": True})
    assert text == render_prompt_text(worker.tokenizer, "hi", use_chat_template=True)  # ignored where unused


def test_model_default_sampling_takes_the_generation_config(tmp_path):
    """temperature: model_default samples with the model's own generation_config values, and says which."""
    from tools.fixture import build_tokenizer
    from confgrid.actors.model_actor import ModelConfig, ModelWorker
    from tests.actors.test_transformers_backend import CORPUS, _save_tiny

    tok = build_tokenizer(CORPUS, vocab_size=300)
    path = _save_tiny(tmp_path / "m", tok)
    from transformers import GenerationConfig

    gc = GenerationConfig.from_pretrained(path)
    gc.do_sample, gc.temperature, gc.top_p, gc.top_k = True, 0.7, 0.9, 5
    gc.save_pretrained(path)
    w = ModelWorker(ModelConfig(name="t", model=str(path), chat_template=False))
    out = w.generate(["Guess:"], 6, sampling=Sampling(n=3, seed=1, from_model=True))
    assert out[0].sampling == Sampling(temperature=0.7, top_p=0.9, top_k=5, n=3, seed=1)
    assert len(out[0].samples) == 3
    GenerationConfig(do_sample=False, eos_token_id=gc.eos_token_id).save_pretrained(path)
    with pytest.raises(ValueError, match="does not sample"):
        ModelWorker(ModelConfig(name="t", model=str(path), chat_template=False)).generate(
            ["Guess:"], 6, sampling=Sampling(n=2, from_model=True))


def test_p_true_from_the_worker_equals_a_hand_computation_from_the_logits(worker):
    """P(True) through the worker's next-token call equals softmax of the model's logits at the candidate ids."""
    import math

    import torch

    from confgrid.protocols.candidates import candidate_token_ids
    from confgrid.protocols.methods import candidate_probability, p_true
    from confgrid.protocols.prompts import get_prompt

    user = get_prompt("ptrue_verify").render("What is the capital of France?", "Paris")
    (out,) = worker.next_token([GenerateRequest(user)], 20, ("A", "B"))
    ids = out.candidate_tokens
    assert ids == candidate_token_ids(worker.tokenizer, ["A", "B"])
    prompt = worker._prompt(user, "", None)
    with torch.no_grad():
        probs = torch.softmax(worker.backend.model(input_ids=torch.tensor([prompt])).logits[0, -1].double(), -1)
    hand = {c: sum(float(probs[t]) for t in m) for c, m in ids.items()}
    top = dict(zip(out.token_ids, out.logprobs, strict=True))
    got = {c: candidate_probability(m, top, c, "sum") for c, m in ids.items()}
    for c in ("A", "B"):
        in_top = [t for t in ids[c] if t in top]
        assert got[c] == pytest.approx(sum(float(probs[t]) for t in in_top), abs=1e-5)
    assert all(v is not None for v in got.values())  # the fixture answers A or B: both are in its top 20
    assert p_true(got, "A", True).value == pytest.approx(hand["A"] / (hand["A"] + hand["B"]), abs=1e-3)
    # a candidate outside the top k: recorded absent
    (small,) = worker.next_token([GenerateRequest(user)], 1, ("A", "B"))
    top1 = dict(zip(small.token_ids, small.logprobs, strict=True))
    probs1 = {c: candidate_probability(m, top1, c, "sum") for c, m in small.candidate_tokens.items()}
    assert sum(v is None for v in probs1.values()) >= 1
    r = p_true(probs1, "A", True)
    assert r.status in ("target_absent", "ok") and r.detail >= 1 and not math.isnan(r.detail)
