"""Inputs for the LinearGeLU task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes. The weights
are inputs, so they share the activations' dtype as in a bfloat16 model."""

import torch

tokens, in_features, out_features = 8192, 4096, 4096


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _inputs(rows, k, n, device):
    dtype = _dtype(device)
    return [torch.randn(rows, k, device=device, dtype=dtype),
            (torch.randn(n, k, device=device) * k ** -0.5).to(dtype),  # outputs O(1) at any k
            (0.1 * torch.randn(n, device=device)).to(dtype)]


def get_inputs(device):
    if device == "cpu":
        return _inputs(64, 128, 96, device)
    return _inputs(tokens, in_features, out_features, device)


def get_extra_inputs(device):
    if device == "cpu":
        return [_inputs(37, 70, 33, device)]
    return [_inputs(1000, in_features, 3000, device), _inputs(4096, 512, 128, device)]
