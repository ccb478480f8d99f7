"""Worker processes: start one confined, hand it a job, enforce the phase timeouts, collect its report.

A worker is started before its job is known (:class:`WorkerProcess`): it imports torch and
the evaluator, then blocks reading its job from stdin, so a pre-started spare saves the
seconds of interpreter start and imports on the critical path. :func:`drive` sends the job
and follows the worker's phases.

The worker reports phases and its result over a private pipe, tagged with a nonce; its own
stdout and stderr (the candidate's prints) go to a log file. Before its timed phase (tests and
benchmark on a GPU, or a profile) it asks for its turn and waits until the executor writes
``go`` on its stdin: builds run side by side, timed phases one per GPU. A timeout kills the
whole process group, so nothing the candidate started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from openkernel.evaluation import protocol
from openkernel.evaluation.host import environment
from openkernel.evaluation.host.zygote import Zygote, ZygoteError
from openkernel.evaluation.protocol import Job

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
        self.prestarted = False  # the job went to a spare started ahead of it
        self.compile_s = 0.0  # seconds in kernel compilations after the build phase
        self.compile_from = 0.0
        self.compiling = False  # it was compiling when it ended (a timeout then is the build's)
        self.phase_starts: list[tuple[str, float]] = [("setup", 0.0)]  # seconds since the job

    def phase_seconds(self) -> dict[str, float]:
        """Wall seconds spent in each phase (imports not done ahead count as setup)."""
        marks = self.phase_starts + [("end", self.wall_s)]
        out: dict[str, float] = {}
        for (name, start), (_, end) in zip(marks, marks[1:]):
            out[name] = round(out.get(name, 0.0) + max(end - start, 0.0), 3)
        return out


class WorkerProcess:
    """A started worker process, waiting for its job on stdin."""

    def __init__(self, scratch: Path, device: str, gpu_index: int | None, cpu_s: float,
                 mem_bytes: int | None, wrap=None, zygote: Zygote | None = None,
                 extra_env: dict[str, str] | None = None):
        """``zygote``: the fork server to fork it from (not with ``wrap``: a wrapper such as
        Nsight Compute starts the interpreter itself); if it fails, the worker starts anew.
        ``extra_env``: the engine's own settings for the worker (never the engine's
        environment: that passes the allow-list only)."""
        self.scratch, self.device, self.gpu_index = scratch, device, gpu_index
        env = environment.worker_env(os.environ, scratch, device, gpu_index)
        env.update(extra_env or {})
        self.read_fd, write_fd = os.pipe()
        self.log_path = scratch / "worker.log"
        self.forked = False
        self.fork_error = ""
        with open(self.log_path, "wb") as log:
            if zygote is not None and wrap is None:
                self.forked = self._fork(zygote, env, cpu_s, mem_bytes, log.fileno(), write_fd)
            if not self.forked:
                argv = [sys.executable, "-m", "openkernel.evaluation.worker", "--fd", str(write_fd)]
                self.proc = subprocess.Popen(
                    wrap(argv) if wrap else argv, stdin=subprocess.PIPE, stdout=log,
                    stderr=subprocess.STDOUT, cwd=scratch, env=env, pass_fds=(write_fd,),
                    preexec_fn=environment.limits_preexec(cpu_s, mem_bytes))
        os.close(write_fd)

    def _fork(self, zygote: Zygote, env: dict, cpu_s: float, mem_bytes: int | None,
              log_fd: int, write_fd: int) -> bool:
        stdin_r, stdin_w = os.pipe()
        try:
            self.proc = zygote.spawn(env, self.scratch, cpu_s, mem_bytes, stdin_r, log_fd,
                                     write_fd)
        except ZygoteError as err:
            os.close(stdin_w)
            self.fork_error = str(err)  # kept with the worker's timing (executor.py)
            return False
        finally:
            os.close(stdin_r)
        self.proc.stdin = os.fdopen(stdin_w, "wb")
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """End the process group from another thread; the one driving it sees its pipe close
        and cleans up."""
        _kill_group(self.proc)

    def send(self, line: str) -> bool:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False  # died (or was closed): its exit code tells

    def kill(self) -> None:
        _kill_group(self.proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1


class PhaseClock:
    """Seconds spent against each limit: build (setup, build and every kernel compilation,
    wherever it happens) and test (the first call once compiled, tests, benchmark); phases
    with walls of their own; and, with ``total_s``, all of them together. Waiting for the
    GPU's turn counts against none."""

    def __init__(self, build_timeout_s: float, test_timeout_s: float,
                 walls: dict[str, float] | None = None, total_s: float | None = None):
        self.limits = {"build": build_timeout_s, "test": test_timeout_s, **(walls or {})}
        self.used = dict.fromkeys(self.limits, 0.0)
        self.total_s = total_s
        self.kind: str | None = "build"
        self.since = time.monotonic()

    def switch(self, kind: str | None) -> None:
        now = time.monotonic()
        if self.kind is not None:
            self.used[self.kind] += now - self.since
        self.kind, self.since = kind, now

    def remaining(self) -> float:
        if self.kind is None:
            return float("inf")
        return min(self.limits[self.kind] - self.used[self.kind], self._total_left()) - (
            time.monotonic() - self.since)

    def _total_left(self) -> float:
        return float("inf") if self.total_s is None else self.total_s - sum(self.used.values())

    def ran_out(self) -> str | None:
        """The limit that ran out: the phase's kind, or "total"."""
        if self.kind is None:
            return None
        return "total" if self._total_left() - (time.monotonic() - self.since) <= 0 else self.kind


