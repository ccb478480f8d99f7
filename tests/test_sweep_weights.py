"""A sweep's combinations share one copy of the weights where their own copies would not fit the
plan's share (worker/sweep.py): judged as before, a combination that writes into the shared
weights fails alone, and an out-of-memory beside the other combinations is the sweep's fault."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.templates import _row
from openkernel.evaluation.worker.sweep import _beside_others, _restore_weights, shares_weights
from openkernel.evaluation.worker.task_runtime import load_state, share_state, state_bytes
from openkernel.schemas import Status
from openkernel.task import load_task
from openkernel.templating import Variant

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        return self.linear(x)


batch, n = 4, 64


def get_inputs():
    return [torch.randn(batch, n)]


def get_init_inputs():
    return [n]
'''

# A templated Triton Linear: one program per row and BLOCK_N outputs (the interpreter's cost is
# the programs a call, so each combination stays a few milliseconds).
TEMPLATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

TEMPLATE_PARAMS = {"BLOCK_N": [16, 32, 64]}
BLOCK_N = 32


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, K, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + m * K + k, mask=k < K, other=0.0)
        w = tl.load(w_ptr + n[:, None] * K + k[None, :], mask=(n[:, None] < N) & (k[None, :] < K),
                    other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)
    acc += tl.load(b_ptr + n, mask=n < N, other=0.0)
    tl.store(out_ptr + m * N + n, acc, mask=n < N)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.weight.shape[0]
        out = torch.empty(m, n, device=x.device, dtype=x.dtype)
        linear_kernel[(m, triton.cdiv(n, BLOCK_N))](x, self.linear.weight, self.linear.bias, out,
                                                    n, k, BLOCK_N=BLOCK_N, BLOCK_K=64)
        return out
'''
# The combination BLOCK_N=16 doubles its weights after each call: its own output is right, the
# others' would not be, were the weights not checked and restored.
HOSTILE = TEMPLATE.replace("        return out\n", "        if BLOCK_N == 16:\n"
                           "            self.linear.weight.data.mul_(2.0)\n        return out\n")


def _evaluator(tmp, reference: str = REFERENCE, **ec) -> Evaluator:
    (tmp / "linear.py").write_text(reference)
    config = build_config({"paths": {"scratch_dir": str(tmp / "scratch")},
                           "eval_config": {"correctness_seeds": 1, **ec},
                           "prompt": {"allow_templated": True}})
    ev = Evaluator(load_task(tmp / "linear.py"), config, bench_budget_s=0.1)
    assert ev.probe().ok
    return ev


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    ev = _evaluator(tmp_path_factory.mktemp("sweep_weights"))
    yield ev
    ev.close()


def test_the_rule_shares_where_own_copies_pass_the_plans_share():
    mb = 1 << 20
    # level3/1 MLP on the H200: 2.5 GB of weights, a 2.76 GB footprint, six combinations
    assert shares_weights(6, 2560 * mb, int(1.5 * 2760 * mb))
    assert not shares_weights(6, 10 * mb, int(1.5 * 2760 * mb))  # activations dominate
    assert not shares_weights(1, 2560 * mb, mb)  # one combination: nothing to share
    assert not shares_weights(6, 2560 * mb, 0)  # no plan: each its own, as before


def test_share_state_points_at_the_same_tensors_and_refuses_other_shapes():
    torch.manual_seed(0)
    a, b, c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)
    weight = b.weight  # the module keeps its Parameter object: only its data moves
    assert share_state(a, b) and b.weight is weight
    assert b.weight.data_ptr() == a.weight.data_ptr() and torch.equal(b.bias, a.bias)
    before = c.weight.clone()
    assert not share_state(a, c) and torch.equal(c.weight, before)
    assert not share_state(a, nn.Linear(8, 8).double())  # another dtype: copies
    assert state_bytes(a) == (64 + 8) * 4 and load_state(a, nn.Linear(8, 8))


def test_restore_weights_names_what_changed_and_puts_it_back():
    ref, model = nn.Linear(8, 8), nn.Linear(8, 8)
    load_state(ref, model)
    assert _restore_weights(ref, model) == ""
    with torch.no_grad():
        model.bias.add_(1.0)
    assert _restore_weights(ref, model) == "bias" and torch.equal(model.bias, ref.bias)


def test_combinations_share_the_weights_and_are_judged_as_before(evaluator):
    result, code = evaluator.evaluate_template(TEMPLATE, "triton", "shared")
    assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
    tr = result.template_results
    assert tr["shared_weights"], "64x64 weights thrice over pass 1.5x the footprint: shared"
    assert [r["status"] in ("correct", "faster") for r in tr["combinations"]] == [True] * 3
    assert "BLOCK_N = " in code


def test_a_combination_writing_into_shared_weights_fails_alone(evaluator):
    result, code = evaluator.evaluate_template(HOSTILE, "triton", "hostile")
    rows = {r["params"]["BLOCK_N"]: r for r in result.template_results["combinations"]}
    assert rows[16]["status"] == "incorrect"
    assert "[weights]" in rows[16]["error"] and "linear.weight" in rows[16]["error"]
    assert all(rows[b]["status"] in ("correct", "faster") for b in (32, 64)), rows
    assert result.correctness and "BLOCK_N = 16" not in code


def test_out_of_memory_beside_the_others_is_the_sweeps_fault_not_the_combinations():
    from types import SimpleNamespace

    ev = SimpleNamespace(plan=SimpleNamespace(footprint_bytes=64 << 20))
    modest = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB.")
    greedy = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB.")
    assert _beside_others(ev, modest).startswith("out of memory beside the sweep's other")
    assert _beside_others(ev, greedy) == ""  # more than the whole problem: its own doing
    assert _beside_others(ev, RuntimeError("Tried to allocate 2.00 MiB")) == ""
    row = _row(Variant({"BLOCK_N": 16}, ""), {"built": False, "correct": False, "error": "",
                                              "fault": "out of memory beside the sweep's other "
                                                       "combinations: CUDA out of memory"}, None)
    assert row["status"] == Status.EVALUATOR_FAULT.value and "beside" in row["error"]


@pytest.mark.gpu
def test_gpu_shared_weights_keep_a_gemm_sweep_within_three_footprints(tmp_path):
    """8192 x 8192 weights (256 MiB) and 128 rows: three combinations with their own copies
    would hold four times the weights (~3.8x the footprint); sharing one, the sweep's worker
    stays within 3x while it screens them and judges the winner."""
    ev = _evaluator(tmp_path, REFERENCE.replace("batch, n = 4, 64", "batch, n = 128, 8192"),
                    profile=False)
    try:
        result, code = ev.evaluate_template(TEMPLATE, "triton", "gpu-shared")
    finally:
        ev.close()
    assert result.correctness, result.eval_log
    assert result.template_results["shared_weights"]
    assert all(r["status"] in ("correct", "faster") for r in result.template_results["combinations"])
    assert result.metadata["memory"]["peak_over_footprint"] <= 3.0, result.metadata["memory"]
