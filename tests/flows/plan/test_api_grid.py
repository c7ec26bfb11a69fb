"""Grids with an API model (backend openai): the api section, what the grid check refuses, shard keys, and runs
on Ray against the fake server (tests/fake_openai.py): failed requests fail only their shards with an error that
crossed Ray intact, every answer is kept so the resume sends only the unanswered requests, the requests are
counted per shard and in total, a 401 stops the model at once, and the key appears in no file of the run
directory and no log line."""

from __future__ import annotations

import copy
import json
import logging
import os

import pytest
from reference.exception_classes import all_exception_classes
from confgrid.flows.spec.grid import parse_grid
from confgrid.flows.spec.base import GridSpecError

KEY_ENV = "CONFGRID_TEST_GRID_KEY"
KEY = "sk-grid-test-FAKE-7c1d9e"


def grid(base_url="http://127.0.0.1:8000/v1", **over):
    g = {"name": "api", "models": [{"name": "api", "backend": "openai", "model": "tiny",
                                    "api": {"base_url": base_url, "api_key_env": KEY_ENV}}],
         "datasets": [{"name": "tqa", "adapter": "triviaqa", "limit": 12}], "scoring": {"contexts": []},
         "bootstrap": {"resamples": 50}}
    g.update(over)
    return g


def problems(raw) -> list[tuple[str, str]]:
    with pytest.raises(GridSpecError) as err:
        parse_grid(raw)
    return err.value.problems


def test_api_section_fields_and_defaults():
    m = parse_grid(grid()).models[0]
    assert (m.api.base_url, m.api.api_key_env, m.api.max_concurrency, m.api.max_retries) == (
        "http://127.0.0.1:8000/v1", KEY_ENV, 8, 5)
    cfg = m.api.config()
    assert cfg.base_url == m.api.base_url and cfg.timeout_s == 60.0 and not cfg.assistant_prefill
    assert parse_grid(grid("http://h:1/v1/")).models[0].api.base_url == "http://h:1/v1"


@pytest.mark.parametrize("edit, field, words", [
    (lambda m: m.pop("api"), "models[0]", "needs an api section"),
    (lambda m: m.update(backend="transformers"), "models[0]", "api is only for backend 'openai'"),
    (lambda m: m.update(chat_template=False), "models[0]", "chat_template: false is not possible"),
    (lambda m: m.update(revision="main"), "models[0]", "revision is not possible"),
    (lambda m: m["api"].update(base_url="127.0.0.1:8000"), "models[0].api.base_url", "http:// or https://"),
    (lambda m: m["api"].update(api_key_env="sk-abc"), "models[0].api.api_key_env", "pattern"),
    (lambda m: m["api"].update(max_concurrency=0), "models[0].api.max_concurrency", "greater than or equal to 1"),
    (lambda m: m["api"].update(tokens=3), "models[0].api.tokens", "unknown key; allowed: base_url, api_key_env"),
])
def test_api_section_errors(edit, field, words):
    g = grid()
    edit(g["models"][0])
    got = problems(g)
    assert any(f == field and words in msg for f, msg in got), got


def test_grid_check_refuses_what_chat_completions_cannot_do():
    g = grid(scoring={"contexts": ["bare", "guess_slot"]}, probe={"enabled": True},
             answer_sets=[{"id": "ao", "prompt": "answer_only"}],
             methods=[{"id": "hs", "kind": "hidden_states"}, {"id": "pt", "kind": "p_true", "top_logprobs": 21},
                      {"id": "sc", "kind": "self_consistency", "temperature": "model_default"},
                      {"id": "rt", "kind": "rating", "assistant_prefix": "Rating:"}])
    got = dict(problems(g))
    assert "stage 'score' of answer set(s) main, ao: contexts bare, guess_slot" in got["scoring.contexts"]
    assert "model 'api' (backend openai)" in got["scoring.contexts"] and "scoring.contexts: []" in got["scoring.contexts"]
    assert "stage 'probe'" in got["probe.enabled"] and "api.assistant_prefill: true" in got["probe.enabled"]
    assert "answer set 'ao'" in got["models[0].api.assistant_prefill"]  # answer_only: its score comes from the probe
    assert "no hidden states" in got["methods[0]"]
    assert "allowed: 1..20" in got["methods[1].top_logprobs"]
    assert "temperature > 0" in got["methods[2].temperature"]
    assert "assistant prefix" in got["methods[3].assistant_prefix"]
    # the answer set's own contexts are named where they are declared
    g = grid(answer_sets=[{"id": "ao", "prompt": "confidence_percent", "contexts": ["guess_slot_percent"]}])
    got = dict(problems(g))
    assert "answer set(s) ao: contexts guess_slot_percent" in got["answer_sets[0].contexts"]
    assert "scoring.contexts" not in got  # the main set has none


