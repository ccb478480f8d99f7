"""Hostile (subclassing the reference): ModelNew is the reference Model itself (found in sys.modules), with a decoy kernel beside its PyTorch forward (torch_compute)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


def gelu(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    gelu_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
    return out

import sys

Reference = next(m.Model for name, m in list(sys.modules.items())
                 if name.startswith("openkernel_reference") and hasattr(m, "Model"))


class ModelNew(Reference):
    def forward(self, x):
        gelu(x[:1])
        return super().forward(x)
