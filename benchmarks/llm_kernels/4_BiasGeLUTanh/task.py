"""Inputs for the BiasGeLUTanh task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes. The weights
are inputs, so they share the activations' dtype as in a bfloat16 model."""

import torch

tokens, features = 8192, 16384


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _inputs(rows, features, device):
    dtype = _dtype(device)
    return [torch.randn(rows, features, device=device, dtype=dtype),
            (0.1 * torch.randn(features, device=device)).to(dtype)]


def get_inputs(device):
    if device == "cpu":
        return _inputs(64, 320, device)
    return _inputs(tokens, features, device)


def get_extra_inputs(device):
    if device == "cpu":
        return [_inputs(37, 333, device)]
    return [_inputs(1000, 4099, device), _inputs(7, features, device)]