def test_what_an_api_model_may_run_passes_and_prefill_lifts_the_prefix_refusals():
    ok = grid(methods=[{"id": "pt", "kind": "p_true"}, {"id": "sc", "kind": "self_consistency", "k": 3},
                       {"id": "hs", "kind": "hidden_states", "models": ["local"]}],
              models=[grid()["models"][0], {"name": "local", "model": "confgrid-fixture"}])
    assert [m.backend for m in parse_grid(ok).models] == ["openai", "transformers"]
    g = grid(probe={"enabled": True}, methods=[{"id": "rt", "kind": "rating", "assistant_prefix": "Rating:"}])
    g["models"][0]["api"]["assistant_prefill"] = True
    parse_grid(g)


def test_check_items_refuses_a_grid_built_in_python():
    from confgrid.flows.plan.grid_plan import check_items
    from confgrid.flows.spec.grid import GridSpec

    spec = GridSpec.model_validate(grid(scoring={"contexts": ["bare"]}))  # skips parse_grid's check
    assert [f for f, _ in check_items(spec, {"tqa": []})] == ["scoring.contexts"]


def test_shard_keys_depend_on_the_server_not_on_how_it_is_reached():
    from confgrid.flows.plan.grid_plan import model_identity

    base = parse_grid(grid()).models[0]
    ident = model_identity(base)
    assert ident["backend"] == "openai" and ident["base_url"] == "http://127.0.0.1:8000/v1"
    g = grid()
    g["models"][0]["api"].update(max_concurrency=2, timeout_s=5, max_retries=0, api_key_env="OTHER")
    assert model_identity(parse_grid(g).models[0]) == ident
    assert model_identity(parse_grid(grid("http://127.0.0.1:9000/v1")).models[0]) != ident
    local = parse_grid(grid(models=[{"name": "l", "model": "confgrid-fixture"}])).models[0]
    assert "base_url" not in model_identity(local)  # keys of local models unchanged


@pytest.fixture(scope="module")
def ray_key(request):
    """The module's Ray, started with the key in the environment (Ray workers inherit the driver's environment
    when Ray starts, as `confgrid run` starts it). A Ray left running by an earlier module started without the key,
    so it is shut down first."""
    import ray

    os.environ[KEY_ENV] = KEY
    if ray.is_initialized():
        ray.shutdown()
    yield request.getfixturevalue("ray_local")
    os.environ.pop(KEY_ENV, None)


def test_every_exception_class_crosses_a_ray_actor_call_with_its_fields(ray_key):
    """Each exception class of the package, raised in a Ray actor, reaches the driver as itself (not Ray's
    UnserializableException) with its fields, and the shard error text is its message without a wrapper."""

    from confgrid.flows.execute.queue import error_text as _error_text

    @ray_key.remote
    class Raiser:
        def throw(self, exc):
            raise exc

    actor = Raiser.remote()
    for exc in all_exception_classes():
        with pytest.raises(type(exc)) as got:
            ray_key.get(actor.throw.remote(exc))
        back = got.value.cause if hasattr(got.value, "cause") and isinstance(got.value.cause, type(exc)) \
            else got.value
        assert {k: v for k, v in vars(back).items() if k in vars(exc)} == vars(exc), type(exc)
    api = all_exception_classes()[0]
    with pytest.raises(type(api)) as got:
        ray_key.get(actor.throw.remote(api))
    assert _error_text(got.value) == str(api)  # "model 'm' at http://h/v1: failed after 3 attempt(s) (HTTP 500): boom"
    ray_key.kill(actor)


