"""A scripted, deterministic run: the same events every time, no clock and no randomness.

Snapshot tests, the README screenshot and the throughput benchmark draw from it, so what they
show is what the engine's events would make the app show, without running a search.
"""

from __future__ import annotations

from openkernel import events as ev
from openkernel.costs import LLMCall, ModelSpend, Spend
from openkernel.evaluation.host import ncu
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.critic import roofline_estimate
from openkernel.wording import Tally

H200 = "NVIDIA H200 (sm_90)"
CPU = "CPU (Triton interpreter)"
PEAKS = {"peak_bandwidth_gbs": 4000.0, "peak_gflops": 60000.0}  # made-up round ceilings
# Its records have the shapes the engine writes (tests/tui/test_demo.py holds it to a real
# run): profiles made by the engine's own functions (Nsight Compute's summary on a GPU, the
# analytic estimate on the CPU), runtime_stats as the evaluator times them, the offline
# generator's params; the ceilings come with RunStarted.

KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask{other})
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, {block}),)
        gelu_kernel[grid](x, out, n, BLOCK={block}, num_warps={warps})
        return out
'''

# (branch, block, warps, status, speedup, description, reasoning)
PLAN = [
    [(0, 256, 4, Status.CORRECT, 0.92, "elementwise erf-GELU, BLOCK=256",
      "Start from a plain one-pass elementwise kernel to get a correct baseline."),
     (1, 1024, 4, Status.FASTER, 1.31, "BLOCK=1024, 4 warps: more work per program", ""),
     (2, 64, 1, Status.COMPILE_ERROR, -1.0, "BLOCK=64 with a tanh approximation", "")],
    [(0, 2048, 8, Status.FASTER, 1.62, "BLOCK=2048, 8 warps, evict_first loads",
      "Memory bound at 61% of peak: wider tiles and streaming loads should lift bandwidth."),
     (1, 4096, 16, Status.INCORRECT, -1.0, "BLOCK=4096, fast erf (too loose)", ""),
     (2, 1024, 2, Status.CORRECT, 1.28, "BLOCK=1024, 2 warps", "")],
    [(0, 4096, 8, Status.FASTER, 1.84, "BLOCK=4096, 8 warps, vectorized 16-byte loads",
      "Keep 8 warps, double the tile and vectorize: the parent is still memory bound."),
     (1, 8192, 32, Status.TEST_TIMEOUT, -1.0, "BLOCK=8192, 32 warps", ""),
     (2, 4096, 8, Status.BUILD_TIMEOUT, -1.0, "BLOCK=4096, autotune over 12 configs", "")],
]


def _result(status: Status, speedup: float, block: int, gpu: bool) -> EvalResult:
    ok = status in (Status.FASTER, Status.CORRECT)
    meta = {"timeout": "build"} if status == Status.BUILD_TIMEOUT else (
        {"timeout": "test"} if status == Status.TEST_TIMEOUT else {})
    log = {Status.COMPILE_ERROR: "CompilationError: at 9:8: tl.math.tanh is not defined",
           Status.INCORRECT: "Mismatch on seed 1: max abs diff 3.1e-03 > atol 1e-05",
           Status.TEST_TIMEOUT: "The tests timed out after 180 s",
           Status.BUILD_TIMEOUT: "The build timed out after 180 s"}.get(
               status, f"Correct on 3 seeds. Median {0.412 / speedup:.3f} ms over 100 trials.")
    prof = {}
    ms = 0.412 / speedup
    flops, moved = 8192 * 8192 * 14, 8192 * 8192 * 8
    if ok and gpu:  # made by the engine's own summary of an Nsight Compute report
        launch = {"kernel": "gelu_kernel", "duration_us": ms * 1e3,
                  "dram_throughput_pct": min(38.0 * speedup, 96.0), "sm_throughput_pct": 21.0,
                  "l2_hit_rate_pct": 30 + block / 200, "achieved_occupancy_pct": 62.0 + 8 * speedup,
                  "registers_per_thread": 24, "dram_bytes": moved}
        prof = ncu.summarize([launch], flops, moved, PEAKS["peak_bandwidth_gbs"],
                             PEAKS["peak_gflops"] / 1e3)
    elif ok:  # the engine's analytic estimate, as the search stores it on the CPU
        probe = TaskProbe(ok=True, flops=flops, bytes_moved=moved, output_dtypes=["torch.float32"])
        prof = roofline_estimate(ms, probe, Hardware(CPU, "cpu", "cpu", interpreter=True))
    reference = {"median": 0.412, "mean": 0.414, "std": 0.004, "min": 0.405, "max": 0.43,
                 "cv": 0.01, "n_trials": 100}
    # adaptive trials: the speedup's 95% interval, and why timing stopped
    ci = [speedup * 0.97, speedup * 1.03]
    side = "faster" if ci[0] > 1 else "slower" if ci[1] < 1 else "a tie with"
    verdict = {"speedup_ci": ci, "tie": ci[0] <= 1.0 <= ci[1], "adaptive": True,
               "stop_reason": f"decided: {side}{' than' if side != 'a tie with' else ''} "
                              "the reference"}
    return EvalResult(
        compiled=status not in (Status.COMPILE_ERROR, Status.BUILD_TIMEOUT), correctness=ok,
        metadata=meta, runtime=ms if ok else -1.0,
        runtime_stats={"median": ms, "mean": ms * 1.004, "std": 0.004, "min": ms * 0.98,
                       "max": ms * 1.05, "cv": 0.01, "n_trials": 100, "unit": "ms",
                       "reference": reference, **verdict} if ok else {},
        runtime_improvement=speedup if ok else -1.0, perf_score=4 if speedup > 1 else 3,
        profiler_data=prof, eval_log=log)


def demo_events(hardware: str = H200, iterations: int = 3) -> list[object]:
    """The events of a small gelu run (3 branches per iteration), critic lines included."""
    gpu = hardware != CPU
    peaks = PEAKS if gpu else {}
    out: list[object] = [ev.RunStarted(
        run_id=1, task_name="gelu", job_name="demo", backend="triton", hardware=hardware,
        models=("offline",), generator="offline", db_path="runs/kernels.sqlite3", max_iters=5,
        branches_per_iteration=3, peak_bandwidth_gbs=peaks.get("peak_bandwidth_gbs"),
        peak_gflops=peaks.get("peak_gflops"))]
    # The engine's rule: the best is the best correct candidate, never the reference, so the
    # first correct one (even slower than the reference) is the first best.
    best, best_program, parent = -1.0, None, None
    for it, plan in enumerate(PLAN[:iterations]):
        out.append(ev.IterationStarted(it))
        for branch, block, warps, status, speedup, desc, why in plan:
            label = f"i{it}-b{branch}"
            out.append(ev.CandidateStarted(label, it, branch, parent, "offline"))
            out.append(ev.CandidatePhaseChanged(label, "generating"))
            out.append(ev.CandidateGenerated(label, "offline", desc, why))
            out.extend(ev.CandidatePhaseChanged(label, phase) for phase in _phases(status, gpu))
            code = KERNEL.format(block=block, warps=warps,
                                 other=", other=0.0" if branch else "")
            program = Program(id=f"p{it}{branch}", code=code, parent_id=parent, timestamp=0.0,
                              iteration_found=it, metadata={
                                  "branch": branch, "label": label, "model": "offline",
                                  "backend": "triton", "description": desc,
                                  "params": {"template": "elementwise", "BLOCK": block,
                                             "num_warps": warps}})
            program.add_eval_results(_result(status, speedup, block, gpu))
            improved = status in (Status.FASTER, Status.CORRECT) and speedup > best
            out.append(ev.CandidateEvaluated(program, status, label, program.kernel_exec_result
                                             .runtime_improvement, speedup if improved else best))
            if improved:
                out.append(ev.BestImproved(program, best, speedup))
                best, best_program = speedup, program
        parent = best_program.id if best_program else None
        out.append(ev.IterationFinished(it, best, 3 * (it + 1), Tally(3 * (it + 1))))
        out.append(ev.CriticDiagnosed(it, f"Best so far {best_program.metadata['label']}: "
                                      f"{best:.2f}x. Memory bound: try wider loads."))
    return out


def _phases(status: Status, gpu: bool) -> list[str]:
    """The phases a candidate with this outcome went through (openkernel.events.PHASES): an
    offline candidate is a sweep of combinations, then its winner's full checks."""
    if status in (Status.COMPILE_ERROR, Status.BUILD_TIMEOUT):
        return ["queued", "sweeping"]
    tests = (["waiting_for_gpu"] if gpu else []) + ["testing"]
    if status in (Status.INCORRECT, Status.TEST_TIMEOUT):
        return ["queued", "sweeping", "building", *tests]
    return ["queued", "sweeping", "building", *tests, "timing"] + (["profiling"] if gpu else [])


def in_flight(events: list[object]) -> list[object]:
    """The demo cut in the middle of its last iteration: one candidate being timed, one
    building, one queued for a worker (for the snapshot of candidates in flight)."""
    last = max(i for i, e in enumerate(events) if isinstance(e, ev.IterationStarted))
    out = list(events[:last + 1])
    stops = {0: "timing", 1: "building", 2: "queued"}
    for e in events[last + 1:]:
        if isinstance(e, (ev.CandidateStarted, ev.CandidateGenerated)):
            out.append(e)
        elif isinstance(e, ev.CandidatePhaseChanged):
            stop = stops[int(e.label.rsplit("b", 1)[1])]
            if ev.PHASES.index(e.phase) <= ev.PHASES.index(stop):
                out.append(e)
    return out


GPT = "openai/gpt-4.1"
ANSWER = '''Idea: {idea}

