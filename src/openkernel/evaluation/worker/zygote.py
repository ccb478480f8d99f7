"""The fork server: ``python -m openkernel.evaluation.worker.zygote --fd N``.

Starting a worker costs its interpreter and imports (torch, torch._dynamo, Triton, the
evaluator): 2 s on a 2-core CPU, 7-12 s on the H200, where 16 workers starting at once made the
throughput job's first turn wait 12.7 s. This process pays them once, never touches CUDA, and
forks a worker for each request: the child only makes its own CUDA context.

Requests come over a SOCK_SEQPACKET socket from the engine (``host/zygote.py``): a JSON object
(the worker's environment, working folder and resource limits) with three descriptors
(its stdin, its log, the protocol pipe). The reply is ``{"pid": N}``; when a child ends,
``{"exit": N, "code": C}`` (C as ``subprocess`` reports it: negative for a signal). The server
ends when the engine's end of the socket closes.

The child closes the socket before anything else runs, so no candidate can ask for a process.
It then becomes what ``python -m openkernel.evaluation.worker`` would be: its own session and
the limits the engine computed (``environment.limits``), its environment replaced by the one
sent (the caches and HOME of its own scratch), only its stdio and the protocol pipe open, and
``worker.main``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import NoReturn


READY_S = 30.0  # a child's session and limits take microseconds; never wait without bound


def _preload() -> str:
    """What every worker imports, and the modes' modules, and Triton's key of its install
    (``main.triton_install_key``): never CUDA (a forked child could not use a context made
    here). Returns the first module whose import (or the step) initialized the driver
    (then the server serves no one), or an empty string."""
    from openkernel.evaluation.worker import main

    culprit = []

    def after(name: str) -> None:
        if not culprit and driver_initialized():
            culprit.append(name)

    main.imports(after)
    for mode in ("probe", "reference_timing", "float64"):
        __import__(f"openkernel.evaluation.worker.{mode}")
        after(f"openkernel.evaluation.worker.{mode}")
    if not os.environ.get("TRITON_INTERPRET"):  # (the interpreter compiles nothing)
        try:
            if main.triton_install_key():
                after("computing Triton's key of its install")
        except Exception:  # noqa: BLE001 - each worker's first compilation meets it
            pass
    return culprit[0] if culprit else ""


def _child(request: dict, fds: list[int], sock: socket.socket, ready: int) -> None:
    """In the forked child: become the worker asked for; never returns."""
    code = 1
    try:
        sock.close()  # first: the candidate must not reach the server
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stdin_r, log_fd, proto_w = fds
        os.dup2(stdin_r, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # Only its stdio and the protocol pipe, as a started worker has (close_fds): nothing
        # the server opened
        keep = {0, 1, 2, proto_w, ready}
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        here = os.getcwd()
        os.chdir(request["cwd"])
        if sys.path and sys.path[0] == here:  # as `python -m` run in its scratch would have it
            sys.path[0] = os.getcwd()
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # read again from TMPDIR: the worker's own scratch
        from openkernel.evaluation.protocol import lead_session

        lead_session(request["limits"])
        os.write(ready, b"1")  # the server answers once the pid leads its own process group
        os.close(ready)
        from openkernel.evaluation.worker import main

        argv = ["--fd", str(proto_w), "--forked"]
        sys.argv = [main.__file__, *argv]
        code = main.main(argv)
    except BaseException:  # noqa: BLE001 - the child reports in its log and exits
        try:
            os.write(2, traceback.format_exc().encode())
        except OSError:
            pass
    os._exit(code if isinstance(code, int) else 1)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            sock.send(json.dumps({"exit": pid, "code": code}).encode())
        except OSError:
            pass


def driver_initialized() -> bool:
    """Whether the CUDA driver was initialized here: then a child's CUDA may fail (the driver's
    state does not survive a fork), so the server serves no one. The library being loaded is
    not enough (on the H200 ``import torch`` maps libcuda.so without calling cuInit); cuInit
    opens /dev/nvidia-uvm, which NVML (torch's import-time check) does not."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/dev/nvidia-uvm"):
                return True
        except OSError:
            pass
    return False


def serve(sock: socket.socket) -> int:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the pipe
    culprit = _preload()
    if culprit:
        what = culprit if " " in culprit else f"importing {culprit}"  # (a module, or a step)
        sys.stderr.write(f"{what} initialized the CUDA driver: workers are started anew\n")
        return 3  # ended before its first fork: the engine starts no server again
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            return 0  # the engine is gone; the children it started live on until killed
        try:
            request = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"a request comes with 3 descriptors, not {len(fds)}")
            ready_r, ready_w = os.pipe()
            pid = os.fork()
        except Exception as err:  # noqa: BLE001 - told to the engine, which starts one itself
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": f"{type(err).__name__}: {err}"}).encode())
            continue
        if pid == 0:
            _child(request, fds, sock, ready_w)
        for fd in (*fds, ready_w):
            os.close(fd)
        # The engine may kill the worker's group as soon as it has the pid: not before the
        # child made it (a child that dies first closes the pipe: EOF)
        if select.select([ready_r], [], [], READY_S)[0]:
            os.read(ready_r, 1)
        os.close(ready_r)
        sock.send(json.dumps({"pid": pid}).encode())
        _reap(sock)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="openkernel.evaluation.worker.zygote")
    parser.add_argument("--fd", type=int, required=True, help="the engine's socket")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    os.set_inheritable(args.fd, False)
    code = serve(sock)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (torch's takes seconds): nothing is left to do


if __name__ == "__main__":
    main()
