"""Hostile (GPU): launches the kernel from a background thread after forward has returned
(background_thread)."""
import threading
import time

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


def _launch(x, out):
    gelu_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.calls += 1
        if self.calls == 1:  # the build call is honest, so the cheat reaches the tests
            _launch(x, out)
            return out

        def late():
            time.sleep(0.002)
            _launch(x, out)

        threading.Thread(target=late, daemon=True).start()
        return out
