"""Profiling runs: a correct candidate (and, when asked, the reference) under Nsight Compute.

A profile is evidence for the next generation, never part of the verdict: any failure here
(no ncu, a crash under the profiler, an empty report) leaves the result as judged and says why
in ``profiler_data["error"]``. By default only the candidates that lead are profiled
(``eval_config.profile_scope``, :class:`Leaders`): a profile holds the GPU alone for about a
second (the longest of a GELU candidate's turns on the H200, session 20: 41 s of a 56 s job),
and a kernel far behind the fastest is not the one a reader or the next prompt studies.
"""

from __future__ import annotations

import threading

from openkernel.evaluation.host import ncu
from openkernel.evaluation.host.ncu_memory import MemoryProfile, memory_tables, parse_raw_csv
from openkernel.roofline import peak_tflops_for
from openkernel.schemas import EvalResult

_lock = threading.Lock()
LEAD_MARGIN = 0.05  # within this of the fastest correct kernel judged so far: it leads


class Leaders:
    """The fastest correct runtime one evaluator (a task's run) has judged so far."""

    def __init__(self) -> None:
        self._fastest: float | None = None
        self._lock = threading.Lock()

    def behind(self, runtime_ms: float) -> float | None:
        """None when a kernel of ``runtime_ms`` leads (the first, the fastest so far, or within
        ``LEAD_MARGIN`` of it; an untimed one too), else its ratio to the fastest. Recorded."""
        with self._lock:
            fastest = self._fastest
            if runtime_ms > 0 and (fastest is None or runtime_ms < fastest):
                self._fastest = runtime_ms
            if fastest is None or runtime_ms <= 0 or runtime_ms <= fastest * (1 + LEAD_MARGIN):
                return None
            return runtime_ms / fastest


def _peak_tflops(evaluator) -> float | None:
    probe = evaluator._probe
    dtype = probe.output_dtypes[0] if probe and probe.output_dtypes else "float32"
    return peak_tflops_for(evaluator.hardware, dtype)


def _profiled_run(evaluator, code: str | None, backend: str, profiler):
    hw = evaluator.hardware
    job = evaluator._task_job(hw.device, "profile",
                              target="reference" if code is None else "candidate")
    slot = evaluator._acquire()
    try:
        # The candidate's build cache: a CUDA extension judged a moment ago loads, not rebuilds.
        cache = evaluator.build_cache(code, backend) if code is not None else None
        return evaluator._run(job, hw.device, slot, label="profile", code=code, build_cache=cache,
                              profiler=profiler)
    finally:
        evaluator._release(slot)


def memory_profile(evaluator, code: str, backend: str = "") -> dict:
    """Nsight Compute's memory workload tables of a candidate (``ncu_memory``), or why none."""
    binary = ncu.find_ncu()
    if binary is None:
        return {"error": "Nsight Compute (ncu) is not installed"}
    run = _profiled_run(evaluator, code, backend, MemoryProfile(binary))
    tables = memory_tables(parse_raw_csv(run.full_log))
    if not tables:
        why = f"timed out in {run.phase}" if run.timed_out else "no memory counters in the report"
        return {"error": f"memory profile failed ({why})", "log_tail": run.log_tail[-2000:]}
    return {**tables, "profile_s": round(run.wall_s, 2)}


def _profile(evaluator, code: str | None, backend: str = "") -> dict:
    binary = ncu.find_ncu()
    if binary is None:
        return {}
    hw = evaluator.hardware
    run = _profiled_run(evaluator, code, backend, binary)
    launches = ncu.parse_ncu_csv(run.full_log)
    probe = evaluator._probe
    data = ncu.summarize(launches, probe.flops if probe else 0.0,
                               probe.bytes_moved if probe else 0.0, hw.peak_bandwidth_gbs,
                               _peak_tflops(evaluator))
    if not data:
        why = f"timed out in {run.phase}" if run.timed_out else "no kernels in the report"
        return {"source": "ncu", "error": f"profiling failed ({why})",
                "log_tail": run.log_tail[-2000:]}
    data["profile_s"] = round(run.wall_s, 2)
    data["profile_phase_s"] = run.phase_seconds()
    data["profile_prestarted"] = run.prestarted
    return data


def reference_profile(evaluator) -> dict:
    """The reference's profile, once per evaluator (eval_config.profile_original_model)."""
    with _lock:
        cached = getattr(evaluator, "_reference_profile", None)
        if cached is None:
            cached = _profile(evaluator, None)
            evaluator._reference_profile = cached
        return cached


def profile_candidate(evaluator, code: str, result: EvalResult) -> None:
    """Attach an Nsight Compute profile (and the reference's, if configured) to ``result``."""
    try:
        backend = result.metadata.get("backend") or evaluator.config.backend
        data = _profile(evaluator, code, backend)
        if data and evaluator.ec.profile_memory:  # deep profiling, asked for: a run of its own
            data["memory_tables"] = memory_profile(evaluator, code, backend)
        if data and evaluator.ec.profile_original_model:
            ref = reference_profile(evaluator)
            if ref and "error" not in ref:
                data["reference"] = {k: v for k, v in ref.items() if not isinstance(v, (list, dict))}
    except Exception as err:  # evidence only: never let profiling change a verdict
        data = {"source": "ncu", "error": f"profiling failed: {err!r}"}
    if not data:
        return
    result.profiler_data = data
    text = ncu.format_profile(data) if "error" not in data else f"Profile: {data['error']}"
    if data.get("reference"):
        text += "\nReference " + ncu.format_profile({**data["reference"], "estimate": False})
    result.eval_log = (result.eval_log.rstrip() + "\n" + text).strip()
