"""KMAJOR: a float32 GEMM operand that is not K-contiguous is copied K-major before the launch.

Hopper's tensor cores take TF32 tiles K-major only, so a 3xTF32 dot of an N-major B (``A @ B``,
attention's ``att @ v``) or an M-major A ran ~2x slower than IEEE tiles on the H200. Where the
plan cannot tell an operand is K-contiguous, the tunable decides whether the forward copies it
so; nn.Linear's ``x @ W.t()`` is K-major already and has no such tunable. Each candidate is
rendered from the traced module, its kernel launch watched for the operand strides it gets,
and run under the Triton interpreter against the reference, with KMAJOR forced to 0 and to 1.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.base import ProposalRequest
from openkernel.generators.compiler.families import FusedMatmul, plan_for
from openkernel.generators.compiler.modelnew import render
from openkernel.generators.offline import OfflineGenerator
from openkernel.records import Hardware, TaskProbe
from openkernel.task import load_task

import rendered  # tests/rendered.py

PARAMS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4,
          "num_stages": 2}
GPU = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90")


class Gemm(nn.Module):  # KernelBench level1/1: torch.matmul(A, B), B row-major (N-major)
    def forward(self, A, B):
        return A @ B


class AttV(nn.Module):  # attention's att @ v: v (B, T, hs) is N-major
    def forward(self, att, v):
        return att @ v


class TransposedA(nn.Module):  # an M-major A as well as an N-major B
    def forward(self, q, v):
        return torch.bmm(q.transpose(1, 2), v)


class Broadcast(nn.Module):  # B broadcast over the batch (stride 0): copied once, not per batch
    def forward(self, x, w):
        return x @ w


class Linear(nn.Module):  # x @ W.t(): B is K-major already
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(96, 80)

    def forward(self, x):
        return torch.relu(self.fc(x))


class _Watched:
    """A kernel whose launches record the strides of their two operands."""

    def __init__(self, kernel, strides: list):
        self.kernel, self.strides = kernel, strides

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.strides.append((args[0].stride(), args[1].stride()))
            return self.kernel[grid](*args, **kwargs)
        return launch


def _candidate(model: nn.Module, plan, value: int, tmp_path, name: str):
    """The candidate for KMAJOR=``value``, its weights loaded, the strides its GEMM gets, code."""
    code = render(plan, {**PARAMS, "KMAJOR": value})
    module = rendered.load(code, tmp_path, f"{name}_{value}")
    strides: list = []
    module._k0_matmul = _Watched(module._k0_matmul, strides)
    candidate = module.ModelNew()
    candidate.load_state_dict(model.state_dict(), strict=False)
    return candidate, strides, code


def test_a_plain_gemm_copies_its_n_major_b_k_major(interpreter, tmp_path):
    torch.manual_seed(0)
    model = Gemm()
    trace = trace_forward(model, [torch.randn(64, 96), torch.randn(96, 80)])
    plan = plan_for(None, trace)
    assert [k.to_k_major for k in plan.kernels] == [("b",)]
    for value in (0, 1):
        candidate, strides, code = _candidate(model, plan, value, tmp_path, "gemm")
        assert f"\nKMAJOR = {value}\n" in code
        assert "    _k0_matmul_b = _k_major(_k0_matmul_b, -2)\n" in code
        for m, k, n in ((64, 96, 80), (33, 50, 47)):  # traced, held out
            a, b = torch.randn(m, k), torch.randn(k, n)
            torch.testing.assert_close(candidate(a, b), model(a, b), atol=1e-4, rtol=1e-4)
        # K-contiguous B (stride_bk 1) with the copy, B as given (stride_bn 1) without it
        assert strides == [((96, 1), (1, 96) if value else (80, 1)),
                           ((50, 1), (1, 50) if value else (47, 1))], strides
    # Offered on a GPU (its start: 1, with TF32X3), pinned to 0 under the interpreter.
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    family = match.family
    kmajor = next(t for t in family.tunables if t.name == "KMAJOR")
    assert kmajor.values(True) == (0,) and kmajor.values(False) == (0, 1)
    for index in range(len(family.starts)):
        start = family.start(random.Random(0), False, index, "triton")
        assert (start["KMAJOR"], start["TF32X3"]) == (1, 1), start
    assert family.start(random.Random(0), True, 0, "triton")["KMAJOR"] == 0
    half = plan_for(None, trace_forward(model, [torch.randn(64, 96, dtype=torch.bfloat16),
                                                torch.randn(96, 80, dtype=torch.bfloat16)]))
    assert [k.to_k_major for k in half.kernels] == [()]  # (16-bit tiles may be transposed)


BATCHED = {  # name -> (module, inputs, operands copied, strides of A and B with KMAJOR=1)
    "att_v": (AttV, ((2, 24, 40), (2, 40, 16)), ("b",), ((960, 40, 1), (640, 1, 40))),
    "transposed_a": (TransposedA, ((2, 40, 24), (2, 40, 16)), ("a", "b"),
                     ((960, 40, 1), (640, 1, 40))),
    "broadcast": (Broadcast, ((2, 24, 40), (1, 40, 16)), ("b",), ((960, 40, 1), (0, 1, 40))),
}


@pytest.mark.parametrize("name", BATCHED)
def test_batched_operands_are_copied_k_major(name, interpreter, tmp_path):
    make, shapes, copied, k_major = BATCHED[name]
    torch.manual_seed(0)
    model = make()
    plan = plan_for(None, trace_forward(model, [torch.randn(s) for s in shapes]))
    assert [k.to_k_major for k in plan.kernels] == [copied]
    for value in (0, 1):
        candidate, strides, code = _candidate(model, plan, value, tmp_path, name)
        for operand, k in (("a", -1), ("b", -2)):
            line = f"    _k0_matmul_{operand} = _k_major(_k0_matmul_{operand}, {k})\n"
            assert (line in code) == (operand in copied), code
        inputs = [torch.randn(s) for s in shapes]
        torch.testing.assert_close(candidate(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)
        given = tuple(x.stride() for x in inputs)
        if name == "transposed_a":
            given = (inputs[0].transpose(1, 2).stride(), given[1])
        elif name == "broadcast":
            given = (given[0], (0, *given[1][1:]))
        assert strides == [k_major if value else given], (value, strides)


def test_a_linear_layer_is_k_major_already(interpreter, tmp_path):
    """nn.Linear reads W.t() in place: no copy is written, and no tunable offered."""
    torch.manual_seed(0)
    model = Linear().eval()
    trace = trace_forward(model, [torch.randn(64, 96)])
    plan = plan_for(None, trace)
    assert [k.to_k_major for k in plan.kernels] == [()]
    for value in (0, 1):
        candidate, strides, code = _candidate(model, plan, value, tmp_path, "linear")
        assert "_k_major" not in code
        x = torch.randn(64, 96)
        torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
        assert strides == [((96, 1), (1, 96))]
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace, hardware=GPU), "triton")
    assert "KMAJOR" not in [t.name for t in match.family.tunables]
    assert "TF32X3" in [t.name for t in match.family.tunables]


def test_a_gpu_candidate_starts_k_major_and_says_so(tmp_path):
    """The offline generator's first candidate on a GPU tries KMAJOR=1 with TF32X3=1, and its
    description shows it as it shows the other tunables (rendered only: nothing runs)."""
    trace = trace_forward(Gemm(), [torch.randn(64, 96), torch.randn(96, 80)])
    path = tmp_path / "task.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, A, B):\n        return A @ B\n\n\n"
                    "def get_inputs():\n    return [torch.randn(64, 96), torch.randn(96, 80)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    proposal = OfflineGenerator().propose(ProposalRequest(
        task=load_task(path), probe=TaskProbe(ok=True, trace=trace, hardware=GPU),
        backend="triton", iteration=0, branch=0, parent=None, best=None, rng=random.Random(0)))
    assert proposal.params["KMAJOR"] == 1 and proposal.params["TF32X3"] == 1
    assert "KMAJOR=1" in proposal.description and "TF32X3=1" in proposal.description
    assert "\nKMAJOR = 1\n" in proposal.code
    assert "_k0_matmul_b = _k_major(_k0_matmul_b, -2)" in proposal.code


@pytest.mark.gpu
def test_k_major_three_tf32_products_on_the_gpu(tmp_path):
    """A 2048^3 float32 A @ B (both row-major) with TF32X3=1: B copied K-major (KMAJOR=1) or
    read in place, each within the precision check's bound (16x the reference's own error
    against float64)."""
    from openkernel.evaluation.worker.correctness import relative_error

    torch.manual_seed(0)
    model = Gemm()
    plan = plan_for(None, trace_forward(model, [torch.randn(64, 96), torch.randn(96, 80)]))
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    with torch.no_grad():
        exact = a.double() @ b.double()
        err_ref = relative_error(model(a, b), exact)
        for value in (1, 0):
            module = rendered.load(render(plan, {
                "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                "num_stages": 3, "TF32X3": 1, "KMAJOR": value}), tmp_path, f"gpu_kmajor_{value}")
            strides: list = []
            module._k0_matmul = _Watched(module._k0_matmul, strides)
            err = relative_error(module.ModelNew().cuda()(a, b), exact)
            assert err <= 16 * err_ref, (value, err, err_ref)
            assert strides == [((2048, 1), (1, 2048) if value else (2048, 1))], strides
