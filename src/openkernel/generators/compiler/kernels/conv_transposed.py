"""A transposed convolution computed directly (the form ``ConvSpec.direct`` picks; the other
is conv.py's gradient form, which loops over every tap and masks those its stride skips).

Output ``o`` of a spatial dim reads input ``i = (o + p - k*dil) / s`` where that divides, so
the outputs split into ``s`` phases (``o mod s``) and within one phase the taps that contribute
are exactly one arithmetic progression: with ``g = gcd(dil, s)``, taps ``k = k0 + j*(s/g)``
where ``k0 = ((r/g) * inv(dil/g mod s/g)) mod (s/g)`` for ``r = (o + p) mod s``, reading input
``i0 - j*(dil/g)``; a phase with ``r`` not a multiple of ``g`` has no taps (only the bias).
Each phase (a grid axis, beside the groups) is then a dense implicit GEMM: rows are its output
positions (consecutive ones read consecutive inputs), columns output channels, and the
reduction runs over only its own taps x input channels, in one flat loop (pipelined across
taps). At stride 1 there is one phase: a convolution with the flipped kernel. The weight is
read as (*kernel, C_in, C_out / groups), permuted once per forward, so a tile's output
channels are contiguous.
"""

from __future__ import annotations

from math import gcd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openkernel.generators.compiler.kernels.conv import ConvSpec


def _dim(spec: ConvSpec, j: int) -> tuple[int, int, int, int, int, int]:
    """Dim ``j``'s kernel, stride, padding, dilation, tap step (s/g) and input step (dil/g)."""
    k, s, p, dil = spec.kernel[j], spec.stride[j], spec.padding[j], spec.dilation[j]
    g = gcd(dil, s)
    return k, s, p, dil, s // g, dil // g


def phases(spec: ConvSpec) -> int:
    n = 1
    for s in spec.stride:
        n *= s
    return n


