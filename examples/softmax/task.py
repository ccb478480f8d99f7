"""Hooks for the softmax task."""

import torch


def get_inputs(device):
    if device == "cpu":
        return [torch.randn(64, 512) * 4]
    return [torch.randn(8192, 4096, device=device) * 4]


def get_extra_inputs(device):
    # Rows that are not a power of two, and a single long row.
    if device == "cpu":
        return [[torch.randn(33, 1000) * 4], [torch.randn(3, 4096)]]
    return [[torch.randn(999, 3000, device=device) * 4], [torch.randn(16, 32768, device=device)]]
