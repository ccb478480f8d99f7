"""Worker process entry: ``python -m openkernel.evaluation.worker --fd N`` (the job on stdin).

One worker evaluates one candidate (or probes the task, or times the reference) and exits; the
executor starts a fresh one for the next job, so whatever a candidate breaks dies with it. It
imports torch and the evaluator *before* reading its job, so the executor can start it ahead
of time (a spare) and save those seconds on the critical path.

The messages it sends and the job it reads are defined in ``openkernel.evaluation.protocol``.
The candidate's own stdout and stderr go to a log file; they never mix with the protocol.

Modes (``Job.mode``): ``hardware``, ``probe``, ``evaluate``, ``sweep`` (every combination of a templated
candidate, screened in one worker: ``sweep.py``), ``reference`` (eager and
``torch.compile`` timings of the reference, GPU only), ``profile`` (one call inside an NVTX
range, run under Nsight Compute), ``pch`` (precompile <torch/extension.h>, see ``pch.py``),
``launchers`` (Triton's host-side modules for the machine, see ``launchers.py``),
``float64`` (the reference's float64 answer of the main set, once per task: ``float64.py``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from openkernel.evaluation import protocol
from openkernel.evaluation.protocol import Job


class Channel:
    """The worker's side of the protocol (a pipe the executor reads)."""

    def __init__(self, fd: int, nonce: str):
        self._fd = fd
        self._nonce = nonce
        self._write = os.write  # private reference: the candidate may replace os.write later
        self._read = os.read

    def send(self, **message: Any) -> None:
        view = memoryview(protocol.encode(self._nonce, **message))
        while view:
            n = self._write(self._fd, view)
            view = view[n:]

    def phase(self, name: str) -> None:
        self.send(phase=name, t=time.time())

    def result(self, payload: dict) -> None:
        self.send(result=payload)

    def wait_turn(self, kind: str | None = None) -> None:
        """Ask for the timed phase ("time"; by default), or for a shared hold for checks
        ("check"), and block until the executor grants it (``go`` on stdin)."""
        self.send(wait=kind or True)
        if _read_line(0, self._read).strip() != protocol.GO:
            os._exit(3)  # the executor is gone: nothing left to report to


def _read_line(fd: int, read=os.read) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return data.decode()


# What every job imports, in order (the fork server, ``zygote.py``, imports them once for its
# children and checks the CUDA driver after each). Triton may be missing (CPU-only installs).
# The sweep (openkernel.schemas, pydantic) costs 0.13 s on the 2-core machine in each worker.
# Not torch.utils.cpp_extension nor torch._inductor.compile_fx: importing either calls cuInit on
# the H200 (torch 2.11: /dev/nvidia-uvm opened), and the fork server then serves no one (every
# worker of kb22-s26-stored was started anew, 10-12 s each); ``_preload`` imports the former.
IMPORTS = ("torch", "torch._dynamo", "triton?", "openkernel.evaluation.worker.evaluate",
           "openkernel.evaluation.worker.launchers", "openkernel.evaluation.worker.sandbox",
           "openkernel.evaluation.worker.sweep")


def imports(after=None) -> None:
    """Import :data:`IMPORTS`; ``after(name)`` is called after each one imported."""
    for name in IMPORTS:
        try:
            importlib.import_module(name.rstrip("?"))
        except ImportError:
            if not name.endswith("?"):
                raise
            continue
        if after is not None:
            after(name.rstrip("?"))


def triton_install_key() -> str:
    """Compute Triton's key of its own install (a hash of its sources and of libtriton, half a
    gigabyte) now, as a process's first compilation would: 0.56 s on the 2-core machine, paid
    by every worker's first kernel (a cache hit too) until this. Cached in the process, so a
    forked worker has it from the fork server. Says which ("inherited", or the seconds it took
    here); empty where Triton has none (or is missing)."""
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):  # 3.3+, then older
        try:
            key = getattr(importlib.import_module(where), "triton_key")
        except (ImportError, AttributeError):
            continue
        info = getattr(key, "cache_info", None)  # functools.lru_cache's
        if info is not None and info().currsize:
            return "inherited"
        t0 = time.perf_counter()
        key()
        return f"computed here in {time.perf_counter() - t0:.2f} s"
    return ""


def _preload() -> dict[str, str]:
    """Import what every job needs while no job is waiting (a spare's head start; a forked
    worker has them already). Returns what it found ready and what it made (for the job's
    record: ``{"triton_key": ...}`` on a GPU).

    A GPU worker also creates its CUDA context here (CUDA_VISIBLE_DEVICES is fixed when it
    starts): about a second that no longer sits between a candidate and its verdict; makes the
    one-pass comparison kernel where the executor named its cache (the run compares with it);
    launches the evaluator's own kernels once (``evaluate.warm``); and computes Triton's key of
    its install (a forked worker has it from the fork server).
    """
    imports()
    import torch

    ready: dict[str, str] = {}
    if os.environ.get("CUDA_VISIBLE_DEVICES") and not os.environ.get("TRITON_INTERPRET"):
        try:
            torch.cuda.init()
            torch.empty(1, device="cuda")
        except Exception:  # a broken device: the job will meet the error and report it
            pass
        else:
            cache = os.environ.get(protocol.COMPARE_CACHE_VAR)
            if cache:  # the run compares with the one-pass kernel (eval_config.fused_comparison)
                from openkernel.evaluation.worker import correctness

                ready["compare_kernel"] = correctness.ahead(cache)
            from openkernel.evaluation.worker import evaluate

            try:  # the evaluator's own kernels launched once: their modules loaded
                ready["warm"] = f"{evaluate.warm('cuda'):.2f} s"
            except Exception as err:  # noqa: BLE001 - the job launches them itself
                ready["warm"] = f"failed: {type(err).__name__}: {str(err)[:200]}"
        try:  # (a forked worker's is the fork server's)
            ready["triton_key"] = triton_install_key()
        except Exception as err:  # noqa: BLE001 - the first compilation computes it, or says why
            ready["triton_key"] = f"failed: {type(err).__name__}: {str(err)[:200]}"
    # What every job imports at its start and the fork server must not: cpp_extension (its
    # import calls cuInit on the H200; 0.24-0.46 s there, in each forked job's setup until
    # now) and Triton's code generator, imported here, in the worker, before its job comes.
    for name in ("torch.utils.cpp_extension", "triton.compiler.code_generator"):
        try:
            importlib.import_module(name)
        except ImportError:  # (no setuptools, no Triton): a job that needs it says so itself
            pass
    return ready


