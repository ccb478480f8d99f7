"""The direct transposed convolution (issue 23, "past the seed"; kernels/conv_transposed.py).

Each output phase (o mod stride) is a dense GEMM over only the taps that reach it, instead of
the gradient form's loop over every tap with those the stride skips masked; the tunable
TCONV_DIRECT picks between the two. Each candidate is rendered from the traced module and run
under the Triton interpreter in this process on the traced input and a held-out one, against
torch's ConvTranspose.
"""

from __future__ import annotations

import contextlib
import random
import re

import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.base import ProposalRequest
from openkernel.generators.compiler.families import FusedMatmul
from openkernel.generators.compiler.modelnew import kernel_source, render
from openkernel.generators.offline import OfflineGenerator
from openkernel.records import Hardware, TaskProbe
from openkernel.task import load_task

import rendered  # tests/rendered.py

PARAMS = {"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4, "BLOCK": 1024,
          "num_warps": 4, "num_stages": 2}

# name -> (module, input shape): 1/2/3-d, strides 2-5 (stride 1: FLIPPED below), padding, output_padding, groups, bias or
# not, kernels not a multiple of the stride, dilations sharing a factor with it (some phases
# reached by no tap) or not.
CASES = {
    "1d_stride2_outpad": (lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1,
                                                     output_padding=1), (2, 4, 7)),
    "1d_stride2_dilation2": (lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1,
                                                        dilation=2), (2, 4, 7)),
    "2d_stride2_groups": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                     output_padding=1, groups=2, bias=False),
                          (2, 4, 5, 7)),
    "2d_stride3x2_kernel2x4": (lambda: nn.ConvTranspose2d(3, 5, (2, 4), stride=(3, 2),
                                                          padding=(0, 1)), (2, 3, 4, 5)),
    "2d_stride2x5_dilated": (lambda: nn.ConvTranspose2d(3, 4, 3, stride=(2, 5), padding=1,
                                                        dilation=2), (1, 3, 4, 5)),
    "3d_stride2x1x2_groups": (lambda: nn.ConvTranspose3d(4, 6, (2, 3, 2), stride=(2, 1, 2),
                                                         padding=(0, 1, 1), dilation=(1, 2, 1),
                                                         groups=2), (1, 4, 2, 3, 4)),
}


def _candidate(module: nn.Module, x: torch.Tensor, tmp_path, device: str = "cpu"):
    """The direct form's candidate module and its code."""
    plans = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(module, [x])),
                                "triton").spec["plans"]
    plan = plans[(0, 0, 1)]
    code = render(plan, PARAMS)
    loaded = rendered.load(code, tmp_path, f"tconv_{id(plan)}")
    candidate = loaded.ModelNew().to(device)
    candidate.load_state_dict(module.state_dict(), strict=False)
    return candidate, code


def _held_out(shape) -> tuple[int, ...]:
    return (shape[0], shape[1], *[s + 1 for s in shape[2:]])


@pytest.mark.parametrize("name", CASES)
def test_the_direct_form_matches_torch(name, interpreter, tmp_path):
    torch.manual_seed(0)
    make, shape = CASES[name]
    module = make().eval()
    x = torch.randn(*shape)
    candidate, code = _candidate(module, x, tmp_path)
    for inp in (x, torch.randn(*_held_out(shape))):
        torch.testing.assert_close(candidate(inp), module(inp), atol=1e-4, rtol=1e-4)
    assert "direct" in code and ".permute(" in code


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_direct_form_in_half_precision(dtype, interpreter, tmp_path):
    torch.manual_seed(0)
    module = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1).to(dtype).eval()
    x = torch.randn(2, 4, 5, 6, dtype=dtype)
    candidate, _ = _candidate(module, x, tmp_path)
    want = module.float()(x.float())
    got = candidate(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)


def test_no_tap_is_masked_for_its_stride(tmp_path):
    """With stride > 1 the direct kernel's loop runs over the phase's own taps only: no
    per-tap ``% s == 0`` test (the gradient form has one per strided dim)."""
    module = CASES["3d_stride2x1x2_groups"][0]().eval()
    x = torch.randn(1, 4, 2, 3, 4)
    trace = trace_forward(module, [x])
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    family, plans = match.family, match.spec["plans"]
    direct = kernel_source(plans[(0, 0, 1)].kernels[0])
    gradient = kernel_source(plans[(0, 0, 0)].kernels[0])
    loop = direct[direct.index("    for kk in range("):]
    assert not re.search(r"% \d+ == 0", loop), loop
    assert "range(0, T_d * T_h * T_w * nck)" in loop  # (T: the phase's taps, per dim)
    assert len(re.findall(r"t_\w % 2 == 0", gradient)) == 2
    assert "4 output phases" in family.describe(match, {"TCONV_DIRECT": 1})
    assert "gradient form" in family.describe(match, {"TCONV_DIRECT": 0})


