"""Workers forked by the fork server (host/zygote.py, worker/zygote.py): judged as a worker
started anew would judge them, with its session, limits and environment, and nothing of the
server within a candidate's reach."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from openkernel.config import build_config
from openkernel.evaluation.host import zygote
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.process import WorkerProcess, drive
from openkernel.evaluation.protocol import Job
from openkernel.task import load_task

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "tests" / "candidates" / "good_gelu.py").read_text()

# What a candidate can find of the server: a socket among its descriptors, or its variables.
PROBE = '''
import os, resource, socket, stat

def _sockets():
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                found.append(int(name))
        except OSError:
            pass
    return found

_found = _sockets()
if _found:
    raise RuntimeError(f"a socket is open in the worker: {_found}")
if os.getsid(0) != os.getpid():
    raise RuntimeError("the worker does not lead its own session")
if resource.getrlimit(resource.RLIMIT_CPU)[0] != CPU_S:
    raise RuntimeError(f"RLIMIT_CPU is {resource.getrlimit(resource.RLIMIT_CPU)}")
if "SECRET_VALUE" in repr(dict(os.environ)) or "SECRET_VALUE" in open("/proc/self/environ").read():
    raise RuntimeError("the engine's secret is in the worker's environment")
if not os.environ["TMPDIR"].startswith(os.getcwd()):
    raise RuntimeError(f"TMPDIR {os.environ['TMPDIR']} is not in the worker's scratch")
import sys, tempfile
if sys.path[0] != os.getcwd():
    raise RuntimeError(f"sys.path[0] is {sys.path[0]}, not the worker's scratch")
if not tempfile.gettempdir().startswith(os.getcwd()):
    raise RuntimeError(f"tempfile writes to {tempfile.gettempdir()}, not the worker's scratch")
'''


def _evaluator(tmp_path: Path, **ec) -> Evaluator:
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")},
                           "eval_config": {"correctness_seeds": 1, **ec}})
    return Evaluator(load_task(ROOT / "examples" / "gelu"), config, bench_budget_s=0.1)


def test_the_probe_sees_a_socket_where_there_is_one():
    """The candidate's check above can fail: run here, beside an open socket, it raises."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with pytest.raises(RuntimeError, match="a socket is open"):
            exec(PROBE.replace("CPU_S", "0"), {})
    finally:
        a.close()
        b.close()


def test_a_forked_worker_judges_a_candidate_with_its_own_session_limits_and_scratch(
        tmp_path, monkeypatch):
    monkeypatch.setenv("OPENKERNEL_API_KEY", "SECRET_VALUE")  # the engine's secret
    ev = _evaluator(tmp_path, fork_workers=True, cpu_time_limit_s=777)
    try:
        result = ev.evaluate(PROBE.replace("CPU_S", "777") + GOOD, "triton", "forked")
        assert result.correctness, result.eval_log
        assert result.metadata["worker"]["forked"] is True, result.metadata["worker"]
        started = _evaluator(tmp_path, fork_workers=False, cpu_time_limit_s=777)
        try:
            again = started.evaluate(PROBE.replace("CPU_S", "777") + GOOD + "\n", "triton", "anew")
        finally:
            started.close()
        assert again.correctness, again.eval_log
        assert again.metadata["worker"]["forked"] is False
    finally:
        ev.close()


def _hardware_job(worker: WorkerProcess) -> Job:
    return Job(mode="hardware", device="cpu", scratch=str(worker.scratch))


def test_the_server_reports_how_a_worker_ended(tmp_path):
    server = zygote.server("cpu")
    assert server is not None
    (tmp_path / "a").mkdir()
    worker = WorkerProcess(tmp_path / "a", "cpu", None, 60, None, zygote=server)
    assert worker.forked and worker.alive()
    os.killpg(worker.proc.pid, signal.SIGKILL)
    assert worker.proc.wait(timeout=30) == -signal.SIGKILL
    worker.kill()
    (tmp_path / "b").mkdir()
    worker = WorkerProcess(tmp_path / "b", "cpu", None, 60, None, zygote=server)
    run = drive(worker, _hardware_job(worker), build_timeout_s=60, test_timeout_s=60)
    assert run.payload and run.payload["worker_timing"]["forked"] is True, run.log_tail
    assert run.returncode == 0


