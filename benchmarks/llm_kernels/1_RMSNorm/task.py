"""Inputs for the RMSNorm task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes. The weights
are inputs, so they share the activations' dtype as in a bfloat16 model."""

import torch

tokens, hidden = 8192, 4096


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _inputs(rows, hidden, device):
    dtype = _dtype(device)
    return [torch.randn(rows, hidden, device=device, dtype=dtype),
            (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)]


def get_inputs(device):
    if device == "cpu":
        return _inputs(64, 384, device)
    return _inputs(tokens, hidden, device)


def get_extra_inputs(device):
    if device == "cpu":
        return [_inputs(37, 250, device)]
    return [_inputs(1000, hidden, device), _inputs(3, 5120, device)]
