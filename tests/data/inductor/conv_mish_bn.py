"""A convolution, Mish and batch norm (inference). At its own sizes Inductor's default mode
makes the convolution channels-last (its layout optimisation): two tiled 2-D kernels change the
input's and the weight's layout, and one kernel applies the epilogue back into NCHW."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = torch.multiply(torch.tanh(torch.nn.functional.softplus(x)), x)
        return self.bn(x)


def get_inputs():
    return [torch.rand(2, 64, 40, 40)]


def get_init_inputs():
    return [64, 128, 3]
