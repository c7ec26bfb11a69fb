"""A small OpenAI-compatible chat-completions server for tests, and a fault-injecting proxy (127.0.0.1 only).

:class:`FakeServer` answers ``POST /v1/chat/completions`` with deterministic
completions: the reply to a user turn is :func:`fake_reply` of its text, each
generated "token" is one whitespace-separated word with log-prob
:data:`TOKEN_LOGPROB`, and ``top_logprobs`` lists :data:`NEXT_TOKENS`. It
records every request (body and headers) and can be told to answer the next
requests with an error status (``fail``), to sleep (``delay_s``), to omit
log-probs (``logprobs=False``), or to answer with one of the faults of
:data:`FAULTS` (``faults``: the next requests; ``always``: every request;
``fault_for(body)``: chosen per request, e.g. for some items only).

:class:`FaultProxy` forwards to a real server and answers its first
``fail_first`` requests with 429 itself.

Both run in a daemon thread and stop with ``close()``; every loop is bounded.

:class:`FakeServerProcess` runs the fake server as a process of its own
(``python tests/fake_openai.py --port P``), as a user's server would be: it is
configured and read over HTTP (``POST /_fake/config``, ``GET /_fake/requests``,
``POST /_fake/clear``), faults are chosen per prompt (``fault_by_prompt``), and
it is stopped, or killed mid-run, by its own pid.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

#: Log-prob (nats) of every generated word.
TOKEN_LOGPROB = -0.25
#: The fake next-token distribution: (token, log-prob), most probable first.
NEXT_TOKENS = ((" A", -0.2), ("B", -1.9), (" Yes", -3.0), ("A", -9999.0))
#: Faults the server can answer with besides an HTTP status (an int): a good body sent one byte every
#: ``trickle_s`` seconds; the status line and headers sent that way (then the body at once); a JSON body cut in half; a proxy's HTML error page served with status 200; ``choices: []``;
#: a choice without a message or log-probs.
FAULTS = ("trickle", "trickle_headers", "truncated", "html", "empty_choices", "no_message")


def fake_reply(user_text: str, sample: int = 0, seed: int | None = None) -> str:
    """The fake's deterministic reply: a guess and a probability that depend on the text (and sample, seed)."""
    h = hashlib.sha256(f"{user_text}|{sample}|{seed}".encode()).digest()
    guess = ("Paris", "Jupiter", "blue", "42")[h[0] % 4]
    return f"Guess: {guess}\nProbability: {0.1 + 0.8 * h[1] / 255:.2f}"


