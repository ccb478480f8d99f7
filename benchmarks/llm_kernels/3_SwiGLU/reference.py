import torch
import torch.nn.functional as F
from torch import nn

tokens, intermediate = 8192, 14336


class Model(nn.Module):
    """SwiGLU (the Llama MLP's activation): silu(gate) * up, the two halves of the up projection."""

    def __init__(self):
        super().__init__()

    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(tokens, intermediate), torch.randn(tokens, intermediate)]


def get_init_inputs():
    return []
