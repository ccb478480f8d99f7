"""Fault: a Triton kernel that does not compile (a non-constexpr block size in tl.arange)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_kernel(x_ptr, out_ptr, n, BLOCK):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        bad_kernel[(1,)](x, out, x.numel(), 1024)
        return out