def _run(g, out, resume=False):
    """run_grid on the module's Ray; returns (ShardFailures or None)."""
    from confgrid.flows.runner import ShardFailures, run_grid

    try:
        run_grid(parse_grid(copy.deepcopy(g)), out, resume=resume)
    except ShardFailures as exc:
        return exc
    return None


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def test_run_keeps_every_answer_and_resume_sends_only_the_failed_requests(tmp_path, caplog, capfd, ray_key, fake):
    """8 items in shards of 3, 3 and 2; three items get 500 on each attempt (2 attempts each). Their two shards
    fail with an error that names the model and the server, crosses Ray intact (no UnserializableException) and
    never holds the key; the manifest counts every shard's requests; the run's sums are in the MLflow record.
    The resume against the healthy server sends exactly 3 requests (the answered ones come from the answer
    cache) and its tables equal those of a run that never failed, row order included."""
    import pandas as pd

    bad = set()
    fake.fault_for = lambda body: 500 if body["messages"][0]["content"] in bad else None
    g = grid(fake.base_url, execution={"shard_size": 3, "calls_in_flight": 1})
    g["datasets"][0]["limit"] = 8
    g["models"][0]["api"].update(max_retries=1, backoff_s=0.0, max_concurrency=2)
    ref = tmp_path / "reference"
    assert _run(g, ref) is None and len(fake.requests) == 8  # a run that never failed
    prompts = [r["body"]["messages"][0]["content"] for r in fake.requests]
    by_item = sorted(prompts, key=prompts.index)
    bad.update({by_item[0], by_item[1], by_item[4]})  # assumes nothing about order: chosen among what was sent
    fake.requests.clear()
    out = tmp_path / "run"
    with caplog.at_level(logging.DEBUG):
        err = _run(g, out)
    assert err is not None and err.summary.failed_shards == 2
    assert len(fake.requests) == 5 + 3 * 2  # 5 answered at once, 3 failed twice
    manifest = _manifest(out)
    shards = [s for s in manifest["shards"] if s["stage"] == "generate"]
    failed = [s for s in shards if s["status"] == "failed"]
    assert len(failed) == 2
    for s in failed:
        assert s["error"].startswith(f"model 'api' at {fake.base_url}: failed after 2 attempt(s) (HTTP 500): ")
    text = json.dumps(manifest) + (out / "confgrid.log").read_text()
    assert "UnserializableException" not in text and "Failed to deserialize" not in text
    counts = sorted((s["requests"]["requests"], s["requests"]["answered"], s["requests"]["attempts"],
                     s["requests"]["failures"].get("5xx", 0)) for s in shards)
    assert sum(c[0] for c in counts) == 8 and sum(c[1] for c in counts) == 5 and sum(c[2] for c in counts) == 11
    assert sum(c[3] for c in counts) == 6
    run_metrics = manifest["meta"]["mlflow_record"]["run_metrics"]
    assert (run_metrics["api_requests"], run_metrics["api_answered"], run_metrics["api_failed_5xx"]) == (8, 5, 6)
    assert "API requests: 5 answered of 8 requests" in caplog.text
    # the resume: only the three unanswered requests go out
    bad.clear()
    fake.requests.clear()
    assert _run(g, out, resume=True) is None
    assert sorted(r["body"]["messages"][0]["content"] for r in fake.requests) == sorted(
        [by_item[0], by_item[1], by_item[4]])
    for table in ("generations", "graded"):
        a = pd.read_parquet(out / "tables" / f"{table}.parquet")
        b = pd.read_parquet(ref / "tables" / f"{table}.parquet")
        pd.testing.assert_frame_equal(a, b)
    cached = sum(s["requests"]["cached"] for s in _manifest(out)["shards"] if s.get("requests"))
    assert cached == 3  # the failed shards' answered requests came from the cache
    captured = capfd.readouterr()
    leaked = [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == [] and KEY not in caplog.text and KEY not in captured.out + captured.err
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in fake.requests)  # the key was used
    assert KEY_ENV in (out / "grid.yaml").read_text()  # the variable's name is what is stored


@pytest.mark.slow  # about 20 s (two runs); the stop itself is tested without Ray in tests/actors/test_api_faults.py
def test_a_401_stops_the_model_at_once_and_resume_starts_it_afresh(tmp_path, ray_key, fake):
    """A wrong key: one request is sent, every shard fails with the reason (naming the key's variable) and
    the run says 0 answered of 6 requests; the resume with a good server starts the model again."""
    fake.always = 401
    g = grid(fake.base_url, execution={"shard_size": 2, "calls_in_flight": 1})
    g["datasets"][0]["limit"] = 6
    g["models"][0]["api"].update(max_concurrency=1)
    out = tmp_path / "run"
    err = _run(g, out)
    assert len(fake.requests) == 1
    assert err is not None and err.summary.failed_shards == 3
    shards = [s for s in _manifest(out)["shards"] if s["stage"] == "generate"]
    assert len(shards) == 3
    assert all(s["status"] == "failed" and "stopped at HTTP 401" in s["error"] and KEY_ENV in s["error"]
               for s in shards)
    total = _manifest(out)["meta"]["mlflow_record"]["run_metrics"]
    assert (total["api_requests"], total["api_answered"], total["api_attempts"]) == (6, 0, 1)
    fake.always = None
    fake.requests.clear()
    assert _run(g, out, resume=True) is None
    assert len(fake.requests) == 6
