"""A hand-written online softmax (Triton) for KernelBench level1/23_Softmax (4096 x 393,216
floats, rows far longer than a tile): one program per row, a first pass keeps the running max
and the rescaled sum, a second writes exp(x - max) / sum. Used to check that a correct kernel on
a 6 GiB problem is judged correct (benchmarks/results/h200_kernelbench_*.json)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _online_softmax(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    out_row = out_ptr + row * stride
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x)
        # lanes that have seen only padding keep m = -inf: their scale is taken as 0
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        d = d * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, d * tl.exp(m - row_max)), axis=0)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf"))
        tl.store(out_row + offs, tl.exp(x - row_max) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        _online_softmax[(rows,)](x, out, cols, x.stride(0), BLOCK=2048, num_warps=8)
        return out
