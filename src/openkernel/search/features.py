"""MAP-Elites feature dimensions for kernels.

Four coordinates that change how a kernel uses the GPU, so that the archive keeps a good kernel
of each *kind* rather than many copies of one:

* ``kind``: how it is built: ``inductor`` (an Inductor seed: torch.compile's own Triton),
  ``library`` (library-backed: a cuBLAS/cuDNN call through torch beside kernels of its own),
  ``template`` (an offline fused template) or ``hand`` (written by a model or a person).
* ``launches``: how many distinct kernels (and library calls) its forward launches: one fused
  kernel against a chain of them.
* ``tile``: log2 of the work one program (block) handles: the output tile (BLOCK_M x BLOCK_N,
  not the K depth), times its unrolled blocks; TILE, MAX_FUSED (a row read at once) or
  THREADS x ELEMS where a kernel says it that way. Small tiles favour occupancy and ragged
  shapes; large tiles favour reuse and fewer programs.
* ``warps``: warps per program (num_warps, or CUDA threads per block / 32): the parallelism
  inside a program, which trades registers per thread against latency hiding.

All come from the code itself (or the offline family's params its code uses), so LLM and
offline candidates share one archive; -1 (or "" for the kind) where the code does not say.
"""

from __future__ import annotations

import ast
import math
import re

from openkernel import syntax

_BLOCK = re.compile(r"\b(BLOCK[A-Z_]*|UNROLL|TILE|MAX_FUSED|ELEMS)\s*[:=]\s*(\d+)")
_WARPS = re.compile(r"\bnum_warps\s*[:=]\s*(\d+)")
_THREADS = re.compile(r"<<<[^,>]+,\s*(\d+)")
# Launch sites: a Triton kernel's `name[grid](`, a CUDA kernel's `name<<<` (or `name<T><<<`),
# Inductor's `name.run(`, and library calls through torch (each a cuBLAS/cuDNN kernel).
_TRITON_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\[[^\]\n]+\]\s*\(")
_CUDA_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>)?\s*<<<")
_INDUCTOR_LAUNCH = re.compile(r"\b(triton_\w+)\.run\(")
_LIBRARY = re.compile(
    r"\b(?:torch\.(?:mm|matmul|bmm|addmm|baddbmm|einsum|conv\w*|convolution)"
    r"|(?:F|functional)\.(?:conv\w*|linear|scaled_dot_product_attention)"
    r"|(?:torch\.ops\.)?aten\.(?:mm|bmm|addmm|baddbmm|_addmm_activation|\w*conv\w*)"
    r"|extern_kernels\.\w+|at::(?:mm|matmul|bmm|addmm|conv\w*)|cublas\w+|cudnn\w+)\s*\(")
_MATMUL_OP = re.compile(r"[\w\)\]]\s+@\s+[\w\(]")  # `a @ b` (a decorator starts a line)
_INDUCTOR = re.compile(r"\btriton_heuristics\b|\btorch\._inductor\b")

KINDS = {"inductor": "Inductor seed", "library": "library-backed", "template": "fused template",
         "hand": "hand-written", "": "unknown kind"}
TILE_RANGE = (4, 16)  # log2 of the work per program: 16 ... 65536 elements (clipped)
LAUNCHES_MAX = 4  # 4 means "4 or more"


def _code_only(code: str) -> str:
    """Python code without its comments and docstrings ("C = act(A @ B)" in a docstring is no
    library call); code that does not parse is read as it is."""
    try:
        tree = syntax.parse(code)
    except (SyntaxError, ValueError):
        return code
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def _kind(code: str, params: dict, origin: str) -> str:
    if origin == "inductor" or params.get("template") == "inductor_seed" or _INDUCTOR.search(code):
        return "inductor"
    if _LIBRARY.search(code) or _MATMUL_OP.search(code):
        return "library"
    if params.get("template"):
        return "template"
    return "hand" if code.strip() else ""


def _launches(code: str) -> int:
    names = set(_TRITON_LAUNCH.findall(code)) | set(_CUDA_LAUNCH.findall(code))
    names |= set(_INDUCTOR_LAUNCH.findall(code))
    names -= {"if", "for", "while", "return"}
    n = len(names) + len({m.group(0) for m in _LIBRARY.finditer(code)})
    n += bool(_MATMUL_OP.search(code))
    return min(n, LAUNCHES_MAX) if n else -1


def _work(values: dict) -> int | None:
    """Elements one program handles, from tile-like tunables or constants."""
    ints = {k: v for k, v in values.items() if isinstance(v, int) and v > 0}
    # A GEMM's output tile where there is one (a compiled family pins its other BLOCKs).
    blocks = [ints[k] for k in ("BLOCK_M", "BLOCK_N") if k in ints] or [
        v for k, v in ints.items() if k.startswith("BLOCK") and not k.endswith("_K")]
    if blocks:
        return math.prod(blocks) * ints.get("UNROLL", 1)
    for key in ("TILE", "MAX_FUSED"):
        if key in ints:
            return ints[key]
    if "THREADS" in ints:
        return ints["THREADS"] * ints.get("ELEMS", 1)
    return None


def _warps(code: str, params: dict) -> int | None:
    if isinstance(params.get("num_warps"), int):
        return params["num_warps"]
    if isinstance(params.get("THREADS"), int):
        return max(params["THREADS"] // 32, 1)
    found = _WARPS.findall(code)
    if found:
        return int(found[-1])
    threads = _THREADS.findall(code)
    return max(int(threads[-1]) // 32, 1) if threads else None


def kernel_features(code: str, params: dict | None = None, origin: str = "") -> dict:
    """Feature coordinates of a candidate: ``kind``, ``launches``, ``tile``, ``warps``."""
    params = params or {}
    code = _code_only(code or "")
    # The params its code uses: a compiled family pins the tunables its plan leaves out.
    values = {k: v for k, v in params.items() if k != "template"
              and (not code.strip() or re.search(rf"\b{re.escape(k)}\b", code))}
    work = _work(values)
    if work is None:
        found: dict[str, int] = {}
        for name, value in _BLOCK.findall(code):
            found.setdefault(name, int(value))
        work = _work(found)
    if work is None and _THREADS.search(code):  # a CUDA launch: a thread per element at least
        work = int(_THREADS.findall(code)[-1])
    tile = -1
    if work:
        tile = int(min(max(round(math.log2(work)), TILE_RANGE[0]), TILE_RANGE[1]))
    warps = _warps(code, params)
    return {"kind": _kind(code, params, origin), "launches": _launches(code), "tile": tile,
            "warps": -1 if warps is None else int(warps)}


def cell_of(features: dict) -> tuple:
    """The archive cell of a feature dict (missing coordinates: unknown)."""
    return (features.get("kind", ""), features.get("launches", -1), features.get("tile", -1),
            features.get("warps", -1))
