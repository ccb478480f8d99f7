"""Past Inductor's launch configs: the knobs a seed's children move (issue 57).

Inductor's heuristics pick one or a few launch configs per kernel, and its code stops there.
A seed's kernel gets three more tunables, each a scale of its chosen config: the x block
(``K<n>_X``), the reduction block of a looped reduction (``K<n>_R``) and the warps
(``K<n>_W``). At 1 each is Inductor's own, so a seed starts as torch.compile's kernels and its
children step away from them. A block axis Inductor left unmasked (it proved the size a
multiple of its block) only shrinks: a larger block would read past the tensor.
"""

from __future__ import annotations

import math

from openkernel.generators.family import Tunable
from openkernel.generators.seeds.rewrite import SeedKernel, _prefix

SCALES = (0.25, 0.5, 1, 2, 4)
# The most elements one program's tile holds (x block times reduction block): past it the
# registers spill whatever the warps.
MAX_TILE = 1 << 16
MAX_WARPS = 32
REDUCTION_KEYS = ("R0_BLOCK", "RBLOCK")
SUFFIXES = ("_X", "_R", "_W")  # the tunables' names: K<n> and one of these


def _masked(kernel: SeedKernel, axis: str) -> bool:
    """Whether the kernel masks its ``axis`` (``x``, ``r0``) by the size (a bound checked)."""
    return f"{axis}mask = {axis}index < {axis}numel" in kernel.source


def _grows(kernel: SeedKernel, axis: str) -> tuple:
    return SCALES if _masked(kernel, axis) else tuple(s for s in SCALES if s <= 1)


def tunables(kernel: SeedKernel) -> tuple[Tunable, ...]:
    """The scales a kernel's children may move, from what its first config holds."""
    k, base = _prefix(kernel), kernel.configs[0]
    out = []
    if "XBLOCK" in base:
        out.append(Tunable(f"{k}_X", _grows(kernel, "x"), None,
                           f"{kernel.name}: its x block times this (Inductor's at 1)"))
    r_key = next((key for key in REDUCTION_KEYS if key in base), None)
    if kernel.kind == "reduction" and r_key:  # a looped reduction (a persistent one holds it all)
        out.append(Tunable(f"{k}_R", _grows(kernel, "r0"), None,
                           f"{kernel.name}: its reduction block ({r_key}) times this"))
    warps = base.get("num_warps", 4)
    out.append(Tunable(f"{k}_W", tuple(s for s in SCALES if 1 <= warps * s <= MAX_WARPS),
                       (1,), f"{kernel.name}: its warps times this (none under the interpreter)"))
    return tuple(out)


def scaled(kernel: SeedKernel, config: dict, params: dict) -> tuple[dict, list[str]]:
    """``config`` with ``params``' scales applied, and what moved in words ("XBLOCK 64->128")."""
    k = _prefix(kernel)
    scales = {"XBLOCK": params.get(f"{k}_X", 1), "num_warps": params.get(f"{k}_W", 1),
              **{key: params.get(f"{k}_R", 1) for key in REDUCTION_KEYS}}
    out = dict(config)
    for key, scale in scales.items():
        if key in out and scale != 1:
            out[key] = max(1, int(out[key] * scale))
    if "num_warps" in out:
        out["num_warps"] = min(MAX_WARPS, out["num_warps"])
    tile = [key for key in ("XBLOCK", *REDUCTION_KEYS) if key in out]
    # a grown axis gives way past the bound (never below Inductor's own: its tile is its own)
    bound = max(MAX_TILE, math.prod(config[key] for key in tile))
    while math.prod(out[key] for key in tile) > bound:
        grown = max(tile, key=lambda key: out[key] / max(1, config[key]))
        out[grown] = max(config[grown], out[grown] // 2)
    moved = [f"{key} {config[key]}->{out[key]}" for key in out if out[key] != config.get(key)]
    return out, moved

