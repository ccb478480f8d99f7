"""Inputs for the AttentionScores task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes."""

import torch

batch, heads, seq, head_dim = 4, 32, 1024, 128


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def get_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [_randn(1, 2, 48, 32), _randn(1, 2, 48, 32)]
    return [_randn(batch, heads, seq, head_dim), _randn(batch, heads, seq, head_dim)]


def get_extra_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [[_randn(1, 1, 17, 32), _randn(1, 1, 17, 32)]]
    return [[_randn(2, 3, 77, head_dim), _randn(2, 3, 77, head_dim)]]
