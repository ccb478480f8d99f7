"""Worker mode ``profile``: run the candidate (or the reference) once inside an NVTX range.

The executor starts this worker under Nsight Compute (``host/ncu.py``), which
profiles only kernels inside ``protocol.NVTX_RANGE``: warm-up and compilation stay outside,
so the profile shows the candidate's steady-state kernels and nothing of ours.
"""

from __future__ import annotations

from pathlib import Path

import torch

from openkernel.evaluation.protocol import NVTX_RANGE, Job
from openkernel.evaluation.worker.build import import_candidate, set_cuda_targets
from openkernel.evaluation.worker.task_runtime import TaskRuntime, load_state


def run_profile(job: Job, ch) -> dict:
    from openkernel.evaluation.worker import sandbox

    rt = TaskRuntime(job.reference_path, job.hooks_path, job.device)
    ref_model = rt.reference_model()
    confinement = sandbox.confine(Path(job.scratch), [Path(p) for p in job.read_only],
                                  gpu=True, writable=[job.build_cache] if job.build_cache else [])
    ch.phase("build")
    if job.target == "reference":
        model = ref_model
    else:
        set_cuda_targets(job)  # the flags it was judged with: its build cache loads as is
        module = import_candidate(Path(job.code_path))
        model = rt.make_model(module.ModelNew)
        load_state(ref_model, model)
    inputs = rt.inputs(0)
    ch.phase("warmup")
    with torch.no_grad():
        model(*inputs)  # compile and warm up outside the profiled range
        torch.cuda.synchronize()
        ch.wait_turn()  # the profiled call runs alone on its GPU
        ch.phase("test")
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return {"profiled": True, "confinement": confinement}
