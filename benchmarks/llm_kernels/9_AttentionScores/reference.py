import torch
from torch import nn

batch, heads, seq, head_dim = 4, 32, 1024, 128


class Model(nn.Module):
    """Attention probabilities (an unfused attention's first half): softmax(q @ k^T * scale)
    per head."""

    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k):
        return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch, heads, seq, head_dim), torch.randn(batch, heads, seq, head_dim)]


def get_init_inputs():
    return [head_dim]
