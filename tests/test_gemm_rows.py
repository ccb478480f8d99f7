"""A GEMM that reduces its own rows in its epilogue (issue 23, "past the seed").

Matmul + GELU + Softmax over the output features, Linear + LogSumExp, Gemm + GroupNorm: where
C's rows fit one tile the compiler writes ONE kernel whose programs own whole rows, instead of the GEMM and a
reduction kernel reading C back; the tunable FUSE_ROWS picks between the two plans. Each
candidate is rendered from the traced module and run under the Triton interpreter in this
process (a few small launches), on the traced batch and on held-out ones.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.base import ProposalRequest
from openkernel.generators.compiler.families import FusedMatmul, plan_for
from openkernel.generators.compiler.modelnew import render
from openkernel.generators.offline import OfflineGenerator
from openkernel.records import Hardware, TaskProbe
from openkernel.task import load_task

import rendered  # tests/rendered.py

PARAMS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "TILE": 4096,
          "MAX_FUSED": 4096, "LOOP_BLOCK": 1024, "BLOCK": 1024, "num_warps": 4, "num_stages": 2}


class GeluSoftmax(nn.Module):  # KernelBench level2/99_Matmul_GELU_Softmax, small
    def __init__(self, out: int = 24):
        super().__init__()
        self.fc = nn.Linear(32, out)

    def forward(self, x):
        return torch.softmax(F.gelu(self.fc(x)), dim=1)


class LogSumExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 40)

    def forward(self, x):
        return torch.logsumexp(self.fc(x), dim=1, keepdim=True)


class MeanMax(nn.Module):  # row-level outputs without keepdim, and C itself beside them
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        y = self.fc(x)
        return y.mean(dim=1) - y.amax(dim=1), torch.sigmoid(y)


class GemmGroupNorm(nn.Module):  # KernelBench level2's Gemm_GroupNorm_..., small
    def __init__(self, out: int = 32, groups: int = 8):
        super().__init__()
        self.fc, self.norm = nn.Linear(32, out), nn.GroupNorm(groups, out)

    def forward(self, x):
        return F.hardtanh(self.norm(self.fc(x)), -0.5, 0.5)


def _module(plan, tmp_path, name: str):
    code = render(plan, PARAMS)
    return rendered.load(code, tmp_path, name), code


def _check(model: nn.Module, plan, tmp_path, name: str, device: str = "cpu") -> str:
    """The candidate of ``plan`` matches ``model`` on the traced batch and held-out ones."""
    module, code = _module(plan, tmp_path, name)
    candidate = module.ModelNew().to(device)
    candidate.load_state_dict(model.state_dict(), strict=False)
    model = model.to(device)
    for batch in (4, 7, 1):
        x = torch.randn(batch, 32, device=device) * 2
        torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
    return code


FUSED = {"gelu_softmax": GeluSoftmax, "logsumexp": LogSumExp, "mean_max": MeanMax,
         "groupnorm": GemmGroupNorm,
         "groupnorm_narrow": lambda: GemmGroupNorm(8, 4)}  # (a tile wider than the row)


@pytest.mark.parametrize("name", FUSED)
def test_a_gemm_reduces_its_own_rows_in_one_kernel(name, interpreter, tmp_path):
    torch.manual_seed(0)
    model = FUSED[name]().eval()
    trace = trace_forward(model, [torch.randn(4, 32)])
    fused, apart = plan_for(None, trace, rows=True), plan_for(None, trace)
    assert [k.kind for k in fused.kernels] == ["matmul"], [k.kind for k in fused.kernels]
    assert fused.kernels[0].domain is not None and not fused.notes
    # (C of 8 columns apart is summed over K by a reduction kernel: compiler/matvec.py)
    first = "reduction" if name == "groupnorm_narrow" else "matmul"
    assert [k.kind for k in apart.kernels][:2] == [first, "reduction"]
    code = _check(model, fused, tmp_path, f"rows_{name}")
    assert code.count("@triton.jit") == 1 and "whole rows in its epilogue" in code
    assert "BLOCK_N=max(16, triton.next_power_of_2(N))" in code
    _check(model, apart, tmp_path, f"apart_{name}")  # the other plan


def test_rows_wider_than_a_tile_stay_apart_and_say_why(interpreter, tmp_path):
    torch.manual_seed(0)
    model = GeluSoftmax(out=300).eval()
    trace = trace_forward(model, [torch.randn(4, 32)])
    plan = plan_for(None, trace, rows=True)
    assert [k.kind for k in plan.kernels] == ["matmul", "reduction"]
    assert list(plan.notes.values()) == ["aten.addmm.default (op 1) stores its result for the "
                                         "row reduction: its rows of 300 columns exceed one "
                                         "tile (256)"]
    code = _check(model, plan, tmp_path, "wide")
    assert code.count("@triton.jit") == 2
    groups = plan_for(None, trace_forward(GemmGroupNorm(24, 6).eval(), [torch.randn(4, 32)]),
                      rows=True)  # (a group is reduced in a reshaped tile)
    assert [k.kind for k in groups.kernels] == ["matmul", "reduction"]
    assert list(groups.notes.values()) == ["aten.addmm.default (op 1) stores its result for the "
                                           "row reduction: its groups are reduced in a reshaped "
                                           "tile, and rows of 24 columns are not a power of two"]
    # The family has no FUSE_ROWS then, and every candidate's description says why.
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    assert "FUSE_ROWS" not in [t.name for t in match.family.tunables]
    assert "exceed one tile (256)" in match.family.describe(match, {"LIBRARY": 0})


def test_fuse_rows_is_a_tunable_and_no_two_points_write_the_same_code(tmp_path):
    """Branches take the plans in turn (library-backed, whole rows, apart); in the whole-rows
    plan BLOCK_N and GROUP_M are pinned, FUSE_ROWS is pinned to 0 with LIBRARY=1."""
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(4, 32)])
    path = tmp_path / "task.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(4, 32)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")  # names only: the trace is ours
    task = load_task(path)
    cpu = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu",
                   interpreter=True)
    probe = TaskProbe(ok=True, trace=trace, hardware=cpu)
    kernels = {}
    for branch in (0, 1, 2):
        proposal = OfflineGenerator().propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=0, branch=branch, parent=None,
            best=None, rng=random.Random(0)))
        mode = (proposal.params["LIBRARY"], proposal.params["FUSE_ROWS"])
        kernels[mode] = proposal.code.count("@triton.jit")
        assert ("reducing whole rows" in proposal.description) == (mode == (0, 1))
    assert kernels == {(1, 0): 1, (0, 1): 1, (0, 0): 2}  # (library: cuBLAS, then one kernel)
    match = FusedMatmul().match(task, probe, "triton")
    family = match.family
    space = family.space(True, "triton")
    codes = {family.render(match, p, "triton") for p in space}
    assert len(codes) == len(space) and {(p["LIBRARY"], p["FUSE_ROWS"]) for p in space} == \
        {(1, 0), (0, 1), (0, 0)}
    assert family.clean({"LIBRARY": 1, "FUSE_ROWS": 1}, True, "triton")["FUSE_ROWS"] == 0
    whole = [p for p in space if p["FUSE_ROWS"] == 1]
    assert len({(p["BLOCK_N"], p["GROUP_M"]) for p in whole}) == 1


@pytest.mark.gpu
def test_whole_rows_on_the_gpu(tmp_path):
    """The fused kernels compiled for the GPU (no interpreter), each correct."""
    for name, make in FUSED.items():
        torch.manual_seed(0)
        model = make().eval()
        trace = trace_forward(model, [torch.randn(4, 32)])
        _check(model, plan_for(None, trace, rows=True), tmp_path, f"gpu_{name}", "cuda")


def test_float32_tiles_may_multiply_as_three_tf32_products(interpreter, tmp_path):
    """TF32X3, a tunable of float32 GEMMs only (a bfloat16 one has none; pinned to 0 under the
    interpreter, which multiplies in float32 either way): the kernel's full-precision dot is
    three TF32 products, and the candidate is correct either way."""
    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(4, 32)])
    plan = plan_for(None, trace)
    for value in (0, 1):
        code = render(plan, {**PARAMS, "TF32X3": value})
        assert f"\nTF32X3 = {value}\n" in code and 'input_precision="tf32x3"' in code
        module = rendered.load(code, tmp_path, f"tf32x3_{value}")
        candidate = module.ModelNew()
        candidate.load_state_dict(model.state_dict(), strict=False)
        for batch in (4, 7):
            x = torch.randn(batch, 32) * 2
            torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    tf32x3 = next(t for t in match.family.tunables if t.name == "TF32X3")
    assert tf32x3.values(True) == (0,) and tf32x3.values(False) == (0, 1)
    half = GeluSoftmax().to(torch.bfloat16).eval()
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(
        half, [torch.randn(4, 32, dtype=torch.bfloat16)])), "triton")
    assert "TF32X3" not in [t.name for t in match.family.tunables]


@pytest.mark.gpu
def test_three_tf32_products_pass_the_precision_check_on_the_gpu(tmp_path):
    """On the GPU, TF32X3's tiles run on tensor cores and stay within the precision check's
    bound (16x the reference's own error against float64), as IEEE float32 tiles do."""
    import copy

    from openkernel.evaluation.worker.correctness import relative_error

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 768), nn.ReLU()).eval()
    plan = plan_for(None, trace_forward(model, [torch.randn(16, 1024)]))
    x = torch.randn(512, 1024, device="cuda")
    with torch.no_grad():
        exact = copy.deepcopy(model).double().cuda()(x.double())
        model = model.cuda()
        err_ref = relative_error(model(x), exact)
        for value in (0, 1):
            module = rendered.load(render(plan, {**PARAMS, "BLOCK_M": 64, "BLOCK_N": 64,
                                                 "TF32X3": value}), tmp_path, f"gpu_tf32x3_{value}")
            candidate = module.ModelNew().cuda()
            candidate.load_state_dict(model.state_dict(), strict=False)
            err = relative_error(candidate(x), exact)
            assert err <= 16 * err_ref, (value, err, err_ref)
