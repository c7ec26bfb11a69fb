"""API models end to end, as a user meets them: `confgrid run`, `status`, `resume` and `resubmit --failed` as
commands, against the fake OpenAI-compatible server running as a process of its own (tests/fake_openai.py
``FakeServerProcess``), switched between fault modes, and killed by its pid mid-run (issue 25).

What is checked: each fault mode fails only its own items' shards, with the cause counted in the manifest; the
resume against the healthy server sends exactly the requests that were never answered (counted on the server's
side), and the tables then equal those of a run that never failed, row order included; a server killed mid-run
gives connection failures, no hang, and a resume on a restarted server completes the run; a 401 stops the model
at once and `resubmit --failed` completes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai import FakeServerProcess  # noqa: E402

KEY_ENV = "CONFGRID_TEST_E2E_KEY"
KEY = "sk-e2e-test-FAKE-3f9a0b"
#: One item per fault mode of the fake server; each fails on both of its attempts (max_retries 1).
MODES = [500, 429, "trickle", "trickle_headers", "truncated", "html", "empty_choices", "no_message"]
#: The manifest's failure cause of each mode.
CAUSE = {500: "5xx", 429: "429", "trickle": "timeout", "trickle_headers": "timeout", "truncated": "malformed",
         "html": "malformed", "empty_choices": "malformed", "no_message": "malformed"}


def _grid(base_url: str, items: int = 12) -> dict:
    return {"name": "api_e2e",
            "models": [{"name": "api", "backend": "openai", "model": "tiny",
                        "api": {"base_url": base_url, "api_key_env": KEY_ENV, "max_concurrency": 2,
                                "max_retries": 1, "backoff_s": 0.0, "timeout_s": 1.0}}],
            "datasets": [{"name": "tqa", "adapter": "triviaqa", "limit": items}],
            "scoring": {"contexts": []}, "bootstrap": {"resamples": 50},
            "execution": {"shard_size": 2}}


def _confgrid(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """The `confgrid` command of this environment, with the key in its environment (as a user exports it)."""
    env = {**os.environ, KEY_ENV: KEY, "RAY_USAGE_STATS_ENABLED": "0"}
    exe = Path(sys.executable).with_name("confgrid")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)


def _write(path: Path, grid: dict) -> Path:
    path.write_text(yaml.safe_dump(grid), encoding="utf-8")
    return path


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _prompts(requests: list[dict]) -> list[str]:
    return [next(m["content"] for m in r["body"]["messages"] if m["role"] == "user") for r in requests]


def _same_tables(a: Path, b: Path) -> None:
    import pandas as pd

    for table in ("generations", "graded"):
        pd.testing.assert_frame_equal(pd.read_parquet(a / "tables" / f"{table}.parquet"),
                                      pd.read_parquet(b / "tables" / f"{table}.parquet"))


@pytest.fixture(scope="module")
def servers():
    """The module's fake server process, in a list: a test that kills it puts its restarted successor (same
    port, so the same model identity and tables) in its place."""
    held = [FakeServerProcess()]
    yield held
    held[0].stop()


@pytest.fixture
def server(servers):
    """The module's server, healthy and with no request recorded."""
    servers[0].configure(fault_by_prompt={}, always=None, faults=[], delay_s=0.0)
    servers[0].clear()
    return servers[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, servers):
    """A run that never failed, and the prompts the server saw (one per item)."""
    tmp = tmp_path_factory.mktemp("reference")
    ref = tmp / "reference"
    servers[0].clear()
    done = _confgrid("run", str(_write(tmp / "grid.yaml", _grid(servers[0].base_url))), "--out", str(ref))
    assert done.returncode == 0, done.stderr[-3000:]
    prompts = _prompts(servers[0].requests())
    assert len(prompts) == len(set(prompts)) == 12
    servers[0].clear()
    return ref, prompts


