"""A launch description (grid, block, shared memory, arguments), checked before it launches.

The driver trusts what it is given: a block of 2048 threads fails with an opaque error, and a
float16 tensor passed where the kernel reads ``float*``, or 3e9 passed to an ``int``, computes
garbage. Every launch is checked against the CUDA limits and the kernel's parameter list
(``signature.py``) first; whatever is wrong is named in one message (:class:`LaunchError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch

from openkernel.nvrtc.signature import POINTEE, SCALARS, Param

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
STATIC_SHARED = 48 * 1024  # more dynamic shared memory needs the kernel's opt-in (done for it)
MAX_SHARED = 227 * 1024  # the most a block may opt in to on sm_90 (the H200)


class LaunchError(ValueError):
    """A launch description the kernel cannot be launched with (one clear message)."""


@dataclass(frozen=True)
class Launch:
    """A checked launch: dimensions as 3-tuples and the arguments packed for the driver."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple  # numpy scalars: pointers as uint64, scalars at their declared width
    devices: tuple[torch.device, ...]  # where the tensor arguments live


def dims(value, what: str, limits: tuple[int, int, int], kernel: str) -> tuple[int, int, int]:
    """An int or a tuple of 1-3 ints, each within its limit, as (x, y, z)."""
    items = (value,) if isinstance(value, Integral) else value
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3 or not all(
            isinstance(v, Integral) and not isinstance(v, bool) for v in items):
        raise LaunchError(f"{kernel}: {what} must be an int or a tuple of 1-3 ints, got {value!r}")
    full = tuple(int(v) for v in items) + (1,) * (3 - len(items))
    for axis, v, top in zip("xyz", full, limits):
        if not 1 <= v <= top:
            raise LaunchError(f"{kernel}: {what}.{axis} = {v} is outside 1..{top}"
                              + (" (an empty input needs no launch: return before it)"
                                 if v == 0 else ""))
    return full  # type: ignore[return-value]


def check_launch(params: list[Param], kernel: str, grid, block, args, shared_mem: int = 0,
                 max_shared: int = MAX_SHARED, need_cuda: bool = True) -> Launch:
    """The launch, checked against CUDA's limits and ``params``.

    Args:
        params: The kernel's parameters (``signature.parse_params``).
        kernel: The kernel's name, for the messages.
        grid, block: An int or a tuple of 1-3 ints.
        args: One argument per parameter: a tensor for a pointer, a number for a scalar.
        shared_mem: Dynamic shared memory per block, in bytes.
        max_shared: The device's opt-in limit on shared memory per block.
        need_cuda: Whether tensors must be CUDA tensors (False: a check without a GPU).

    Raises:
        LaunchError: the first thing wrong, named.
    """
    g = dims(grid, "grid", MAX_GRID, kernel)
    b = dims(block, "block", MAX_BLOCK, kernel)
    if b[0] * b[1] * b[2] > MAX_THREADS:
        raise LaunchError(f"{kernel}: block {b} has {b[0] * b[1] * b[2]} threads, over the "
                          f"limit of {MAX_THREADS}")
    if not isinstance(shared_mem, Integral) or isinstance(shared_mem, bool) or not (
            0 <= shared_mem <= max_shared):
        raise LaunchError(f"{kernel}: shared_mem must be an int of bytes in 0..{max_shared} "
                          f"(this device's limit per block), got {shared_mem!r}")
    if not isinstance(args, (tuple, list)):
        raise LaunchError(f"{kernel}: args must be a tuple or list of arguments, got "
                          f"{type(args).__name__}")
    if len(args) != len(params):
        raise LaunchError(f"{kernel} takes {len(params)} argument(s) "
                          f"({', '.join(p.describe() for p in params)}), got {len(args)}")
    packed, devices = [], []
    for p, a in zip(params, args):
        if p.pointer:
            packed.append(_pointer(p, a, kernel, need_cuda))
            devices.append(a.device)
        else:
            packed.append(_scalar(p, a, kernel))
    return Launch(g, b, int(shared_mem), tuple(packed), tuple(dict.fromkeys(devices)))


def _pointer(p: Param, a, kernel: str, need_cuda: bool) -> np.uint64:
    if not isinstance(a, torch.Tensor):
        raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) must be a tensor, "
                          f"got {type(a).__name__}")
    if need_cuda and a.device.type != "cuda":
        raise LaunchError(f"{kernel}: argument '{p.name}' is a tensor on {a.device}; "
                          "kernels read CUDA tensors only")
    dtype = str(a.dtype).removeprefix("torch.")
    accepted = POINTEE.get(p.ctype)
    if accepted is not None and dtype not in accepted:
        raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) is a {dtype} "
                          f"tensor; {p.ctype}* reads {' or '.join(accepted)}")
    ptr = a.data_ptr()
    if p.align > 1 and ptr % p.align:
        raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) is not "
                          f"{p.align}-byte aligned (a view at an offset?): vector loads need it")
    return np.uint64(ptr)


def _scalar(p: Param, a, kernel: str):
    kind = SCALARS[p.ctype]
    if isinstance(a, torch.Tensor):
        raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) is a scalar: pass "
                          "a Python number (tensor.item()), not a tensor")
    if kind is np.bool_:
        if not isinstance(a, (bool, np.bool_, Integral)):
            raise LaunchError(f"{kernel}: argument '{p.name}' (bool) got {a!r}")
        return np.bool_(bool(a))
    if np.issubdtype(kind, np.integer):
        if isinstance(a, bool) or not isinstance(a, Integral):
            raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) must be an "
                              f"integer, got {a!r}")
        info = np.iinfo(kind)
        if not info.min <= int(a) <= info.max:
            raise LaunchError(f"{kernel}: argument '{p.name}' = {int(a)} does not fit "
                              f"{p.ctype} ({info.min}..{info.max}); declare it long long")
        return kind(int(a))
    if not isinstance(a, Real):
        raise LaunchError(f"{kernel}: argument '{p.name}' ({p.describe()}) must be a number, "
                          f"got {a!r}")
    return kind(float(a))
