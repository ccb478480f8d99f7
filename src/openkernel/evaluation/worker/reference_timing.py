"""Worker mode ``reference``: eager and ``torch.compile`` timings of the reference, interleaved."""

from __future__ import annotations

import torch

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker.task_runtime import TaskRuntime
from openkernel.evaluation.worker.timing import Timer, summarize


def run_reference_timing(job: Job, ch) -> dict:
    """Worker mode ``reference``: eager vs ``torch.compile`` of the reference, interleaved."""
    device = job.device
    rt = TaskRuntime(job.reference_path, job.hooks_path, device)
    model = rt.make_model(rt.ref.Model)
    ch.phase("build")
    compiled = torch.compile(model)
    inputs = rt.inputs(1)
    with torch.no_grad():
        compiled(*inputs)
        ch.wait_turn()  # compiled side by side with other work; timed alone on its GPU
        ch.phase("benchmark")
        timer = Timer(device)
        samples = timer.interleaved({"eager": lambda: model(*inputs), "compile": lambda: compiled(*inputs)},
                                    budget_s=job.bench_budget_s, min_trials=job.min_trials,
                                    max_trials=job.max_trials)
    return {"eager": summarize(samples["eager"]), "compile": summarize(samples["compile"]),
            "timing_method": timer.method}