def test_a_worker_starts_anew_when_the_server_is_gone(tmp_path):
    server = zygote.Zygote("cpu")
    server.proc.kill()
    server.proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not server.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.closed
    worker = WorkerProcess(tmp_path, "cpu", None, 60, None, zygote=server)
    assert not worker.forked and "the fork server has ended" in worker.fork_error
    run = drive(worker, _hardware_job(worker), build_timeout_s=120, test_timeout_s=60)
    assert run.payload and run.payload["worker_timing"]["forked"] is False, run.log_tail
    server.stop()
    assert not server.root.exists()


def test_the_server_ends_when_its_engine_closes_the_socket(tmp_path):
    server = zygote.Zygote("cpu")
    worker = WorkerProcess(tmp_path, "cpu", None, 60, None, zygote=server)
    assert worker.forked  # the server is up and serving
    worker.kill()
    server.stop()  # the socket shut: the server returns from its loop (a kill would be -9)
    assert server.proc.returncode == 0


@pytest.mark.gpu
def test_forked_gpu_workers_make_their_own_cuda_context(tmp_path):
    """On the H200: the server never initialises the driver (a forked child could not use
    its context); each forked worker makes its own and judges a compiled Triton kernel."""
    ev = _evaluator(tmp_path, fork_workers=True)
    try:
        result = ev.evaluate(GOOD, "triton", "forked-gpu")
        assert result.correctness, result.eval_log
        assert result.metadata["worker"]["forked"] is True, result.metadata["worker"]
        server = zygote.server("cuda")
        assert server is not None
        fds = Path(f"/proc/{server.proc.pid}/fd")
        assert not [fd for fd in fds.iterdir() if os.readlink(fd).startswith("/dev/nvidia-uvm")]
    finally:
        ev.close()


def test_a_server_killed_after_forking_is_restarted_one_killed_before_is_not(tmp_path,
                                                                              monkeypatch):
    """A candidate may kill the server (it is the worker's parent): the next worker gets a new
    one. A server that ends before its first fork is broken (its imports fail, as a started
    worker's then would, and say why): workers start anew, no server is started again."""
    monkeypatch.setenv("OPENKERNEL_ZYGOTE_TEST", "restart")  # a key of this test's own
    first = zygote.server("cpu")
    worker = WorkerProcess(tmp_path, "cpu", None, 60, None, zygote=first)
    assert worker.forked
    worker.kill()
    first.proc.kill()
    first.proc.wait(timeout=30)
    second = zygote.server("cpu")
    assert second is not None and second is not first
    second.proc.kill()
    second.proc.wait(timeout=30)
    assert zygote.server("cpu") is None
    second.stop()
    first.stop()
    # Every worker started anew for it says why (on the H200 a preloaded import called cuInit
    # and the records said nothing: kb22-s26-stored)
    assert "the fork server has ended" in zygote.why_not("cpu")
    ev = _evaluator(tmp_path, fork_workers=True)
    try:
        result = ev.evaluate(GOOD, "triton", "after-a-broken-server")
    finally:
        ev.close()
    assert result.correctness, result.eval_log
    worker = result.metadata["worker"]
    assert worker["forked"] is False and "the fork server has ended" in worker["fork_error"], worker
    from openkernel.bench.summary import fork_error  # what a suite's figures count and say

    assert fork_error(result.metadata, None) == worker["fork_error"]


