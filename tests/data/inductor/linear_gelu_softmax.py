import torch
import torch.nn as nn


class Model(nn.Module):
    """An extern GEMM (cuBLAS) and a fused reduction after it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 48)

    def forward(self, x):
        return torch.softmax(nn.functional.gelu(self.fc(x)) * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(24, 64)]


def get_init_inputs():
    return []
