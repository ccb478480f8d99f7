"""A real OpenAI-compatible chat server on 127.0.0.1 for the LLM tests.

POST /v1/chat/completions answers from a script: each entry of ``script`` is consumed by one
request, either ``(status, error_message)`` for a failure, ``Fail(status, message, headers)``
for one with headers (``Retry-After``) or a message echoing the request's key (``{key}``),
``Broken(text)`` for a stream that breaks off after ``text``, ``Dead()`` to stop listening (this
request and every later one find the port closed: connection refused), a function of the
request body (giving the answer text or any of these), or the answer text; when the script runs out, ``default`` answers (text or a
function). Every request body is recorded in ``requests``.

Like the real services it streams when asked (``"stream": true``): server-sent events, one
chunk per ``chunk_chars`` characters, ``chunk_delay_s`` apart, then the usage when
``stream_options.include_usage`` is set. Usage counts words (prompt and answer); with
``usage=False`` the server sends none (some self-hosted servers do not). ``delay_s``: the
server thinks that long before it answers at all (a slow server, for client timeouts).

The generator's preflight (a one-token request, ``max_tokens == 1``) is answered by ``ping``
instead ("OK", or ``(status, error_message)``) and recorded in ``pings``, so scripts stay about
the run's own requests.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Broken:
    """A streamed answer that stops after ``text``: the connection closes mid-stream."""

    text: str


@dataclass
class Fail:
    """An error answer: ``status``, a message (``{key}`` is replaced by the request's API key,
    as providers that echo a refused key do) and headers (e.g. ``{"Retry-After": "7"}``)."""

    status: int
    message: str
    headers: dict | None = None


@dataclass
class Dead:
    """The server stops listening: this request and every later one are refused."""


def critic_json(body: dict, diagnosis: str = "CRITIC-MODEL-SAYS: use 16-byte loads.") -> str:
    """A critic's answer: one diagnosis per '### <label>' kernel in its prompt."""
    prompt = body["messages"][-1]["content"]
    labels = [line.split()[1] for line in prompt.splitlines() if line.startswith("### ")]
    return "```json\n" + json.dumps({"kernels": [
        {"label": label, "bottleneck": "memory_bound", "headroom": 1.5,
         "diagnosis": f"{diagnosis} ({label})"} for label in labels]}) + "\n```"


def is_critic(body: dict) -> bool:
    return body["messages"][-1]["content"].startswith("You are the critic")


class ChatServer:
    def __init__(self, default="", chunk_chars: int = 12, chunk_delay_s: float = 0.0,
                 usage: bool = True) -> None:
        self.default = default
        self.usage = usage
        self.delay_s = 0.0
        self.script: list = []
        self.requests: list[dict] = []
        self.chunk_chars = chunk_chars
        self.chunk_delay_s = chunk_delay_s
        self.ping: str | tuple = "OK"
        self.pings: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                body["_auth"] = self.headers.get("Authorization", "")
                with server._lock:
                    if body.get("max_tokens") == 1:
                        server.pings.append(body)
                        step = server.ping
                        n = f"ping-{len(server.pings)}"
                    else:
                        server.requests.append(body)
                        step = server.script.pop(0) if server.script else server.default
                        n = len(server.requests)
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                if callable(step):  # a function of the request: an answer, or any step above
                    step = step(body)
                if isinstance(step, Dead):
                    server.die()
                    self.close_connection = True
                    return
                if isinstance(step, tuple):
                    step = Fail(*step)
                if isinstance(step, Fail):
                    key = body["_auth"].removeprefix("Bearer ")
                    return self._send(step.status, {"error": {
                        "message": step.message.replace("{key}", key), "type": "test",
                        "code": step.status}}, step.headers)
                broken = isinstance(step, Broken)
                text = step.text if broken else step
                if server.delay_s:
                    time.sleep(server.delay_s)
                prompt_tokens = sum(len(m.get("content", "").split()) for m in body["messages"])
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                         "total_tokens": prompt_tokens + len(text.split())}
                base = {"id": f"chatcmpl-{n}", "created": int(time.time()),
                        "model": body.get("model", "")}
                if body.get("stream"):
                    return self._stream(base, text, usage, body, broken)
                answer = {**base, "object": "chat.completion",
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": text}}]}
                self._send(200, {**answer, "usage": usage} if server.usage else answer)

            def _stream(self, base, text, usage, body, broken):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                size = max(1, server.chunk_chars)
                pieces = [text[i:i + size] for i in range(0, len(text), size)] or [""]
                for i, piece in enumerate(pieces):
                    delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
                    self._event({**base, "object": "chat.completion.chunk", "choices": [
                        {"index": 0, "delta": delta, "finish_reason": None}]})
                    if server.chunk_delay_s:
                        time.sleep(server.chunk_delay_s)
                if broken:  # no finish_reason, no [DONE]: the connection just ends
                    self.close_connection = True
                    return
                self._event({**base, "object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if (body.get("stream_options") or {}).get("include_usage") and server.usage:
                    self._event({**base, "object": "chat.completion.chunk", "choices": [],
                                 "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload):
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._dead = threading.Event()

    def die(self) -> None:
        """Stop listening now (from any thread, a handler's too): later requests are refused."""
        if not self._dead.is_set():
            self._dead.set()
            threading.Thread(target=self.httpd.shutdown, daemon=True).start()
            try:  # stop listening at once (a close alone waits for the accept loop's select)
                self.httpd.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.httpd.socket.close()

    def generation_requests(self) -> list[dict]:
        """The requests that asked for a kernel (not the critic's)."""
        return [r for r in self.requests if not is_critic(r)]

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._dead.is_set():
            self.httpd.shutdown()
        self.httpd.server_close()
