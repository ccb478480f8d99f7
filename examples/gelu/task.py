"""Hooks for the GELU task: smaller inputs on the CPU, where Triton runs interpreted."""

import torch


def get_inputs(device):
    if device == "cpu":
        return [torch.randn(64, 1024)]
    return [torch.randn(8192, 8192, device=device)]


def get_extra_inputs(device):
    # Held-out shapes: a ragged tail and a 1-D tensor catch kernels that assume the benchmark shape.
    if device == "cpu":
        return [[torch.randn(37, 999)], [torch.randn(5000)]]
    return [[torch.randn(1000, 4099, device=device)], [torch.randn(1 << 20, device=device)]]
