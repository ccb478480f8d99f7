"""The taps-outer forms of the Triton convolution (kernels/conv_nhwc.py; the tunable CONV_NHWC).

On the H200 our NCHW implicit GEMM (every A element gathered at its own computed index) ran
at 0.42-0.85x torch.compile on KernelBench's lone convolutions; these forms run taps outer and
channel blocks inner, as torch.compile's own Triton convolution does, over a channels-last copy
of the input or over the input as it is. Each candidate is rendered by the family from the
traced module, with CONV_NHWC forced to each form, and run under the Triton interpreter on the traced input and a
held-out one against torch's convolution.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul
from openkernel.records import Hardware, PrecisionFlags, TaskProbe

import rendered  # tests/rendered.py

PARAMS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4, "BLOCK": 1024,
          "LIBRARY": 0}


class ConvReluBias(nn.Module):
    """KernelBench level2/1's form: convolution, ReLU, a per-channel bias added."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


# name -> (module, input shape): 1/2/3-d; stride, padding, dilation; groups whose 18 channels
# take two BLOCK_K blocks per tap (the second masked); bias or not; an epilogue after it.
CASES = {
    "1d_strided_dilated": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2),
                           (2, 4, 11)),
    "2d_stride2_pad1_dil2_groups2": (lambda: nn.Conv2d(36, 6, 3, stride=2, padding=1,
                                                       dilation=2, groups=2), (2, 36, 7, 6)),
    "3d_padded_no_bias": (lambda: nn.Conv3d(3, 5, (2, 3, 2), padding=(1, 0, 1), bias=False),
                          (1, 3, 3, 5, 4)),
    "2d_relu_bias_add": (ConvReluBias, (2, 3, 7, 6)),
}


