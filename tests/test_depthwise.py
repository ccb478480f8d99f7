"""Depthwise convolutions computed tap by tap (compiler/kernels/depthwise.py), not as an
implicit GEMM whose tiles would be nearly all padding (KernelBench level1/82: 0.02x
torch.compile that way on the H200).

Each candidate is rendered from the traced module and run under the Triton interpreter in this
process, on the traced batch and on held-out batch sizes and spatial sizes.
"""

from __future__ import annotations


import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul, plan_for
from openkernel.generators.compiler.library import kernel_precision
from openkernel.generators.compiler.modelnew import render
from openkernel.records import PrecisionFlags, TaskProbe

import rendered  # tests/rendered.py


class Depthwise2d(nn.Module):  # level1/82-84's shape of problem, small, with a multiplier
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                              groups=3)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


class Depthwise1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 5, stride=2, padding=2, groups=4, bias=False)

    def forward(self, x):
        return self.conv(x)


class Depthwise3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 2, 3, padding=1, groups=2)

    def forward(self, x):
        return self.conv(x)


CASES = {"2d_multiplier_epilogue": (Depthwise2d, (3, 9, 7), [(1, 3, 5, 4), (3, 3, 12, 9)]),
         "1d_strided_no_bias": (Depthwise1d, (4, 19), [(1, 4, 8), (5, 4, 33)]),
         "3d": (Depthwise3d, (2, 4, 5, 6), [(1, 2, 3, 3, 3)])}


def _module(plan, tmp_path, name: str, block: int, wide: bool = False):
    code = render(plan, {"BLOCK": block, "num_warps": 4})
    if wide:  # the int64 positions of a plane past 2^31 elements, on small planes
        assert code.count(">= 2**31") == 1
        code = code.replace(">= 2**31", ">= 0")
    return rendered.load(code, tmp_path, name), code


@pytest.mark.parametrize("name", CASES)
def test_a_depthwise_convolution_is_computed_tap_by_tap(name, interpreter, tmp_path):
    make, traced, held_out = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    trace = trace_forward(model, [torch.randn(2, *traced)])
    plan = plan_for(None, trace)
    conv = [k for k in plan.kernels if k.kind == "conv"]
    assert len(conv) == 1 and conv[0].conv.depthwise, [k.kind for k in plan.kernels]
    # a block smaller than a plane, one holding several rows, and int64 positions
    for block, wide in ((16, False), (64, False), (16, True)):
        module, code = _module(plan, tmp_path, f"dw_{name}_{block}_{wide}", block, wide)
        assert "tl.dot" not in code and "depthwise convolution" in code
        candidate = module.ModelNew()
        candidate.load_state_dict(model.state_dict(), strict=False)
        for shape in [(2, *traced), *held_out]:
            x = torch.randn(*shape)
            torch.testing.assert_close(candidate(x), model(x), atol=1e-5, rtol=1e-5)


def test_depthwise_tunes_its_block_and_computes_in_float32(tmp_path):
    """Its tunables are a pointwise kernel's (no GEMM tiles to sweep), and on a GPU whose
    cuDNN TF32 flag is on it still reports float32: it multiplies in FMAs, not tensor cores."""
    trace = trace_forward(Depthwise2d().eval(), [torch.randn(2, 3, 9, 7)])
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    names = {t.name for t in match.family.tunables}
    assert "BLOCK" in names and not names & {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"}
    plan = plan_for(None, trace)
    flags = PrecisionFlags(matmul_tf32=False, conv_tf32=True)
    assert [(p.by, p.precision) for p in kernel_precision(plan, True, flags)] == [("triton", "fp32")]
    # A grouped convolution with more than one input channel a group stays a GEMM.
    grouped = nn.Conv2d(4, 6, 3, groups=2).eval()
    plan = plan_for(None, trace_forward(grouped, [torch.randn(2, 4, 8, 8)]))
    assert [k.conv.depthwise for k in plan.kernels if k.kind == "conv"] == [False]


@pytest.mark.gpu
def test_depthwise_on_the_gpu(tmp_path, monkeypatch):
    """Compiled for the GPU (no interpreter), each case correct against cuDNN's float32."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    for name, (make, traced, held_out) in CASES.items():
        torch.manual_seed(0)
        model = make().eval()
        trace = trace_forward(model, [torch.randn(2, *traced)])
        module, _ = _module(plan_for(None, trace), tmp_path, f"gpu_dw_{name}", 256)
        candidate = module.ModelNew().cuda()
        candidate.load_state_dict(model.state_dict(), strict=False)
        model = model.cuda()
        for shape in [(2, *traced), *held_out, (16, *traced[:1], *(4 * s for s in traced[1:]))]:
            x = torch.randn(*shape, device="cuda")
            torch.testing.assert_close(candidate(x), model(x), atol=1e-5, rtol=1e-5)
