"""Inputs for the TokenLogProbs task: bfloat16 at LLM sizes on a GPU; float32 and small
shapes on the CPU, where Triton runs interpreted. Held-out shapes have ragged sizes."""

import torch

tokens, vocab = 8192, 32000


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def get_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [_randn(32, 1000), torch.randint(0, 1000, (32,), device=device)]
    return [_randn(tokens, vocab), torch.randint(0, vocab, (tokens,), device=device)]


def get_extra_inputs(device):
    def _randn(*shape):
        return torch.randn(*shape, device=device, dtype=_dtype(device))

    if device == "cpu":
        return [[_randn(7, 777), torch.randint(0, 777, (7,), device=device)]]
    return [[_randn(1000, 50257), torch.randint(0, 50257, (1000,), device=device)]]
