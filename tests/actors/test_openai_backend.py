"""The openai backend against a fake OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py).

Request shapes (greedy, n, seed, top_p/top_k, budgets, assistant prefill,
template arguments), parsing of generated-token and next-token log-probs,
missing log-probs (NaN with a reason), retries on 429 and 5xx with the
waits they take, exhaustion, time-outs, bounded concurrency, and that the
key is only ever sent as the Authorization header.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from fake_openai import KEY, KEY_ENV, NEXT_TOKENS, TOKEN_LOGPROB, fake_reply
from fake_openai import fake_backend as backend

from confgrid.actors.backend import text_request_seed
from confgrid.actors.calls import EngineCall, GenerateRequest, Sampling, ScoreRequest, ShardWork
from confgrid.actors.openai_backend import ApiConfig, ApiRequestError, OpenAIBackend


def test_greedy_request_shape_and_parsed_output(fake, key):
    b = backend(fake)
    out = b.generate(["What is the capital of France?", "Which planet is largest?"], ["", ""], 16)
    assert [o.text for o in out] == [fake_reply("What is the capital of France?"), fake_reply("Which planet is largest?")]
    req = next(r for r in fake.requests if r["body"]["messages"][0]["content"].startswith("What"))
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert body["model"] == "tiny-model"
    assert body["messages"] == [{"role": "user", "content": "What is the capital of France?"}]
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0 and body["logprobs"] is True
    assert not {"n", "seed", "top_p", "top_k", "top_logprobs", "continue_final_message"} & set(body)
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    words = len(out[0].text.split(" "))
    assert out[0].finish_reason == "stop" and out[0].n_tokens == words
    assert out[0].token_logprobs == (TOKEN_LOGPROB,) * words and out[0].logprobs_status == "ok"
    short = b.generate(["What is the capital of France?"], [""], 2)[0]
    assert short.finish_reason == "length" and short.n_tokens == 2
    st = b.request_stats()
    assert (st.requests, st.answered, st.attempts, st.retries, st.failures, st.system_fingerprints) == (
        3, 3, 3, 0, {}, ["fp_fake"])


def test_sampling_sends_n_seed_top_p_top_k(fake, key):
    b = backend(fake)
    s = Sampling(temperature=0.7, top_p=0.9, top_k=5, n=3, seed=11)
    texts = ["q one", "q two"]
    out = b.generate(texts, ["", ""], 8, sampling=s)
    assert [len(o.samples) for o in out] == [3, 3] and out[0].sampling == s
    bodies = sorted((r["body"] for r in fake.requests), key=lambda x: x["messages"][0]["content"])
    for text, body in zip(texts, bodies, strict=True):
        assert (body["n"], body["temperature"], body["top_p"], body["top_k"]) == (3, 0.7, 0.9, 5)
        assert body["seed"] == text_request_seed(11, text)
    assert bodies[0]["seed"] != bodies[1]["seed"]
    assert [g.text for g in out[0].samples] == [fake_reply("q one", k, bodies[0]["seed"]) for k in range(3)]
    # without a seed none is sent; top_k 0 is not sent
    b.generate(["q one"], [""], 8, sampling=Sampling(temperature=1.0, n=2, seed=None))
    assert not {"seed", "top_k"} & set(fake.requests[-1]["body"])


def test_text_request_seed_depends_only_on_its_arguments():
    a = text_request_seed(3, "ab", "c")
    assert a == text_request_seed(3, "ab", "c") and 0 <= a < 2 ** 32
    assert len({a, text_request_seed(3, "a", "bc"), text_request_seed(4, "ab", "c"),
                text_request_seed(3, "ab", "c", index=0)}) == 4


def test_budget_field_prefill_and_template_kwargs(fake, key):
    b = OpenAIBackend("m", ApiConfig(base_url=fake.base_url, max_tokens_field="max_completion_tokens",
                                     assistant_prefill=True, logprobs=False), {"enable_thinking": False})
    out = b.generate(["question"], ["Guess: Paris\nProbability:"], 4)[0]
    body = fake.requests[0]["body"]
    assert body["max_completion_tokens"] == 4 and "max_tokens" not in body and "logprobs" not in body
    assert body["messages"][-1] == {"role": "assistant", "content": "Guess: Paris\nProbability:"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert fake.requests[0]["headers"]["authorization"] == "Bearer EMPTY"  # no api_key_env: a placeholder
    assert out.token_logprobs is None and out.logprobs_status == "not_requested"
    with pytest.raises(ValueError, match="assistant_prefill"):
        backend(fake).generate(["q"], ["Answer:"], 4)


def test_next_token_parses_top_logprobs(fake, key):
    b = backend(fake)
    out = b.next_token(["Is it true?"], [""], 4, candidates=("A", "B"))[0]
    body = fake.requests[0]["body"]
    assert (body["max_tokens"], body["logprobs"], body["top_logprobs"], body["temperature"]) == (1, True, 4, 0.0)
    assert out.token_ids == (-1, -2, -3, -4)
    assert out.logprobs == tuple(v for _, v in NEXT_TOKENS[:3]) + (-math.inf,)  # -9999.0 read as -inf
    assert out.candidate_tokens == {"A": {-1: " A", -4: "A"}, "B": {-2: "B"}}
    assert out.logprobs_status == "ok" and out.prompt_tokens == 3
    # P(True) renormalized over A and B, by hand: e^-0.2 / (e^-0.2 + e^-1.9)
    from confgrid.protocols.methods import candidate_probability, p_true

    top = dict(zip(out.token_ids, out.logprobs, strict=True))
    probs = {c: candidate_probability(out.candidate_tokens[c], top, c) for c in ("A", "B")}
    assert p_true(probs, "A", True).value == pytest.approx(math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.9)))
    with pytest.raises(ValueError, match="max_top_logprobs"):
        b.next_token(["q"], [""], 21)


def test_missing_logprobs_give_nan_with_a_reason_never_zero(fake, key):
    import pandas as pd

    from confgrid.flows.stages.generate import _generation_logprobs
    from confgrid.flows.stages.next_token import next_token_values
    from confgrid.flows.spec.methods import MethodSpec

    fake.logprobs = False
    b = backend(fake)
    g = b.generate(["q"], [""], 8)[0]
    assert g.token_logprobs is None and g.logprobs_status == "no_logprobs"
    assert g.n_tokens == len(g.text.split(" "))  # from the usage count (n = 1)
    cols = _generation_logprobs((g,))
    assert math.isnan(cols["sum_logprob"][0]) and cols["logprobs_status"] == ["no_logprobs"]
    nt = b.next_token(["q"], [""], 3, candidates=("A", "B"))[0]
    assert nt.token_ids == () and nt.logprobs == () and nt.logprobs_status == "no_logprobs"
    table = pd.DataFrame({"item_id": ["i1"], "rated_answer": ["Paris"], "top_token_ids": [[]], "top_logprobs": [[]],
                          "candidate_tokens": ["{}"], "logprobs_status": [nt.logprobs_status]})
    [(item, rated, value, status, _)] = next_token_values(MethodSpec(id="pt", kind="p_true"), table)
    assert (item, rated, value, status) == ("i1", "Paris", None, "no_logprobs")


def test_429_then_success_retries_counted_with_retry_after(fake, key):
    waits: list[float] = []
    fake.fail = [(429, {"Retry-After": "0.2"}), (503, {})]
    out = backend(fake, waits).generate(["q"], [""], 8)
    assert out[0].text == fake_reply("q")
    assert waits == [0.2, 0.02]  # Retry-After honoured; then backoff_s * 2**1
    assert len(fake.requests) == 3


def test_retry_stats_and_backoff_cap(fake, key):
    waits: list[float] = []
    b = backend(fake, waits, backoff_s=1.0, max_backoff_s=1.5, max_retries=3)
    fake.fail = [(500, {}), (429, {"Retry-After": "30"}), (502, {})]
    b.generate(["q"], [""], 8)
    assert waits == [1.0, 1.5, 1.5]
    st = b.request_stats()
    assert st.failures == {"5xx": 2, "429": 1}
    assert (st.requests, st.answered, st.attempts, st.retries) == (1, 1, 4, 3)


def test_5xx_exhaustion_raises_and_4xx_is_not_retried(fake, key):
    fake.fail = [(500, {})] * 3
    with pytest.raises(ApiRequestError, match=r"after 3 attempt\(s\) \(HTTP 500\)") as err:
        backend(fake).generate(["q"], [""], 8)
    assert (err.value.status, err.value.attempts) == (500, 3)
    fake.fail = [(400, {})]
    with pytest.raises(ApiRequestError) as err:
        backend(fake).generate(["q"], [""], 8)
    assert (err.value.status, err.value.attempts) == (400, 1)


def test_timeout_and_dead_server(fake, key):
    fake.delay_s = 1.0
    t0 = time.time()
    with pytest.raises(ApiRequestError, match="APITimeoutError") as err:
        backend(fake, timeout_s=0.2, max_retries=1).generate(["q"], [""], 8)
    assert err.value.status is None and err.value.attempts == 2 and time.time() - t0 < 1.9
    dead = ApiConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.0)
    with pytest.raises(ApiRequestError, match="APIConnectionError") as err:
        OpenAIBackend("m", dead).generate(["q"], [""], 8)
    assert err.value.attempts == 2


def test_concurrency_is_bounded(fake, key):
    fake.delay_s = 0.15
    t0 = time.time()
    out = backend(fake, max_concurrency=3).generate([f"q{i}" for i in range(9)], [""] * 9, 8)
    assert [o.text for o in out] == [fake_reply(f"q{i}") for i in range(9)]  # input order kept
    assert fake.max_active == 3
    assert time.time() - t0 < 9 * 0.15  # they did overlap


def test_key_never_in_errors_provenance_or_records(fake, key, monkeypatch):
    b = backend(fake)
    outs = b.generate(["q"], [""], 8) + b.next_token(["q"], [""], 2)
    fake.fail = [(401, {})]
    with pytest.raises(ApiRequestError) as err:
        b.generate(["q"], [""], 8)
    assert KEY not in str(err.value) and KEY not in repr(outs) and KEY not in repr(b.provenance())
    assert KEY not in repr(b.config) and b.provenance()["api_key_env"] == KEY_ENV
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=KEY_ENV):
        backend(fake)


def test_model_worker_runs_engine_calls_on_an_api_model(fake, key):
    from confgrid.actors.model_actor import ModelConfig, ModelWorker, replica_resources

    cfg = ModelConfig(name="api", model="tiny-model", backend="openai",
                      api=ApiConfig(base_url=fake.base_url, api_key_env=KEY_ENV))
    rr = replica_resources(cfg, {"GPU": 8.0, "CPU": 64.0})
    assert rr.actor == {"num_gpus": 0, "num_cpus": 1} and rr.per_node == {"CPU": 1.0} and rr.bundles is None
    w = ModelWorker(cfg)
    assert w.tokenizer is None and w.ping().provenance["backend"] == "openai"
    res = w.run(EngineCall("generate", (ShardWork("k1", (GenerateRequest("q1"), GenerateRequest("q2"))),
                                        ShardWork("k2", (GenerateRequest("q3"),))), max_new_tokens=8))
    assert [o.text for o in res.outputs["k1"]] == [fake_reply("q1"), fake_reply("q2")]
    assert [o.text for o in res.outputs["k2"]] == [fake_reply("q3")]
    nt = w.run(EngineCall("next_token", (ShardWork("k3", (GenerateRequest("q1"),)),), top_logprobs=2,
                          candidates=("A", "B"))).outputs["k3"][0]
    assert nt.candidate_tokens == {"A": {-1: " A"}, "B": {-2: "B"}}
    for kind, req in (("score", ScoreRequest("q", "", " ", "Paris")), ("hidden_states", GenerateRequest("q"))):
        with pytest.raises(NotImplementedError, match="chat completions"):
            w.run(EngineCall(kind, (ShardWork("k4", (req,)),)))
    assert w.request_stats().attempts == 4
    assert np.all(np.isfinite(res.outputs["k1"][0].token_logprobs))
