"""Hooks for the matmul + bias + relu task: float16 on a GPU (tensor cores), float32 on the CPU."""

import torch


def _inputs(m, k, n, device, dtype):
    scale = k ** -0.5  # keep outputs O(1) so tolerances mean the same at every K
    return [
        torch.randn(m, k, device=device, dtype=dtype),
        torch.randn(k, n, device=device, dtype=dtype) * scale,
        torch.randn(n, device=device, dtype=dtype),
    ]


def get_inputs(device):
    if device == "cpu":
        return _inputs(64, 128, 96, device, torch.float32)
    return _inputs(4096, 4096, 4096, device, torch.float16)


def get_extra_inputs(device):
    if device == "cpu":
        return [_inputs(50, 70, 33, device, torch.float32)]
    return [_inputs(1000, 2048, 3000, device, torch.float16), _inputs(4096, 512, 128, device, torch.float16)]
