"""Comparing a candidate's outputs with the reference's (runs inside a worker process).

Two tests must both pass, per output tensor:

* elementwise: ``|out - ref| <= atol + rtol * |ref|`` everywhere (``torch.allclose``
  semantics), with NaN never passing and infinities matching exactly;
* relative norm: ``||out - ref||_2 / ||ref||_2 <= max_rel_error``. This is what catches
  outputs so small that ``atol`` alone would pass an all-zero answer.

Default tolerances per dtype (a task's ``get_tolerances(dtype)`` hook overrides any key):

=========  =====  =====  =============  ===============================================
dtype      atol   rtol   max_rel_error  why
=========  =====  =====  =============  ===============================================
float64    1e-6   1e-6   1e-9
float32    1e-2   1e-2   1e-3           admits TF32 matmuls (~3e-4), rejects bf16 (~3e-3)
float16    2e-2   2e-2   5e-3           unit roundoff 4.9e-4 plus fp32-accumulation noise
bfloat16   5e-2   5e-2   2e-2           unit roundoff 3.9e-3
ints/bool  0      0      0              exact
=========  =====  =====  =============  ===============================================

Every comparison is done in float64 with functions captured when this module is imported,
before any candidate code runs, so a candidate that patches ``torch.allclose`` gains nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# Private references: captured before candidate code is imported (see integrity.Guard).
_isnan = torch.isnan
_isinf = torch.isinf
_abs = torch.abs
_norm = torch.linalg.vector_norm
_where = torch.where
_equal = torch.equal

DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"atol": 1e-6, "rtol": 1e-6, "max_rel_error": 1e-9},
    "float32": {"atol": 1e-2, "rtol": 1e-2, "max_rel_error": 1e-3},
    "float16": {"atol": 2e-2, "rtol": 2e-2, "max_rel_error": 5e-3},
    "bfloat16": {"atol": 5e-2, "rtol": 5e-2, "max_rel_error": 2e-2},
}
_EXACT = {"atol": 0.0, "rtol": 0.0, "max_rel_error": 0.0}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerances_for(dtype: torch.dtype, hook: Any = None) -> dict[str, float]:
    """The tolerances for outputs of ``dtype``, with the task hook's keys taking precedence."""
    base = dict(DEFAULT_TOLERANCES.get(dtype_name(dtype), _EXACT if not dtype.is_floating_point
                                       else DEFAULT_TOLERANCES["float32"]))
    if hook is not None:
        override = hook(dtype) or {}
        base.update({k: float(v) for k, v in override.items() if k in base})
    return base


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """Outputs as a flat list of tensors; raises TypeError for anything else."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        flat: list[torch.Tensor] = []
        for item in out:
            flat.extend(flatten_outputs(item))
        return flat
    raise TypeError(f"forward returned {type(out).__name__}, expected a tensor or a tuple of tensors")


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64 (inf if NaN appears; 0/0 counts as 0)."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    finite = ~(_isinf(o) | _isinf(r))
    diff = _where(finite, o - r, torch.zeros((), dtype=torch.float64, device=o.device))
    num = float(_norm(diff))
    den = float(_norm(_where(finite, r, torch.zeros((), dtype=torch.float64, device=r.device))))
    if math.isnan(num):
        return math.inf
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float], name: str
                   ) -> tuple[bool, str, dict[str, float]]:
    """Check one output tensor; returns (ok, message, stats)."""
    if tuple(out.shape) != tuple(ref.shape):
        return False, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}", {}
    if out.dtype != ref.dtype:
        return False, f"{name}: dtype {dtype_name(out.dtype)} != reference {dtype_name(ref.dtype)}", {}
    if out.device != ref.device:
        out = out.to(ref.device)
    if out.numel() == 0:
        return True, "", {"max_abs_error": 0.0, "rel_error": 0.0}
    if not ref.dtype.is_floating_point:
        ok = _equal(out, ref)
        return ok, "" if ok else f"{name}: integer/bool values differ", {}
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    n_nan = int(_isnan(o).sum())
    if n_nan:
        return False, f"{name}: {n_nan} NaN value(s) in the output (NaN never passes)", {}
    o_inf, r_inf = _isinf(o), _isinf(r)
    if not _equal(o_inf, r_inf) or not _equal(o[o_inf], r[r_inf]):
        return False, f"{name}: infinities differ from the reference", {}
    diff = _abs(_where(o_inf, torch.zeros_like(o), o - r))
    bound = tol["atol"] + tol["rtol"] * _abs(_where(r_inf, torch.zeros_like(r), r))
    max_abs = float(diff.max())
    rel = relative_error(out, ref)
    stats = {"max_abs_error": max_abs, "rel_error": rel}
    bad = int((diff > bound).sum())
    if bad:
        return False, (f"{name}: {bad}/{o.numel()} elements outside atol={tol['atol']:g}, "
                       f"rtol={tol['rtol']:g} (max abs error {max_abs:.3g})"), stats
    if rel > tol["max_rel_error"]:
        return False, (f"{name}: relative error ||out-ref||/||ref|| = {rel:.3g} > "
                       f"{tol['max_rel_error']:g} (elementwise tolerances passed; outputs may be "
                       "too small for atol to mean anything)"), stats
    return True, "", stats


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], tol_hook: Any = None
                    ) -> tuple[bool, str, dict[str, float]]:
    """Check all outputs; returns (ok, first failure message, worst stats)."""
    if len(outs) != len(refs):
        return False, f"returned {len(outs)} output(s), the reference returns {len(refs)}", {}
    worst = {"max_abs_error": 0.0, "rel_error": 0.0}
    for i, (o, r) in enumerate(zip(outs, refs)):
        ok, msg, stats = compare_tensor(o, r, tolerances_for(r.dtype, tol_hook), f"output {i}")
        for k, v in stats.items():
            worst[k] = max(worst[k], v)
        if not ok:
            return False, msg, worst
    return True, "", worst
