"""The memory plan: how an evaluation of this task uses device memory, made from the probe.

The probe measures the reference's footprint F (weights, inputs, outputs and the transient
memory of one forward, ``records.Footprint``). A worker's own checks are planned to stay within
``BUDGET_FACTOR`` x F (the target is 3x; the rest is slack for the allocator):

* one correctness input set alive at a time, reference outputs freed once compared, inputs
  checked unchanged by fingerprints instead of a pristine copy (a copy only when the
  reference itself writes into its inputs): about P + I + 2 O + T, under 2 F;
* comparisons in blocks of ``chunk_elements`` (no full-size float64 copy);
* the float64 precision check holds the candidate's weights, the inputs and a float64 run of
  the reference (its float32 weights wait in host memory meanwhile, ``integrity.
  float64_reference``), about P + I + 2 F: on the main input set where that fits 2.5 F (the
  budget factor, whatever MIN_BUDGET allows: where weights dominate this is 3 F already);
  else, when the reference's FLOPs are few enough for the host's cores (``HOST_FLOPS``: a
  level-2 GEMM with 8192 x 8192 weights is 1.4e11), on the main set with the float64 run on
  the host CPU, so the device holds only the float32 data of the seeds' checks; else on the
  probe's smaller set (KernelBench size globals shrunk, or a task's smaller held-out set); else
  skipped. The log says which. The task's float64 answer, made once by a worker that holds no
  candidate (``host/float64.py``), needs about 2 F and the float32 inputs: where a check's run
  goes to the host for want of room, that one may still fit the device (``answer_on_device``:
  the level-2 GEMMs' took 3.7-7.1 s on the H200's host cores, and checks waited for it), when
  every worker may be at its checks at once: checks waiting for the answer never hold the turn
  its making needs.

A sweep's first calls (each combination's, compiling its kernels) run side by side on a GPU, as
many as add at most (``BUDGET_FACTOR`` - 1) x F together beyond what the worker holds
(``MemoryPlan.first_calls_bytes``; the first call alone measures one's). Where the
combinations' own copies of the weights would add more than that share, they share one copy
(the MLPs of level 3: 2.5-8 GB of weights, six combinations).

Workers per GPU: every worker holds its task data while it builds and runs its first call
(about F plus the candidate's weights), the one in its turn up to the budget, and each process
has a CUDA context; a spare holds no task data, only its context (``SPARES_PER_SLOT`` of them
per worker; once a run's candidates are done, as many as a next run starts with, beside the
one worker left: ``spares_beside_one``). Checks per GPU (with
``eval_config.overlap_checks``): how many of those workers may be at their checks' peak at
once, each up to the budget, beside the others holding their first call's data. Level 1 (a retry after an
evaluator fault) has the GPU to itself, smaller chunks and the precision check on the small
set or skipped.
"""

from __future__ import annotations

from openkernel.records import Footprint, Hardware, MemoryPlan

# 2.5, not 2.7: on the H200 (2026-12-01) the float64 check of the dim-1 reductions (KernelBench
# 47-53) peaked 16% over its estimate and took the worker to 3.01x; 20% slack keeps it under 3x.
BUDGET_FACTOR = 2.5
CONTEXT_BYTES = 640 << 20  # a CUDA context and torch's own state, per worker process (H200)
SPARES_PER_SLOT = 2  # spare workers kept per worker slot on a GPU (executor._fill), each a context
CHUNK = 1 << 24
MIN_CHUNK = 1 << 20
# A comparison holds ~5 float64 temporaries of one block (40 bytes an element): blocks are
# sized to the problem so they stay a few percent of its footprint (H200, 2026-12-01: a 16M
# block on a 0.32 GiB matmul took the worker to 3.96x its footprint).
CHUNK_SHARE = 1 / 32
MIN_BUDGET = 1 << 30  # tiny problems: the checks' fixed costs dominate, not the problem
# A float64 run on the host: at most this many FLOPs (seconds on a GPU host's cores in float64)
# and this much host memory (2 F and the parked float32 weights).
HOST_FLOPS = 5e11
HOST_BYTES = 16 << 30


