"""The rule-based critic: after each iteration, what limits the best kernel and what to try next.

It reads the best kernel's profiler data when there is some (Nsight Compute on a GPU) and
otherwise places it against the roofline from the task's FLOPs and minimum bytes, labelled as
an estimate. Interpreter timings on the CPU say nothing about a GPU, and the critic says so.
"""

from __future__ import annotations

from collections import Counter

from openkernel.records import Hardware, TaskProbe
from openkernel.roofline import arithmetic_intensity, floor_seconds, peak_tflops_for
from openkernel.schemas import NOT_JUDGED, Program, Status


def roofline_estimate(runtime_ms: float, probe: TaskProbe, hw: Hardware) -> dict:
    """Achieved rates and the roofline bound for a kernel of the task, from its runtime."""
    if runtime_ms <= 0 or not (probe.flops or probe.bytes_moved):
        return {}
    est = {
        "estimate": True,
        "source": "analytic (FLOPs counted from the reference's ops, minimum bytes)",
        "bytes": probe.bytes_moved,
    }
    intensity = arithmetic_intensity(probe.flops, probe.bytes_moved)
    if probe.flops > 0:  # 0 means not counted: no FLOP figure rather than a wrong zero
        est["flops"] = probe.flops
    if intensity is not None:
        est["arithmetic_intensity"] = intensity
    if hw.interpreter:  # interpreter timings say nothing about achieved GPU rates
        return est
    seconds = runtime_ms / 1e3
    if probe.flops > 0:
        est["gflops"] = probe.flops / seconds / 1e9
    est["achieved_gbs"] = probe.bytes_moved / seconds / 1e9
    dtype = probe.output_dtypes[0] if probe.output_dtypes else "float32"
    peak_tflops = peak_tflops_for(hw, dtype)
    if hw.peak_bandwidth_gbs:
        est["peak_bandwidth_gbs"] = hw.peak_bandwidth_gbs
        est["dram_throughput_pct"] = 100.0 * est["achieved_gbs"] / hw.peak_bandwidth_gbs
    if peak_tflops:
        est["peak_gflops"] = peak_tflops * 1e3
    floors = floor_seconds(probe.flops, probe.bytes_moved, hw, dtype)
    if floors:
        t_mem, t_math = floors
        est["bottleneck"] = "memory_bound" if t_mem >= t_math else "compute_bound"
        est["headroom"] = seconds / max(floors) if max(floors) > 0 else None
    return est


# Why candidates were not judged (schemas.NOT_JUDGED), in the critic's words.
_UNJUDGED = {
    Status.NOT_RUN: "compiled but not run here (CUDA C++ needs a GPU: press b for Triton, or "
                    "run on a GPU)",
    Status.GENERATION_FAILED: "no kernel came back from the generator (see their generation "
                              "logs)",
    Status.EVALUATOR_FAULT: "the evaluator itself failed (see their evaluation logs)",
}


def diagnose(best: Program | None, probe: TaskProbe, hw: Hardware,
             outcomes: Counter | None = None) -> str:
    """One or two sentences for the chat panel and the dashboard; ``outcomes`` counts the
    job's candidates by status, so candidates never judged are not read as failures."""
    if best is None or best.kernel_exec_result is None:
        outcomes = outcomes or Counter()
        unjudged = [f"{outcomes[s]} {why}" for s, why in _UNJUDGED.items() if outcomes[s]]
        failed = sum(n for s, n in outcomes.items() if s not in NOT_JUDGED
                     and s not in (Status.FASTER, Status.CORRECT))
        if unjudged and not failed:
            return "No candidate judged yet: " + "; ".join(unjudged) + "."
        return ("No correct kernel yet. Read the evaluation logs of the failures: build errors "
                "first, then correctness (shapes, dtypes, masks on ragged tails)."
                + (" Not judged: " + "; ".join(unjudged) + "." if unjudged else ""))
    result = best.kernel_exec_result
    label = best.metadata.get("label", best.label)
    speed = result.runtime_improvement
    head = f"Best so far {label}: {speed:.2f}x over the reference." if speed > 0 else f"Best so far {label}."
    prof = result.profiler_data or {}
    if hw.interpreter:
        return (head + " Timings here are Triton-interpreter timings on the CPU: they rank "
                "candidates only roughly and say nothing about a GPU. Run on a GPU to profile.")
    if not prof.get("bottleneck"):
        prof = roofline_estimate(result.runtime, probe, hw)
    bottleneck = prof.get("bottleneck")
    if not bottleneck:
        return head + " No profile or hardware ceilings yet, so no bottleneck diagnosis."
    source = "estimate" if prof.get("estimate") else "profile"
    headroom = prof.get("headroom")
    if bottleneck == "memory_bound":
        pct = prof.get("dram_throughput_pct", 0.0)
        advice = ("near the bandwidth floor: further gains need fewer bytes (fusion, lower "
                  "precision the task allows)" if pct > 80 else
                  "try wider (16-byte) loads, more work per program, and fewer passes over memory")
        text = f"{head} Memory bound ({source}): {pct:.0f}% of peak bandwidth; {advice}."
    elif bottleneck == "compute_bound":
        text = (f"{head} Compute bound ({source}): use the tensor cores (tl.dot / wgmma) with "
                "larger tiles and deeper pipelining (num_stages).")
    else:
        text = (f"{head} Latency bound ({source}): too little work in flight; raise occupancy "
                "or work per program, or use a persistent grid.")
    if headroom:
        text += f" Headroom ~{headroom:.1f}x."
    if best.status == Status.CORRECT:
        text += " It is correct but not faster: the reference may already be near the floor."
    return text
