import torch
from torch import nn

batch, heads, seq, head_dim = 4, 32, 2048, 128


class Model(nn.Module):
    """Rotary position embedding (RoPE, Llama's rotate-half form) applied to queries: q *
    cos + rotate_half(q) * sin."""

    def __init__(self):
        super().__init__()

    def forward(self, q, cos, sin):
        half = q.shape[-1] // 2
        rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
        return q * cos + rotated * sin


def _rope(b, h, s, d):
    pos = torch.arange(s, dtype=torch.float32)[:, None]
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.cat((pos * inv, pos * inv), dim=-1)
    return [torch.randn(b, h, s, d), angles.cos(), angles.sin()]


def get_inputs():
    return _rope(batch, heads, seq, head_dim)


def get_init_inputs():
    return []
