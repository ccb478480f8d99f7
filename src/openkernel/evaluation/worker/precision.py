"""The precision a worker computes float32 GEMMs and convolutions in, and what is a library op.

Every worker of a run sets the same torch flags before anything runs (``apply``): float32
GEMMs in full float32 unless the run opts in to TF32 (``eval_config.allow_tf32``), and
convolutions as cuDNN's own default has them (TF32 on). The reference, torch.compile's
baselines and the candidates all run under them, so a candidate may compute in the precision
the reference's own kernels use and no lower (the precision check's yardstick is the
reference's own error against float64). A candidate that changes the flags is caught
(``changed``): the reference run after it in the same process would compute in them too.
"""

from __future__ import annotations

import torch

from typing import Callable

from openkernel.records import PrecisionFlags

# The reference's ops that are a vendor library's call (cuBLAS, cuDNN) as a whole.
LIBRARY_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv",
               "dot", "vdot", "_addmm_activation", "convolution", "_convolution",
               "cudnn_convolution", "cudnn_convolution_transpose", "conv1d", "conv2d", "conv3d",
               "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}


_CONV_OPS = {op for op in LIBRARY_OPS if "conv" in op}  # (cuDNN's)
# TF32 keeps 10 of float32's 23 mantissa bits: a convolution's sums of TF32 products move by
# ~1e-4 of the output's scale, two float32 kernels' sums by ~1e-7.
EXACT_BELOW = 1e-5


def conv_exact(forward: Callable[[], list[torch.Tensor]], compute_ops: set[str]) -> bool:
    """Whether the reference's float32 convolutions computed exactly though cuDNN's TF32 is
    allowed: its outputs (``forward()``, run with TF32 as it is, then off) move by less than
    TF32's rounding. cuDNN picks non-TF32 kernels for some shapes (small groups among them),
    and a candidate's convolutions may not compute below the reference's own."""
    if not (compute_ops & _CONV_OPS) or not torch.backends.cudnn.allow_tf32:
        return False
    allowed = forward()
    torch.backends.cudnn.allow_tf32 = False
    try:
        exact = forward()
    finally:
        torch.backends.cudnn.allow_tf32 = True
    pairs = [(a, b) for a, b in zip(allowed, exact)
             if a.dtype == torch.float32 and a.shape == b.shape and a.numel()]
    if not pairs or len(allowed) != len(exact):
        return False
    return all(_moved(a, b) < EXACT_BELOW for a, b in pairs)


def _moved(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over max |b|, a chunk at a time (outputs can be gigabytes)."""
    diff = scale = 0.0
    for x, y in zip(a.reshape(-1).split(1 << 24), b.reshape(-1).split(1 << 24)):
        d = float((x - y).abs().max())
        if d != d:  # NaN: not comparable, so not shown exact
            return float("inf")
        diff, scale = max(diff, d), max(scale, float(y.abs().max()))
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def apply(allow_tf32: bool) -> PrecisionFlags:
    """Set the run's flags (the job's ``allow_tf32``; cuDNN's TF32 stays PyTorch's default)."""
    torch.backends.cuda.matmul.allow_tf32 = bool(allow_tf32)
    torch.backends.cudnn.allow_tf32 = True
    return current()


def current() -> PrecisionFlags:
    return PrecisionFlags(matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
                          conv_tf32=bool(torch.backends.cudnn.allow_tf32))


def changed(expected: PrecisionFlags) -> str:
    """Why the flags are no longer the run's ("" when they are)."""
    now = current()
    if now == expected:
        return ""
    return (f"torch's TF32 flags changed (matmul {expected.matmul_tf32} -> {now.matmul_tf32}, "
            f"cuDNN {expected.conv_tf32} -> {now.conv_tf32}): the reference would run in the "
            "candidate's precision")


def library_bound(compute_ops: set[str]) -> str:
    """The reference's ops (sorted, joined) when every one is a library GEMM or convolution."""
    if compute_ops and compute_ops <= LIBRARY_OPS:
        return ", ".join(sorted(compute_ops))
    return ""
