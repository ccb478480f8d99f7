"""Inputs for the CausalMaskedSoftmax task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes."""

import torch

batch, heads, seq, head_dim = 4, 32, 1024, 128


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def get_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [_randn(2, 2, 64, 64)]
    return [_randn(batch, heads, seq, seq)]


def get_extra_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [[_randn(1, 3, 37, 37)]]
    return [[_randn(2, 3, 77, 77)]]
