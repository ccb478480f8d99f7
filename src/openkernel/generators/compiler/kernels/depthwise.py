"""A depthwise convolution (each output channel reads one input channel: the weight is
(C_out, 1, *kernel), groups = C_in) computed directly, tap by tap.

As an implicit GEMM (conv.py) such a convolution is a product of one input channel by a few
taps: the tiles of ``tl.dot`` are at least 16 wide, so nearly all of their work is padding
(KernelBench level1/82 ran at 0.02x torch.compile that way). Here each program computes
BLOCK neighbouring output positions of one (batch, output channel) plane: for each tap (the
loops unrolled) it loads the input positions that tap reads, coalesced along the innermost
dim, masked outside the input (the padding), and multiplies them by the tap's weight in
float32 FMAs; the bias is added and the plane stored once. The work is memory-bound, like the
library's own depthwise kernels, as long as the per-element index arithmetic stays cheap:
positions within a plane are int32 (64-bit division and modulo are emulated on the GPU in
dozens of instructions; with them KernelBench level1/84 ran at 15.9 ms where the memory
traffic alone takes under 2), and only the planes' base offsets are int64. A plane of 2^31
elements or more (``WIDE``) keeps int64 positions.
"""

from __future__ import annotations


def source(name: str, spec) -> str:
    """The kernel: one BLOCK of one output plane per program."""
    nd, dims, ks = spec.nd, spec.names, spec.kernel
    sp_in = ", ".join(f"{d.upper()}_in" for d in dims)
    sp_out = ", ".join(f"{d.upper()}_out" for d in dims)
    lines = [
        "@triton.jit",
        f"def {name}(x_ptr, w_ptr, b_ptr, y_ptr, C_in, {sp_in}, C_out, {sp_out}, S_out, NBLK,",
        f"{' ' * (len(name) + 5)}MULT: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):",
        f'    """Depthwise convolution ({nd}-d, kernel {"x".join(map(str, ks))}, MULT output '
        'channels per input channel), tap by tap: BLOCK outputs of one plane per program."""',
        "    pid = tl.program_id(0)",
        "    plane = pid // NBLK  # batch x output channel",
        "    rs = (pid % NBLK) * BLOCK + tl.arange(0, BLOCK)  # output positions in the plane",
        "    if WIDE:  # a plane past int32",
        "        rs = rs.to(tl.int64)",
        "    s_mask = rs < S_out",
        "    co = plane % C_out",
        "    ci = co // MULT",
        "    n = plane // C_out",
    ]
    from openkernel.generators.compiler.kernels.conv import output_coordinates

    lines += output_coordinates("rs", dims)[0]
    plane_in = " * ".join(f"{d.upper()}_in" for d in dims)
    lines += [
        f"    x_plane = x_ptr + (n.to(tl.int64) * C_in + ci) * ({plane_in})",
        "    acc = tl.zeros((BLOCK,), dtype=tl.float32)",
    ]
    indent = "    "
    for j, (d, k) in enumerate(zip(dims, ks)):  # one unrolled loop per kernel dim
        s, p, dil = spec.stride[j], spec.padding[j], spec.dilation[j]
        lines.append(f"{indent}for k_{d} in tl.static_range({k}):")
        indent += "    "
        lines.append(f"{indent}i_{d} = o_{d} * {s} - {p} + k_{d} * {dil}")
        lines.append(f"{indent}ok_{d} = (i_{d} >= 0) & (i_{d} < {d.upper()}_in)")
    mask = " & ".join(["s_mask"] + [f"ok_{d}" for d in dims])
    offset = f"i_{dims[0]}"
    for d in dims[1:]:
        offset = f"({offset}) * {d.upper()}_in + i_{d}"
    tap = f"k_{dims[0]}"
    for d, k in zip(dims[1:], ks[1:]):
        tap = f"({tap}) * {k} + k_{d}"
    k_pos = 1
    for k in ks:
        k_pos *= k
    lines += [
        f"{indent}w = tl.load(w_ptr + co * {k_pos} + {tap}).to(tl.float32)",
        f"{indent}xv = tl.load(x_plane + {offset}, mask={mask}, other=0.0)",
        f"{indent}acc += xv.to(tl.float32) * w",
    ]
    if spec.bias:
        lines.append("    acc += tl.load(b_ptr + co).to(tl.float32)")
    lines.append("    tl.store(y_ptr + plane.to(tl.int64) * S_out + rs, "
                 "acc.to(y_ptr.dtype.element_ty), mask=s_mask)")
    return "\n".join(lines)


def launch(name: str, spec, x: str, w: str, b: str | None, y: str, outs: list[str],
           fn: str = "") -> list[str]:
    """The launch lines once the operands (contiguous) and ``y`` exist: one program per BLOCK
    outputs of each (batch, output channel) plane, on one grid axis (2^31 programs); ``fn``:
    the jit function, ``name`` unless it shares another's."""
    size = " * ".join(f"{name}_out[{j}]" for j in range(spec.nd))
    return [
        f"{name}_s = {size}",
        f"{name}_nblk = triton.cdiv({name}_s, BLOCK)",
        f"grid = ({x}.shape[0] * {y}.shape[1] * {name}_nblk,)",
        "if grid[0] > 0:",
        f"    {fn or name}[grid]({x}, {w}, {b or y}, {y}, {x}.shape[1], "
        + ", ".join(f"{x}.shape[{2 + j}]" for j in range(spec.nd))
        + f", {y}.shape[1], " + ", ".join(outs)
        + f", {name}_s, {name}_nblk, MULT={y}.shape[1] // {x}.shape[1], BLOCK=BLOCK, "
        f"WIDE=max({name}_s, {x}[0, 0].numel()) + BLOCK >= 2**31, num_warps=NUM_WARPS)",
    ]


def describe(spec) -> str:
    return f"{spec.nd}-d depthwise convolution in Triton, tap by tap (no GEMM tiles)"
