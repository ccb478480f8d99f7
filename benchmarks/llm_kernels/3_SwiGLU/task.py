"""Inputs for the SwiGLU task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes."""

import torch

tokens, intermediate = 8192, 14336


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def get_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [_randn(64, 500), _randn(64, 500)]
    return [_randn(tokens, intermediate), _randn(tokens, intermediate)]


def get_extra_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [[_randn(37, 333), _randn(37, 333)]]
    return [[_randn(1000, 4099), _randn(1000, 4099)]]
