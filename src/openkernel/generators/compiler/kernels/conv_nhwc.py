"""A convolution as a Triton implicit GEMM, taps outer and blocks of input channels inner
(the tunable ``CONV_NHWC``: compiler/families.py), the form of torch.compile's own Triton
convolution.

The NCHW form (conv.py) orders its reduction input channel x kernel position, so every element
of an A tile works out its own input coordinates (div/mod, bounds) and the load is a gather.
Here the reduction runs tap (outer) x block of BLOCK_K input channels (inner), flattened into
one loop so the pipeliner overlaps taps too: for a tap, each row (output position) computes its
input position once, the padding is a row mask. The input is read through its strides, either
copied channels-last first (CONV_NHWC=1: a tap's BLOCK_K channels contiguous, vector loads) or
as it is (``ConvSpec.in_place``, CONV_NHWC=2: no copy of the input each call; an NCHW input's
A tile is then contiguous along the rows, as the NCHW form's is). The weight is re-laid out
once per call as (C_out, *kernel, C_in / groups). Row coordinates divide in int32 (64-bit
division is emulated on the GPU; see depthwise.py); offsets are int64 from the batch index on,
and wholly (WIDE) where the rows or the input pass int32. The output is stored NCHW
contiguous, the layout of the reference's. Stride, padding, dilation, groups, bias, 1-3
spatial dims and the precision flags are those of conv.py's kernel.
"""

from __future__ import annotations


def _taps(spec) -> int:
    count = 1
    for k in spec.kernel:
        count *= k
    return count


def _affine(v: str, mul: int, add: int) -> str:
    """``v * mul + add`` without the no-op terms."""
    out = v if mul == 1 else f"{v} * {mul}"
    return out if add == 0 else f"{out} + {add}" if add > 0 else f"{out} - {-add}"


def source(name: str, spec) -> str:
    """The kernel: one BLOCK_M x BLOCK_N tile of one group's output per program."""
    from openkernel.generators.compiler.kernels.conv import DOT, output_coordinates

    nd, dims, ks, groups = spec.nd, spec.names, spec.kernel, spec.groups
    sp_in = ", ".join(f"{d.upper()}_in" for d in dims)
    sp_out = ", ".join(f"{d.upper()}_out" for d in dims)
    strides = ", ".join(f"sx_{d}" for d in ("n", "c", *dims))  # the input's, in elements
    pad = " " * (len(name) + 5)
    lines = [
        "@triton.jit",
        f"def {name}(x_ptr, w_ptr, b_ptr, y_ptr, M, cig, {sp_in}, {strides}, cog, {sp_out},",
        f"{pad}IEEE: tl.constexpr, TF32X3: tl.constexpr, UPCAST: tl.constexpr,",
        f"{pad}WIDE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,",
        f"{pad}BLOCK_K: tl.constexpr):",
        f'    """Convolution ({nd}-d, kernel {"x".join(map(str, ks))}, groups {groups}) as an '
        'implicit GEMM: taps outer, BLOCK_K input channels inner."""',
        "    pid_m = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    g = tl.program_id(2)",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions: batch x spatial",
        "    if WIDE:  # rows or the input's offsets past int32",
        "        rm = rm.to(tl.int64)",
        "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels of group g",
        "    rc = tl.arange(0, BLOCK_K)",
        "    if WIDE:",
        "        rc = rc.to(tl.int64)",
    ]
    coordinates, rest = output_coordinates("rm", dims)
    lines += coordinates + [f"    n = {rest}.to(tl.int64)"]
    for j, d in enumerate(dims):  # each row's window corner, once per row
        lines.append(f"    c_{d} = {_affine(f'o_{d}', spec.stride[j], -spec.padding[j])}")
    lines += [
        "    m_ok = rm < M",
        "    n_ok = rn < cog",
        "    x_row = n * sx_n + (g.to(tl.int64) * cig) * sx_c  # group g's first input channel",
        f"    w_col = (g * cog + rn).to(tl.int64) * ({_taps(spec)} * cig)  # (C_out, *kernel, cig)",
        "    nck = tl.cdiv(cig, BLOCK_K)  # channel blocks per tap",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"    for kk in range(0, {_taps(spec)} * nck):",
        "        tap = kk // nck",
        "        c = (kk - tap * nck) * BLOCK_K + rc",
    ]
    div = 1  # tap = ((k_d * K_h) + k_h) * K_w + k_w: the weight's order
    for j, (d, k) in enumerate(zip(reversed(dims), reversed(ks))):
        q = "tap" if div == 1 else f"(tap // {div})"
        lines.append(f"        k_{d} = {q}" if j == nd - 1 else f"        k_{d} = {q} % {k}")
        div *= k
    row_ok = ["m_ok"]
    pixel = "x_row"
    for j, d in enumerate(dims):
        lines.append(f"        i_{d} = c_{d} + {_affine(f'k_{d}', spec.dilation[j], 0)}")
        row_ok.append(f"(i_{d} >= 0) & (i_{d} < {d.upper()}_in)")
        pixel = f"{pixel} + i_{d} * sx_{d}"
    lines += [
        f"        row_ok = {' & '.join(row_ok)}  # padding: the whole row",
        f"        x_off = {pixel}  # (int64: x_row is)",
        "        c_ok = c < cig",
        "        a = tl.load(x_ptr + x_off[:, None] + c[None, :] * sx_c,",
        "                    mask=row_ok[:, None] & c_ok[None, :], other=0.0)",
        "        b = tl.load(w_ptr + w_col[None, :] + tap * cig + c[:, None],",
        "                    mask=c_ok[:, None] & n_ok[None, :], other=0.0)",
    ] + DOT + ["    co = g * cog + rn"]
    if spec.bias:
        lines.append("    acc += tl.load(b_ptr + co[None, :], mask=n_ok[None, :], other=0.0)"
                     ".to(tl.float32)")
    c_out = "cog" if groups == 1 else f"({groups} * cog)"
    y_off = f"n[:, None] * {c_out} + co[None, :]"
    for d in dims:
        y_off = f"({y_off}) * {d.upper()}_out + o_{d}[:, None]"
    lines += [
        f"    y_off = {y_off}  # NCHW, the reference's layout",
        "    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty),",
        "             mask=m_ok[:, None] & n_ok[None, :])",
    ]
    return "\n".join(lines)


