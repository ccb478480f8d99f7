"""A convolution computes no lower than the reference's own (issue 23, found on the H200).

cuDNN's TF32 is on by PyTorch's default, yet for some shapes (KernelBench level1/75: a grouped,
dilated transposed convolution) cuDNN picks float32 kernels; a Triton convolution in TF32 was
then 10x over the reference's own error and failed the precision check. The probe measures it
(``precision.conv_exact``: the reference's output with TF32 on, then off) and the offline
generator's convolutions compute in 3xTF32 (near float32, on tensor cores) there.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker import precision
from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul
from openkernel.generators.compiler.modelnew import render
from openkernel.records import Hardware, PrecisionFlags, TaskProbe

import rendered  # tests/rendered.py

PARAMS = {"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4, "BLOCK": 1024,
          "num_warps": 4, "num_stages": 2}
CONV = {"convolution"}


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to TF32's 10 mantissa bits (what a TF32 tensor core reads)."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


def _module() -> nn.Module:  # level1/75's form, small
    return nn.ConvTranspose2d(8, 16, (3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1),
                              groups=4, bias=False).eval()


def test_conv_exact_tells_tf32_rounding_from_float32():
    torch.manual_seed(0)
    module, x = _module(), torch.randn(2, 8, 9, 11)
    calls = []

    def forward(rounds: bool):
        def run():  # a library that rounds to TF32 only while cuDNN's flag allows it
            calls.append(torch.backends.cudnn.allow_tf32)
            with torch.no_grad():
                if rounds and torch.backends.cudnn.allow_tf32:
                    w = _tf32(module.weight)
                    return [nn.functional.conv_transpose2d(
                        _tf32(x), w, stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4)]
                return [module(x)]
        return run

    assert torch.backends.cudnn.allow_tf32
    assert precision.conv_exact(forward(rounds=False), CONV) is True
    assert calls == [True, False] and torch.backends.cudnn.allow_tf32  # the flag comes back
    assert precision.conv_exact(forward(rounds=True), CONV) is False
    calls.clear()
    assert precision.conv_exact(forward(rounds=False), {"gelu", "mm"}) is False
    assert calls == []  # no convolution: nothing run
    nan = [torch.full((4,), float("nan"))]
    assert precision.conv_exact(lambda: nan, CONV) is False
    torch.backends.cudnn.allow_tf32 = False
    try:  # TF32 already off: our convolutions follow the flag (IEEE) without a measurement
        assert precision.conv_exact(forward(rounds=False), CONV) is False
    finally:
        torch.backends.cudnn.allow_tf32 = True


def _match(module, x, exact: bool):
    return FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(module, [x]),
                                               conv_exact=exact), "triton")


def _load(code: str, tmp_path, name: str):
    return rendered.load(code, tmp_path, name).ModelNew


def test_an_exact_reference_makes_every_plan_exact(tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the interpreter's check")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    module, x = _module(), torch.randn(2, 8, 9, 11)
    exact, plain = _match(module, x, True), _match(module, x, False)
    assert set(exact.spec["plans"]) == set(plain.spec["plans"]) and len(exact.spec["plans"]) >= 2
    gpu = Hardware(label="H200", device="cuda", gpu_arch="sm_90")
    for mode, plan in exact.spec["plans"].items():
        convs = [k for k in plan.kernels if k.kind == "conv"]
        assert convs and all(k.conv.exact for k in convs), mode
        assert not any(k.conv.exact for k in plain.spec["plans"][mode].kernels if k.kind == "conv")
        code = render(plan, PARAMS)
        assert re.search(r"TF32X3=\w+\.dtype == torch\.float32,", code), code
        assert "TF32X3=False" in render(plain.spec["plans"][mode], PARAMS)
        params = {**PARAMS, "TCONV_DIRECT": mode[2]}
        probe = TaskProbe(ok=True, hardware=gpu, flags=PrecisionFlags(conv_tf32=True),
                          conv_exact=True)
        assert [p.precision for p in exact.family.precision(exact, params, probe)] == ["fp32"]
        probe.conv_exact = False
        assert [p.precision for p in plain.family.precision(plain, params, probe)] == ["tf32"]
        candidate = _load(code, tmp_path, f"exact_{mode[2]}")()
        candidate.load_state_dict(module.state_dict(), strict=False)
        torch.testing.assert_close(candidate(x), module(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_exact_convolutions_on_the_gpu_meet_float64(tmp_path):
    """With cuDNN's TF32 on, the exact (3xTF32) kernels' error against float64 stays near
    float32's and well under the TF32 kernels' (both forms of the transposed convolution)."""
    torch.manual_seed(0)
    assert torch.backends.cudnn.allow_tf32
    module, x = _module(), torch.randn(4, 8, 33, 41)
    want = module.double()(x.double()).cuda()
    module = module.float()
    errors = {}
    for exact in (True, False):
        match = _match(module, x, exact)
        for mode, plan in match.spec["plans"].items():
            if not any(k.kind == "conv" for k in plan.kernels):
                continue  # (the library plan: cuDNN itself)
            candidate = _load(render(plan, PARAMS), tmp_path, f"gpu_{int(exact)}_{mode[2]}")()
            candidate.load_state_dict(module.state_dict(), strict=False)
            got = candidate.cuda()(x.cuda()).double()
            errors[(exact, mode[2])] = float((got.detach() - want).abs().max() / want.abs().max())
    print(errors)
    for form in {m for _, m in errors}:
        assert errors[(True, form)] < 1e-5, errors
        assert errors[(False, form)] > 3 * errors[(True, form)], errors