def plan_memory(fp: Footprint | None, hw: Hardware, *, memory_fraction: float = 0.9,
                max_workers_per_gpu: int = 8, level: int = 0, flops: float = 0.0) -> MemoryPlan:
    """The plan for one task on ``hw`` (see the module docstring); ``flops``: one forward's
    (``TaskProbe.flops``, 0 when unknown)."""
    if fp is None:
        return MemoryPlan(level=level, workers_per_gpu=max_workers_per_gpu,
                          memory_fraction=memory_fraction, exclusive=level > 0,
                          chunk_elements=CHUNK >> (2 * level))
    footprint = max(fp.peak_bytes, fp.param_bytes + fp.input_bytes + fp.output_bytes, 1)
    budget = max(int(BUDGET_FACTOR * footprint), MIN_BUDGET)
    chunk = min(CHUNK, max(MIN_CHUNK, int(footprint * CHUNK_SHARE / 40))) >> (2 * level)
    plan = MemoryPlan(level=level, footprint_bytes=footprint, budget_bytes=budget,
                      keep_pristine=fp.mutates_inputs, poison_bytes=fp.output_bytes,
                      small_set=dict(fp.small_set), chunk_elements=max(chunk, 1 << 16),
                      memory_fraction=memory_fraction,
                      first_calls_bytes=int((BUDGET_FACTOR - 1) * footprint),
                      small_call_bytes=max(0, fp.small_peak_bytes - fp.param_bytes)
                      if fp.small_set else 0)
    pristine = fp.input_bytes if fp.mutates_inputs else 0
    full = fp.param_bytes + fp.input_bytes + pristine + 2 * footprint
    small = (fp.small_peak_bytes * 2 + fp.input_bytes // 4) if fp.small_set else 0
    on_host = 0 < flops <= HOST_FLOPS and 2 * footprint + fp.param_bytes <= HOST_BYTES
    # The float64 run against the footprint itself, never MIN_BUDGET: where the weights are
    # most of the problem it holds them three times (candidate's, float64), 3x already.
    if level == 0 and full <= (int(BUDGET_FACTOR * footprint) if hw.device == "cuda" else budget):
        plan.precision_set = "main"
    elif on_host and hw.device == "cuda":
        plan.precision_set, plan.precision_on_host = "main", True
        plan.precision_why = (f"a float64 run on the device needs ~{_gib(full)}, over "
                              f"{BUDGET_FACTOR}x the footprint: it runs on the host "
                              f"({flops:.2g} FLOPs)")
    elif fp.small_set and small <= budget:
        plan.precision_set = "small"
        plan.precision_why = (f"a float64 run on the main set needs ~{_gib(full)}, over the plan's "
                              f"{_gib(budget)}" if level == 0 else "retry with a smaller plan")
    else:
        plan.precision_set = "skip"
        plan.precision_why = (
            "retry with a smaller plan, and no smaller input set exists" if level else
            f"a float64 run on the main set needs ~{_gib(full)}, over the plan's {_gib(budget)}, "
            "and no smaller input set exists (the task's get_inputs hook has no small held-out "
            "set, or the reference accepts no other sizes)")
    if hw.device != "cuda" or not hw.gpu_memory_bytes:
        plan.budget_bytes = 0  # no device to fit into: the CPU's memory limit applies instead
        plan.workers_per_gpu = plan.checks_per_gpu = max_workers_per_gpu
        return plan
    usable = int(hw.gpu_memory_bytes * memory_fraction)
    if level > 0:
        plan.exclusive, plan.workers_per_gpu = True, 1
        return plan
    # One worker at its peak, the others holding their first call's data; each a context.
    contexts = (1 + SPARES_PER_SLOT) * CONTEXT_BYTES  # its own and its spares'
    per_worker = footprint + fp.param_bytes + contexts
    others = max(0, usable - budget - contexts) // per_worker
    plan.workers_per_gpu = max(1, min(max_workers_per_gpu, 1 + int(others)))
    # C checking and W - C waiting: C (budget + contexts) + (W - C) per_worker <= usable.
    extra = budget + contexts - per_worker
    room = usable - plan.workers_per_gpu * per_worker
    plan.checks_per_gpu = plan.workers_per_gpu if extra <= 0 else max(
        1, min(plan.workers_per_gpu, room // extra))
    plan.answer_on_device = plan.precision_on_host and plan.checks_per_gpu >= \
        plan.workers_per_gpu and 2 * footprint + fp.input_bytes <= int(BUDGET_FACTOR * footprint)
    if plan.workers_per_gpu > 1:
        # A worker may not take what the plan gave the others (its own failure if it tries).
        cap = max(budget + (4 << 30), int(1.5 * budget))
        plan.memory_fraction = min(memory_fraction, cap / hw.gpu_memory_bytes)
    return plan


def spares_beside_one(plan: MemoryPlan, hw: Hardware, memory_fraction: float = 0.9) -> int:
    """Spares that fit on a GPU beside one worker at its checks' peak (a run's late baselines,
    once its candidates are done): the rest of the usable memory, a context each; 0 when the
    GPU's memory is unknown."""
    if not hw.gpu_memory_bytes:
        return 0
    usable = int(hw.gpu_memory_bytes * memory_fraction)
    return max(0, (usable - plan.budget_bytes - CONTEXT_BYTES) // CONTEXT_BYTES)


def retry_plan(plan: MemoryPlan, fp: Footprint | None, hw: Hardware,
               memory_fraction: float = 0.9, flops: float = 0.0) -> MemoryPlan:
    """The smaller plan a candidate is retried with after an evaluator fault."""
    return plan_memory(fp, hw, memory_fraction=memory_fraction, max_workers_per_gpu=1,
                       level=plan.level + 1, flops=flops)


def describe(plan: MemoryPlan) -> str:
    """One line for the log."""
    if not plan.footprint_bytes:
        return "memory plan: no footprint measured"
    if plan.budget_bytes:  # a GPU: workers share its memory
        overlap = (f"{plan.checks_per_gpu} at their checks' peak at once (overlapping checks)"
                   if plan.checks_per_gpu > 1 else "one at its checks' peak at a time")
        where = (f"checks within {_gib(plan.budget_bytes)}, {plan.workers_per_gpu} worker(s) "
                 f"per GPU ({overlap})")
    else:  # the CPU: each worker within its own memory limit, nothing shared to plan
        where = "checks within each worker's memory limit (eval_config.memory_limit_gb)"
    text = (f"memory plan (level {plan.level}): footprint {_gib(plan.footprint_bytes)}, {where}, "
            f"float64 check on "
            f"{ {'main': 'the main set', 'small': 'a smaller set', 'skip': 'no set'}[plan.precision_set] }"
            + (" (run on the host" + ("; the task's answer, made once, on the device)"
                                     if plan.answer_on_device else ")")
               if plan.precision_on_host else ""))
    if plan.precision_why:
        text += f" ({plan.precision_why})"
    if plan.keep_pristine:
        text += "; the reference writes into its inputs: a pristine copy is kept"
    return text


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"
