"""A task whose outputs are far below atol: an all-zero answer passes atol=1e-2 everywhere."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 1e-4


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return []
