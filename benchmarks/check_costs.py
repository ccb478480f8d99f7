"""Where a correctness check's seconds go on one problem's own data (issue 22): each step a
worker's check takes per input set, timed alone on the device, then again while other
processes keep the GPU busy as other workers' checks and first calls do.

    python benchmarks/check_costs.py TASK [--busy 3] [--out FILE.json]

Steps: generating an input set, the reference's call, comparing its outputs with a copy of
them (the evaluator's blocked float64 comparison, at the block size the memory plan gives this
footprint), fingerprinting the outputs and the inputs, the float64 norm error, poisoning the
outputs' bytes. ``--busy N`` starts N processes that each launch a stream of GPU work (a
matmul and an elementwise pass of 256 MiB, over and over) and times every step again beside
them: the per-block reads of a comparison wait for the device, and a device other processes
share is time-sliced between them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import torch

from openkernel.evaluation.host.memplan import CHUNK, CHUNK_SHARE, MIN_CHUNK
from openkernel.evaluation.worker.correctness import Fingerprints, compare_outputs, \
    flatten_outputs, relative_error
from openkernel.evaluation.worker.task_runtime import TaskRuntime, tensors_in


def _busy(stop) -> None:
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.empty(64 << 20, device="cuda")
    while not stop.is_set():
        for _ in range(20):
            a @ a
            b.mul_(1.0001)
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int = 3) -> float:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t0) / repeats


def steps(task: str, device: str = "cuda") -> dict[str, float]:
    rt = TaskRuntime(task, None, device)
    model = rt.reference_model()
    inputs = rt.inputs(1)
    with torch.no_grad():
        outs = flatten_outputs(model(*inputs))
    footprint = sum(t.numel() * t.element_size() for t in tensors_in(inputs) + outs) + sum(
        p.numel() * p.element_size() for p in model.parameters())
    chunk = min(CHUNK, max(MIN_CHUNK, int(footprint * CHUNK_SHARE / 40)))
    copies = [o.clone() for o in outs]
    fps = Fingerprints(device, chunk)
    out = {"footprint_bytes": footprint, "chunk_elements": chunk,
           "output_bytes": sum(o.numel() * o.element_size() for o in outs)}
    with torch.no_grad():
        out["generating inputs"] = _timed(lambda: rt.inputs(2), device)
        out["the reference's call"] = _timed(lambda: model(*inputs), device)
    out["comparing outputs"] = _timed(lambda: compare_outputs(outs, copies, None, chunk), device)
    out["fingerprinting the outputs"] = _timed(lambda: [fps.of(o) for o in outs], device)
    out["fingerprinting the inputs"] = _timed(lambda: fps.of_all(tensors_in(inputs)), device)
    out["relative error (float64 norms)"] = _timed(
        lambda: [relative_error(o, c, chunk) for o, c in zip(outs, copies)], device)
    out["poisoning the outputs' memory"] = _timed(
        lambda: [c.fill_(float("nan")) for c in copies], device)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--busy", type=int, default=3, help="processes keeping the GPU busy")
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to try the script")
    args = parser.parse_args(argv)
    result = {"task": args.task, "alone": steps(args.task, args.device)}
    if args.busy and args.device == "cuda":
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        procs = [ctx.Process(target=_busy, args=(stop,), daemon=True) for _ in range(args.busy)]
        for p in procs:
            p.start()
        time.sleep(8)  # their CUDA contexts made and their work running
        try:
            result[f"beside {args.busy} busy processes"] = steps(args.task)
        finally:
            stop.set()
            for p in procs:
                p.join(30)
    for label in [k for k in result if k != "task"]:
        print(label)
        for step, value in result[label].items():
            counted = step.endswith(("_bytes", "_elements"))
            print(f"  {step:36} {value}" if counted else f"  {step:36} {value:.4f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