def drive(worker: WorkerProcess, job: Job, build_timeout_s: float, test_timeout_s: float,
          turn=None, release_on_result: bool = False, on_phase=None, checks=None,
          walls: dict[str, float] | None = None, total_s: float | None = None) -> WorkerRun:
    """Send ``job`` to a started worker, enforce the phase timeouts, collect its report.

    ``turn`` is a context manager factory; the worker's timed phase runs inside it (the
    executor passes the GPU's exclusive turn). ``checks`` (with overlapping checks) is the
    factory of the device's shared hold: a worker that asks for it before its tests gets it,
    and gives it up when it asks for the turn to time; without it, the tests take the turn.
    Waiting for either counts against no timeout.
    The turn ends when the worker has exited, or, with ``release_on_result``, once its result
    is in: Nsight Compute writes its report after the profiled process is gone, on the CPU,
    and the next candidate's tests need not wait for that. ``on_phase`` (if given) is called
    with each phase the worker enters, "queued" included while it waits for its turn.
    ``walls`` gives phases a limit of their own (the reference's baselines, by phase name):
    past it ``timed_out`` is that phase's name; past ``total_s`` (every phase's time but
    the queue's, together) it is "total".
    """
    out = WorkerRun()
    nonce = uuid.uuid4().hex
    t0 = time.monotonic()
    worker.send(job.to_line(nonce))
    clock = PhaseClock(build_timeout_s, test_timeout_s, walls, total_s)
    compiling = granted = False

    def kind() -> str | None:
        if walls and out.phase in walls:
            return out.phase
        if compiling or out.phase in protocol.BUILD_PHASES:
            return "build"
        if out.phase == "queued":
            return "test" if granted else None
        return "test"

    buf = b""
    held = contextlib.ExitStack()
    sharing = contextlib.ExitStack()  # the shared hold of overlapping checks
    has_turn = False
    try:
        while True:
            remaining = clock.remaining()
            if remaining <= 0:
                out.timed_out = clock.ran_out()
                break
            ready, _, _ = select.select([worker.read_fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(worker.read_fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = protocol.decode(line, nonce)
                if msg is None:
                    continue  # not from the worker itself
                if "phase" in msg:
                    out.phase = msg["phase"]
                    out.phase_starts.append((out.phase, time.monotonic() - t0))
                    if on_phase is not None:
                        on_phase(out.phase)
                elif "compiling" in msg:
                    compiling = bool(msg["compiling"])
                    out.compile_s += 0.0 if compiling else time.monotonic() - out.compile_from
                    out.compile_from = time.monotonic()
                elif msg.get("wait") and out.phase != "queued":
                    share = msg["wait"] == "check" and checks is not None
                    if has_turn and share:
                        # A sweep's winner's checks, after the sweep's timed turn: the turn goes
                        # back to the others, the checks share the GPU as any candidate's do.
                        held.close()
                        has_turn = False
                    elif has_turn:  # checks in the turn (none shared): time in the same turn
                        worker.send(protocol.GO)
                        continue
                    out.phase = "queued"
                    out.phase_starts.append(("queued", time.monotonic() - t0))
                    clock.switch(None)
                    if on_phase is not None and turn is not None:  # no turn to wait for: no queue
                        on_phase("queued")
                    if share:
                        sharing.enter_context(checks())
                    else:
                        sharing.close()  # the checks are done: no hold kept while waiting
                        if turn is not None:
                            held.enter_context(turn())
                        has_turn = True
                    granted = True
                    worker.send(protocol.GO)
                elif "judging" in msg:  # a sweep's worker starts judging its winner
                    if on_phase is not None:
                        on_phase("judging")
                elif "result" in msg:
                    out.payload = msg["result"]
                    if release_on_result:
                        held.close()
                clock.switch(kind())
    finally:
        if out.timed_out or worker.alive():
            _kill_group(worker.proc)
        try:
            out.returncode = worker.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(worker.proc)
            # Killed: it ends unless stuck in the kernel (a hung driver call); never wait forever.
            with contextlib.suppress(subprocess.TimeoutExpired):
                out.returncode = worker.proc.wait(timeout=30)
        sharing.close()
        held.close()
        worker.kill()
    out.wall_s = time.monotonic() - t0
    out.compiling = compiling
    out.log_tail = _tail(worker.log_path)
    return out


def read_full_log(worker: WorkerProcess) -> str:
    """A wrapper's report (ncu's CSV) is read whole, bounded."""
    try:
        return worker.log_path.read_bytes()[-(8 << 20):].decode("utf-8", "replace")
    except OSError:
        return ""


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
    return environment.redact("\n".join(lines), environment.secret_values(os.environ))