def _use_build_cache(job: Job):
    """Point torch's extension and Triton's caches at the candidate's build cache (and
    C++ builds at the precompiled torch header, ``pch.py``); on a GPU, Triton's host-side
    modules built for the machine are copied in (``launchers.py``). Returns the recorder of
    the launchers this worker's Triton makes (None when none is kept).

    The folder is keyed by the candidate's code (the executor names it), so only an identical
    candidate ever reads what this one built; the torch version keeps builds apart across
    upgrades.
    """
    from openkernel.evaluation.worker import pch

    pch.use(job.pch_dir)
    cache = job.build_cache
    if not cache:
        return None
    import torch

    root = os.path.join(cache, f"torch-{torch.__version__}")
    for var, sub in (("TORCH_EXTENSIONS_DIR", "torch_extensions"), ("TRITON_CACHE_DIR", "triton")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
        os.environ[var] = os.path.join(root, sub)
    if not job.launchers_dir or not job.device.startswith("cuda") or os.environ.get("TRITON_INTERPRET"):
        return None
    from openkernel.evaluation.worker import launchers

    launchers.seed(job.launchers_dir, os.path.join(root, "triton"))
    return launchers.Recorder().install()


def _dispatch(job: Job, ch: Channel) -> dict:
    mode = job.mode
    if mode == "hardware":
        from openkernel.evaluation.worker.hardware import run_hardware

        return run_hardware(job, ch)
    if mode == "probe":
        from openkernel.evaluation.worker.probe import run_probe

        return run_probe(job, ch)
    if mode == "evaluate":
        from openkernel.evaluation.worker.evaluate import run_evaluate

        return run_evaluate(job, ch)
    if mode == "sweep":
        from openkernel.evaluation.worker.sweep import run_sweep

        return run_sweep(job, ch)
    if mode == "profile":
        from openkernel.evaluation.worker.profile import run_profile

        return run_profile(job, ch)
    if mode == "reference":
        from openkernel.evaluation.worker.reference_timing import run_reference_timing

        return run_reference_timing(job, ch)
    if mode == "float64":  # the reference alone, no candidate: it writes only its answer
        from openkernel.evaluation.worker.float64 import run_float64

        return run_float64(job, ch)
    if mode == "launchers":  # our own code, no candidate: Triton's modules for the machine
        from openkernel.evaluation.worker import launchers

        return launchers.build(job.launchers_dir, job.launchers)
    if mode == "pch":  # our own code, no candidate: it writes only the folder it is given
        from openkernel.evaluation.worker import pch

        return pch.build(Path(job.pch_root), with_cuda=job.device == "cuda")
    raise ValueError(f"unknown worker mode {mode!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openkernel.evaluation.worker")
    parser.add_argument("--fd", type=int, required=True, help="protocol file descriptor")
    parser.add_argument("--forked", action="store_true", help="forked by the fork server "
                        "(zygote.py): its imports were done there")
    args = parser.parse_args(argv)
    os.set_inheritable(args.fd, False)  # nvcc and other children must not hold the pipe open
    t0 = time.monotonic()
    ready = _preload()
    t1 = time.monotonic()
    line = _read_line(0)
    t2 = time.monotonic()
    if not line.strip():
        os._exit(0)  # a spare the executor no longer needs
    # idle_s > 0: the job found the worker ready (a warm spare); preload_s: its imports.
    timing = {"preload_s": round(t1 - t0, 3), "idle_s": round(time.monotonic() - t1, 3),
              "forked": args.forked, **ready}
    data = json.loads(line)
    ch = Channel(args.fd, data.pop("nonce"))
    try:
        job = Job.from_dict(data)
        recorder = _use_build_cache(job)
        from openkernel.evaluation.worker import precision

        precision.apply(job.allow_tf32)  # before any torch work: every mode runs under them
        timing["job_start_s"] = round(time.monotonic() - t2, 3)  # the job read, caches set
        payload = _dispatch(job, ch)
    except BaseException as err:  # report, then exit non-zero: the executor turns it into a result
        tb = traceback.format_exc(limit=8)
        ch.result({"fatal": f"{type(err).__name__}: {err}", "traceback": tb})
        sys.stderr.write(tb)
        sys.stderr.flush()
        os._exit(1)
    if isinstance(payload, dict):
        payload["worker_timing"] = timing
        if recorder is not None and recorder.signatures:
            payload["launchers"] = recorder.signatures
    ch.result(payload)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate threads and atexit hooks cannot delay the verdict.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
