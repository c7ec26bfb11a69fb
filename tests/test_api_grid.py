"""Grids with an API model (backend openai): the api section, what the grid check refuses, shard keys, and one
run on Ray against the fake server (tests/fake_openai.py) whose failed shard is recorded and whose key appears in
no file of the run directory and no log line."""

from __future__ import annotations

import copy

import pytest
from fake_openai import FakeServer

from confgrid.flows.spec import GridSpecError, parse_grid

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
    from confgrid.flows.plan import check_items
    from confgrid.flows.spec import GridSpec

    spec = GridSpec.model_validate(grid(scoring={"contexts": ["bare"]}))  # skips parse_grid's check
    assert [f for f, _ in check_items(spec, {"tqa": []})] == ["scoring.contexts"]


def test_shard_keys_depend_on_the_server_not_on_how_it_is_reached():
    from confgrid.flows.plan import model_identity

    base = parse_grid(grid()).models[0]
    ident = model_identity(base)
    assert ident["backend"] == "openai" and ident["base_url"] == "http://127.0.0.1:8000/v1"
    g = grid()
    g["models"][0]["api"].update(max_concurrency=2, timeout_s=5, max_retries=0, api_key_env="OTHER")
    assert model_identity(parse_grid(g).models[0]) == ident
    assert model_identity(parse_grid(grid("http://127.0.0.1:9000/v1")).models[0]) != ident
    local = parse_grid(grid(models=[{"name": "l", "model": "confgrid-fixture"}])).models[0]
    assert "base_url" not in model_identity(local)  # keys of local models unchanged


def test_run_records_a_failed_shard_and_never_the_key(tmp_path, monkeypatch, caplog, capfd):
    """One run on Ray: 6 items in 2 generate shards; one request fails for good (500 after its retry), so its
    shard fails (in the manifest, the error naming HTTP 500) and the other completes. The key, sent as the
    Authorization header, is in no file of the run directory and no captured output."""
    import json
    import logging

    from confgrid.flows.runner import ShardFailures, run_grid

    monkeypatch.setenv(KEY_ENV, KEY)
    fake = FakeServer()
    fake.fail = [(500, {}), (500, {})]  # the first request and its one retry
    g = grid(fake.base_url, execution={"shard_size": 3, "calls_in_flight": 1},
             methods=[{"id": "pt", "kind": "p_true"}])
    g["datasets"][0]["limit"] = 6
    g["models"][0]["api"].update(max_retries=1, backoff_s=0.0, max_concurrency=1)
    out = tmp_path / "run"
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(ShardFailures) as err:
                run_grid(parse_grid(copy.deepcopy(g)), out)
    finally:
        fake.close()
        ray.shutdown()  # later tests check that Ray is not running
    assert err.value.summary.failed_shards == 1
    manifest = json.loads((out / "manifest.json").read_text())
    failed = [s for s in manifest["shards"] if s.get("status") == "failed"]
    assert len(failed) == 1 and "HTTP 500" in json.dumps(failed[0])
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in fake.requests)  # the key was used
    leaked = [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    captured = capfd.readouterr()
    assert leaked == [] and KEY not in caplog.text and KEY not in captured.out + captured.err
    assert KEY_ENV in (out / "grid.yaml").read_text()  # the variable's name is what is stored
