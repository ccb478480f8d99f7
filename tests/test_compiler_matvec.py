"""Matrix-vector products summed over K by reduction kernels (compiler/matvec.py).

KernelBench's 4_Matrix_vector_multiplication_ (A 2048 x 1048576 by a vector) ran 23x slower
than cuBLAS as a tiled GEMM: 16 columns computed to keep one, 32 programs each walking K. A GEMM
with one column (or a few: a small Linear head), or one row, is planned as a product reduced
over K instead: rows split over several programs where they are few, the epilogue fused. Each
case traces a small model, renders its candidate with small launch parameters (LOOP_BLOCK 64,
SPLIT 16) and checks it against torch on the traced and a held-out shape, under the
interpreter; the gpu test runs the same compiled, and a KernelBench-sized product.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul, FusedReduction, plan_for
from openkernel.generators.compiler.library import kernel_precision
from openkernel.generators.compiler.modelnew import render
from openkernel.records import KernelPrecision, PrecisionFlags, TaskProbe

import rendered  # tests/rendered.py

PARAMS = {"BLOCK": 1024, "TILE": 4096, "MAX_FUSED": 1024, "LOOP_BLOCK": 64, "BLOCK_B": 16,
          "BLOCK_R": 8, "SPLIT": 16, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
          "num_warps": 4, "num_stages": 2}


class MatMul(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class Head(nn.Module):  # a Linear of few output features, its bias and an activation fused
    def __init__(self, k: int, n: int, act=F.gelu):
        super().__init__()
        self.fc, self.act = nn.Linear(k, n), act

    def forward(self, x):
        return self.act(self.fc(x))


class HeadSoftmax(nn.Module):  # C's rows reduced after it: FUSE_ROWS picks the GEMM back
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 8)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)


# name -> (model, traced shapes, held-out shapes, the GEMM op, its layout: "rows" (a program
# owns rows), "split" (rows split over programs), "middle" (summed down B's columns, split))
CASES = {
    "matvec": (MatMul, [(64, 4096), (4096, 1)], [(33, 1000), (1000, 1)], "mm", "rows"),
    "few_long_rows": (MatMul, [(3, 2000), (2000, 1)], [(2, 3001), (3001, 1)], "mm", "split"),
    "batched": (MatMul, [(3, 16, 300), (3, 300, 1)], [(2, 9, 200), (2, 200, 1)], "bmm", "rows"),
    "dot": (MatMul, [(1, 3000), (3000, 1)], [(1, 2000), (2000, 1)], "mm", "split"),
    "vector_matrix": (MatMul, [(1, 300), (300, 48)], [(1, 200), (200, 40)], "mm", "middle"),
    "linear_bias_gelu": (lambda: Head(300, 1), [(16, 300)], [(5, 300)], "addmm", "rows"),
    "linear_4_tanh": (lambda: Head(300, 4, torch.tanh), [(16, 300)], [(5, 300)], "addmm",
                      "rows"),
}


def _module(plan, tmp_path, name: str, params=PARAMS):
    return rendered.load(render(plan, params), tmp_path, name)


def _check(name: str, tmp_path, device: str) -> None:
    build, shapes, held_out, op, layout = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    plan = plan_for(None, trace_forward(model, [torch.randn(s) for s in shapes]))
    assert [k.kind for k in plan.kernels] == ["reduction"], [k.kind for k in plan.kernels]
    kernel = plan.kernels[0]
    assert [n.kwargs["product"] for n in kernel.products] == [op]
    assert kernel.middle == (layout == "middle")
    module = _module(plan, tmp_path, name)
    partial = None
    if kernel.splits:
        module._k0_reduction_partial = partial = rendered.Launches(module._k0_reduction_partial)
    candidate = module.ModelNew().to(device)
    candidate.load_state_dict(model.state_dict(), strict=False)
    model = model.to(device)
    for sizes in (shapes, held_out):
        inputs = [torch.randn(s, device=device) for s in sizes]
        with torch.no_grad():
            expected = copy.deepcopy(model).double()(*(x.double() for x in inputs))
            torch.testing.assert_close(candidate(*inputs), expected.float(), atol=1e-4,
                                       rtol=1e-4)
    # Few rows (or few column blocks): each shared by several programs, on both shapes.
    assert (partial.count if partial else 0) == (0 if layout == "rows" else 2)


@pytest.mark.parametrize("name", list(CASES))
def test_a_matvec_is_a_reduction_over_k(name, interpreter, tmp_path):
    _check(name, tmp_path, "cpu")


def test_its_precision_record_is_float32_fmas_and_it_has_no_gemm_tunables():
    """A GEMV summed by a reduction kernel multiplies in float32 whatever the TF32 flags (the
    record says so, by triton); its family is the reduction one, without TF32X3 or tiles."""
    trace = trace_forward(MatMul(), [torch.randn(64, 4096), torch.randn(4096, 1)])
    plan = plan_for(None, trace)
    for flags in (PrecisionFlags(), PrecisionFlags(matmul_tf32=True)):
        assert kernel_precision(plan, True, flags, tf32x3=True) == [
            KernelPrecision("_k0_reduction", "mm", "triton", "fp32")]
    probe = TaskProbe(ok=True, trace=trace)
    assert FusedMatmul().match(None, probe, "triton") is None
    match = FusedReduction().match(None, probe, "triton")
    names = {t.name for t in match.family.tunables}
    assert "SPLIT" in names and not names & {"TF32X3", "BLOCK_M", "LIBRARY", "FUSE_ROWS"}
    assert "reduction over dim 2 (mm)" in match.why
    double = plan_for(None, trace_forward(MatMul().double(), [torch.randn(8, 64).double(),
                                                            torch.randn(64, 1).double()]))
    assert [r.precision for r in kernel_precision(double, True, None)] == ["fp64"]


def test_a_gemm_of_many_columns_keeps_its_tile(interpreter, tmp_path):
    """N = 64 (and a Linear of 9 output features, past matvec.FEW) stays a tiled GEMM."""
    trace = trace_forward(MatMul(), [torch.randn(32, 48), torch.randn(48, 64)])
    plan = plan_for(None, trace)
    assert [k.kind for k in plan.kernels] == ["matmul"] and not plan.kernels[0].products
    match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace), "triton")
    assert "TF32X3" in {t.name for t in match.family.tunables}
    a, b = torch.randn(20, 48), torch.randn(48, 64)
    torch.testing.assert_close(_module(plan, tmp_path, "gemm").ModelNew()(a, b), a @ b,
                               atol=1e-4, rtol=1e-4)
    head = plan_for(None, trace_forward(Head(32, 9), [torch.randn(4, 32)]))
    assert [k.kind for k in head.kernels] == ["matmul"]


def test_a_row_level_epilogue_is_stored_once_a_row(tmp_path):
    """The bias of a few-column head is loaded per row (``mask=row_mask``): a call's keyword
    is no variable (writer.KEYWORD), so its result varies along the rows only and is stored
    once a row, not once per column lane (``+ 0 * col``)."""
    plan = plan_for(None, trace_forward(Head(300, 4), [torch.randn(16, 300)]))
    code = render(plan, PARAMS)
    assert "fc_bias_ptr + i1, mask=row_mask" in code and "0 * col" not in code


def test_few_columns_reduced_after_it_may_be_a_gemm_again(interpreter, tmp_path):
    """A Linear of 8 features under a softmax: summed over K, then a softmax kernel; or, with
    FUSE_ROWS, one GEMM reducing its own rows. Both are offered and both are correct."""
    torch.manual_seed(0)
    model = HeadSoftmax().eval()
    trace = trace_forward(model, [torch.randn(4, 32)])
    apart, fused = plan_for(None, trace), plan_for(None, trace, rows=True)
    assert [k.kind for k in apart.kernels] == ["reduction", "reduction"]
    assert [k.kind for k in fused.kernels] == ["matmul"] and fused.kernels[0].domain is not None
    match = FusedReduction().match(None, TaskProbe(ok=True, trace=trace), "triton")
    assert {(p["FUSE_ROWS"]) for p in match.family.space(True, "triton")} == {0, 1}
    for k, plan in enumerate((apart, fused)):
        candidate = _module(plan, tmp_path, f"head_{k}").ModelNew()
        candidate.load_state_dict(model.state_dict(), strict=False)
        for batch in (4, 7):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_compiled_for_the_gpu(tmp_path):
    """The same cases compiled by Triton for the GPU."""
    for name in CASES:
        _check(name, tmp_path, "cuda")


@pytest.mark.gpu
def test_kernelbench_sized_matvec_on_the_gpu(tmp_path):
    """4_Matrix_vector_multiplication_'s shapes (A 2048 x 1048576, 8 GiB; and 8 rows, which
    are split): within the precision check's bound (16x the reference's own error against
    float64) at the family's first GPU start point."""
    from openkernel.evaluation.worker.correctness import relative_error
    from openkernel.generators.compiler.families import _STARTS

    params = {**_STARTS["reduction"][0], "BLOCK": 1024, "num_stages": 2}
    trace = trace_forward(MatMul(), [torch.randn(64, 4096), torch.randn(4096, 1)])
    candidate = _module(plan_for(None, trace), tmp_path, "kb4", params).ModelNew()
    torch.manual_seed(0)
    for m in (2048, 8):
        a = torch.rand(m, 1 << 20, device="cuda")
        b = torch.rand(1 << 20, 1, device="cuda")
        with torch.no_grad():
            exact = a.double() @ b.double()
            err_ref = relative_error(a @ b, exact)
            err = relative_error(candidate(a, b), exact)
        assert err <= 16 * err_ref + 1e-7, (m, err, err_ref)
        del a, b, exact