def operands(name: str, spec, x_expr: str, w_expr: str) -> tuple[list[str], list[str]]:
    """Forward lines making the input channels-last (a copy unless it already is; an NCHW view
    of it, so its sizes read as the input's) unless the kernel reads it in place, and the
    weight (C_out, *kernel, C_in / groups); and the input's spatial sizes."""
    nd = spec.nd
    order = ", ".join(str(2 + j) for j in range(nd))
    back = ", ".join(str(1 + j) for j in range(nd))
    x, w = f"{name}_x", f"{name}_w"
    read = f"{x} = {x_expr}  # read in its own layout (its strides)" if spec.in_place else \
        f"{x} = {x_expr}.permute(0, {order}, 1).contiguous().permute(0, {nd + 1}, {back})" \
        "  # channels-last"
    lines = [read,
             f"{w} = {w_expr}.permute(0, {order}, 1).contiguous()  # (C_out, *kernel, C_in / g)"]
    return lines, [f"{x}.shape[{2 + j}]" for j in range(nd)]


def launch_args(spec, x: str, y: str, sizes_in: list[str], sizes_out: list[str]) -> list[str]:
    """The kernel's size arguments after its pointers and M: channels per group, spatial sizes,
    the input's strides; the last is the WIDE flag. Not conv.wide's rule: here the output's
    and the weight's offsets are int64 from the batch index or the column on, so only the rows
    and the input's offsets can pass int32 (level1/63's 2.1G-element output would have made
    every row's arithmetic 64-bit for nothing)."""
    g = spec.groups
    return ["M", f"{x}.shape[1] // {g}", *sizes_in, f"*{x}.stride()", f"{y}.shape[1] // {g}",
            *sizes_out, f"WIDE=max(M + BLOCK_M, {x}.numel()) >= 2**31"]


def describe(spec) -> str:
    where = "its input as it is" if spec.in_place else "a channels-last input"
    return (f"{spec.nd}-d convolution as a Triton implicit GEMM over {where} "
            "(taps outer, channel blocks inner)")
