"""Fault on a GPU: its kernel writes far outside any allocation (an illegal address, which the
driver reports asynchronously). Its own failure, never the evaluator's."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs + (1 << 40), tl.maximum(x, 0.0))  # no mask, 4 TiB away


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
