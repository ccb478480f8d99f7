"""The float64 answer of the main input set, computed once per task (worker mode ``float64``).

The precision check compares a candidate's outputs and the reference's with the reference run
in float64 on the main input set (seed 1). That answer is the same for every candidate of a
task, and where the float64 run goes to the host CPU (the level-2 GEMMs: 1.4e11 FLOPs) it took
each winner's checks ~10 s on the H200 while four ran at once. A worker that runs no candidate
makes it once, from the same weights and inputs every worker draws, and writes it where
candidates' workers may read it but not write it (``Job.float64_path``); a candidate's check
uses it only when the inputs and weights it was made from match its own (``stored``), else it
runs the float64 reference itself, as before.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

from openkernel.evaluation.protocol import FLOAT64_FORMAT as FORMAT
from openkernel.evaluation.protocol import Job, float64_failed
from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker.correctness import norm
from openkernel.evaluation.worker.task_runtime import TaskRuntime, tensors_in
from openkernel.records import MemoryPlan


def signature(inputs: list, model: torch.nn.Module, chunk: int) -> dict:
    """What the answer was made from: each input's shape, dtype and 2-norm, and the 2-norms of
    the reference's floating weights and buffers (another seed or draw shows at once)."""
    def of(t: torch.Tensor) -> list:
        value = norm(t, chunk) if t.is_floating_point() else float(t.double().abs().sum())
        return [list(t.shape), str(t.dtype), value]

    weights = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    return {"inputs": [of(t) for t in tensors_in(inputs)],
            "weights": [of(t) for t in weights]}


def _same(a: dict, b: dict) -> bool:
    for key in ("inputs", "weights"):
        xs, ys = a.get(key), b.get(key)
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys):
            if x[:2] != y[:2] or not math.isclose(float(x[2]), float(y[2]), rel_tol=1e-9,
                                                   abs_tol=1e-12):
                return False
    return True


def _arrived(path: str, wait_s: float) -> bool:
    """Whether the answer is there, waiting up to ``wait_s`` for one being made (a float64 run
    on the host takes a check about as long as the answer's making, four checks at once)."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if time.monotonic() >= deadline or float64_failed(path).exists():
            return False
        time.sleep(0.05)
    return True


def stored(path: str | None, inputs: list, model: torch.nn.Module, chunk: int,
           wait_s: float = 0.0) -> tuple[list | None, str]:
    """The stored answer (on the CPU) when it was made from these inputs and weights, else
    None; and why not, for the log ("" when there is no answer). ``wait_s``: how long to wait
    for an answer being made."""
    if not path:
        return None, ""
    if not _arrived(path, wait_s):
        waited = wait_s and not float64_failed(path).exists()  # (not: none is being made)
        return None, f"the task's float64 answer was not there after {wait_s:g} s" if waited else ""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unreadable: computed here instead
        return None, f"the stored float64 answer could not be read ({type(err).__name__})"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None, "the stored float64 answer has another format"
    if not _same(data.get("signature") or {}, signature(inputs, model, chunk)):
        return None, "the stored float64 answer was made from other inputs or weights"
    outputs = data.get("outputs")
    if not isinstance(outputs, list) or not all(isinstance(t, torch.Tensor) for t in outputs):
        return None, "the stored float64 answer has no outputs"
    return outputs, ""


def run_float64(job: Job, ch) -> dict:
    """Worker mode ``float64``: the answer written to ``job.float64_path`` (atomically)."""
    t0 = time.perf_counter()
    plan = MemoryPlan.from_json(job.plan)
    rt = TaskRuntime(job.reference_path, job.hooks_path, job.device)
    model = rt.reference_model()
    inputs = rt.inputs(1)
    sig = signature(inputs, model, plan.chunk_elements)
    # (a check's float64 run may go to the host where this one, holding no candidate, fits)
    host = plan.precision_on_host and not plan.answer_on_device and job.device.startswith("cuda")
    if job.device.startswith("cuda") and not host:
        ch.wait_turn("check")  # the run's memory is a check's: it shares the GPU as checks do
    exact = ig.float64_reference(model, inputs, host=host)
    if exact is None:
        return {"float64": None, "why": "the reference has no float64 path"}
    target = Path(job.float64_path)
    part = target.with_name(f"{target.name}.{os.getpid()}.part")
    torch.save({"format": FORMAT, "signature": sig, "on_host": host,
                "outputs": [t.detach().to("cpu") for t in exact]}, part)
    os.replace(part, target)  # whole or absent: a reader never sees half a file
    return {"float64": str(target), "bytes": target.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 3), "on_host": host}