def test_tconv_direct_is_a_tunable_and_the_branches_take_both_forms(tmp_path):
    """A lone transposed convolution: branch 0 starts direct, branch 1 in the gradient form; no
    two points of the space write the same code; a plain convolution has no TCONV_DIRECT, and a
    library-backed plan (cuDNN) pins it to 0."""
    module = nn.ConvTranspose1d(3, 4, 3, stride=2).eval()
    trace = trace_forward(module, [torch.randn(2, 3, 5)])
    path = tmp_path / "task.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(2, 3, 5)]"
                    "\n\n\ndef get_init_inputs():\n    return []\n")  # names only: the trace is ours
    task = load_task(path)
    cpu = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu",
                   interpreter=True)
    probe = TaskProbe(ok=True, trace=trace, hardware=cpu)
    forms = []
    for branch in (0, 1):
        proposal = OfflineGenerator().propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=0, branch=branch, parent=None,
            best=None, rng=random.Random(0)))
        forms.append((proposal.params["TCONV_DIRECT"], "direct" in proposal.description))
    assert forms == [(1, True), (0, False)]
    match = FusedMatmul().match(task, probe, "triton")
    family = match.family
    space = family.space(True, "triton")
    assert {p["TCONV_DIRECT"] for p in space} == {0, 1} and "LIBRARY" not in space[0]
    assert len({family.render(match, p, "triton") for p in space}) == len(space)
    plain = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(
        nn.Conv1d(3, 4, 3).eval(), [torch.randn(2, 3, 5)])), "triton")
    assert "TCONV_DIRECT" not in [t.name for t in plain.family.tunables]
    relu = nn.Sequential(nn.ConvTranspose1d(3, 4, 3, stride=2), nn.ReLU()).eval()
    both = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(
        relu, [torch.randn(2, 3, 5)])), "triton")
    assert set(both.spec["plans"]) == {(1, 0, 0), (0, 0, 0), (0, 0, 1)}
    assert both.family.clean({"LIBRARY": 1, "TCONV_DIRECT": 1}, True, "triton")[
        "TCONV_DIRECT"] == 0


@contextlib.contextmanager
def _cudnn_exact():
    """TF32 off, as the reference's cuDNN then computes (the kernels' IEEE flag follows it)."""
    allow = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = allow


def _matches_on_the_gpu(candidate, module, shape, msg: str) -> None:
    module = module.cuda()
    for s in (shape, _held_out(shape)):
        x = torch.randn(*s, device="cuda")
        torch.testing.assert_close(candidate(x), module(x), atol=1e-4, rtol=1e-4, msg=msg)


@pytest.mark.gpu
def test_direct_on_the_gpu(tmp_path):
    """The direct kernels compiled for the GPU (no interpreter), each correct."""
    with _cudnn_exact():
        for name, (make, shape) in CASES.items():
            torch.manual_seed(0)
            module = make().eval()
            candidate, _ = _candidate(module, torch.randn(*shape), tmp_path, device="cuda")
            _matches_on_the_gpu(candidate, module, shape, name)


# Stride 1: a plain convolution over the flipped kernel (ConvSpec.flipped), in either layout.
FLIPPED = {
    "1d_dilated_no_bias": (lambda: nn.ConvTranspose1d(4, 6, 5, padding=2, dilation=3,
                                                      bias=False), (2, 4, 9)),
    "2d_groups_padded": (lambda: nn.ConvTranspose2d(4, 6, 3, padding=1, groups=2), (2, 4, 5, 7)),
    "3d_kernel2x3x1": (lambda: nn.ConvTranspose3d(3, 5, (2, 3, 1)), (1, 3, 3, 4, 2)),
}


@pytest.mark.parametrize("name", FLIPPED)
@pytest.mark.parametrize("nhwc", [0, 1])
def test_stride_one_is_a_plain_convolution_over_the_flipped_kernel(name, nhwc, interpreter,
                                                                    tmp_path):
    torch.manual_seed(0)
    make, shape = FLIPPED[name]
    module = make().eval()
    x = torch.randn(*shape)
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(module, [x])),
                                "triton")
    family = match.family
    assert (0, 0, 1) not in match.spec["plans"]  # (no phases to split: nothing direct)
    params = family.clean({**PARAMS, "CONV_NHWC": nhwc}, True, "triton")
    assert params["CONV_NHWC"] == nhwc
    code = family.render(match, params, "triton")
    assert ".flip(" in code and "over its flipped kernel" in family.describe(match, params)
    candidate = rendered.load(code, tmp_path, f"flipped_{name}_{nhwc}").ModelNew()
    candidate.load_state_dict(module.state_dict(), strict=False)
    for inp in (x, torch.randn(*_held_out(shape))):
        torch.testing.assert_close(candidate(inp), module(inp), atol=1e-4, rtol=1e-4)


def test_a_padding_past_the_kernel_stays_transposed(interpreter, tmp_path):
    """Padding over dil * (k - 1) crops the output: no plain convolution has that (a negative
    padding), so the gradient form computes it."""
    module = nn.ConvTranspose1d(4, 6, 3, padding=3).eval()
    x = torch.randn(2, 4, 12)
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(module, [x])),
                                "triton")
    code = render(match.spec["plans"][(0, 0, 0)], PARAMS)
    assert ".flip(" not in code and "Transposed convolution" in code
    candidate = rendered.load(code, tmp_path, "cropped").ModelNew()
    candidate.load_state_dict(module.state_dict(), strict=False)
    torch.testing.assert_close(candidate(x), module(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_flipped_on_the_gpu(tmp_path):
    """The stride-1 forms compiled for the GPU, in both layouts, each correct."""
    with _cudnn_exact():
        for name, (make, shape) in FLIPPED.items():
            torch.manual_seed(0)
            module = make().eval()
            match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(
                module, [torch.randn(*shape)])), "triton")
            for nhwc in (0, 1):
                params = match.family.clean({**PARAMS, "CONV_NHWC": nhwc}, False, "triton")
                code = match.family.render(match, params, "triton")
                candidate = rendered.load(code, tmp_path, f"gpu_{name}_{nhwc}").ModelNew().cuda()
                candidate.load_state_dict(module.state_dict(), strict=False)
                _matches_on_the_gpu(candidate, module, shape, f"{name}, CONV_NHWC {nhwc}")
