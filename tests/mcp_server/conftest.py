"""A real ``openkernel mcp`` process and the SDK's own client, driven from plain tests.

The client lives in an event loop of its own thread for the whole module (one server process
per module): ``McpSession.call`` runs a coroutine there and waits for it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "tests" / "candidates"
# Tiny work per candidate: one seed, the defaults of an offline template (no sweep).
FAST = {"eval_config": {"correctness_seeds": 1}, "prompt": {"max_template_combinations": 1}}


def server_env() -> dict[str, str]:
    """The server's environment: this checkout's openkernel first, the interpreter on CPU."""
    env = {k: v for k, v in os.environ.items() if k != "OPENKERNEL_DB"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class McpSession:
    """The SDK's ``Client`` connected to ``server`` (a URL, or StdioServerParameters)."""

    def __init__(self, server) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._ready = threading.Event()
        # One task enters and leaves the client (anyio wants both in the same task).
        self._held = asyncio.run_coroutine_threadsafe(self._hold(server), self.loop)
        while not self._ready.wait(0.1):
            if self._held.done():
                self._held.result()  # the connection failed: say why
        self._client = self._connected

    async def _hold(self, server) -> None:
        from mcp import Client

        self._closing = asyncio.Event()
        async with Client(server, read_timeout_seconds=600) as client:
            self._connected = client
            self._ready.set()
            await self._closing.wait()

    def run(self, coroutine, timeout: float = 900):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, tool: str, **arguments):
        """A tool's result (``is_error``, ``content``, ``structured_content``)."""
        return self.run(self._client.call_tool(tool, arguments))

    def ok(self, tool: str, **arguments) -> dict:
        """A tool's structured answer; fails the test on a tool error."""
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    def error(self, tool: str, **arguments) -> str:
        """A tool error's one message; fails the test if the call succeeded."""
        result = self.call(tool, **arguments)
        assert result.is_error, f"{tool} succeeded: {result.structured_content}"
        return result.content[0].text

    def __getattr__(self, name):  # list_tools, read_resource, ...: the client's own
        method = getattr(self._client, name)
        return lambda *a, **k: self.run(method(*a, **k))

    def close(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self._closing.set)
            self._held.result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


def wait_for(predicate, timeout: float, what: str, poll: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout:.0f} s"
        time.sleep(poll)


@pytest.fixture(scope="module")
def stdio_server(tmp_path_factory):
    """``openkernel mcp --db DB`` launched by the client over stdio, as an editor does."""
    from mcp.client.stdio import StdioServerParameters

    db = tmp_path_factory.mktemp("mcp-stdio") / "kernels.sqlite3"
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "openkernel.cli", "mcp", "--db", str(db)],
                                   env=server_env(), cwd=str(ROOT))
    session = McpSession(params)
    yield session, db
    session.close()


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    """``openkernel mcp --http PORT`` with OPENKERNEL_DB, and a client on its URL."""
    folder = tmp_path_factory.mktemp("mcp-http")
    db, port = folder / "kernels.sqlite3", free_port()
    env = {**server_env(), "OPENKERNEL_DB": str(db)}
    log = open(folder / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "openkernel.cli", "mcp", "--http", str(port)],
                            cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _listening(port) or proc.poll() is not None, 60, "the server's port")
        assert proc.poll() is None, (folder / "server.log").read_text()
        session = McpSession(f"http://127.0.0.1:{port}/mcp")
        yield session, db, folder / "server.log"
        session.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