The parent reads each element once and writes it once, so it is memory bound; at 61% of the
measured bandwidth the loads are the thing to widen. {plan}

```python
{code}```
'''


def _spend(calls: int) -> Spend:
    return Spend((ModelSpend(GPT, calls, 2100 * calls, 640 * calls, 0.00932 * calls, 0,
                             {"generate": calls}),))


def llm_demo_events() -> list[object]:
    """A model-driven run caught mid-iteration: one answer judged (its reasoning collapsed to
    a line), one still streaming inside its code block, one answered and being judged."""
    out: list[object] = [ev.RunStarted(
        run_id=2, task_name="gelu", job_name="llm-demo", backend="triton", hardware=H200,
        models=(GPT,), generator="llm", db_path="runs/kernels.sqlite3", max_iters=3,
        branches_per_iteration=3, max_usd=0.5, peak_bandwidth_gbs=PEAKS["peak_bandwidth_gbs"],
        peak_gflops=PEAKS["peak_gflops"]), ev.IterationStarted(0)]
    plans = [("one masked program per 1024 elements, 4 warps", "Start with BLOCK=1024.", 1024),
             ("vectorised 16-byte loads, BLOCK=4096, 8 warps", "Four floats per thread.", 4096),
             ("BLOCK=2048 with evict_first streaming loads", "Stream past L2.", 2048)]
    answers = [ANSWER.format(idea=idea, plan=plan, code=KERNEL.format(
        block=block, warps=8, other=", other=0.0")) for idea, plan, block in plans]
    for branch in range(3):
        out.append(ev.CandidateStarted(f"i0-b{branch}", 0, branch, None, GPT))
        out.append(ev.CandidatePhaseChanged(f"i0-b{branch}", "generating"))
    calls = 0
    for branch, answer in enumerate(answers):
        label = f"i0-b{branch}"
        cut = answer.index("    x = tl.load") if branch == 1 else len(answer)
        out += [ev.AnswerStreamed(label, GPT, answer[i:min(i + 40, cut)]) for i in range(0, cut, 40)]
        if branch == 1:
            continue  # still being written
        calls += 1
        call = LLMCall(GPT, "generate", 2100, 640, 0.00932, "litellm", 6.4)
        out.append(ev.ModelCalled(label, 0, call, _spend(calls), f"q0{branch}"))
        out.append(ev.CandidateGenerated(label, GPT, plans[branch][0]))
        if branch == 2:  # answered, now in its tests
            out.extend(ev.CandidatePhaseChanged(label, phase) for phase in
                       ("queued", "building", "waiting_for_gpu", "testing"))
        if branch == 0:
            out.extend(ev.CandidatePhaseChanged(label, phase)
                       for phase in _phases(Status.FASTER, True))
            program = Program(id="q00", code=KERNEL.format(block=1024, warps=4, other=""),
                              raw_llm_code=answer, timestamp=0.0, iteration_found=0, metadata={
                                  "branch": 0, "label": label, "model": GPT, "origin": "llm",
                                  "backend": "triton", "description": plans[0][0]})
            program.add_eval_results(_result(Status.FASTER, 1.31, 1024, True))
            out.append(ev.CandidateEvaluated(program, Status.FASTER, label, 1.31, 1.31))
            out.append(ev.BestImproved(program, -1.0, 1.31))
    return out
