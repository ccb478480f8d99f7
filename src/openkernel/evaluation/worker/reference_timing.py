"""Worker mode ``reference``: eager and ``torch.compile`` timings of the reference, interleaved.

With ``job.autotune_baseline`` the reference is also compiled with
``mode="max-autotune-no-cudagraphs"`` (Inductor's GEMM/convolution templates and autotuned
Triton configs, without CUDA graphs, which would hide launch cost the candidates pay) and timed
in the same interleaved rounds, so the three baselines see the same GPU state. Its compile runs
inside the GPU's turn (it benchmarks kernels on the GPU). A failure of that mode is kept as
``autotune_error``; the default timings still count.
"""

from __future__ import annotations

import torch

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker.task_runtime import TaskRuntime
from openkernel.evaluation.worker.timing import Timer, summarize

AUTOTUNE_MODE = "max-autotune-no-cudagraphs"


def run_reference_timing(job: Job, ch) -> dict:
    """Worker mode ``reference``: eager vs ``torch.compile`` of the reference, interleaved."""
    device = job.device
    rt = TaskRuntime(job.reference_path, job.hooks_path, device)
    model = rt.make_model(rt.ref.Model)
    ch.phase("build")
    inputs = rt.inputs(1)
    fns = {"eager": lambda: model(*inputs)}
    result: dict = {}
    with torch.no_grad():
        compiled = torch.compile(model)
        compiled(*inputs)
        fns["compile"] = lambda: compiled(*inputs)
        ch.wait_turn()  # compiled side by side with other work; timed alone on its GPU
        if job.autotune_baseline:
            # In the turn: max-autotune times its GEMM/convolution choices on the GPU while it
            # compiles, which would disturb another candidate's timed trials.
            try:
                # Dynamo guards each cache entry on its backend, so the same module compiled in
                # another mode gets its own graph and the default one stays as it is.
                tuned = torch.compile(model, mode=AUTOTUNE_MODE)
                tuned(*inputs)
                fns["autotune"] = lambda: tuned(*inputs)
            except Exception as err:  # the default baselines stand without it
                result["autotune_error"] = f"{type(err).__name__}: {err}"[:2000]
        ch.phase("benchmark")
        timer = Timer(device)
        samples = timer.interleaved(fns, budget_s=job.bench_budget_s, min_trials=job.min_trials,
                                    max_trials=job.max_trials)
    result.update({name: summarize(samples[name]) for name in fns})
    result["timing_method"] = timer.method
    if "autotune" in fns:
        result["autotune_mode"] = AUTOTUNE_MODE
    return result
