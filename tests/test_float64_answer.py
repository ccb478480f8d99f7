"""The precision check's float64 answer, made once per task by a worker that runs no candidate
(host/float64.py, worker/float64.py): every check uses it, later evaluators find it stored, an
answer made from other inputs is not used, and a candidate cannot write it."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.float64 import MAX_BYTES, answer_path, why_not
from openkernel.evaluation.protocol import FLOAT64_FORMAT
from openkernel.records import Footprint, MemoryPlan, TaskProbe
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"
GELU = Path(__file__).resolve().parents[1] / "examples" / "gelu"
USED = "(the task's float64 answer, computed once)"


def _evaluator(tmp: Path, **ec) -> Evaluator:
    config = build_config({"paths": {"scratch_dir": str(tmp / "scratch"),
                                     "build_cache_dir": str(tmp / "cache" / "builds")},
                           "eval_config": {"correctness_seeds": 2, "float64_once": True, **ec}})
    return Evaluator(load_task(GELU), config, bench_budget_s=0.05)


def _code(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")


def test_the_answer_is_made_once_used_by_every_check_and_found_by_the_next_run(tmp_path):
    ev = _evaluator(tmp_path)
    try:
        assert ev.probe().ok
        assert ev.float64.done.wait(120)
        assert ev.float64.note.startswith("float64 answer: made once on cpu"), ev.float64.note
        answer = ev.float64.path
        assert answer is not None and answer.is_file() and answer.parent == tmp_path / "cache" / "float64"
        made = hashlib.sha256(answer.read_bytes()).hexdigest()
        assert ev.float64.wait_s == 0.0 and not ev.float64.failed.exists()  # made: no wait
        with ThreadPoolExecutor(max_workers=2) as pool:
            good, low = pool.map(lambda n: ev.evaluate(_code(n), "triton", n),
                                 ["good_gelu", "low_precision"])
        assert good.correctness, good.eval_log
        assert f"precision check against float64 on the main input set {USED}: passed" in good.eval_log
        spent = good.metadata["memory"]["spent_s"]
        assert "reading the task's float64 answer" in spent
        assert "running the reference in float64" not in spent, spent
        # The lowered precision is still caught against the stored answer
        assert low.metadata.get("integrity_violation") == "precision", low.eval_log
        assert USED in low.eval_log
        assert ev.costs["float64_answer"] == ev.float64.note
    finally:
        ev.close()
    again = _evaluator(tmp_path)
    try:
        assert again.probe().ok
        assert again.float64.note == "float64 answer: stored" and again.float64.done.is_set()
        result = again.evaluate(_code("good_gelu"), "triton", "again")
        assert result.correctness and USED in result.eval_log, result.eval_log
    finally:
        again.close()
    assert hashlib.sha256(answer.read_bytes()).hexdigest() == made  # kept, not made again


def test_an_answer_made_from_other_inputs_is_not_used(tmp_path):
    ev = _evaluator(tmp_path)
    try:
        path = answer_path(tmp_path / "cache" / "float64", ev.task.digest, ev.hardware)
        path.parent.mkdir(parents=True)
        # Another draw of the inputs: same shape and dtype, another norm; all-zero outputs
        # that would fail any candidate if they were used.
        torch.save({"format": FLOAT64_FORMAT, "signature": {
            "inputs": [[[64, 1024], "torch.float32", 1.0]], "weights": []},
            "outputs": [torch.zeros(64, 1024, dtype=torch.float64)]}, path)
        assert ev.probe().ok and ev.float64.note == "float64 answer: stored"
        result = ev.evaluate(_code("good_gelu"), "triton", "c")
        assert result.correctness, result.eval_log
        assert ("the stored float64 answer was made from other inputs or weights: the float64 "
                "reference runs here") in result.eval_log
        assert USED not in result.eval_log
    finally:
        ev.close()


def _landlock() -> bool:
    from openkernel.evaluation.worker import sandbox

    try:
        return sandbox._sys(444, None, sandbox.ctypes.c_size_t(0), sandbox.ctypes.c_uint32(1)) >= 1
    except OSError:
        return False


@pytest.mark.skipif(not _landlock(), reason="this kernel has no Landlock")
def test_a_candidate_cannot_write_the_answer(tmp_path):
    ev = _evaluator(tmp_path)
    try:
        assert ev.probe().ok and ev.float64.done.wait(120)
        answer = ev.float64.path
        before = answer.read_bytes()
        hostile = _code("good_gelu").replace("class ModelNew", (
            f"try:\n    open({str(answer)!r}, 'wb').write(b'forged')\n"
            f"except OSError as err:\n    print('refused:', err)\n\n\nclass ModelNew"))
        result = ev.evaluate(hostile, "triton", "forger")
        assert answer.read_bytes() == before
        assert result.correctness and USED in result.eval_log, result.eval_log
    finally:
        ev.close()


def _probe(output_bytes: int, flops: float) -> TaskProbe:
    return TaskProbe(ok=True, flops=flops, memory=Footprint(output_bytes=output_bytes))


def test_when_the_answer_is_made_once():
    main, host = MemoryPlan(precision_set="main"), MemoryPlan(precision_set="main",
                                                                precision_on_host=True)
    assert why_not(None, host, _probe(64 << 20, 1.4e11)) == ""  # a level-2 GEMM on the host
    assert why_not(None, main, _probe(64 << 20, 2e10)) == ""  # costly on the device too
    assert why_not(None, main, _probe(64 << 10, 1e6)) == "the float64 run is cheap here"
    # on a GPU (a plan with a budget) made once however cheap: run in each check it would hold
    # about twice the footprint beside the check's own data
    gpu = MemoryPlan(precision_set="main", budget_bytes=1 << 30)
    assert why_not(None, gpu, _probe(64 << 10, 1e6)) == ""
    assert why_not(True, main, _probe(64 << 10, 1e6)) == ""
    assert why_not(None, host, _probe(MAX_BYTES, 1e11)).startswith("the outputs in float64")
    assert why_not(None, MemoryPlan(precision_set="small"), _probe(1 << 20, 1e11)) \
        == "the precision check does not run on the main input set"
    assert why_not(False, host, _probe(1 << 20, 1e11)) == "eval_config.float64_once is off"
    assert why_not(None, host, TaskProbe(ok=True, flops=1e11)) == "the probe measured no footprint"


LINEAR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4096)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(64, 4096)]


def get_init_inputs():
    return []
'''


@pytest.mark.gpu
def test_a_gemms_answer_is_made_once_on_the_gpu_though_checks_run_theirs_on_the_host(tmp_path):
    """A GEMM whose weights are most of its footprint: a check's float64 run (beside the
    candidate's weights) does not fit the plan on the device and would go to the host; the
    task's answer, made once by a worker without a candidate, fits there (~2x the footprint)
    and is made on the GPU by default; the offline generator's candidate's check reads it."""
    import random

    from openkernel.generators.base import ProposalRequest
    from openkernel.generators.offline import OfflineGenerator

    path = tmp_path / "linear.py"
    path.write_text(LINEAR)
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "cache" / "builds")},
                           "eval_config": {"correctness_seeds": 2, "profile": False}})
    task = load_task(path)
    ev = Evaluator(task, config, bench_budget_s=0.1)
    try:
        probe = ev.probe()
        assert probe.ok and ev.plan.precision_on_host and ev.plan.answer_on_device, ev.plan
        assert ev.float64.done.wait(120) and "made once on cuda" in ev.float64.note, \
            ev.float64.note
        proposal = OfflineGenerator().propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=0, branch=1, parent=None,
            best=None, rng=random.Random(0), hardware_label=probe.hardware.label))
        result = ev.evaluate(proposal.code, "triton", "gemm")
        assert result.correctness, result.eval_log
        assert USED in result.eval_log, result.eval_log
    finally:
        ev.close()


def test_a_check_waits_for_an_answer_being_made_and_stops_at_its_failure(tmp_path):
    """In the worker: an answer that arrives while the check waits is used; the engine's
    failure marker ends the wait at once; past the wait the check runs its own."""
    import threading
    import time

    from openkernel.evaluation.protocol import float64_failed as failed_marker
    from openkernel.evaluation.worker.float64 import signature, stored

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).double()
    inputs = [torch.randn(3, 8, dtype=torch.float64)]
    answer = {"format": FLOAT64_FORMAT, "signature": signature(inputs, model, 1 << 16),
              "outputs": [model(inputs[0]).detach()]}
    path = tmp_path / "answer.pt"

    def later():  # whole or absent, as the float64 worker writes it (a torch.save straight
        time.sleep(0.4)  # to the path was read half-written once: EOFError)
        torch.save(answer, tmp_path / "answer.part")
        os.replace(tmp_path / "answer.part", path)

    writer = threading.Thread(target=later)
    writer.start()
    t0 = time.monotonic()
    outputs, why = stored(str(path), inputs, model, 1 << 16, wait_s=20)
    writer.join()
    assert why == "" and outputs is not None and torch.equal(outputs[0], answer["outputs"][0])
    assert 0.3 < time.monotonic() - t0 < 10

    missing = tmp_path / "missing.pt"
    failed_marker(missing).touch()
    t0 = time.monotonic()
    assert stored(str(missing), inputs, model, 1 << 16, wait_s=20) == (None, "")
    assert time.monotonic() - t0 < 1
    failed_marker(missing).unlink()
    assert stored(str(missing), inputs, model, 1 << 16, wait_s=0.2) == (
        None, "the task's float64 answer was not there after 0.2 s")
    assert stored(str(missing), inputs, model, 1 << 16) == (None, "")  # nothing being made
