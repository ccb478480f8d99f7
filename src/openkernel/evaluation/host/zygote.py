"""The engine's side of the fork server (``worker/zygote.py``): workers forked, not started.

One server per kind of worker (the engine's environment digest and the device), started on
first use and kept for the process's life: it imports torch and the evaluator once, and each
worker it forks skips the interpreter start and imports (2 s a worker on a 2-core CPU, 7-12 s
on the H200). :class:`ForkedProcess` stands where ``subprocess.Popen`` stood for
``process.WorkerProcess``: its pid leads the worker's own process group, its exit code comes
from the server, which reaps it.

Any failure (the server would not start, died, or refused a request) is answered by starting
the worker as before; nothing waits on the server without a bound.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Hashable
from pathlib import Path

from openkernel.evaluation.host import environment
from openkernel.store.liveness import pid_alive

# The first request waits for the server's imports (as long as a worker's own start); later
# ones for a fork (milliseconds).
REPLY_S = 300.0


class ZygoteError(RuntimeError):
    """The server could not fork the worker; the caller starts it itself."""


class Zygote:
    """A started fork server for workers of one kind."""

    def __init__(self, device: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="openkernel-zygote-"))
        env = environment.worker_env(os.environ, self.root, device, None)
        # torch.cuda.is_available() during an import asks NVML, not the driver (whose state a
        # forked child could not use): the server checks it loaded no driver, worker/zygote.py
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(self.root / "zygote.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "openkernel.evaluation.worker.zygote",
                 "--fd", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                env=env, pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self.sock = ours
        self._ask = threading.Lock()  # one request (and its reply) at a time
        self._replies: queue.Queue = queue.Queue()
        self._children: dict[int, ForkedProcess] = {}  # running; each told its code once
        self._exits: dict[int, int] = {}
        self._ended = threading.Condition()
        self.closed = False
        self.forked = 0  # workers forked so far
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                with self._ended:
                    self.closed = True
                    self._ended.notify_all()
                self._replies.put(None)
                return
            message = json.loads(data)
            if "exit" in message:
                with self._ended:
                    proc = self._children.pop(message["exit"], None)
                    if proc is None:  # ended before spawn() took its pid in
                        self._exits[message["exit"]] = message["code"]
                    else:
                        proc.returncode = message["code"]
                    self._ended.notify_all()
            else:
                self._replies.put(message)

    def spawn(self, env: dict[str, str], cwd: Path, cpu_s: float, mem_bytes: int | None,
              stdin_r: int, log_fd: int, proto_w: int) -> ForkedProcess:
        """Fork a worker with these descriptors as its stdin, stdout and stderr, and protocol."""
        request = json.dumps({"env": env, "cwd": str(cwd),
                              "limits": environment.limits(cpu_s, mem_bytes)}).encode()
        with self._ask:
            if self.closed:
                raise ZygoteError(self._ended_why())
            try:
                socket.send_fds(self.sock, [request], [stdin_r, log_fd, proto_w])
            except OSError as err:
                raise ZygoteError(f"{self._ended_why()} ({err})") from err
            try:
                reply = self._replies.get(timeout=REPLY_S)
            except queue.Empty as err:
                # no one waits on it again: ended, and (if it never forked) not restarted
                self.closed = True
                self.proc.kill()
                raise ZygoteError(f"no answer from the fork server within {REPLY_S:g} s") from err
        if not reply or "pid" not in reply:
            raise ZygoteError((reply or {}).get("error") or self._ended_why())
        self.forked += 1
        proc = ForkedProcess(self, reply["pid"])
        with self._ended:
            if proc.pid in self._exits:
                proc.returncode = self._exits.pop(proc.pid)
            else:
                self._children[proc.pid] = proc
        return proc

    def _ended_why(self) -> str:
        try:
            tail = (self.root / "zygote.log").read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            tail = []
        return "the fork server has ended" + (f": {tail[0]}" if tail else "")

    def wait_for(self, proc: ForkedProcess, timeout: float | None) -> None:
        """Until ``proc.returncode`` is set (by the server's report) or ``timeout`` passes.
        Where the server has ended, a child no longer alive ends with an unknown code (-1)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ended:
            while proc.returncode is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                if self.closed:
                    if not pid_alive(proc.pid):
                        self._children.pop(proc.pid, None)
                        proc.returncode = -1
                        return
                    left = 0.1 if left is None else min(0.1, left)
                self._ended.wait(left)

    def stop(self) -> None:
        with self._ask:
            self.closed = True
            try:  # shutdown, not close alone: it wakes the reader's recv and tells the server
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


class ForkedProcess:
    """A worker forked by the server: the parts of ``subprocess.Popen`` a worker's driver uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None
        self.stdin = None  # set by the caller: the write end of the worker's stdin

    def poll(self) -> int | None:
        self.zygote.wait_for(self, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.zygote.wait_for(self, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return self.returncode


_servers: dict[Hashable, Zygote] = {}
# A server that ended before forking anything is not restarted: why, by key (each worker
# started anew instead says so)
_broken: dict[Hashable, str] = {}
_lock = threading.Lock()


def server(device: str) -> Zygote | None:
    """The fork server for workers on ``device`` under the engine's current environment,
    started on first use (again if it ended after serving: a candidate may kill it); None if
    it cannot start, or ended before forking a worker (its imports fail: so would a worker's,
    which then says why)."""
    key = (environment.digest(os.environ), device)
    with _lock:
        found = _servers.get(key)
        if found is not None and not found.closed and found.proc.poll() is None:
            return found
        if found is not None:  # ended: its folder goes (its children's codes are then unknown)
            why = found._ended_why()
            found.stop()
            if not found.forked:
                _broken[key] = why
        if key in _broken:
            return None
        try:
            _servers[key] = Zygote(device)
        except OSError as err:
            _servers.pop(key, None)
            _broken[key] = f"the fork server could not start: {err}"
            return None
        return _servers[key]


def why_not(device: str) -> str:
    """Why :func:`server` has no server for ``device`` (empty if it has or may start one)."""
    return _broken.get((environment.digest(os.environ), device), "")


@atexit.register
def _stop_all() -> None:
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for zygote in servers:
        zygote.stop()
