"""A small, realistic results database written through the engine's own Store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from openkernel.store import Store

TASK, JOB = "gelu_mul_add", "demo job"  # a space in the job name exercises URL quoting
REFERENCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x, a, b):\n" \
            "        return torch.nn.functional.gelu(x) * a + b\n"


def _code(i: int) -> str:
    return ("import triton\nimport triton.language as tl\n\n@triton.jit\n"
            f"def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr = {64 << (i % 4)}):\n"
            "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
            f"    x = tl.load(x_ptr + offs, mask=offs < n)  # variant {i}\n"
            "    tl.store(out_ptr + offs, x, mask=offs < n)\n")


# (label suffix, status, speedup) per candidate, four branches per iteration, parents chained
PLAN = [
    ("i0-b0", "correct", 1.0, None), ("i0-b1", "compile_error", -1, None),
    ("i0-b2", "incorrect", -1, None), ("i0-b3", "faster", 1.3, None),
    ("i1-b0", "faster", 1.8, "i0-b3"), ("i1-b1", "test_timeout", -1, "i0-b3"),
    ("i1-b2", "build_timeout", -1, "i0-b0"), ("i1-b3", "not_run", -1, "i0-b0"),
    ("i2-b0", "faster", 2.4, "i1-b0"), ("i2-b1", "correct", 0.9, "i1-b0"),
]


def build(path: Path) -> dict:
    """Write the sample job (kernels and critic lines); return {label: kernel id} and the best id."""
    store = Store(path)
    # Fixed times, before the kernels': "last activity" must not depend on the day tests run.
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc)
    run = store.start_run(task_name=TASK, job_name=JOB, backend="triton", gpu_arch="sm_90",
                          hardware="NVIDIA H200 (sm_90)", models=["offline"], status="completed",
                          started_at=t0 - timedelta(minutes=1),
                          config={"branches_per_iteration": 4,
                                  "hardware": {"peak_bandwidth_gbs": 4000.0, "peak_tflops": {"fp32": 60.0}}})
    store.start_run(task_name="softmax", job_name="other job", backend="cuda", hardware="CPU", status="failed",
                    started_at=t0 - timedelta(hours=1))
    ids = {}
    for n, (label, status, speedup, parent) in enumerate(PLAN):
        it, br = int(label[1]), int(label[-1])
        correct = status in ("faster", "correct")
        kid = f"k{n:03d}{label.replace('-', '')}"
        ids[label] = kid
        profiler = {}
        if correct:
            profiler = {"flops": 2e6, "bytes": 8e6, "dram_throughput_pct": 30 + 5 * n,
                        "achieved_occupancy": 0.6, "registers_per_thread": 32,
                        "shared_mem_per_block": 4096, "l2_hit_rate_pct": 55.0, "bottleneck": "memory_bound"}
        if label == "i2-b0":
            profiler["memory_heatmap"] = [[1, 2, 3], [4, 5, 6]]
        store.add_kernel(
            id=kid, run_id=run.id, task_name=TASK, job_name=JOB, iteration=it, branch=br, label=label,
            parent_id=ids.get(parent) if parent else None, origin="offline", model="offline-templates",
            hardware="NVIDIA H200 (sm_90)", gpu_arch="sm_90", description=f"variant {n}: vectorized loads",
            prompt=f"You are a kernel engineer. PROMPT-MARKER-{n}\n" + "Reference:\n" + REFERENCE,
            answer=f"I will try BLOCK={64 << (n % 4)}.\n\n```python\n{_code(n)}```\n",
            reference_code=REFERENCE, code=_code(n), status=status,
            compiled=status not in ("compile_error", "build_timeout"), correctness=correct,
            runtime=0.1 / speedup if speedup > 0 else -1.0,
            runtime_stats={"median": 0.1 / speedup, "mean": 0.101 / speedup, "std": 0.002, "min": 0.09 / speedup,
                           "max": 0.12 / speedup, "cv": 0.02, "n_trials": 100 + n,
                           "reference_median": 0.1} if speedup > 0 else {},
            runtime_improvement=speedup, improve_over_compile=speedup * 0.8 if speedup > 0 else -1.0,
            perf_score=4 if status == "faster" else 3 if correct else 0,
            score=(4 if status == "faster" else 3) + speedup if correct else 0.0,
            features={"block": 64 << (n % 4), "vector_width": 1 + n % 3, "num_warps": 2 + n % 4},
            profiler_data=profiler,
            meta={"integrity_violation": "output_aliasing"} if label == "i0-b2" else {"flagged_for_review": label == "i2-b1"},
            eval_log=f"EVAL-LOG-MARKER-{n}: " + ("error: expected ';'" if status == "compile_error" else "ok"),
            created_at=t0 + timedelta(seconds=n))
    for it in range(3):  # the critic's line after each iteration, as the search loop stores it
        store.add_critique(run_id=run.id, task_name=TASK, job_name=JOB, iteration=it,
                           text=f"CRITIC-MARKER-{it}: Best so far i{it}-b0. Memory bound (estimate).")
    store.close()
    return {"ids": ids, "best": ids["i2-b0"]}
