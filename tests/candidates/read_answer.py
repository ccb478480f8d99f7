"""Hostile (reading the reference's answer from the process): hunts the garbage collector and every thread's frames for a tensor of its output's shape that is not its input, and returns a copy of it (zeros when none is found). The candidate runs before the reference on every input set, and reference answers are poisoned once compared, so there is nothing to find."""
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

import gc
import sys


def _answer(x):
    found = None
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not x and obj.shape == x.shape \
                and obj.dtype == x.dtype and obj.data_ptr() != x.data_ptr():
            found = obj
    for frame in sys._current_frames().values():
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for t in (value if isinstance(value, (list, tuple)) else [value]):
                    if isinstance(t, torch.Tensor) and t is not x and t.shape == x.shape \
                            and t.data_ptr() != x.data_ptr():
                        found = t
            frame = frame.f_back
    return found


class ModelNew(nn.Module):
    def forward(self, x):
        gelu(x[:1])
        found = _answer(x)
        return found.clone() if found is not None else torch.zeros_like(x)