def _serve(handler: type, port: int = 0, **attrs: Any) -> tuple[ThreadingHTTPServer, int, str]:
    """An HTTP server on 127.0.0.1 (``port``, or a free one if 0), serving in a daemon thread: (server, port,
    base_url)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    for k, v in attrs.items():
        setattr(httpd, k, v)
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, port, f"http://127.0.0.1:{port}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        fake: FakeServer = self.server.fake
        if self.path == "/_fake/requests":
            with fake.lock:
                self._send(200, {"requests": list(fake.requests)})
            return
        self._send(200, {"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802
        fake: FakeServer = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.startswith("/_fake/"):
            self._control(fake, self.path, body)
            return
        with fake.lock:
            fake.requests.append({"path": self.path, "body": body,
                                  "headers": {k.lower(): v for k, v in self.headers.items()}})
            failure = fake.fail.pop(0) if fake.fail else None
            fault = fake.faults.pop(0) if fake.faults else fake.always
            if fault is None and fake.fault_for is not None:
                fault = fake.fault_for(body)
            fake.active += 1
            fake.max_active = max(fake.max_active, fake.active)
        try:
            if fake.delay_s:
                time.sleep(fake.delay_s)
        finally:
            with fake.lock:
                fake.active -= 1
        if isinstance(fault, int) and failure is None:
            failure = (fault, {})
        if failure is not None:
            status, headers = failure
            self._send(status, {"error": {"message": f"injected {status}", "type": "fake", "code": status}}, headers)
            return
        if fault is None:
            self._send(200, fake.completion(body))
            return
        self._fault(fault, fake.completion(body), fake.trickle_s)

    def _control(self, fake: "FakeServer", path: str, body: dict[str, Any]) -> None:
        """The control endpoints of the process mode: ``/_fake/config`` sets attributes, ``/_fake/clear`` forgets
        the requests seen."""
        with fake.lock:
            if path == "/_fake/clear":
                fake.requests.clear()
            elif path == "/_fake/config":
                unknown = sorted(set(body) - set(CONFIG_FIELDS))
                if unknown:
                    self._send(400, {"error": f"unknown config field(s) {unknown}; allowed: {CONFIG_FIELDS}"})
                    return
                for k, v in body.items():
                    if k == "fault_by_prompt":
                        table = dict(v or {})
                        fake.fault_for = (lambda b, t=table: t.get(_user_text(b))) if table else None
                    elif k == "fail":
                        fake.fail = [(int(st), dict(h)) for st, h in v]
                    else:
                        setattr(fake, k, v)
            else:
                self._send(404, {"error": f"no control endpoint {path}"})
                return
        self._send(200, {"ok": True})

    def _fault(self, fault: str, good: dict[str, Any], trickle_s: float) -> None:
        """Answer 200 with one of :data:`FAULTS` (every loop bounded by the body's length)."""
        ctype = "application/json"
        if fault in ("trickle", "trickle_headers"):
            data = json.dumps(good).encode()
        elif fault == "truncated":
            data = json.dumps(good).encode()
            data = data[: len(data) // 2]
        elif fault == "html":
            data, ctype = b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"
        elif fault == "empty_choices":
            data = json.dumps({**good, "choices": []}).encode()
        elif fault == "no_message":
            data = json.dumps({**good, "choices": [{"index": 0, "finish_reason": "stop"}]}).encode()
        else:
            raise ValueError(f"fault {fault!r}: allowed {FAULTS} or an HTTP status")
        head = (f"{self.protocol_version} 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                f"Server: fake-openai\r\n\r\n").encode()
        slow = {"trickle": data, "trickle_headers": head}.get(fault)
        if slow is None:
            self.wfile.write(head + data)
            return
        if fault == "trickle":
            self.wfile.write(head)
        for i in range(len(slow)):  # bounded: one byte per step
            try:
                self.wfile.write(slow[i : i + 1])
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            time.sleep(trickle_s)
        if fault == "trickle_headers":
            self.wfile.write(data)


#: What ``POST /_fake/config`` may set on a :class:`FakeServerProcess` (``fault_by_prompt``: {user text: fault}).
CONFIG_FIELDS = ("always", "faults", "fail", "fault_by_prompt", "trickle_s", "delay_s", "logprobs")


def _user_text(body: dict[str, Any]) -> str:
    return next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"), "")


class FakeServer:
    """The fake server on ``127.0.0.1:<free port>``; ``base_url`` ends in ``/v1``.

    Attributes
    ----------
    requests : list of dict
        Every request received: ``path``, ``body`` (parsed JSON), ``headers`` (names lower-cased).
    fail : list of (int, dict)
        Statuses (and headers) to answer the next requests with, in order.
    delay_s : float
        Seconds each request sleeps before it is answered.
    logprobs : bool
        Whether responses carry ``logprobs`` when asked.
    faults : list of str or int
        Faults (:data:`FAULTS`) or statuses to answer the next requests with, in order.
    always : str or int or None
        A fault or status for every request (after ``faults`` are used up).
    fault_for : callable or None
        ``fault_for(body) -> fault, status or None``, asked for each request ``faults`` and ``always`` leave alone.
    trickle_s : float
        Seconds between two bytes of a ``trickle`` body.
    """

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail: list[tuple[int, dict[str, str]]] = []
        self.faults: list[str | int] = []
        self.always: str | int | None = None
        self.fault_for: Callable[[dict[str, Any]], str | int | None] | None = None
        self.trickle_s = 0.05
        self.delay_s = 0.0
        self.logprobs = True
        self.active = 0
        self.max_active = 0  # most requests being answered at once
        self.lock = threading.Lock()
        self._httpd, self.port, self.base_url = _serve(_Handler, port=port, fake=self)

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion answering ``body``."""
        msgs = body["messages"]
        user = next(m["content"] for m in msgs if m["role"] == "user")
        budget = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        n = int(body.get("n") or 1)
        choices = []
        for k in range(n):
            words = fake_reply(user, k if n > 1 else 0, body.get("seed")).split(" ")
            tokens = [w if j == 0 else " " + w for j, w in enumerate(words)][:budget]
            finish = "stop" if len(tokens) == len(words) else "length"
            lp = None
            if body.get("logprobs") and self.logprobs:
                top = [{"token": t, "logprob": v, "bytes": list(t.encode())}
                       for t, v in NEXT_TOKENS[: int(body.get("top_logprobs") or 0)]]
                lp = {"content": [{"token": t, "logprob": TOKEN_LOGPROB, "bytes": list(t.encode()),
                                   "top_logprobs": top} for t in tokens], "refusal": None}
            choices.append({"index": k, "finish_reason": finish, "logprobs": lp,
                            "message": {"role": "assistant", "content": "".join(tokens)}})
        return {"id": "fake", "object": "chat.completion", "created": 0, "model": body["model"],
                "system_fingerprint": "fp_fake", "choices": choices,
                "usage": {"prompt_tokens": len(user.split()), "completion_tokens": sum(
                    len(c["message"]["content"].split(" ")) for c in choices), "total_tokens": 0}}

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _ProxyHandler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self, method: str) -> None:
        proxy: FaultProxy = self.server.proxy
        data = self.rfile.read(int(self.headers.get("Content-Length", 0))) if method == "POST" else None
        with proxy.lock:
            proxy.seen += 1
            inject = proxy.seen <= proxy.fail_first
            seen = proxy.seen
        if proxy.on_request is not None:
            proxy.on_request(seen)
        if inject:
            body = json.dumps({"error": {"message": "injected rate limit", "code": 429}}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        req = urllib.request.Request(proxy.upstream + self.path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=proxy.timeout_s) as resp:
                status, out, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as exc:
            status, out, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "application/json")
        except OSError:  # the upstream is down: drop the connection, as a dead server would
            self.close_connection = True
            return
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")


class FaultProxy:
    """Forwards ``127.0.0.1:<free port>`` to ``upstream`` (``http://host:port``), answering 429 to the first
    ``fail_first`` requests (with ``Retry-After: 0``); ``seen`` counts every request, and ``on_request(seen)``
    (if given) is called before each is answered (a test kills the upstream from it). An upstream that is down
    gets the connection dropped, as a dead server would."""

    def __init__(self, upstream: str, fail_first: int = 0, timeout_s: float = 120.0,
                 on_request: Callable[[int], None] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.fail_first = fail_first
        self.on_request = on_request
        self.timeout_s = timeout_s
        self.seen = 0
        self.lock = threading.Lock()
        self._httpd, self.port, self.base_url = _serve(_ProxyHandler, proxy=self)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


#: The key variable and value the backend tests send to the fake server (a fake: never a real key).
KEY_ENV = "CONFGRID_TEST_FAKE_KEY"
KEY = "sk-test-0123456789abcdefFAKE"


def fake_backend(fake: "FakeServer", waits: list | None = None, **kw: Any):
    """An OpenAIBackend of model ``tiny-model`` on ``fake`` (defaults: ``backoff_s`` 0.01, ``max_retries`` 2; ``kw``
    overrides any ApiConfig field); its waits are appended to ``waits`` instead of slept."""
    from confgrid.actors.openai_backend import ApiConfig, OpenAIBackend

    cfg = ApiConfig(base_url=fake.base_url, api_key_env=KEY_ENV, **{"backoff_s": 0.01, "max_retries": 2, **kw})
    return OpenAIBackend("tiny-model", cfg, sleep=waits.append if waits is not None else (lambda s: None))


class FakeServerProcess:
    """:class:`FakeServer` in a process of its own, started by the test and stopped (or killed) by its pid.

    Parameters
    ----------
    port : int
        The port to bind on 127.0.0.1 (0: a free one; give the old port to restart a killed server in place).
    ready_s : float
        Seconds to wait for the process to print its address; it is killed and ``RuntimeError`` raised after.
    """

    def __init__(self, port: int = 0, ready_s: float = 30.0) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--port", str(port)], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], ready_s)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            self.kill()
            raise RuntimeError(f"the fake server (pid {self.proc.pid}) did not start within {ready_s} s: {line!r}")
        self.base_url = line
        self.port = int(line.rsplit(":", 1)[1].split("/")[0])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.base_url.rsplit("/v1", 1)[0] + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def configure(self, **fields: Any) -> None:
        """Set fields of :data:`CONFIG_FIELDS` on the server (``fault_by_prompt={user text: fault}``)."""
        self._call("/_fake/config", fields)

    def requests(self) -> list[dict[str, Any]]:
        """Every chat request received since the start or the last :meth:`clear` (``path``, ``body``, ``headers``)."""
        return self._call("/_fake/requests")["requests"]

    def clear(self) -> None:
        self._call("/_fake/clear", {})

    def kill(self) -> None:
        """SIGKILL the server by its pid (a server that dies mid-run), and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it has not exited within 5 s."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def main() -> None:
    """``python tests/fake_openai.py [--port P]``: serve until SIGTERM; the first line printed is the base URL."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    fake = FakeServer(port=args.port)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(fake.base_url, flush=True)
    while not done.wait(0.5):  # bounded steps until SIGTERM
        pass
    fake.close()


if __name__ == "__main__":
    main()
