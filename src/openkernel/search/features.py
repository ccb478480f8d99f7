"""MAP-Elites feature dimensions for kernels.

Two coordinates that change how a kernel uses the GPU, so that the archive keeps a good kernel
of each *kind* rather than many copies of one:

* ``tile``: log2 of the work one program (block) handles, from the BLOCK* constants. Small
  tiles favour occupancy and ragged shapes; large tiles favour reuse and fewer launches.
* ``warps``: threads per program in warps (num_warps, or CUDA threads per block / 32): the
  parallelism inside a program, which trades registers per thread against latency hiding.

Both come from the code itself (or the offline template's params), so LLM and offline
candidates share one archive.
"""

from __future__ import annotations

import math
import re

_BLOCK = re.compile(r"\b(BLOCK[A-Z_]*)\s*[:=]\s*(\d+)")
_WARPS = re.compile(r"\bnum_warps\s*[:=]\s*(\d+)")
_THREADS = re.compile(r"<<<[^,>]+,\s*(\d+)")

TILE_BINS = 8  # log2 tile 0-6 (<=64), ..., 7 (>= 2^13)
WARP_BINS = 6  # 1, 2, 4, 8, 16, 32 warps


def kernel_features(code: str, params: dict | None = None) -> dict[str, int]:
    """Feature coordinates of a candidate; -1 where the code does not say."""
    params = params or {}
    blocks = {k: int(v) for k, v in params.items() if k.upper().startswith("BLOCK") and isinstance(v, int)}
    if not blocks:
        for name, value in _BLOCK.findall(code or ""):
            blocks.setdefault(name, int(value))
    tile = -1
    if blocks:
        work = math.prod(v for v in blocks.values() if v > 0) or 1
        tile = int(min(max(math.log2(work) - 6, 0), TILE_BINS - 1))
    warps = params.get("num_warps")
    if warps is None:
        found = _WARPS.findall(code or "")
        if found:
            warps = int(found[-1])
        else:
            threads = _THREADS.findall(code or "")
            warps = max(int(threads[-1]) // 32, 1) if threads else None
    warp_bin = -1 if warps is None else int(min(max(math.log2(max(int(warps), 1)), 0), WARP_BINS - 1))
    return {"tile": tile, "warps": warp_bin}


def cell_of(features: dict[str, int]) -> tuple[int, int]:
    return (features.get("tile", -1), features.get("warps", -1))
