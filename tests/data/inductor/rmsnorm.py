import torch
import torch.nn as nn


class Model(nn.Module):
    """A row reduction whose row length is a symbol: a looped reduction kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def get_inputs():
    return [torch.randn(6, 9, 200), torch.randn(200)]


def get_init_inputs():
    return []
