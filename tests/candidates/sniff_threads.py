"""Hostile (stack sniffing across threads): looks at every thread's stack (sys._current_frames) for a caller that looks like a timer, and then returns its previous answer. The evaluator's own thread does show where it is; every timed call is checked, so the cheat is caught (timed_calls)."""
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

TIMERS = ("bench", "interleav", "time_once", "timed", "estimate", "launch_us")


def _sniff():
    for frame in sys._current_frames().values():
        while frame is not None:
            if any(t in frame.f_code.co_name for t in TIMERS):
                return True
            frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        if self.last is not None and self.last.shape == x.shape and _sniff():
            gelu(x[:1])
            return self.last
        self.last = gelu(x)
        return self.last
