"""Units of the evaluation package that need no worker process: tolerances, static scan,
timing statistics, the result ladder, CUDA source extraction."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from openkernel.aten_ops import compute_ops, torch_covers
from openkernel.evaluation.host.results import flag, from_worker
from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker.build import static_cuda_sources
from openkernel.evaluation.worker.correctness import (
    compare_outputs,
    relative_error,
    tolerances_for,
)
from openkernel.evaluation.worker.timing import Timer, summarize
from openkernel.records import CPU_LABEL, Hardware, TaskProbe
from openkernel.roofline import roofline_ms
from openkernel.schemas import Program, Status

CANDIDATES = Path(__file__).parent / "candidates"
CPU = Hardware(label=CPU_LABEL, device="cpu", gpu_arch="cpu", interpreter=True)
H200 = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=1,
                peak_bandwidth_gbs=4800.0, peak_tflops={"float32": 67.0, "tf32": 495.0})
LIMITS = {"build_timeout_s": 10, "test_timeout_s": 20}


def test_tolerances_per_dtype_and_hook_override():
    assert tolerances_for(torch.float32)["max_rel_error"] == 1e-3
    assert tolerances_for(torch.bfloat16)["atol"] > tolerances_for(torch.float16)["atol"]
    assert tolerances_for(torch.int64) == {"atol": 0.0, "rtol": 0.0, "max_rel_error": 0.0}
    assert tolerances_for(torch.float32, lambda d: {"atol": 0.5})["atol"] == 0.5


def test_compare_rejects_nan_shape_dtype_and_zeros_on_tiny_outputs():
    ref = torch.randn(64, 64)
    assert compare_outputs([ref.clone()], [ref])[0]
    bad = ref.clone()
    bad[3, 3] = float("nan")
    ok, msg, _ = compare_outputs([bad], [ref])
    assert not ok and "NaN" in msg
    assert "shape" in compare_outputs([ref[:-1]], [ref])[1]
    assert "dtype" in compare_outputs([ref.half()], [ref])[1]
    tiny = ref * 1e-5  # far below atol: zeros pass elementwise, not the relative norm
    ok, msg, _ = compare_outputs([torch.zeros_like(tiny)], [tiny])
    assert not ok and "relative error" in msg
    assert relative_error(torch.zeros(3), torch.zeros(3)) == 0.0


def test_static_scan_names_no_kernel_and_fallback():
    assert [c for c, _ in ig.static_scan((CANDIDATES / "no_kernel.py").read_text())] == ["static_no_kernel"]
    assert [c for c, _ in ig.static_scan((CANDIDATES / "fallback.py").read_text())] == ["static_fallback"]
    assert ig.static_scan((CANDIDATES / "good_gelu.py").read_text()) == []
    assert ig.static_scan((CANDIDATES / "cuda_ok.py").read_text()) == []


def test_compute_ops_ignore_allocation_and_views():
    assert compute_ops(["aten.empty_like.default", "aten.view.default", "aten.gelu.default"]) == {"gelu"}


def test_a_fused_library_call_covers_the_ops_it_fuses():
    """A candidate that is nothing but the library call (with a decoy kernel) is caught, a
    library call with our own kernels around it is not."""
    assert torch_covers({"addmm", "relu"}, {"_addmm_activation"})
    assert torch_covers({"mm", "add", "relu"}, {"_addmm_activation"})
    assert torch_covers({"convolution"}, {"convolution"})
    assert not torch_covers({"addmm", "native_group_norm"}, {"addmm"})
    assert not torch_covers({"convolution", "relu", "add"}, {"convolution"})
    assert not torch_covers(set(), {"mm"})


def test_guard_sees_a_replaced_timer(monkeypatch):
    import time

    guard = ig.Guard()
    assert guard.changed() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert guard.changed() == ["time.perf_counter"]


def test_hidden_work_profiles_again_before_blaming_a_call_seen_slow():
    """One profiled call seen 2x its timed median (another process's kernel beside it) is
    profiled again and the least kept; work outside the timed stream, seen in every call, is
    still past the bound after the last try; a call within it is profiled once."""
    def calls(*ms):
        seen = iter(ms)
        return lambda: (["k"], next(seen))

    names, least, tries = ig.hidden_work(calls(5.2146, 2.74), timed_ms=2.7161)
    assert names == ["k"] and least == 2.74 and tries == [5.2146, 2.74]
    assert not ig.beyond_timed(least, 2.7161)
    _, least, tries = ig.hidden_work(calls(5.2, 5.3, 5.1, 2.7), timed_ms=2.7161)
    assert tries == [5.2, 5.3, 5.1] and least == 5.1 and ig.beyond_timed(least, 2.7161)
    _, least, tries = ig.hidden_work(calls(2.9), timed_ms=2.7161)
    assert tries == [2.9]
    assert ig.beyond_timed(4.08, 2.7161) and not ig.beyond_timed(4.07, 2.7161)


def test_summarize_and_interleaved_cpu_timer():
    stats = summarize([1.0, 2.0, 3.0, 4.0])
    assert stats["median"] == 2.5 and stats["n_trials"] == 4 and stats["min"] == 1.0
    assert stats["cv"] == pytest.approx(stats["std"] / stats["mean"])
    order = []
    samples = Timer("cpu").interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                                       budget_s=0.05, min_trials=5, max_trials=20, warmup=0)
    assert 5 <= len(samples["a"]) == len(samples["b"]) <= 20
    timed = [x for x in order[6:]]  # after the estimate calls: strictly A B A B
    assert timed[: 4] == ["a", "b", "a", "b"]


def test_result_ladder_from_worker_payloads():
    ok = {"compiled": True, "ran": True, "correctness": True, "log": [],
          "cand_stats": summarize([1.0, 1.0, 1.0]), "ref_stats": summarize([2.0, 2.0, 2.0])}
    r = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="", hw=CPU,
                    probe=None, compile_ratio=None, limits=LIMITS)
    assert r.get_status() == Status.FASTER and r.perf_score == 4 and r.runtime_improvement == 2.0
    r = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="", hw=CPU,
                    probe=None, compile_ratio=0.4, limits=LIMITS)
    assert r.perf_score == 4 and r.improve_over_compile == pytest.approx(0.8)
    r = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="", hw=CPU,
                    probe=None, compile_ratio=0.75, limits=LIMITS)
    assert r.perf_score == 5
    cheat = {**ok, "integrity_violation": "hidden_work"}
    r = from_worker(cheat, phase="benchmark", timed_out=None, returncode=0, log_tail="", hw=CPU,
                    probe=None, compile_ratio=None, limits=LIMITS)
    assert r.get_status() == Status.INCORRECT and r.runtime_improvement == -1.0
    dead = from_worker(None, phase="test", timed_out=None, returncode=-11, log_tail="boom",
                       hw=CPU, probe=None, compile_ratio=None, limits=LIMITS)
    assert dead.get_status() == Status.INCORRECT and "SIGSEGV" in dead.eval_log
    slow = from_worker(None, phase="warmup", timed_out="build", returncode=-9, log_tail="",
                       hw=CPU, probe=None, compile_ratio=None, limits=LIMITS)
    assert slow.get_status() == Status.BUILD_TIMEOUT and slow.perf_score == 0


def test_roofline_flags_impossible_speed():
    probe = TaskProbe(ok=True, flops=0.0, bytes_moved=4.8e9, output_dtypes=["torch.float32"])
    assert roofline_ms(0.0, 4.8e9, H200, "float32") == pytest.approx(1.0)
    ok = {"compiled": True, "ran": True, "correctness": True, "log": [],
          "cand_stats": summarize([0.1] * 3), "ref_stats": summarize([2.0] * 3)}
    r = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="", hw=H200,
                    probe=probe, compile_ratio=None, limits=LIMITS)
    # too good to be true: noted for a second judgement, still correct until that one says so too
    assert "below 80% of the roofline minimum of 1 ms" in r.metadata["too_good"]
    assert r.get_status() == Status.FASTER and "flagged_for_review" not in r.metadata
    second = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="",
                         hw=H200, probe=probe, compile_ratio=0.5, limits=LIMITS)
    flagged = flag(second, r)
    assert flagged.get_status() == Status.FLAGGED and not flagged.correctness
    assert flagged.runtime_improvement == flagged.improve_over_compile == -1.0
    said = flagged.metadata["flagged_for_review"]
    assert said["speedup"] == pytest.approx(20.0) and said["over_compile"] == pytest.approx(10.0)
    assert "too_good" not in flagged.metadata and "FLAGGED FOR REVIEW" in flagged.eval_log
    assert not Program(id="k", code="x", kernel_exec_result=flagged).can_be_best
    # on the CPU: a jump over the reference that the interpreter cannot make
    cpu = from_worker({**ok, "cand_stats": summarize([0.01] * 3)}, phase="benchmark",
                      timed_out=None, returncode=0, log_tail="", hw=CPU, probe=probe,
                      compile_ratio=None, limits=LIMITS)
    assert "200x over the reference on the CPU" in cpu.metadata["too_good"]
    honest = from_worker(ok, phase="benchmark", timed_out=None, returncode=0, log_tail="",
                         hw=CPU, probe=probe, compile_ratio=None, limits=LIMITS)
    assert "too_good" not in honest.metadata  # 20x: within what the interpreter can do


def test_static_cuda_sources_finds_kernels():
    assert "__global__" in static_cuda_sources((CANDIDATES / "cuda_ok.py").read_text())


def test_phase_seconds_split_the_worker_wall_time():
    from openkernel.evaluation.host.process import WorkerRun

    run = WorkerRun()
    run.phase_starts += [("build", 1.5), ("warmup", 2.0), ("test", 3.0), ("benchmark", 5.0)]
    run.wall_s = 6.2
    assert run.phase_seconds() == {"setup": 1.5, "build": 0.5, "warmup": 1.0, "test": 2.0,
                                   "benchmark": 1.2}


def test_a_reference_of_library_calls_only_is_library_bound():
    from openkernel.evaluation.worker import precision

    assert precision.library_bound(compute_ops(["aten.addmm.default", "aten.t.default"])) == "addmm"
    assert precision.library_bound({"convolution", "cudnn_convolution"}) == "convolution, cudnn_convolution"
    assert precision.library_bound({"addmm", "relu"}) == "" and precision.library_bound(set()) == ""
    flags = precision.apply(False)
    assert flags.matmul_tf32 is False and flags.conv_tf32 is True and not precision.changed(flags)
    try:
        precision.apply(True)
        assert "matmul False -> True" in precision.changed(flags)
    finally:
        precision.apply(False)


def test_a_gpu_workers_head_start_launches_the_evaluators_own_kernels(monkeypatch):
    """``evaluate.warm`` (a GPU worker's preload) runs the comparisons' PyTorch passes masked
    and not in float32 and float64, the float64 relative error through both of its passes, and
    the fingerprints' sums, on values of its own generator: the job's seeded draws are the same
    with it as without. Here on the CPU (the same calls; on a GPU they load the kernels)."""
    from openkernel.evaluation.worker import correctness, evaluate

    passes, relative = [], []
    real_sums, real_relative = correctness._sums, correctness._relative_sums

    def sums(out, ref, tol, chunk, masked):
        passes.append((out.dtype, masked))
        return real_sums(out, ref, tol, chunk, masked)

    def relative_sums(out, ref, chunk, through, masked):
        relative.append((through is None, masked))
        return real_relative(out, ref, chunk, through, masked)

    monkeypatch.setattr(correctness, "_sums", sums)
    monkeypatch.setattr(correctness, "_relative_sums", relative_sums)
    torch.manual_seed(7)
    before = torch.rand(3)
    torch.manual_seed(7)
    assert evaluate.warm("cpu") > 0
    assert torch.equal(torch.rand(3), before)
    assert sorted(set(passes), key=str) == sorted(
        {(d, m) for d in (torch.float32, torch.float64) for m in (False, True)}, key=str)
    assert (True, False) in relative and (True, True) in relative  # unmasked, then masked
    assert (False, False) in relative  # through a 16-bit rounding
