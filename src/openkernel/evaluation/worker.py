"""Worker process entry: ``python -m openkernel.evaluation.worker --fd N`` (job JSON on stdin).

One worker evaluates one candidate (or probes the task, or times the reference) and exits; the
executor starts a fresh one for the next job, so whatever a candidate breaks dies with it.

Protocol: the job arrives as JSON on stdin (including a random ``nonce``). The worker reports
on the inherited file descriptor ``N``, one JSON line per message, each carrying the nonce:
``{"nonce": ..., "phase": "build" | "test" | "benchmark"}`` when a phase starts (the executor
applies the build or the test timeout accordingly) and finally ``{"nonce": ..., "result": {...}}``.
The candidate's own stdout and stderr go to a log file; they never mix with the protocol.

Modes (``job["mode"]``): ``hardware``, ``probe``, ``evaluate``, ``reference`` (eager and
``torch.compile`` timings of the reference, GPU only), ``profile`` (one call inside an NVTX
range, run under Nsight Compute).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any


class Channel:
    """The worker's side of the protocol (a pipe the executor reads)."""

    def __init__(self, fd: int, nonce: str):
        self._fd = fd
        self._nonce = nonce
        self._write = os.write  # private reference: the candidate may replace os.write later

    def send(self, **message: Any) -> None:
        data = (json.dumps({"nonce": self._nonce, **message}, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = self._write(self._fd, view)
            view = view[n:]

    def phase(self, name: str) -> None:
        self.send(phase=name, t=time.time())

    def result(self, payload: dict) -> None:
        self.send(result=payload)


def _hardware(job: dict, ch: Channel) -> dict:
    from dataclasses import replace

    from openkernel.evaluation.hardware import detect, to_json

    hw = detect()
    if hw.device != "cuda":
        return {"hardware": to_json(hw)}
    import torch

    from openkernel.evaluation import ceilings

    name = torch.cuda.get_device_name(0)
    entry = (job.get("known_ceilings") or {}).get(name)
    measured = entry is None
    if measured:
        entry = ceilings.measure(0)
    hw = replace(hw, peak_bandwidth_gbs=entry["peak_bandwidth_gbs"],
                 peak_tflops=dict(entry["peak_tflops"]))
    return {"hardware": to_json(hw), "ceilings": entry, "ceilings_measured": measured}


def _dispatch(job: dict, ch: Channel) -> dict:
    mode = job.get("mode")
    if mode == "hardware":
        return _hardware(job, ch)
    if mode == "probe":
        from openkernel.evaluation.probe import run_probe

        return run_probe(job, ch)
    if mode == "evaluate":
        from openkernel.evaluation.runner import run_evaluate

        return run_evaluate(job, ch)
    if mode == "profile":
        from openkernel.evaluation.profile_run import run_profile

        return run_profile(job, ch)
    if mode == "reference":
        from openkernel.evaluation.reference import run_reference_timing

        return run_reference_timing(job, ch)
    raise ValueError(f"unknown worker mode {mode!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openkernel.evaluation.worker")
    parser.add_argument("--fd", type=int, required=True, help="protocol file descriptor")
    args = parser.parse_args(argv)
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    ch = Channel(args.fd, job.pop("nonce"))
    os.set_inheritable(args.fd, False)  # nvcc and other children must not hold the pipe open
    try:
        payload = _dispatch(job, ch)
    except BaseException as err:  # report, then exit non-zero: the executor turns it into a result
        tb = traceback.format_exc(limit=8)
        ch.result({"fatal": f"{type(err).__name__}: {err}", "traceback": tb})
        sys.stderr.write(tb)
        sys.stderr.flush()
        os._exit(1)
    ch.result(payload)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate threads and atexit hooks cannot delay the verdict.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
