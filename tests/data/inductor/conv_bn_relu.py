import torch
import torch.nn as nn


class Model(nn.Module):
    """An extern convolution (cuDNN) with batch norm and ReLU fused after it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(2, 3, 12, 10)]


def get_init_inputs():
    return []