def test_each_fault_mode_fails_only_its_items_and_resume_sends_only_what_was_never_answered(
        tmp_path, server, reference):
    ref, prompts = reference
    faulty = dict(zip(prompts[::-1], MODES))  # the last 8 items sent, one per mode
    server.configure(fault_by_prompt=faulty, trickle_s=0.05)
    out = tmp_path / "run"
    grid = _write(tmp_path / "grid.yaml", _grid(server.base_url))
    t0 = time.monotonic()
    failed = _confgrid("run", str(grid), "--out", str(out))
    took = time.monotonic() - t0
    assert failed.returncode == 1, failed.stderr[-3000:]
    seen = _prompts(server.requests())
    assert sorted(set(seen)) == sorted(prompts)  # every item asked; each faulty one twice
    assert len(seen) == 12 + len(MODES)
    shards = [s for s in _manifest(out)["shards"] if s["stage"] == "generate"]
    failures: dict[str, int] = {}
    for s in shards:
        for cause, n in s["requests"]["failures"].items():
            failures[cause] = failures.get(cause, 0) + n
    want: dict[str, int] = {}
    for mode in MODES:
        want[CAUSE[mode]] = want.get(CAUSE[mode], 0) + 2
    assert failures == want
    assert sum(s["requests"]["answered"] for s in shards) == 12 - len(MODES)
    for s in shards:
        if s["status"] == "failed":
            assert s["error"].startswith(f"model 'api' at {server.base_url}: failed after 2 attempt(s) (")
            assert "Unserializable" not in s["error"] and KEY not in s["error"]
    assert took < 120  # two trickled attempts end at timeout_s each, not after the 16 s a full body takes
    st = _confgrid("status", str(out))
    assert st.returncode == 1 and "failed" in st.stdout
    # the server is healthy again: only the never-answered requests go out
    server.configure(fault_by_prompt={})
    server.clear()
    resumed = _confgrid("resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(_prompts(server.requests())) == sorted(faulty)
    _same_tables(out, ref)
    assert _confgrid("status", str(out)).returncode == 0
    leaked = [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == [] and KEY not in failed.stdout + failed.stderr + resumed.stdout + resumed.stderr


@pytest.mark.slow  # about 33 s (CI budget); a real vLLM server killed mid-run: tests/vllm_cpu/test_openai_server.py
def test_a_server_killed_mid_run_gives_connection_failures_and_resume_completes_on_its_restart(
        tmp_path, servers, server, reference):
    ref, _ = reference
    server.configure(delay_s=0.3)
    out = tmp_path / "run"
    grid = _write(tmp_path / "grid.yaml", _grid(server.base_url))

    def kill_after_four() -> None:
        for _ in range(600):  # bounded: 60 s
            if len(server.requests()) >= 4:
                server.kill()
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_four, daemon=True)
    killer.start()
    t0 = time.monotonic()
    failed = _confgrid("run", str(grid), "--out", str(out))
    killer.join(5)
    assert failed.returncode == 1 and time.monotonic() - t0 < 120, failed.stderr[-3000:]
    shards = [s for s in _manifest(out)["shards"] if s["stage"] == "generate"]
    answered = sum(s["requests"]["answered"] for s in shards)
    assert any("APIConnectionError" in (s.get("error") or "") for s in shards)
    # the server comes back on the same port: the resume asks only what was never answered
    again = servers[0] = FakeServerProcess(port=server.port)
    resumed = _confgrid("resume", str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(again.requests()) == 12 - answered
    _same_tables(out, ref)


@pytest.mark.slow  # about 31 s (CI budget); the stop and resume on Ray: tests/flows/plan/test_api_grid.py, unit: test_api_faults
def test_a_wrong_key_stops_the_model_at_once_and_resubmit_failed_completes_it(tmp_path, server, reference):
    """401 on everything: the model stops at once (only the requests already in flight, max_concurrency 2, are
    sent), the message names the key's variable and never the key; `resubmit --failed` with a good server
    completes the run."""
    ref, _ = reference
    server.configure(always=401)
    out = tmp_path / "run"
    stopped = _confgrid("run", str(_write(tmp_path / "grid.yaml", _grid(server.base_url))), "--out", str(out))
    assert stopped.returncode == 1 and len(server.requests()) <= 2
    assert KEY_ENV in stopped.stdout + stopped.stderr and KEY not in stopped.stdout + stopped.stderr
    server.configure(always=None)
    server.clear()
    redone = _confgrid("resubmit", str(out), "--failed")
    assert redone.returncode == 0, redone.stderr[-3000:]
    assert len(server.requests()) == 12
    _same_tables(out, ref)
