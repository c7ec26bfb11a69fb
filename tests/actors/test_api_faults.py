"""The openai backend against a faulty server, without Ray (tests/fake_openai.py's fault modes).

Errors pickle with their fields; ``timeout_s`` bounds a request whose body
trickles in; malformed 200s are retried and, when they persist, named with the
model, the server, what was wrong and the start of the body; 401/403/404 and
``max_consecutive_failures`` stop the model; 408/409 are retried; counts per
request; the answer cache keeps every answered request, so a second pass sends
only what never got an answer and returns the same outputs.
"""

from __future__ import annotations

import pickle
import time

import pytest
from fake_openai import KEY, KEY_ENV, fake_backend, fake_reply
from reference.exception_classes import all_exception_classes

from confgrid.actors.api_cache import AnswerCache, request_key
from confgrid.actors.calls import EngineCall, GenerateRequest, RequestCounts, ShardWork
from confgrid.actors.openai_backend import ApiConfig, ApiRequestError, OpenAIBackend, check_reply


def backend(fake, **kw):
    return fake_backend(fake, **{"backoff_s": 0.0, **kw})



def test_every_exception_class_pickles_with_its_fields():
    for exc in all_exception_classes():
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.args == exc.args
        assert back.__dict__.keys() == exc.__dict__.keys(), type(exc)
    err = pickle.loads(pickle.dumps(all_exception_classes()[0]))
    assert (err.status, err.attempts, err.failure, err.fatal, err.counts.failures) == (500, 3, "5xx", False, {"5xx": 3})


@pytest.mark.parametrize("ctype, body, n, wrong", [
    ("text/html", "<html>502 Bad Gateway</html>", None, "content type 'text/html', not JSON"),
    ("application/json", '{"choices": [{"mess', None, "invalid JSON"),
    ("application/json", "[1, 2]", None, "a JSON list, not an object"),
    ("application/json", '{"id": "x"}', None, "no 'choices' list"),
    ("application/json", '{"choices": []}', None, "'choices' is empty"),
    ("application/json", '{"choices": [{"index": 0}]}', None, "choice 0 has neither a message nor a distribution"),
    ("application/json", '{"choices": [{"message": {"content": "a"}}]}', 3, "asked n=3, the server returned 1"),
])
def test_check_reply_names_what_is_wrong(ctype, body, n, wrong):
    data, got = check_reply(ctype, body, n)
    assert data is None and got.startswith(wrong)


