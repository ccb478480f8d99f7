"""Pieces every rendered candidate shares: imports, the copied constructor, probe helpers."""

from __future__ import annotations

from openkernel.generators.activations import BoundActivation, aten_base
from openkernel.generators.refparse import Reference
from openkernel.records import TaskProbe

TRITON_HEADER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
'''

# Ops a probe may list that move no data of their own (views, aliasing).
IGNORED_OPS = {"detach", "alias", "view", "_unsafe_view", "expand", "lift_fresh"}
FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64"}


def op_bases(probe: TaskProbe) -> list[str]:
    """The probe's aten ops as base names, in order, without view-only ops."""
    out = []
    for op in probe.aten_ops:
        base = aten_base(op)
        if base not in IGNORED_OPS and base not in out:
            out.append(base)
    return out


def dtype_name(dtype: str) -> str:
    """``torch.float32`` -> ``float32``."""
    return dtype.replace("torch.", "")


def init_method(ref: Reference, act: BoundActivation | None = None, extra: str = "") -> str:
    """``ModelNew.__init__`` with the reference's signature, storing activation scalars.

    Copying the signature keeps the KernelBench convention: ModelNew(*get_init_inputs()).
    """
    lines = [f"    def __init__(self{', ' + ref.init_signature if ref.init_signature else ''}):",
             "        super().__init__()"]
    if act is not None:
        for name, value in act.values.items():
            if isinstance(value.const, str):
                continue
            lines.append(f"        self.{name} = float({value.source()})")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def act_args(act: BoundActivation | None, prefix: str = "self.") -> str:
    """The activation's scalar arguments for a kernel call, each followed by ", "."""
    if act is None:
        return ""
    return "".join(f"{prefix}{name}, " for name in act.act_param_names())


def module_preamble(ref: Reference, header: str) -> str:
    """Imports plus the reference's module-level constants (constructor defaults may use them)."""
    return header + ("\n" + ref.constants + "\n" if ref.constants else "")
