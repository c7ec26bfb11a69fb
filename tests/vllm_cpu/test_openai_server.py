"""The openai backend against a real ``vllm serve`` (vLLM's OpenAI-compatible server) on 127.0.0.1.

Two servers per module serve the tiny Llama of conftest.py (CPU, float32),
requiring an API key (``VLLM_API_KEY``). Checked: generation (greedy text and
the generated tokens' log-probs equal the transformers backend's on the same
chat-rendered prompt; ``n`` samples with a seed are reproducible), next-token
``top_logprobs`` equal to the transformers backend's, a 429 answered by a small
proxy in front of the server and retried, and a grid run through
``confgrid run`` whose server is killed mid-run (a shard fails, recorded in
the manifest) and that ``confgrid resume`` completes once a server of the same
model (the spare, launched with the first) answers at the same address, with
the same outputs as direct requests; the key is in no file of the run
directory and no line the commands printed.

The servers' process groups are started here and killed here (by their pids);
nothing else is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fake_openai import FaultProxy

from confgrid.actors.calls import Sampling
from confgrid.actors.openai_backend import ApiConfig, OpenAIBackend

pytestmark = pytest.mark.vllm

KEY_ENV = "CONFGRID_VLLM_TEST_KEY"
KEY = "sk-vllm-test-FAKE-51f0c2"
SERVED = "tiny"
START_TIMEOUT_S = 300
TEXTS = ["What is the capital of France?", "Which planet is largest?", "Give your best short answer."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` in its own process group, its output in ``log``."""

    def __init__(self, model_dir: str, port: int, log: Path) -> None:
        self.model_dir, self.port, self.log = model_dir, port, log
        self.proc: subprocess.Popen | None = None
        self.start_seconds: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])

    def launch(self) -> None:
        """Start the server process (returns at once; :meth:`wait_healthy` waits for it)."""
        # the engine in the server's process and no worker process (each would import vLLM again): on 2 cores
        # the server starts in about half the time
        env = dict(os.environ, VLLM_API_KEY=KEY, VLLM_HOST_IP="127.0.0.1", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
               "--max-model-len", "512", "--max-num-seqs", "16", "--enforce-eager", "--distributed-executor-backend",
               "uni", "--disable-uvicorn-access-log"]
        self._t0 = time.time()
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self) -> float:
        """Wait for ``/health``; returns the seconds since :meth:`launch` (fails with the log's tail)."""
        assert self.proc is not None, "launch() first"
        while time.time() - self._t0 < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {self.proc.returncode} while starting:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            self.kill()
            pytest.fail(f"vllm serve not healthy after {START_TIMEOUT_S} s:\n{self.tail()}")
        self.start_seconds.append(round(time.time() - self._t0, 1))
        return self.start_seconds[-1]

    def start(self) -> float:
        """Start the server and wait for ``/health``; returns the seconds it took."""
        self.launch()
        return self.wait_healthy()

    def kill(self) -> None:
        """SIGKILL the server's process group (the API server and its engine process), then reap it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=60)
        self.proc = None


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    """(server, spare): two servers of the same model launched together (their start-ups overlap on 2 cores,
    instead of a restart after the kill); the tests use ``server``, the killed-server test resumes on the spare."""
    log_dir = tmp_path_factory.mktemp("vllm_serve")
    srv = VllmServer(model_dir, _free_port(), log_dir / "server.log")
    spare = VllmServer(model_dir, _free_port(), log_dir / "spare.log")
    srv.launch()
    spare.launch()
    try:
        srv.wait_healthy()
        yield srv, spare
    finally:
        srv.kill()
        spare.kill()
    print(f"\nvllm serve start seconds: {srv.start_seconds} {spare.start_seconds}")


@pytest.fixture(scope="module")
def server(servers):
    return servers[0]


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def api(base_url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(SERVED, ApiConfig(base_url=base_url, api_key_env=KEY_ENV, **kw))


def test_generation_matches_transformers_and_seeded_samples_repeat(server, key, hf_backend, tokenizer):
    from confgrid.protocols.chat import render_prompt_ids

    b = api(server.url + "/v1")
    outs = b.generate(TEXTS, [""] * len(TEXTS), 12)
    for text, o in zip(TEXTS, outs, strict=True):
        ids = render_prompt_ids(tokenizer, text, use_chat_template=True)
        ref = hf_backend.generate([ids], max_new_tokens=12)[0]
        # vLLM's incremental detokenizer holds back an incomplete UTF-8 character at the end of the text
        assert (o.text, o.finish_reason, o.n_tokens, o.prompt_tokens) == (
            ref.text.rstrip("\ufffd"), ref.finish_reason, len(ref.token_ids), len(ids))
        ref_lp = hf_backend.score([(ids, list(ref.token_ids))])[0]
        assert o.logprobs_status == "ok" and max(abs(a - r) for a, r in zip(o.token_logprobs, ref_lp)) < 1e-3
    s = Sampling(temperature=1.0, n=3, seed=7)
    first = b.generate(TEXTS[:2], ["", ""], 8, sampling=s)
    again = b.generate(TEXTS[:2], ["", ""], 8, sampling=s)
    other = b.generate(TEXTS[:2], ["", ""], 8, sampling=Sampling(temperature=1.0, n=3, seed=8))
    texts = lambda outs: [[g.text for g in o.samples] for o in outs]  # noqa: E731
    assert [len(o.samples) for o in first] == [3, 3]
    assert texts(first) == texts(again) and texts(first) != texts(other)
    assert all(len(g.token_logprobs) == g.n_tokens for o in first for g in o.samples)


def test_top_logprobs_match_transformers(server, key, hf_backend, tokenizer):
    from confgrid.protocols.chat import render_prompt_ids

    outs = api(server.url + "/v1").next_token(TEXTS, [""] * len(TEXTS), 5, candidates=("T",))
    for text, o in zip(TEXTS, outs, strict=True):
        ref = hf_backend.next_token([render_prompt_ids(tokenizer, text, use_chat_template=True)], top_k=5)[0]
        assert o.logprobs_status == "ok" and o.token_ids == (-1, -2, -3, -4, -5)
        assert max(abs(a - r) for a, r in zip(o.logprobs, ref.logprobs, strict=True)) < 1e-3
        assert set(o.candidate_tokens) == {"T"}


def test_prefill_continues_the_assistant_turn_like_a_local_prefix(server, key, hf_backend, tokenizer):
    from confgrid.protocols.chat import render_prompt_ids

    [o] = api(server.url + "/v1", assistant_prefill=True).generate([TEXTS[0]], ["Guess:"], 6)
    ids = render_prompt_ids(tokenizer, TEXTS[0], use_chat_template=True, assistant_prefix="Guess:")
    ref = hf_backend.generate([ids], max_new_tokens=6)[0]
    assert (o.text, o.n_tokens) == (ref.text.rstrip("\ufffd"), len(ref.token_ids))  # the continuation only


def test_429_from_a_proxy_is_retried(server, key):
    proxy = FaultProxy(server.url, fail_first=2)
    try:
        b = api(proxy.base_url, backoff_s=0.0, max_concurrency=1)
        [o] = b.generate([TEXTS[0]], [""], 6)
    finally:
        proxy.close()
    assert o.n_tokens == 6 and proxy.seen == 3
    stats = b.request_stats()  # a RequestCounts record: one request, answered on its third attempt
    assert (stats.requests, stats.answered, stats.attempts, stats.retries, stats.failures) == (1, 1, 3, 2, {"429": 2})


GRID = """
name: api_resume
models:
  - name: served
    backend: openai
    model: {served}
    api: {{base_url: "{base_url}", api_key_env: {key_env}, max_concurrency: 2, max_retries: 1, backoff_s: 0.0,
           timeout_s: 30}}
