"""Canary (checking and timing look alike): returns garbage in any call whose stack (every frame's file, function and line) differs from its first call's. Judged correct only if every call, checked or timed, comes the same way."""
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


def _stack():
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = None

    def forward(self, x):
        stack = _stack()
        if self.first is None:
            self.first = stack
        out = gelu(x)
        if stack != self.first:
            out.fill_(7.0)  # seen a different way in: say so in the output
        return out
