import torch
from torch import nn

batch, heads, seq, head_dim = 4, 32, 1024, 128


class Model(nn.Module):
    """Scaled, causally masked softmax over attention scores (unfused attention):
    softmax(scores * scale masked to -inf above the diagonal)."""

    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, scores):
        s = scores.shape[-1]
        mask = torch.ones(s, s, dtype=torch.bool, device=scores.device).tril()
        return torch.softmax((scores * self.scale).masked_fill(~mask, float("-inf")), dim=-1)


def get_inputs():
    return [torch.randn(batch, heads, seq, seq)]


def get_init_inputs():
    return [head_dim]