datasets:
  - {{name: tqa, adapter: triviaqa, limit: 8}}
elicitation: {{max_new_tokens: 8}}
scoring: {{contexts: []}}
methods:
  - {{id: pt, kind: p_true}}
bootstrap: {{resamples: 50}}
execution: {{shard_size: 2, calls_in_flight: 1}}
"""


def _confgrid(*args: str) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("confgrid"))
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=400, env=dict(os.environ))


def test_killed_server_fails_a_shard_and_resume_completes(servers, key, tmp_path):
    """The server is killed (SIGKILL of its process group) when the proxy sees its 4th request (2 of 4 generate
    shards answered): a shard fails; resume, once a server of the same model answers behind the same address (the
    spare, launched with the first so that no restart is waited for), finishes the run, and every output equals
    a direct request to that server."""
    import pandas as pd

    server, spare = servers
    killed: list[int] = []

    def kill_on_fourth(seen: int) -> None:
        if seen == 4 and not killed:
            killed.append(seen)
            server.kill()

    proxy = FaultProxy(server.url, on_request=kill_on_fourth)
    out = tmp_path / "run"
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID.format(served=SERVED, base_url=proxy.base_url, key_env=KEY_ENV))
    try:
        first = _confgrid("run", str(grid), "--out", str(out))
        assert killed and first.returncode == 1, first.stderr[-3000:]
        manifest = json.loads((out / "manifest.json").read_text())
        failed = [s for s in manifest["shards"] if s["status"] == "failed"]
        assert failed and all("APIConnectionError" in (s["error"] or "") for s in failed), failed
        spare.wait_healthy()
        proxy.upstream = spare.url  # the address the grid names answers again
        before = proxy.seen
        second = _confgrid("resume", str(out))
        resumed = proxy.seen - before
        assert second.returncode == 0, second.stderr[-3000:]
    finally:
        proxy.close()
    manifest = json.loads((out / "manifest.json").read_text())
    assert not [s for s in manifest["shards"] if s["status"] == "failed"]
    assert 0 < resumed < 16  # 8 answers + 8 P(True): what the first run finished is reused
    gens = pd.read_parquet(out / "tables" / "generations.parquet")
    assert len(gens) == 8 and set(gens["logprobs_status"]) == {"ok"}
    # the same outputs as direct requests to the server that answered the resume (greedy: deterministic)
    from confgrid.flows.plan.grid_plan import GridPlan
    from confgrid.flows.runner import _load_items
    from confgrid.flows.spec.grid import load_grid

    spec = load_grid(out / "grid.yaml")
    rows = [r for sh in GridPlan(spec, {d.name: _load_items(d) for d in spec.datasets}).generate_shards()
            if sh.stage == "generate" for r in sh.rows]
    direct = api(spare.url + "/v1").generate([r.user_text for r in rows], [""] * len(rows), 8)
    by_item = dict(zip(gens["item_id"], gens["raw_output"], strict=True))
    assert [by_item[r.item_id] for r in rows] == [d.text for d in direct]
    nt = pd.read_parquet(out / "tables" / "next_token.parquet")
    assert len(nt) > 0 and set(nt["logprobs_status"]) == {"ok"}
    # the key: used by every request, stored nowhere, printed nowhere
    leaked = [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    assert leaked == [] and KEY not in printed and KEY_ENV in (out / "grid.yaml").read_text()
