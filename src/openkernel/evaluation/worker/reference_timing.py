"""Worker mode ``reference``: the reference's baselines (``job.baselines``), timed interleaved.

Each baseline is made in a phase of its own, so the engine holds it to its own wall
(``eval_config.baseline_timeout_s``): ``eager`` (the first eager call), ``compile``
(``torch.compile`` in its default mode, and its first call) and ``autotune`` (the reference
compiled with ``mode="max-autotune-no-cudagraphs"``: Inductor's GEMM/convolution templates and
autotuned Triton configs, without CUDA graphs, which would hide launch cost the candidates pay)
and ``cudagraphs`` (``mode="reduce-overhead"``: the default mode's kernels replayed from CUDA
graphs, the yardstick for a candidate that replays one: generators/compiler/replay.py). CUDA-graph
trees warm up on a first call and record on a later one, and each replay overwrites the previous
outputs, so that baseline marks a new step before every call
(``torch.compiler.cudagraph_mark_step_begin``) and is called ``CUDAGRAPH_CALLS`` times before it
is timed.
The engine kills a worker whose phase runs past its wall and asks again without that baseline.
Then all of them are timed in the same interleaved rounds, so they see the same GPU state,
until each compiled one's ratio to eager is known within ``stopping.BASELINE_BAND`` (or the
budget ends; ``stop_reason`` says which; ``eval_config.adaptive_trials``). The
autotune compile never runs beside a timed trial (it benchmarks kernels on the GPU). A baseline
that raises is kept as ``<name>_error``; the others still count.
"""

from __future__ import annotations

import torch

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker import stopping
from openkernel.evaluation.worker.task_runtime import TaskRuntime
from openkernel.evaluation.worker.timing import Timer, summarize

AUTOTUNE_MODE = "max-autotune-no-cudagraphs"
CUDAGRAPHS_MODE = "reduce-overhead"
CUDAGRAPH_CALLS = 3  # warm-up, record, a first replay


def run_reference_timing(job: Job, ch) -> dict:
    """Worker mode ``reference``: eager and the compiled baselines asked for, interleaved."""
    device = job.device
    rt = TaskRuntime(job.reference_path, job.hooks_path, device)
    model = rt.reference_model()
    ch.phase("build")
    inputs = rt.inputs(1)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    result: dict = {}
    with torch.no_grad():
        ch.phase("eager")
        model(*inputs)
        sync()
        fns = {"eager": lambda: model(*inputs)}
        if "compile" in job.baselines:
            ch.phase("compile")
            _compiled(fns, result, "compile", torch.compile(model), inputs, sync)
        if "autotune" in job.baselines:
            # Never beside a timed trial: max-autotune times its GEMM/convolution choices on
            # the GPU while it compiles, which would disturb another candidate's timings. It
            # holds the GPU as checks do (beside other checks with overlap_checks, else in the
            # turn). Dynamo guards each cache entry on its backend, so the same module compiled
            # in another mode gets its own graph and the default one stays as it is.
            ch.wait_turn("check")
            ch.phase("autotune")
            _compiled(fns, result, "autotune", torch.compile(model, mode=AUTOTUNE_MODE), inputs,
                      sync)
        if "cudagraphs" in job.baselines:
            ch.phase("cudagraphs")
            graphed = torch.compile(model, mode=CUDAGRAPHS_MODE)

            def step(*args):  # a new step: the previous call's outputs may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
                return graphed(*args)

            _compiled(fns, result, "cudagraphs", step, inputs, sync, CUDAGRAPH_CALLS)
        ch.wait_turn()  # compiled side by side with other work; timed alone on its GPU
        ch.phase("benchmark")
        timer = Timer(device)
        # (adaptive: once every ratio to eager is known closely enough, not the whole budget)
        samples = timer.interleaved(fns, budget_s=job.bench_budget_s, min_trials=job.min_trials,
                                    max_trials=job.max_trials,
                                    stop=stopping.baselines_settled if job.adaptive_trials else None,
                                    check_every=stopping.CHECK_EVERY)
    result.update({name: summarize(samples[name]) for name in fns})
    result["timing_method"] = timer.method
    result["stop_reason"] = timer.stop_reason
    if "autotune" in fns:
        result["autotune_mode"] = AUTOTUNE_MODE
    if "cudagraphs" in fns:
        result["cudagraphs_mode"] = CUDAGRAPHS_MODE
    return result


def _compiled(fns: dict, result: dict, name: str, compiled, inputs, sync, calls: int = 1) -> None:
    """Compile by a first call (``calls`` of them); a failure is that baseline's alone."""
    try:
        for _ in range(calls):
            compiled(*inputs)
        sync()
    except Exception as err:  # the other baselines stand without it
        result[f"{name}_error"] = f"{type(err).__name__}: {err}"[:2000]
        return
    fns[name] = lambda: compiled(*inputs)
