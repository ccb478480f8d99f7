"""Hostile: no custom kernel at all; PyTorch computes the answer (caught by static_no_kernel)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x):
        return F.gelu(x)
