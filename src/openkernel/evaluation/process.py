"""One worker process: start it confined, enforce the phase timeouts, collect its report.

The worker reports phases and its result over a private pipe, tagged with a nonce; its own
stdout and stderr (the candidate's prints) go to a log file. A timeout kills the whole process
group, so nothing the candidate started outlives it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from openkernel.evaluation import sandbox

LOG_TAIL_LINES = 40


class WorkerRun:
    """Outcome of one worker process."""

    def __init__(self) -> None:
        self.payload: dict | None = None
        self.phase = "setup"
        self.timed_out: str | None = None
        self.returncode: int | None = None
        self.log_tail = ""
        self.full_log = ""
        self.wall_s = 0.0
        self.phase_starts: list[tuple[str, float]] = [("setup", 0.0)]  # seconds since start

    def phase_seconds(self) -> dict[str, float]:
        """Wall seconds spent in each phase (process start + imports count as setup)."""
        marks = self.phase_starts + [("end", self.wall_s)]
        out: dict[str, float] = {}
        for (name, start), (_, end) in zip(marks, marks[1:]):
            out[name] = round(out.get(name, 0.0) + max(end - start, 0.0), 3)
        return out


def run_worker(job: dict, scratch: Path, device: str, gpu_index: int | None,
               build_timeout_s: float, test_timeout_s: float, cpu_s: float,
               mem_bytes: int | None, wrap=None) -> WorkerRun:
    """Start a worker on ``job``, enforce the phase timeouts, collect its report."""
    out = WorkerRun()
    nonce = uuid.uuid4().hex
    env = sandbox.worker_env(os.environ, scratch, device, gpu_index)
    read_fd, write_fd = os.pipe()
    log_path = scratch / "worker.log"
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "openkernel.evaluation.worker", "--fd", str(write_fd)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            wrap(argv) if wrap else argv,
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=scratch, env=env,
            pass_fds=(write_fd,), preexec_fn=sandbox.limits_preexec(cpu_s, mem_bytes))
    os.close(write_fd)
    try:
        proc.stdin.write(json.dumps({**job, "nonce": nonce}).encode())
        proc.stdin.close()
    except OSError:
        pass  # died at start-up: the exit code tells
    deadline = t0 + build_timeout_s
    buf = b""
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out.timed_out = "build" if out.phase in ("setup", "build", "warmup") else "test"
                break
            ready, _, _ = select.select([read_fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict) or msg.get("nonce") != nonce:
                    continue  # not from the worker itself
                if "phase" in msg:
                    if msg["phase"] == "test" or (msg["phase"] == "benchmark" and out.phase in ("setup", "build", "warmup")):
                        deadline = time.monotonic() + test_timeout_s
                    out.phase = msg["phase"]
                    out.phase_starts.append((out.phase, time.monotonic() - t0))
                elif "result" in msg:
                    out.payload = msg["result"]
    finally:
        os.close(read_fd)
        if out.timed_out or proc.poll() is None:
            _kill_group(proc)
        try:
            out.returncode = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out.returncode = proc.wait()
    out.wall_s = time.monotonic() - t0
    out.log_tail = _tail(log_path)
    if wrap is not None:  # a wrapper's report (ncu's CSV) is read whole, bounded
        try:
            out.full_log = log_path.read_bytes()[-(8 << 20):].decode("utf-8", "replace")
        except OSError:
            out.full_log = ""
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()[-LOG_TAIL_LINES:]
    return sandbox.redact("\n".join(lines), sandbox.secret_values(os.environ))
