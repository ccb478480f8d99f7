"""Hostile (call-count laziness): computes honestly for its first calls, then returns its previous answer whatever the input. It keys nothing on the input, so only a check of the calls made after its first ones can see it (timed_calls)."""
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls <= 8 or self.last is None or self.last.shape != x.shape:
            self.last = gelu(x)
            return self.last
        gelu(x[:1])  # a launch, so that a kernel ran
        return self.last
