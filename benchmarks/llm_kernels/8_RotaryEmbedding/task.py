"""Inputs for the RotaryEmbedding task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes."""

import torch

batch, heads, seq, head_dim = 4, 32, 2048, 128


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _rope(b, h, s, d, device, dtype):
    pos = torch.arange(s, device=device, dtype=torch.float32)[:, None]
    inv = 10000.0 ** (-torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    angles = torch.cat((pos * inv, pos * inv), dim=-1)
    return [torch.randn(b, h, s, d, device=device, dtype=dtype), angles.cos().to(dtype),
            angles.sin().to(dtype)]


def get_inputs(device):
    dtype = _dtype(device)
    if device == "cpu":
        return _rope(2, 2, 40, 32, device, dtype)
    return _rope(batch, heads, seq, head_dim, device, dtype)


def get_extra_inputs(device):
    dtype = _dtype(device)
    if device == "cpu":
        return [_rope(1, 3, 17, 16, device, dtype)]
    return [_rope(1, 8, 999, 64, device, dtype)]