def source(name: str, spec: ConvSpec) -> str:
    """The kernel: one BLOCK_M x BLOCK_N tile of one phase of one group's output per program."""
    from openkernel.generators.compiler.kernels.conv import DOT  # (conv.py imports this module)

    nd, dims = spec.nd, spec.names
    sp_in = ", ".join(f"{d.upper()}_in" for d in dims)
    sp_out = ", ".join(f"{d.upper()}_out" for d in dims)
    pad = " " * (len(name) + 5)
    stride = "x".join(map(str, spec.stride))
    lines = [
        "@triton.jit",
        f"def {name}(x_ptr, w_ptr, b_ptr, y_ptr, M, C_in, {sp_in}, C_out, {sp_out},",
        f"{pad}IEEE: tl.constexpr, TF32X3: tl.constexpr, UPCAST: tl.constexpr,",
        f"{pad}BLOCK_M: tl.constexpr,",
        f"{pad}BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):",
        f'    """Transposed convolution ({nd}-d, kernel {"x".join(map(str, spec.kernel))}, '
        f'stride {stride}, groups {spec.groups}), direct: {phases(spec)} output phase'
        f'{"s" if phases(spec) > 1 else ""}, each an implicit GEMM over its own taps."""',
        "    pid_m = tl.program_id(0).to(tl.int64)",
        "    pid_n = tl.program_id(1).to(tl.int64)",
        f"    g = tl.program_id(2).to(tl.int64) // {phases(spec)}",
        f"    ph = tl.program_id(2) % {phases(spec)}  # the output phase: o mod stride, per dim",
        f"    cig = C_in // {spec.groups}  # input channels per group",
        f"    cog = C_out // {spec.groups}",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # the phase's outputs: batch x spatial",
        "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels of group g",
    ]
    # Per dim (innermost first): the phase, its first tap k0 and tap count T, its output rows.
    rest, row_ok = "rm", ["(rm < M)"]
    for j in reversed(range(nd)):
        d = dims[j]
        k, s, p, dil, step, di = _dim(spec, j)
        if s == 1:
            lines += [f"    T_{d} = {k}  # every tap", f"    o_{d} = {rest} % {d.upper()}_out"]
        else:
            lines += [f"    ph_{d} = ph % {s}", f"    ph = ph // {s}",
                      f"    r_{d} = (ph_{d} + {p}) % {s}"]
            g = s // step
            if step == 1:  # (the dilation a multiple of the stride: all taps or none)
                count = str(k)
            else:  # k0 * dil = r (mod s): k0 = (r / g) * inv(dil / g) mod s / g
                inv, q = pow(di, -1, step), f"r_{d}" if g == 1 else f"(r_{d} // {g})"
                first = q if inv == 1 else f"({q} * {inv}) % {step}"
                lines.append(f"    k0_{d} = {first}  # taps k0 + j * {step} reach this phase")
                count = f"({k} - k0_{d} + {step - 1}) // {step}"
            if g > 1:  # (r not a multiple of gcd(dilation, stride): no tap reaches it)
                count = f"tl.where(r_{d} % {g} == 0, {count}, 0)"
            lines += [f"    T_{d} = {count}",
                      f"    o_{d} = ph_{d} + {s} * ({rest} % tl.cdiv({d.upper()}_out, {s}))"]
            row_ok.append(f"(o_{d} < {d.upper()}_out)")  # (ragged phases end early)
        divisor = f"{d.upper()}_out" if s == 1 else f"tl.cdiv({d.upper()}_out, {s})"
        rest = f"({rest} // {divisor})"
        i0 = f"o_{d} + {p}" + (f" - k0_{d} * {dil}" if step > 1 else "")
        lines.append(f"    i0_{d} = {f'({i0}) // {s}' if s > 1 else i0}  # (exact in a phase)")
    lines.append(f"    n = {rest}")
    lines.append(f"    row_ok = {' & '.join(row_ok)}")
    sp = " * ".join(f"{d.upper()}_in" for d in dims)
    count = " * ".join(f"T_{d}" for d in dims)
    lines += [
        f"    x_row = n * C_in * ({sp})  # the row's image; its spatial offset moves with the tap",
        "    nck = tl.cdiv(cig, BLOCK_K)",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"    for kk in range(0, {count} * nck):  # this phase's taps x input-channel blocks",
        "        t = kk // nck",
        "        ck = (kk - t * nck) * BLOCK_K + tl.arange(0, BLOCK_K)",
    ]
    ok, spatial, kpos = ["row_ok"], "", ""
    for j in reversed(range(nd)):
        d = dims[j]
        k, s, p, dil, step, di = _dim(spec, j)
        jv = "t" if j == 0 else f"(t % T_{d})"
        lines.append(f"        k_{d} = " + (f"k0_{d} + {jv} * {step}" if step > 1 else jv))
        lines.append(f"        i_{d} = i0_{d} - {jv}" + (f" * {di}" if di > 1 else ""))
        if j:
            lines.append(f"        t = t // T_{d}")
        ok.append(f"(i_{d} >= 0) & (i_{d} < {d.upper()}_in)")
    for j, d in enumerate(dims):
        spatial = f"i_{d}" if not j else f"({spatial}) * {d.upper()}_in + i_{d}"
        kpos = f"k_{d}" if not j else f"({kpos}) * {spec.kernel[j]} + k_{d}"
    lines += [
        f"        a_ok = {' & '.join(ok)}",
        f"        a = tl.load(x_ptr + (x_row + {spatial})[:, None] + (g * cig + ck)[None, :] "
        f"* ({sp}),",
        "                    mask=a_ok[:, None] & (ck[None, :] < cig), other=0.0)",
        f"        w_row = ({kpos}) * C_in + g * cig  # weight (*kernel, C_in, C_out / groups)",
        "        b = tl.load(w_ptr + (w_row + ck[:, None]) * cog + rn[None, :],",
        "                    mask=(ck[:, None] < cig) & (rn[None, :] < cog), other=0.0)",
    ] + DOT
    co = "g * cog + rn[None, :]"
    if spec.bias:
        lines.append(f"    acc += tl.load(b_ptr + {co}, mask=rn[None, :] < cog, other=0.0)"
                     ".to(tl.float32)")
    y_off = f"n[:, None] * C_out + {co}"
    for d in dims:
        y_off = f"({y_off}) * {d.upper()}_out + o_{d}[:, None]"
    lines += [
        "    y_mask = row_ok[:, None] & (rn[None, :] < cog)",
        f"    tl.store(y_ptr + {y_off}, acc.to(y_ptr.dtype.element_ty), mask=y_mask)",
    ]
    return "\n".join(lines)


def weight(spec: ConvSpec, w: str) -> str:
    """The weight (C_in, C_out / groups, *kernel) as the kernel reads it."""
    order = ", ".join(str(2 + j) for j in range(spec.nd))
    return f"{w}.permute({order}, 0, 1).contiguous()"


def rows(spec: ConvSpec, batch: str, out: str) -> str:
    """How many output rows one phase has (its largest: ragged phases mask their last)."""
    return " * ".join([batch] + [f"{out}[{j}]" if s == 1 else f"triton.cdiv({out}[{j}], {s})"
                                 for j, s in enumerate(spec.stride)])


def describe(spec: ConvSpec) -> str:
    n = phases(spec)
    if n == 1:
        return (f"{spec.nd}-d transposed convolution, direct (stride 1: the flipped kernel's "
                "convolution), a Triton implicit GEMM")
    return (f"{spec.nd}-d transposed convolution, direct: {n} output phases, each a Triton "
            "implicit GEMM over only its own taps")
