"""Hostile: decoy kernel, the answer from PyTorch ops disguised as a kernel wrapper with no
launch at all on the real path (kernel_launches): the @triton.jit exists but is never called."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def unused_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
