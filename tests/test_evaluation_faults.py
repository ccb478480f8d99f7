"""Faults are results, not crashes: each ends with the right status and a clear log, and the
next candidate evaluates normally. Also: CUDA C++ without a GPU, the probe, bad tasks."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.schemas import Status
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

FAULTS = {
    # name -> (status, text the log must contain)
    "segfault": (Status.INCORRECT, "SIGSEGV"),
    "os_exit": (Status.INCORRECT, "exit code 3"),
    "sys_exit": (Status.COMPILE_ERROR, "SystemExit"),
    "raise_import": (Status.COMPILE_ERROR, "broken at import"),
    "syntax_error": (Status.COMPILE_ERROR, "SyntaxError"),
    "loop_import": (Status.BUILD_TIMEOUT, "Build timeout"),
    "loop_forward": (Status.TEST_TIMEOUT, "Test timeout"),
    "memory_hog": (Status.COMPILE_ERROR, "memory"),
}


def _read(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def fault_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    config = build_config({
        "paths": {"scratch_dir": str(tmp / "scratch")},
        "eval_config": {"correctness_seeds": 1, "build_timeout_s": 30, "test_timeout_s": 8,
                        "memory_limit_gb": 8},
    })
    evaluator = Evaluator(load_task(EXAMPLES / "gelu"), config, bench_budget_s=0.1)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(pool.map(lambda n: (n, evaluator.evaluate(_read(n), "triton", n)), FAULTS))
    # After every fault, the same evaluator still judges an honest kernel normally.
    results["after"] = evaluator.evaluate(_read("good_gelu"), "triton", "after")
    return results


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_becomes_a_result(fault_results, name):
    status, text = FAULTS[name]
    result = fault_results[name]
    assert result.get_status() == status, result.eval_log
    assert text.lower() in result.eval_log.lower()
    assert not result.correctness and result.runtime_improvement == -1.0


def test_timeouts_name_their_phase(fault_results):
    assert fault_results["loop_import"].metadata["timeout"] == "build"
    assert fault_results["loop_import"].perf_score == 0
    assert fault_results["loop_forward"].metadata["timeout"] == "test"
    assert fault_results["loop_forward"].compiled


def test_next_candidate_evaluates_normally(fault_results):
    after = fault_results["after"]
    assert after.get_status() in (Status.CORRECT, Status.FASTER), after.eval_log


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_without_gpu_is_compiled_not_run(tmp_path):
    config = build_config({"paths": {"scratch_dir": str(tmp_path)}, "backend": "cuda"})
    evaluator = Evaluator(load_task(EXAMPLES / "gelu"), config)
    if evaluator.hardware.device != "cpu":
        pytest.skip("a GPU is present: CUDA candidates run for real")
    with ThreadPoolExecutor(max_workers=2) as pool:
        ok, broken = pool.map(lambda n: evaluator.evaluate(_read(n), "cuda", n), ["cuda_ok", "cuda_broken"])
    assert ok.get_status() == Status.NOT_RUN, ok.eval_log
    assert ok.metadata["runnable"] is False and ok.compiled and ok.perf_score == 1
    assert "cannot run on this machine" in ok.eval_log
    assert broken.get_status() == Status.COMPILE_ERROR, broken.eval_log
    assert "undefined_symbol" in broken.eval_log


def test_probe_describes_the_task(tmp_path):
    config = build_config({"paths": {"scratch_dir": str(tmp_path)}})
    probe = Evaluator(load_task(EXAMPLES / "matmul_bias_relu"), config).probe()
    assert probe.ok, probe.error
    assert any("mm" in op for op in probe.aten_ops)
    assert probe.input_shapes == [[64, 128], [128, 96], [96]]
    assert probe.output_shapes == [[64, 96]] and probe.output_dtypes == ["torch.float32"]
    assert probe.flops == 2 * 64 * 128 * 96 + 2 * 64 * 96  # the matmul, then + b and relu
    assert probe.hardware is not None and probe.hardware.label == "CPU (Triton interpreter)"
    # what a prompt tells the model: the tolerances, the held-out shapes, the reference's time
    assert probe.tolerances == {"float32": {"atol": 1e-2, "rtol": 1e-2, "max_rel_error": 1e-3}}
    assert probe.heldout == [{"name": "get_extra_inputs set 0", "shapes": [[50, 70], [70, 33], [33]],
                              "dtypes": ["float32"] * 3}]
    assert probe.reference_ms > 0


def test_probe_warns_when_the_trace_cannot_follow_the_sizes(tmp_path):
    task = tmp_path / "readback.py"  # a value read back: the trace is made at fixed sizes
    task.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x * float(x.abs().max())\n\ndef get_inputs():\n"
                    "    return [torch.randn(4, 5)]\n\ndef get_init_inputs():\n    return []\n")
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "s")}})
    probe = Evaluator(load_task(task), config).probe()
    assert probe.ok, probe.error
    fixed = [w for w in probe.warnings if "trace has fixed sizes" in w]
    assert len(fixed) == 1 and "symbolic" in fixed[0], probe.warnings


def test_bad_task_gives_one_clear_message(tmp_path):
    bad = tmp_path / "bad_task.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x @ x.t()[:3]\n\ndef get_inputs():\n    return [torch.randn(4, 5)]\n"
                   "\ndef get_init_inputs():\n    return []\n")
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "s")}})
    probe = Evaluator(load_task(bad), config).probe()
    assert not probe.ok
    assert str(bad) in probe.error and "forward failed" in probe.error


def test_kernelbench_file_gets_derived_held_out_shapes(tmp_path):
    config = build_config({"paths": {"scratch_dir": str(tmp_path)},
                           "eval_config": {"correctness_seeds": 1}})
    evaluator = Evaluator(load_task(EXAMPLES / "kernelbench" / "19_ReLU.py"), config,
                          bench_budget_s=0.1)
    result = evaluator.evaluate(_read("good_relu"), "triton", "relu")
    assert result.correctness, result.eval_log
    assert result.metadata["heldout_source"].startswith("derived (batch_size=13, dim=14335")
    assert result.metadata["heldout_ok"] is True