class _Spy:
    """Stands in for a Triton kernel in the loaded module: records each launch's arguments."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append(args)
            return self.kernel[grid](*args, **kwargs)
        return launch


def _match(module: nn.Module, x: torch.Tensor, exact: bool = False):
    return FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(module, [x]),
                                               conv_exact=exact), "triton")


def _candidate(module, x, nhwc: int, tmp_path, device="cpu", params=None):
    """The all-Triton candidate with CONV_NHWC forced, its code, and a spy on its convolution."""
    match = _match(module, x)
    family = match.family
    params = family.clean({**(params or PARAMS), "CONV_NHWC": nhwc}, device == "cpu", "triton")
    assert params["CONV_NHWC"] == nhwc and params.get("LIBRARY", 0) == 0
    code = family.render(match, params, "triton")
    loaded = rendered.load(code, tmp_path, f"conv_nhwc_{nhwc}_{id(match)}")
    kernel = re.search(r"def (_k\d+_conv)\(", code).group(1)
    spy = _Spy(getattr(loaded, kernel))
    setattr(loaded, kernel, spy)
    candidate = loaded.ModelNew().to(device)
    candidate.load_state_dict(module.state_dict(), strict=False)
    return candidate, code, spy, family.describe(match, params)


def _held_out(shape) -> tuple[int, ...]:
    return (shape[0] + 1, shape[1], *[s + 1 for s in shape[2:]])


@pytest.mark.parametrize("nhwc", [1, 2, 0])
@pytest.mark.parametrize("name", CASES)
def test_every_form_matches_torch(name, nhwc, interpreter, tmp_path):
    """NCHW gathers (0), taps outer over a channels-last copy (1) or over the input as it is
    (2): the same answers, on the traced input and a held-out one."""
    torch.manual_seed(0)
    make, shape = CASES[name]
    module = make().eval()
    x = torch.randn(*shape)
    candidate, code, spy, label = _candidate(module, x, nhwc, tmp_path)
    for inp in (x, torch.randn(*_held_out(shape))):
        torch.testing.assert_close(candidate(inp), module(inp), atol=1e-4, rtol=1e-4)
    nd = len(shape) - 2
    order = ", ".join(str(2 + j) for j in range(nd))
    assert (f".permute(0, {order}, 1).contiguous().permute(" in code) == (nhwc == 1), code
    assert ("channels-last" in label) == (nhwc == 1), label
    assert ("its input as it is" in label) == (nhwc == 2), label
    read = spy.calls[-1][0]
    if nhwc == 1:  # handed a channels-last copy, viewed as NCHW (its sizes the input's)
        assert read.shape == inp.shape and read.permute(0, *range(2, nd + 2), 1).is_contiguous()
        assert torch.equal(read, inp)
    if nhwc == 2:  # handed the input itself, read through its strides
        assert read.data_ptr() == inp.data_ptr() and read.stride() == inp.stride()


def test_in_place_form_reads_a_strided_view(interpreter, tmp_path):
    """Taps outer over the input as it is: a non-contiguous view (a slice of a wider tensor)
    is read through its own strides, never copied."""
    torch.manual_seed(0)
    module = nn.Conv2d(4, 6, 3, stride=2, padding=1).eval()
    x = torch.randn(2, 4, 9, 8)
    candidate, _, spy, _ = _candidate(module, x, 2, tmp_path)
    wide = torch.randn(2, 4, 9, 20)
    view = wide[:, :, :, 3:11]
    got = candidate(view)
    assert spy.calls[-1][0].data_ptr() == view.data_ptr()
    torch.testing.assert_close(got, module(view), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("nhwc", [0, 2])
@pytest.mark.parametrize("name", ["1d_strided_dilated", "2d_stride2_pad1_dil2_groups2",
                                  "3d_padded_no_bias"])
def test_offsets_are_32_bit_unless_wide(name, nhwc, interpreter, tmp_path):
    """The NCHW kernel adds each row's window start to each column's channel and tap (the
    gradient form of a transposed one computes every A element's index), the taps-outer one
    each row's per tap:
    in int32 below 2^30 elements (the taps-outer one: its rows and input below 2^31; 64-bit
    division is emulated on the GPU), in int64 past it (WIDE), the same outputs either way."""
    torch.manual_seed(0)
    make, shape = CASES[name]
    module = make().eval()
    x = torch.randn(*shape)
    _, code, _, _ = _candidate(module, x, nhwc, tmp_path)
    assert "WIDE=max(" in code and "    if WIDE:" in code and ".to(tl.int64)" in code
    for forced in ("True", "False"):
        wide = re.sub(r"WIDE=max\(.*?\) >= 2\*\*3[01]", f"WIDE={forced}", code)
        assert wide != code
        loaded = rendered.load(wide, tmp_path, f"conv_wide_{forced}_{name}_{nhwc}")
        candidate = loaded.ModelNew()
        candidate.load_state_dict(module.state_dict(), strict=False)
        torch.testing.assert_close(candidate(x), module(x), atol=1e-4, rtol=1e-4)


def test_a_channels_last_input_is_read_in_place(interpreter, tmp_path):
    """An input already channels-last is handed to the kernel as it is (no copy), and the
    output keeps the reference's layout (NCHW contiguous)."""
    torch.manual_seed(0)
    module = nn.Conv2d(4, 6, 3, padding=1).eval()
    x = torch.randn(2, 4, 5, 6)
    candidate, code, spy, _ = _candidate(module, x, 1, tmp_path)
    assert "in0 = in0.contiguous()" not in code and "x = x.contiguous()" not in code, code
    last = x.contiguous(memory_format=torch.channels_last)
    got = candidate(last)
    assert spy.calls[-1][0].data_ptr() == last.data_ptr()
    assert got.is_contiguous()
    torch.testing.assert_close(got, module(x), atol=1e-4, rtol=1e-4)


def test_bfloat16_channels_last(interpreter, tmp_path):
    torch.manual_seed(0)
    module = nn.Conv2d(4, 6, 3, stride=2, padding=1).to(torch.bfloat16).eval()
    x = torch.randn(2, 4, 7, 6, dtype=torch.bfloat16)
    candidate, _, _, _ = _candidate(module, x, 1, tmp_path)
    got = candidate(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), module.float()(x.float()), atol=3e-2, rtol=3e-2)


