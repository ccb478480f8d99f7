"""Hostile and faulty candidates end with the right status and named check (CPU, interpreter).

Every candidate runs in its own worker process; they are evaluated concurrently through one
Evaluator per configuration (which also exercises its thread safety), then asserted one by one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.schemas import Status
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# candidate file -> (expected status, expected integrity_violation or None)
HOSTILE = {
    "good_gelu": (Status.CORRECT, None),
    "no_kernel": (Status.INCORRECT, "static_no_kernel"),
    "fallback": (Status.INCORRECT, "static_fallback"),
    "decoy": (Status.INCORRECT, "torch_compute"),
    "decoy_hidden": (Status.INCORRECT, "kernel_launches"),
    "memo_ptr": (Status.INCORRECT, "memoization"),
    "memo_calls": (Status.INCORRECT, "memoization"),
    "mutate_inputs": (Status.INCORRECT, "inputs_modified"),
    "thread": (Status.INCORRECT, "background_thread"),
    "lazy": (Status.INCORRECT, "lazy_output"),
    "patch_timer": (Status.INCORRECT, "patched_functions"),
    "patch_allclose": (Status.INCORRECT, "patched_functions"),
    "low_precision": (Status.INCORRECT, "precision"),
    "half_dtype": (Status.INCORRECT, "precision"),
    "tf32_flag": (Status.INCORRECT, "precision"),
    "shape_overfit": (Status.INCORRECT, "held_out_shapes"),
    "wrong": (Status.INCORRECT, None),
    "reuse_ref": (Status.INCORRECT, "*"),  # CPU: wrong or named; the named case is a GPU test
    # Issue 56: every timed call is a checked call, and checked and timed calls look alike.
    "lazy_calls": (Status.INCORRECT, "timed_calls"),
    "sniff_stack": (Status.CORRECT, None),  # its own stack names no phase: it stays honest
    "same_frames": (Status.CORRECT, None),  # every call, checked or timed, comes the same way
    "sniff_threads": (Status.INCORRECT, "timed_calls"),
    "read_answer": (Status.INCORRECT, None),
    "nan_out": (Status.INCORRECT, None),
    "inf_out": (Status.INCORRECT, None),
    "process": (Status.INCORRECT, "background_process"),
    "patch_sync": (Status.INCORRECT, "patched_functions"),
    # uninitialised memory: the last round's poisoned reference answer on a GPU
    "reuse_later": (Status.INCORRECT, ("timed_calls", "reference_memory_reuse")),
    "mutate_later": (Status.INCORRECT, "inputs_modified"),
    "precision_later": (Status.INCORRECT, "timed_calls"),
    "subclass_ref": (Status.INCORRECT, "torch_compute"),
    "memo_id": (Status.INCORRECT, "memoization"),
    "thread_later": (Status.INCORRECT, "background_thread"),
    # issue 58: what the language rejects is a compile error under the interpreter too
    "bad_triton": (Status.COMPILE_ERROR, None),
}
# What the verdict must say besides the check's name (what it saw, and where)
SAID = {
    "lazy_calls": "timed call", "sniff_threads": "timed call", "reuse_later": "timed call",
    "mutate_later": "timed call", "precision_later": "computes less exactly when timed",
    "thread_later": "timed call", "nan_out": "NaN value(s) in the output",
    "inf_out": "infinities differ", "process": "a process started in forward",
    "bad_triton": "arange's arguments must be of type tl.constexpr",
}


def test_logs_say_what_the_candidate_can_act_on(hostile_results):
    """Issue 58: a compile error's log holds the candidate's own line and the error once, not
    Triton's and torch's frames and the chained exception again; a wrong kernel's log does
    not open with a precision check that "passed"."""
    log = hostile_results["bad_triton"].eval_log
    assert log.count("arange's arguments must be of type tl.constexpr") == 1, log
    assert "site-packages" not in log and "InterpreterError" not in log, log
    assert "offs = tl.arange(0, BLOCK)" in log
    wrong = hostile_results["wrong"].eval_log
    assert "precision check" not in wrong and "seed 1" in wrong, wrong


def _config(tmp: Path, **eval_config):
    return build_config({"paths": {"scratch_dir": str(tmp / "scratch")},
                         "eval_config": {"correctness_seeds": 2, **eval_config}})


def _evaluate_all(evaluator: Evaluator, names: list[str], backend: str = "triton") -> dict:
    def one(name):
        code = (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")
        return name, evaluator.evaluate(code, backend, label=name)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, names))


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    evaluator = Evaluator(load_task(EXAMPLES / "gelu"), _config(tmp), bench_budget_s=0.2)
    assert evaluator.probe().ok
    results = _evaluate_all(evaluator, list(HOSTILE))
    evaluator.close()
    return results


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_candidate_is_caught(hostile_results, name):
    status, check = HOSTILE[name]
    result = hostile_results[name]
    assert result.get_status() == status, result.eval_log
    violation = result.metadata.get("integrity_violation")
    assert SAID.get(name, "") in result.eval_log, result.eval_log
    if check == "*":
        return
    allowed = check if isinstance(check, tuple) else (check,)
    assert violation in allowed, result.eval_log
    if check:
        assert f"[{violation}]" in result.eval_log
        assert result.runtime_improvement == -1.0 and not result.correctness
        assert result.perf_score in (1, 2)  # built (static rejection) or ran


def test_honest_candidate_is_timed_and_labelled(hostile_results):
    result = hostile_results["good_gelu"]
    assert result.correctness and result.compiled and result.perf_score >= 3
    assert result.metadata["timing_method"] == "wall clock, Triton interpreter (CPU)"
    assert result.metadata["hardware"] == "CPU (Triton interpreter)"
    assert result.metadata["heldout_ok"] is True
    stats = result.runtime_stats
    assert stats["n_trials"] >= 3 and stats["median"] == result.runtime > 0
    assert stats["reference"]["n_trials"] == stats["n_trials"]  # interleaved A B A B
    assert result.runtime_improvement == pytest.approx(stats["reference"]["median"] / result.runtime)
    assert set(result.metadata["integrity_checks"]) >= {"kernel_launches", "memoization",
                                                        "inputs_modified", "precision",
                                                        "timed_calls", "background_process"}
    timed = result.metadata["timed_calls"]  # every timed call checked, warm-up rounds too
    assert timed["checked"] and timed["calls"] == timed["input_sets"] >= stats["n_trials"] + 3
    assert "every timed call checked" in result.eval_log
    assert "earlier threads unconfined" not in result.eval_log  # forwards run confined


def test_honest_sniffers_are_judged_at_their_honest_speed(hostile_results):
    """A kernel that would cheat where its stack names a timer finds none: judged like the
    honest kernel, not 48x faster (the same-frames canary proves every call comes the same way)."""
    honest = hostile_results["good_gelu"].runtime
    for name in ("sniff_stack", "same_frames"):
        assert hostile_results[name].runtime > honest / 3, hostile_results[name].eval_log


def test_tiny_outputs_need_relative_error(tmp_path):
    evaluator = Evaluator(load_task(CANDIDATES / "tasks" / "tiny"), _config(tmp_path),
                          bench_budget_s=0.1)
    probe = evaluator.probe()
    assert probe.ok and any("below the absolute tolerance" in w for w in probe.warnings)
    result = evaluator.evaluate((CANDIDATES / "tiny_zeros.py").read_text(), "triton", "zeros")
    assert result.get_status() == Status.INCORRECT, result.eval_log
    assert result.metadata["integrity_violation"] == "tiny_outputs"
    assert "relative error" in result.eval_log


@pytest.mark.gpu
def test_gpu_hostile_candidates(tmp_path):
    """On a GPU: the same candidates plus reference-memory reuse, on CUDA tensors."""
    evaluator = Evaluator(load_task(EXAMPLES / "gelu"), _config(tmp_path), bench_budget_s=0.5)
    results = _evaluate_all(evaluator, list(HOSTILE))
    wrong = {}
    for name, (status, check) in HOSTILE.items():
        got = (results[name].get_status(), results[name].metadata.get("integrity_violation"))
        print(name, got, results[name].runtime_improvement)
        allowed = check if isinstance(check, tuple) else (check,)
        if got[0] != status or (check != "*" and got[1] not in allowed):
            wrong[name] = (got, results[name].eval_log[-1500:])
    assert not wrong, wrong
    assert "cuda events" in results["good_gelu"].metadata["timing_method"]


@pytest.mark.gpu
def test_gpu_hidden_work_and_real_builds(tmp_path):
    """Side stream, late thread, a Triton compile error and a real CUDA C++ build, on a GPU."""
    evaluator = Evaluator(load_task(EXAMPLES / "gelu"), _config(tmp_path), bench_budget_s=0.5)
    results = _evaluate_all(evaluator, ["side_stream", "thread_gpu", "bad_triton"])
    assert results["side_stream"].metadata.get("integrity_violation") == "hidden_work", \
        results["side_stream"].eval_log
    assert results["thread_gpu"].metadata.get("integrity_violation") == "background_thread", \
        results["thread_gpu"].eval_log
    assert results["bad_triton"].get_status() == Status.COMPILE_ERROR, results["bad_triton"].eval_log
    cuda = evaluator.evaluate((CANDIDATES / "cuda_ok.py").read_text(), "cuda", "cuda_ok")
    assert cuda.get_status() in (Status.CORRECT, Status.FASTER), cuda.eval_log
    assert cuda.improve_over_compile > 0 and cuda.perf_score >= 3
