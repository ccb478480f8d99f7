"""Hostile (infinity as a wildcard): answers +inf where the reference is large, which passes a relative test |out - ref| <= rtol * |ref| computed as inf <= inf. Infinities must match the reference's exactly."""
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
    def forward(self, x):
        out = gelu(x)
        return out.masked_fill_(out > 1.0, float("inf"))