def test_conv_nhwc_is_offered_where_a_gemm_convolution_is():
    """Offered for a convolution (alone or with an epilogue), not for transposed or depthwise
    ones; on the GPU the first all-Triton start point runs taps outer over the input as it is
    where there are NHWC_MIN_CHANNELS input channels or more, else none runs taps outer; the
    precision record and the launch's precision flags are the same in every form."""
    def tunables(module, shape):
        return [t.name for t in _match(module.eval(), torch.randn(*shape)).family.tunables]

    assert "CONV_NHWC" in tunables(nn.Conv1d(3, 4, 3), (2, 3, 9))
    # GROUP_M orders a GEMM's tiles: a plan of convolutions alone has no use for it
    assert "GROUP_M" not in tunables(nn.Conv1d(3, 4, 3), (2, 3, 9))
    assert "GROUP_M" in tunables(nn.Sequential(nn.Conv1d(3, 4, 3), nn.Flatten(),
                                               nn.Linear(28, 64)), (32, 3, 9))
    assert "CONV_NHWC" not in tunables(nn.ConvTranspose1d(3, 4, 3, stride=2), (2, 3, 5))
    assert "CONV_NHWC" not in tunables(nn.Conv2d(4, 4, 3, groups=4), (2, 4, 6, 6))
    # (16 input channels and more start taps outer too; 3 start NCHW only: NHWC_MIN_CHANNELS)
    for module, shape, wide in [(nn.Conv2d(32, 8, 3), (2, 32, 7, 6), True),
                                (nn.Conv2d(16, 8, 3), (2, 16, 7, 6), True),
                                (nn.Conv2d(3, 8, 3), (2, 3, 7, 6), False),
                                (ConvReluBias(), (2, 3, 7, 6), False)]:
        match = _match(module.eval(), torch.randn(*shape), exact=True)
        family = match.family
        starts = [family.clean(dict(p), False, "triton") for p in family.starts]
        first = next(p for p in starts if p.get("LIBRARY", 0) == 0)
        assert first["CONV_NHWC"] == (2 if wide else 0)
        assert {p["CONV_NHWC"] for p in starts} == ({1, 2} if wide else {0})
        gpu = Hardware(label="H200", device="cuda", gpu_arch="sm_90")
        probe = TaskProbe(ok=True, hardware=gpu, flags=PrecisionFlags(conv_tf32=True),
                          conv_exact=True)
        codes = {}
        for nhwc in (0, 1, 2):
            params = {**first, "CONV_NHWC": nhwc}
            assert [(p.op, p.precision) for p in family.precision(match, params, probe)] == \
                [("convolution", "fp32")]
            codes[nhwc] = family.render(match, params, "triton")
        for flag in ("IEEE", "TF32X3"):
            found = [re.search(flag + r"=(.*?),", codes[n]).group(1).replace("_x.", ".")
                     for n in (0, 1, 2)]
            assert found[0] == found[1] == found[2], found
        space = family.space(True, "triton")
        assert {p["CONV_NHWC"] for p in space} == {0, 1, 2}
        assert len({family.render(match, p, "triton") for p in space}) == len(space)


