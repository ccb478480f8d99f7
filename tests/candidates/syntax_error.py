"""Fault: does not even parse (compile error at import)."""
import torch
import triton.language as tl


def broken(x:
    return x
