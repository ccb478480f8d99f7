"""A real OpenAI-compatible chat server on 127.0.0.1 for the LLM generator's tests.

POST /v1/chat/completions answers from a script: each entry of ``script`` is consumed by one
request, either ``(status, error_message)`` for a failure or the answer text; when the script
runs out, ``default`` answers. Every request body is recorded in ``requests``.

The generator's preflight (a one-token request, ``max_tokens == 1``) is answered by ``ping``
instead ("OK", or ``(status, error_message)``) and recorded in ``pings``, so scripts stay about
the run's own requests.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer:
    def __init__(self, default: str = "") -> None:
        self.default = default
        self.script: list = []
        self.requests: list[dict] = []
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
                    else:
                        server.requests.append(body)
                        step = server.script.pop(0) if server.script else server.default
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                if isinstance(step, tuple):
                    status, message = step
                    return self._send(status, {"error": {"message": message, "type": "test",
                                                         "code": status}})
                text = step(body) if callable(step) else step
                prompt_tokens = sum(len(m.get("content", "").split()) for m in body["messages"])
                completion_tokens = len(text.split())
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": body.get("model", ""),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt_tokens,
                              "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                })

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