@pytest.mark.gpu
def test_channels_last_on_the_gpu(tmp_path):
    """KernelBench-like sizes compiled for the GPU at the first curated start point, in each
    form: correct with TF32 off (IEEE), and with cuDNN's TF32 on no further from float64 than
    the NCHW form."""
    torch.manual_seed(0)
    cases = [(nn.Conv2d(64, 128, 3, padding=1), (8, 64, 64, 64)),
             (nn.Conv2d(32, 64, 5, stride=2, padding=2, dilation=2, groups=2), (4, 32, 65, 47)),
             (nn.Conv1d(64, 128, 3, stride=3, dilation=4), (16, 64, 2049)),
             (nn.Conv3d(16, 32, 3, padding=1), (2, 16, 16, 32, 32)),
             (ConvReluBias(), (16, 3, 128, 128))]
    allow = torch.backends.cudnn.allow_tf32
    try:
        for k, (module, shape) in enumerate(cases):
            module = module.eval()  # (on the CPU: traced there)
            x = torch.randn(*shape)
            params = next(p for p in _match(module, x).family.starts if p.get("LIBRARY", 0) == 0)
            gpu, xc = copy.deepcopy(module).cuda(), x.cuda()
            want = copy.deepcopy(module).double().cuda()(x.double().cuda())
            errors = {}
            for nhwc in (1, 2, 0):
                candidate, _, spy, _ = _candidate(module, x, nhwc, tmp_path, "cuda", params)
                torch.backends.cudnn.allow_tf32 = False
                torch.testing.assert_close(candidate(xc), gpu(xc), atol=1e-3, rtol=1e-3,
                                           msg=f"case {k}, CONV_NHWC {nhwc}")
                torch.backends.cudnn.allow_tf32 = True
                got = candidate(xc).double()
                errors[nhwc] = float((got - want).abs().max().detach() / want.abs().max())
                assert len(spy.calls) == 2
            assert max(errors[1], errors[2]) <= 2 * errors[0] + 1e-6, (k, errors)
    finally:
        torch.backends.cudnn.allow_tf32 = allow


def test_no_tile_is_wider_than_what_it_covers():
    """A tile wider than the GEMM's output columns (a convolution's output channels per
    group) or the convolution's K (input channels x taps; taps outer, a channel block) only
    adds masked work: starts, neighbours and moves stop at the smallest tile that covers it.
    (On the H200 level1/57's 64 output channels won at BLOCK_N 64 in every branch, each having
    started at 128.)"""
    import random

    def points(module, shape):
        family = _match(module.eval(), torch.randn(*shape)).family
        starts = [family.start(random.Random(0), False, i, "triton") for i in range(6)]
        near = [p for s in starts for p in family.neighbours(s, False, "triton")]
        moved = [family.mutate(s, random.Random(k), False, "triton")[0]
                 for k, s in enumerate(starts * 8)]
        # (a library-backed plan's points pin the tiles it has no use for)
        return family, [p for p in starts + near + moved if not p.get("LIBRARY")]

    family, seen = points(nn.Conv2d(16, 64, 3), (2, 16, 9, 9))
    assert max(p["BLOCK_N"] for p in seen) == 64
    assert {p["BLOCK_K"] for p in seen if p["CONV_NHWC"]} == {16}  # one 16-channel block a tap
    wide = {**seen[0], "BLOCK_N": 256, "BLOCK_K": 64}
    assert family.clean({**wide, "CONV_NHWC": 0}, False, "triton")["BLOCK_K"] == 64  # K = 144
    assert family.clean({**wide, "CONV_NHWC": 2}, False, "triton")["BLOCK_K"] == 16
    assert family.clean(wide, False, "triton")["BLOCK_N"] == 64
    # the space itself keeps every value (a stored point outside the bounds still renders)
    assert {p["BLOCK_N"] for p in family.points(False, "triton")} >= {128, 256}
    # 6 output channels: the narrowest tile there is; a GEMM's 48 columns: 64
    _, seen = points(nn.Conv2d(3, 6, 3), (2, 3, 9, 9))
    assert {p["BLOCK_N"] for p in seen} == {16}
    _, seen = points(nn.Sequential(nn.Linear(32, 48), nn.ReLU()), (64, 32))
    assert max(p["BLOCK_N"] for p in seen) == 64 and max(p["BLOCK_K"] for p in seen) == 64
    # wide enough: nothing changes (level2's 8192 output features)
    _, seen = points(nn.Sequential(nn.Linear(64, 512), nn.ReLU()), (8, 64))
    assert max(p["BLOCK_N"] for p in seen) == 256