def test_a_frozen_server_is_waited_on_for_a_bounded_time_then_left(tmp_path, monkeypatch):
    """Nothing waits on the server without a bound: stopped (SIGSTOP), it gets REPLY_S to
    answer, then it is killed and the worker starts anew."""
    server = zygote.Zygote("cpu")
    (tmp_path / "a").mkdir()
    first = WorkerProcess(tmp_path / "a", "cpu", None, 60, None, zygote=server)
    assert first.forked, first.fork_error  # imports done: the server is serving
    first.kill()
    monkeypatch.setattr(zygote, "REPLY_S", 2.0)  # after the imports (seconds under load)
    os.kill(server.proc.pid, signal.SIGSTOP)
    (tmp_path / "b").mkdir()
    t0 = time.monotonic()
    worker = WorkerProcess(tmp_path / "b", "cpu", None, 60, None, zygote=server)
    assert time.monotonic() - t0 < 60
    assert not worker.forked and "no answer from the fork server within 2 s" in worker.fork_error
    assert server.closed and server.proc.wait(timeout=30) == -signal.SIGKILL
    run = drive(worker, _hardware_job(worker), build_timeout_s=120, test_timeout_s=60)
    assert run.payload and run.payload["worker_timing"]["forked"] is False, run.log_tail
    server.stop()


def test_a_workers_end_is_told_to_every_caller(tmp_path):
    """The spares' reaper waits on a worker while another thread polls it (a test did, and the
    poll once took the code from the wait, which then waited its 30 s): both learn the code."""
    import threading

    server = zygote.server("cpu")
    worker = WorkerProcess(tmp_path, "cpu", None, 60, None, zygote=server)
    assert worker.forked, worker.fork_error
    waited: list = []
    waiter = threading.Thread(target=lambda: waited.append(worker.proc.wait(timeout=20)))
    waiter.start()
    time.sleep(0.5)  # the waiter is waiting when the code comes
    os.killpg(worker.proc.pid, signal.SIGKILL)
    while worker.proc.poll() is None:
        time.sleep(0.001)
    waiter.join(timeout=30)
    assert not waiter.is_alive() and waited == [-signal.SIGKILL]
    assert worker.proc.poll() == worker.proc.wait(timeout=0) == -signal.SIGKILL
    worker.kill()


def test_the_server_computes_tritons_install_key_for_its_children(monkeypatch):
    """Triton's first compilation in a process hashes its install (libtriton: half a gigabyte,
    0.56 s on the 2-core machine), a cache hit too: the fork server computes it once for every
    worker it forks (not under the interpreter, which compiles nothing)."""
    triton_cache = pytest.importorskip("triton.runtime.cache")
    from openkernel.evaluation.worker import main
    from openkernel.evaluation.worker import zygote as server_side

    triton_cache.triton_key.cache_clear()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert server_side._preload() == ""
    assert triton_cache.triton_key.cache_info().currsize == 0
    monkeypatch.delenv("TRITON_INTERPRET")
    assert server_side._preload() == ""
    assert triton_cache.triton_key.cache_info().currsize == 1
    # a forked worker finds it made, and says so in its job's record
    assert main.triton_install_key() == "inherited"
    triton_cache.triton_key.cache_clear()
    assert main.triton_install_key().startswith("computed here in ")
    assert main.triton_install_key() == "inherited"


def test_the_server_names_the_import_that_initialized_the_driver(tmp_path, monkeypatch):
    """On the H200 an import of torch.utils.cpp_extension called cuInit and the server served
    no one, saying only that its imports had: it now names the first import after which the
    driver was initialized (checked after each), and an optional import may be missing."""
    import sys

    from openkernel.evaluation.worker import main
    from openkernel.evaluation.worker import zygote as server_side

    (tmp_path / "ok_cuinit_on_import.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(main, "IMPORTS", (*main.IMPORTS, "ok_no_such_module?", "ok_cuinit_on_import"))
    monkeypatch.setattr(server_side, "driver_initialized", lambda: "ok_cuinit_on_import" in sys.modules)
    try:
        assert server_side._preload() == "ok_cuinit_on_import"
    finally:
        sys.modules.pop("ok_cuinit_on_import", None)
    monkeypatch.setattr(main, "IMPORTS", (*main.IMPORTS[:-1],))
    assert server_side._preload() == ""