def test_check_reply_accepts_a_usable_body_and_null_logprobs():
    data, wrong = check_reply("application/json; charset=utf-8",
                              '{"choices": [{"message": {"content": null}, "logprobs": null}]}', 1)
    assert wrong is None and data["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("fault", ["trickle", "trickle_headers"])
def test_a_trickling_reply_is_cut_at_the_deadline_and_retried(fake, key, fault):
    """Each byte arrives well within any per-read time-out, so only a deadline on the whole request ends it:
    ``trickle`` sends the body a byte per 50 ms (a ~330-byte body: about 16 s in full), ``trickle_headers`` the
    status line and headers (~90 bytes: about 4.5 s)."""
    fake.always, fake.trickle_s = fault, 0.05
    b = backend(fake, timeout_s=0.5, max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(ApiRequestError, match=r"failed after 2 attempt\(s\) \(APITimeoutError\)") as err:
        b.generate(["q"], [""], 8)
    took = time.monotonic() - t0
    assert 1.0 <= took < 2.0  # two attempts of 0.5 s each, nothing more
    assert err.value.counts.failures == {"timeout": 2} and err.value.status is None


@pytest.mark.parametrize("fault", ["truncated", "html", "empty_choices", "no_message"])
def test_malformed_replies_are_retried_like_a_5xx(fake, key, fault):
    fake.faults = [fault]
    b = backend(fake)
    [out] = b.generate(["q"], [""], 8)
    assert out.text == fake_reply("q") and len(fake.requests) == 2
    st = b.request_stats()
    assert (st.attempts, st.retries, st.answered, st.failures) == (2, 1, 1, {"malformed": 1})


def test_persistent_malformed_replies_name_model_server_problem_and_body(fake, key):
    fake.always = "html"
    with pytest.raises(ApiRequestError) as err:
        backend(fake, max_retries=1).generate(["q"], [""], 8)
    msg = str(err.value)
    assert msg.startswith(f"model 'tiny-model' at {fake.base_url}: failed after 2 attempt(s) (malformed reply: "
                          "content type 'text/html', not JSON)")
    assert "502 Bad Gateway" in msg and err.value.failure == "malformed" and KEY not in msg
    fake.always = "empty_choices"  # the P(True) path goes through the same check (was an IndexError)
    with pytest.raises(ApiRequestError, match=r"'choices' is empty"):
        backend(fake, max_retries=0).next_token(["q"], [""], 2)
    fake.always = "truncated"
    with pytest.raises(ApiRequestError, match=r"invalid JSON .* body starts '\{\"id\"") as err:
        backend(fake, max_retries=0).generate(["q"], [""], 8)
    assert len(str(err.value).split("body starts ")[1]) <= 200 + 2  # the first 200 characters, quoted


def test_408_and_409_are_retried(fake, key):
    fake.faults = [408, 409]
    b = backend(fake)
    assert b.generate(["q"], [""], 8)[0].text == fake_reply("q")
    assert b.request_stats().failures == {"408": 1, "409": 1}


@pytest.mark.parametrize("status, words", [
    (401, f"the key comes from the variable named in api.api_key_env, {KEY_ENV}, which is set"),
    (403, f"api.api_key_env, {KEY_ENV}"),
    (404, "the server does not know model 'tiny-model'"),
])
def test_401_403_404_stop_the_model_at_once(fake, key, status, words):
    fake.always = status
    b = backend(fake, max_concurrency=1)
    outcomes = b.generate_outcomes([f"q{i}" for i in range(5)], [""] * 5, 8)
    assert len(fake.requests) == 1  # the first answer stops the model; the other four are never sent
    assert all(o.error is not None and o.error.fatal for o in outcomes)
    first = outcomes[0].error
    assert first.status == status and first.attempts == 1 and words in str(first) and KEY not in str(first)
    assert [o.error.attempts for o in outcomes[1:]] == [0] * 4 and "(request not sent)" in str(outcomes[1].error)
    with pytest.raises(ApiRequestError, match=f"stopped at HTTP {status}"):
        b.generate(["again"], [""], 8)  # the replica stays stopped; a resume starts a new one
    assert len(fake.requests) == 1


def test_without_a_key_variable_a_401_says_no_key_was_sent(fake):
    fake.always = 401
    cfg = ApiConfig(base_url=fake.base_url, max_retries=0)
    with pytest.raises(ApiRequestError, match="no key was sent"):
        OpenAIBackend("m", cfg).generate(["q"], [""], 8)


def test_consecutive_failures_stop_the_model_instead_of_every_retry_schedule(fake, key):
    fake.always = 500
    b = backend(fake, max_retries=5, max_consecutive_failures=4, max_concurrency=1)
    outcomes = b.generate_outcomes(["a", "b", "c"], [""] * 3, 8)
    assert len(fake.requests) == 4  # not 3 x 6
    assert all(o.error.fatal for o in outcomes)
    assert "stopped after 4 failed attempts in a row (api.max_consecutive_failures=4)" in str(outcomes[0].error)
    # successes in between reset the count
    fake.always = None
    fake.faults = [500, 500, 500]
    b = backend(fake, max_retries=5, max_consecutive_failures=4, max_concurrency=1)
    assert len(b.generate(["a", "b"], [""] * 2, 8)) == 2


def test_answer_cache_keeps_every_answer_and_a_second_pass_sends_only_the_missing(fake, key, tmp_path):
    texts = [f"question {i}" for i in range(6)]
    bad = {"question 1", "question 4"}
    fake.fault_for = lambda body: 400 if body["messages"][0]["content"] in bad else None
    cache = tmp_path / "api_cache"
    cache.mkdir()
    b = backend(fake, cache_dir=str(cache), max_concurrency=2)
    outcomes = b.generate_outcomes(texts, [""] * 6, 8)
    assert [o.error is None for o in outcomes] == [t not in bad for t in texts]
    assert len(AnswerCache(cache)) == 4 and len(fake.requests) == 6
    fake.fault_for = None
    fake.requests.clear()
    again = backend(fake, cache_dir=str(cache))
    outs = again.generate(texts, [""] * 6, 8)
    sent = sorted(r["body"]["messages"][0]["content"] for r in fake.requests)
    assert sent == sorted(bad)  # only the two unanswered requests
    reference = backend(fake).generate(texts, [""] * 6, 8)
    assert outs == reference
    st = again.request_stats()
    assert (st.requests, st.answered, st.cached, st.attempts) == (6, 6, 4, 2)
    # the key is the request's content: another seed or budget is another request
    k = request_key("m", "http://h/v1", {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8})
    assert k == request_key("m", "http://h/v1", {"max_tokens": 8, "messages": [{"role": "user", "content": "q"}]})
    assert k != request_key("m", "http://h/v1", {"messages": [{"role": "user", "content": "q"}], "max_tokens": 9})
    assert k != request_key("m", "http://other/v1", {"messages": [{"role": "user", "content": "q"}], "max_tokens": 8})
    assert all(KEY.encode() not in p.read_bytes() for p in cache.rglob("*") if p.is_file())


def test_worker_fails_only_the_shard_with_a_failed_request_and_counts_each(fake, key, tmp_path):
    from confgrid.actors.model_actor import ModelConfig, ModelWorker

    fake.fault_for = lambda body: 500 if body["messages"][0]["content"] == "q3" else None
    cfg = ModelConfig(name="api", model="tiny-model", backend="openai",
                      api=ApiConfig(base_url=fake.base_url, api_key_env=KEY_ENV, max_retries=1, backoff_s=0.0))
    w = ModelWorker(cfg)
    res = w.run(EngineCall("generate", (ShardWork("k1", (GenerateRequest("q1"), GenerateRequest("q2"))),
                                        ShardWork("k2", (GenerateRequest("q3"), GenerateRequest("q4")))),
                           max_new_tokens=8))
    assert [o.text for o in res.outputs["k1"]] == [fake_reply("q1"), fake_reply("q2")] and "k2" not in res.outputs
    assert isinstance(res.failed["k2"], ApiRequestError) and "HTTP 500" in str(res.failed["k2"])
    assert res.requests["k1"].as_dict() == {"requests": 2, "answered": 2, "cached": 0, "attempts": 2, "retries": 0,
                                            "failures": {}, "system_fingerprints": ["fp_fake"]}
    k2 = res.requests["k2"]
    assert (k2.requests, k2.answered, k2.attempts, k2.retries, k2.failures) == (2, 1, 3, 1, {"5xx": 2})
    back = pickle.loads(pickle.dumps(res))  # what crosses Ray: the failed request's own counts come along
    assert back.requests["k2"] == k2 and back.failed["k2"].counts.as_dict()["failures"] == {"5xx": 2}


def test_request_counts_sum_line_and_metrics():
    a = RequestCounts(requests=3, answered=2, cached=1, attempts=4, retries=2, failures={"429": 2},
                      system_fingerprints=["fp1"])
    b = RequestCounts(requests=2, answered=0, attempts=2, failures={"4xx": 2}, system_fingerprints=["fp0"])
    a.add(b)
    assert a.as_dict() == {"requests": 5, "answered": 2, "cached": 1, "attempts": 6, "retries": 2,
                           "failures": {"429": 2, "4xx": 2}, "system_fingerprints": ["fp0", "fp1"]}
    assert RequestCounts.from_dict(a.as_dict()) == a
    assert a.line() == ("2 answered of 5 requests (1 from the answer cache); 6 HTTP attempts, 2 retries; "
                        "failed attempts: 429 x2, 4xx x2")
    m = a.metrics()
    assert (m["api_requests"], m["api_answered"], m["api_failed_429"], m["api_failed_5xx"]) == (5.0, 2.0, 2.0, 0.0)
    assert RequestCounts(requests=30, attempts=30, failures={"4xx": 30}).line().startswith("0 answered of 30 requests")


def test_the_private_cluster_start_drops_only_rays_token_notice(caplog):
    """Ray's token-authentication notice is dropped while confgrid starts its private local cluster; other Ray
    warnings, and the notice outside that start, pass."""
    import logging

    from confgrid.flows.execute.ray_session import _quiet_token_notice

    ray_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    notice = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    with caplog.at_level(logging.WARNING, logger=ray_log.name):
        with _quiet_token_notice():
            ray_log.warning(notice)
            ray_log.warning("Generated new authentication token and saved to /x")
        ray_log.warning(notice)
    assert [r.getMessage() for r in caplog.records] == ["Generated new authentication token and saved to /x", notice]


def test_status_sums_the_api_requests_of_the_manifest(tmp_path):
    """`confgrid status` adds up the shards' request counts (the latest attempt of each shard)."""
    from typer.testing import CliRunner

    from confgrid.cli.main import app
    from confgrid.flows.store.run_store import RunStore

    store = RunStore(tmp_path)
    counts = [RequestCounts(requests=3, answered=3, cached=1, attempts=4, retries=1, failures={"429": 1}),
              RequestCounts(requests=3, answered=1, attempts=5, retries=2, failures={"5xx": 4})]
    for i, c in enumerate(counts):
        rec = store.begin("generate", f"api/tqa#{i}", f"k{i}")
        rec.requests = c.as_dict()
        store.fail(rec, "model 'api' at http://h/v1: failed after 2 attempt(s) (HTTP 500): x")
    local = store.begin("generate", "local/tqa#0", "k9")  # a local model's shard has no request counts
    store.fail(local, "x")
    (tmp_path / "grid.yaml").write_text("name: x\n")
    res = CliRunner().invoke(app, ["status", str(tmp_path)])
    assert res.exit_code == 1, res.output  # failed shards: status exits 1 (issue 27)
    assert ("API requests (latest attempt of 2 shard(s)): 4 answered of 6 requests (1 from the answer cache); "
            "9 HTTP attempts, 3 retries; failed attempts: 429 x1, 5xx x4") in res.output


_WRITER = """
import sys
from confgrid.actors.api_cache import AnswerCache
cache = AnswerCache(sys.argv[1])
print("ready", flush=True)
for i in range(100000):  # bounded; killed long before
    cache.put(f"{i:064x}", str(i) * 20000)
"""


def test_answer_cache_entries_survive_kill_9_whole_or_absent(tmp_path):
    """A process killed with SIGKILL while it writes cache entries leaves only whole entries (each one read back
    equals what was written); a temporary file left behind is never read as an answer."""
    import signal
    import subprocess
    import sys

    cache = tmp_path / "api_cache"
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(cache)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    store = AnswerCache(cache)
    entries = sorted(cache.glob("??/*.json"))
    assert len(entries) >= 1
    for path in entries:
        i = int(path.stem, 16)
        assert store.get(path.stem) == str(i) * 20000
    assert store.get(f"{len(entries) + 5:064x}") is None


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_request_deadline_refuses_a_budget_that_is_not_a_positive_finite_number(bad):
    from confgrid.actors.http_deadline import request_deadline

    with pytest.raises(ValueError, match=r"seconds=.*positive finite"):
        with request_deadline(bad):
            pass


def test_a_thread_without_a_deadline_keeps_the_per_operation_time_outs(fake, key):
    """The deadline belongs to the request that set it: after a cut request, the next one on the same client
    answers in full."""
    b = backend(fake, timeout_s=0.5, max_retries=0)
    fake.faults = ["trickle_headers"]
    with pytest.raises(ApiRequestError, match="APITimeoutError"):
        b.generate(["q"], [""], 8)
    assert b.generate(["q"], [""], 8)[0].text == fake_reply("q")
