"""Who is to blame (issue 12): the evaluator's own failures get a status of their own and one
retry with a smaller plan; a candidate's own failures stay its own; timeouts follow phases."""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.process import WorkerProcess, drive
from openkernel.evaluation.protocol import Job
from openkernel.schemas import NOT_JUDGED, Status
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"

RELU = (CANDIDATES / "good_relu.py").read_text()


def _task(folder: Path, forward: str, prelude: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reference.py").write_text(textwrap.dedent(f'''
        import os
        import torch
        import torch.nn as nn
        {textwrap.indent(textwrap.dedent(prelude), " " * 8).strip()}

        class Model(nn.Module):
            def forward(self, x):
        {textwrap.indent(textwrap.dedent(forward), " " * 16)}

        batch_size = 16
        dim = 1000

        def get_inputs():
            return [torch.randn(batch_size, dim)]

        def get_init_inputs():
            return []
    '''))
    return folder


def _evaluate(tmp_path, folder: Path, code: str, after_probe=None, **ec):
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"correctness_seeds": 2, "memory_limit_gb": 8, **ec}})
    ev = Evaluator(load_task(folder), config, bench_budget_s=0.05)
    try:
        probe = ev.probe()
        assert probe.ok, probe.error
        if after_probe is not None:
            after_probe()
        return ev.evaluate(code, "triton", "c")
    finally:
        ev.close()


def test_a_failing_reference_is_the_evaluators_fault_and_retried_once(tmp_path):
    # The reference breaks from its fifth call in a process on: the probe (its own process)
    # passes, its fifth call being one of the timing calls, whose failure leaves no figure; each evaluation's checks then fail inside the reference (the fifth
    # call comes after the seeds, the in-place rewrite and the float64 run), not the candidate.
    folder = _task(tmp_path / "breaks", """
        global CALLS
        CALLS += 1
        if CALLS >= 5:
            raise RuntimeError("the reference broke")
        return torch.relu(x)
    """, prelude="CALLS = 0")
    result = _evaluate(tmp_path, folder, RELU)
    assert result.get_status() is Status.EVALUATOR_FAULT, result.eval_log
    assert result.get_status() in NOT_JUDGED
    fault = result.metadata["evaluator_fault"]
    assert fault["where"].startswith("running the reference") and "the reference broke" in fault["error"]
    retried = result.metadata["retried"]
    assert retried["plan_level"] == 1 and retried["first_fault"]["where"].startswith("running the")
    assert "Evaluator fault (not the candidate's)" in result.eval_log
    assert "retried once" in result.eval_log
    assert result.perf_score == -1 and not result.correctness


def test_a_transient_evaluator_fault_is_judged_on_the_retry(tmp_path):
    # Fails once per machine (markers in /dev/shm, which workers may write), then works: the
    # retry judges the candidate for real. Armed once the probe has passed, so the fault falls
    # in the evaluation whatever number of calls the probe makes.
    marker = f"/dev/shm/openkernel-test-{uuid.uuid4().hex}"
    armed = Path(marker + ".armed")
    folder = _task(tmp_path / "flaky", f"""
        if os.path.exists({str(armed)!r}) and not os.path.exists({marker!r}):
            open({marker!r}, "w").close()
            raise RuntimeError("a passing fault")
        return torch.relu(x)
    """)
    try:
        result = _evaluate(tmp_path, folder, RELU, after_probe=armed.touch)
    finally:
        Path(marker).unlink(missing_ok=True)
        armed.unlink(missing_ok=True)
    assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
    assert result.metadata["retried"]["first_fault"]["error"].count("a passing fault")
    assert "evaluator_fault" not in result.metadata


def test_a_candidate_that_allocates_too_much_stays_its_own_failure(tmp_path):
    folder = _task(tmp_path / "relu", "return torch.relu(x)")
    hog = RELU.replace("        x = x.contiguous()", "        torch.empty(1 << 34)  # 64 GiB\n"
                       "        x = x.contiguous()")
    result = _evaluate(tmp_path, folder, hog)
    assert result.get_status() is Status.INCORRECT, result.eval_log
    assert "evaluator_fault" not in result.metadata and "retried" not in result.metadata
    assert "memory" in result.eval_log.lower()


def test_a_candidate_that_crashes_stays_its_own_failure(tmp_path):
    folder = _task(tmp_path / "relu", "return torch.relu(x)")
    crash = RELU.replace("        x = x.contiguous()", "        import os; os.abort()\n"
                         "        x = x.contiguous()")
    result = _evaluate(tmp_path, folder, crash)
    assert result.get_status() is Status.INCORRECT, result.eval_log
    assert "SIGABRT" in result.eval_log and "evaluator_fault" not in result.metadata


def test_memory_peak_is_recorded(tmp_path):
    folder = _task(tmp_path / "relu", "return torch.relu(x)")
    result = _evaluate(tmp_path, folder, RELU)
    assert result.correctness, result.eval_log
    memory = result.metadata["memory"]
    assert memory["footprint_bytes"] == 2 * 16 * 1000 * 4 and memory["precision_set"] == "main"
    assert "precision check against float64 on the main input set: passed" in result.eval_log
    # Where the checks' seconds went: the evaluator's work by what it did, the candidate's calls
    spent = memory["spent_s"]
    assert {"generating inputs", "comparing outputs", "running the reference",
            "running the reference in float64", "the candidate's calls"} <= set(spent), spent
    assert all(v >= 0 for v in spent.values()) and list(spent.values()) == sorted(
        spent.values(), reverse=True)
    steps = memory["steps_s"]
    assert sum(spent.values()) <= sum(steps.values()) + 0.05, (spent, steps)


# -- timeouts by phase ------------------------------------------------------------------------
def test_a_forward_that_never_returns_on_its_first_call_is_a_test_timeout(tmp_path):
    folder = _task(tmp_path / "relu", "return torch.relu(x)")
    endless = RELU.replace("        return out", "        while True:\n            pass")
    t0 = time.monotonic()
    result = _evaluate(tmp_path, folder, endless, build_timeout_s=120, test_timeout_s=4)
    took = time.monotonic() - t0
    assert result.get_status() is Status.TEST_TIMEOUT, result.eval_log
    assert result.metadata["timeout"] == "test" and result.compiled
    assert took < 60  # after test_timeout_s, far before build_timeout_s


FAKE_WORKER = textwrap.dedent('''
    import json, os, sys, time
    from openkernel.evaluation import protocol
    fd = int(sys.argv[sys.argv.index("--fd") + 1])
    job = json.loads(sys.stdin.readline())
    say = lambda **m: os.write(fd, protocol.encode(job["nonce"], **m))
    plan = job["scratch"].split("/")[-1]  # the test's script, by folder name
    say(phase="build")
    say(phase="warmup")
    if plan.startswith("compiling"):
        say(compiling=True)  # a kernel compiling in the first call: build time
    time.sleep(60)
''')


@pytest.mark.parametrize("case,expected", [("compiling", "build"), ("running", "test")])
def test_drive_charges_compilation_to_the_build_and_a_first_call_to_the_test(tmp_path, case, expected):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    scratch = tmp_path / case
    scratch.mkdir()
    worker = WorkerProcess(scratch, "cpu", None, 120, None,
                           wrap=lambda argv: [sys.executable, str(script), *argv[3:]])
    t0 = time.monotonic()
    run = drive(worker, Job(mode="evaluate", scratch=str(scratch)), build_timeout_s=3,
                test_timeout_s=2)
    assert run.timed_out == expected and run.phase == "warmup"
    took = time.monotonic() - t0
    assert (2.5 if expected == "build" else 1.5) < took < 10


@pytest.mark.gpu
def test_gpu_a_kernel_that_faults_is_its_own_failure_and_the_next_one_is_judged(tmp_path):
    folder = _task(tmp_path / "relu", "return torch.relu(x)")
    bad = _evaluate(tmp_path, folder, (CANDIDATES / "illegal_address.py").read_text())
    assert bad.get_status() in (Status.INCORRECT, Status.COMPILE_ERROR), bad.eval_log
    assert "evaluator_fault" not in bad.metadata and "retried" not in bad.metadata
    good = _evaluate(tmp_path, folder, RELU)
    assert good.correctness, good.eval_log
