"""A convolution as a Triton implicit GEMM (the all-Triton plan's; a library-backed plan
calls cuDNN instead: compiler/library.py): 1-3 spatial dims, stride, padding, dilation,
groups, bias, and transposed (the gradient form: each output reads the inputs whose window
covers it). Per group, the output is a GEMM: rows are output
positions (batch x spatial), columns output channels, and the reduction runs over input
channels x kernel positions; the A tile is gathered from the input at computed indices (zeros
outside it, the padding), the B tile read from the weight. ``tl.dot`` accumulates in float32
(float32 inputs in full precision, or TF32 where cuDNN's own convolution would use it: on a GPU
with ``torch.backends.cudnn.allow_tf32``), the bias is added on the tile, one store. A
convolution that is neither transposed nor depthwise may instead run taps outer, channel
blocks inner, over a channels-last copy of its input or the input as it is (``ConvSpec.nhwc``,
``ConvSpec.in_place``: conv_nhwc.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from openkernel.generators.compiler.graph import Node, Value, int_list
from openkernel.generators.compiler.kernels import conv_nhwc, conv_transposed, depthwise

_DIMS = ("d", "h", "w")  # the last nd of them name the spatial dims
# The K loop's product of the tiles ``a`` and ``b`` into ``acc``, in the run's precision.
DOT = [
    "        if UPCAST:  # the Triton interpreter multiplies bfloat16 tiles as integers",
    "            a, b = a.to(tl.float32), b.to(tl.float32)",
    "        if IEEE:  # float32 in full precision (TF32 only where cuDNN's would be)",
    "            acc = tl.dot(a, b, acc, input_precision=\"ieee\")",
    "        elif TF32X3:  # near float32 on tensor cores: the reference's cuDNN kernels were exact",
    "            acc = tl.dot(a, b, acc, input_precision=\"tf32x3\")",
    "        else:",
    "            acc = tl.dot(a, b, acc)",
]


@dataclass
class ConvSpec:
    """The static arguments of one ``aten.convolution`` node."""

    nd: int
    kernel: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    transposed: bool
    output_padding: list[int]
    groups: int
    bias: bool
    # a transposed convolution computed directly, phase by phase (conv_transposed.py), not
    # in the gradient form below
    direct: bool = False
    # float32 near-exactly (3xTF32) though cuDNN's TF32 is on: the reference's own cuDNN
    # kernels measured exact at the probe (TaskProbe.conv_exact), so TF32 would be below them
    exact: bool = False
    # each output channel reads one input channel (weight (C_out, 1, *kernel)): computed tap by
    # tap (depthwise.py), not as a GEMM whose tiles would be nearly all padding
    depthwise: bool = False
    # taps outer and channel blocks inner over a channels-last copy of the input
    # (conv_nhwc.py; the tunable CONV_NHWC), not NCHW with every A element gathered
    nhwc: bool = False
    # (with nhwc) the input read in its own layout, through its strides: no copy
    in_place: bool = False
    channels: int = 0  # input channels per group
    # a transposed convolution of stride 1 computed as a plain one: its weight (C_in, C_out / g,
    # *kernel) read as (C_out, C_in / g, *kernel) with the kernel flipped, its padding
    # dil * (k - 1) - p; the plain forms (NCHW, channels-last) then serve it
    flipped: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return _DIMS[-self.nd:]


def conv_spec(node: Node) -> ConvSpec | str:
    """The node's arguments, or why this kernel cannot compute it."""
    x, w = node.args[0], node.args[1]
    if not isinstance(x, Value) or not isinstance(w, Value):
        return "a convolution of a non-tensor"
    nd = len(w.shape) - 2
    if nd not in (1, 2, 3) or len(x.shape) != nd + 2:
        return f"a {nd}-d convolution (or one without a batch dim)"
    if any(not s.static for s in w.shape):
        return "a convolution whose weight has symbolic sizes"
    spec = ConvSpec(nd=nd, kernel=[s.coeff for s in w.shape[2:]],
                    stride=int_list(node.arg(3, "stride"), nd, [1] * nd),
                    padding=int_list(node.arg(4, "padding"), nd),
                    dilation=int_list(node.arg(5, "dilation"), nd, [1] * nd),
                    transposed=bool(node.arg(6, "transposed", False)),
                    output_padding=int_list(node.arg(7, "output_padding"), nd),
                    groups=int(node.arg(8, "groups", 1) or 1),
                    bias=isinstance(node.arg(2, "bias"), Value))
    spec.channels = w.shape[0].coeff // spec.groups if spec.transposed else w.shape[1].coeff
    flip = [d * (k - 1) - p for k, p, d in zip(spec.kernel, spec.padding, spec.dilation)]
    if spec.transposed and set(spec.stride) == {1} and not any(spec.output_padding) and \
            min(flip) >= 0:  # (a larger padding crops: left to the transposed forms)
        spec.transposed, spec.flipped, spec.padding = False, True, flip
    spec.depthwise = not spec.transposed and spec.channels == 1
    if x.dtype != w.dtype:
        return "a convolution of mixed dtypes"
    return spec


def source(name: str, spec: ConvSpec) -> str:
    """The kernel: one BLOCK_M x BLOCK_N tile of one group's output per program."""
    if spec.direct:
        return conv_transposed.source(name, spec)
    if spec.depthwise:
        return depthwise.source(name, spec)
    if spec.nhwc:
        return conv_nhwc.source(name, spec)
    nd, dims, ks = spec.nd, spec.names, spec.kernel
    sp_in = ", ".join(f"{d.upper()}_in" for d in dims)
    sp_out = ", ".join(f"{d.upper()}_out" for d in dims)
    k_pos = 1
    for k in ks:
        k_pos *= k
    lines = [
        "@triton.jit",
        f"def {name}(x_ptr, w_ptr, b_ptr, y_ptr, M, C_in, {sp_in}, C_out, {sp_out},",
        f"{' ' * (len(name) + 5)}IEEE: tl.constexpr, TF32X3: tl.constexpr, UPCAST: tl.constexpr,",
        f"{' ' * (len(name) + 5)}WIDE: tl.constexpr, BLOCK_M: tl.constexpr,",
        f"{' ' * (len(name) + 5)}BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):",
        f'    """{"Transposed c" if spec.transposed else "C"}onvolution ({nd}-d, '
        f'kernel {"x".join(map(str, ks))}, groups {spec.groups}) as an implicit GEMM."""',
        "    pid_m = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    g = tl.program_id(2)",
        "    if WIDE:  # offsets past int32 (else 32-bit: an add or an index an A element)",
        "        pid_m = pid_m.to(tl.int64)",
        "        pid_n = pid_n.to(tl.int64)",
        "        g = g.to(tl.int64)",
        f"    cig = C_in // {spec.groups}  # input channels per group",
        f"    cog = C_out // {spec.groups}",
        f"    K = cig * {k_pos}  # input channels x kernel positions",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions: batch x spatial",
        "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels of group g",
    ]
    coordinates, rest = output_coordinates("rm", dims)
    lines += coordinates + [f"    n = {rest}"]
    if not spec.transposed:
        lines += _window_starts(spec)
    lines += [
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "    for k0 in range(0, K, BLOCK_K):",
        "        rk = k0 + tl.arange(0, BLOCK_K)",
    ]
    if not spec.transposed:
        lines += ["        if WIDE:  # (its column part reaches the input's size too)",
                  "            rk = rk.to(tl.int64)"]
    rest = "rk"
    for d, k in zip(reversed(dims), reversed(ks)):
        lines.append(f"        k_{d} = {rest} % {k}")
        rest = f"({rest} // {k})"
    lines.append(f"        ci = {rest}")
    ok = ["(rm[:, None] < M)", "(rk[None, :] < K)"]
    if not spec.transposed:
        lines += _window_columns(spec, ok)
    else:
        for j, d in enumerate(dims):
            s, p, dil = spec.stride[j], spec.padding[j], spec.dilation[j]
            # the input whose window covers this output: (o + p - k * dil) / s, if whole
            lines.append(f"        t_{d} = o_{d}[:, None] + {p} - k_{d}[None, :] * {dil}")
            lines.append(f"        i_{d} = t_{d} // {s}")
            if s != 1:
                ok.append(f"(t_{d} >= 0) & (t_{d} % {s} == 0)")
            ok.append(f"(i_{d} >= 0) & (i_{d} < {d.upper()}_in)")
        offset = "n[:, None] * C_in + g * cig + ci[None, :]"
        for d in dims:
            offset = f"({offset}) * {d.upper()}_in + i_{d}"
        lines.append(f"        a_mask = {' & '.join(ok)}")
        lines.append(f"        a = tl.load(x_ptr + {offset}, mask=a_mask, other=0.0)")
    if not spec.transposed:  # weight (C_out, C_in / groups, *kernel): rk is its inner index
        w_off = "(g * cog + rn[None, :]) * K + rk[:, None]"
    else:  # weight (C_in, C_out / groups, *kernel)
        kpos = "k_" + dims[0] + "[:, None]"
        for d, k in zip(dims[1:], ks[1:]):
            kpos = f"({kpos}) * {k} + k_{d}[:, None]"
        w_off = f"((g * cig + ci[:, None]) * cog + rn[None, :]) * {k_pos} + {kpos}"
    lines += [
        "        b_mask = (rk[:, None] < K) & (rn[None, :] < cog)",
        f"        b = tl.load(w_ptr + {w_off}, mask=b_mask, other=0.0)",
    ] + DOT
    co = "g * cog + rn[None, :]"
    if spec.bias:
        lines.append(f"    acc += tl.load(b_ptr + {co}, mask=rn[None, :] < cog, other=0.0)"
                     ".to(tl.float32)")
    # (n * C_out + co) * S + o, S the output plane: a row part and a column part
    plane = " * ".join(f"{d.upper()}_out" for d in dims)
    spatial = f"o_{dims[0]}"
    for d in dims[1:]:
        spatial = f"({spatial}) * {d.upper()}_out + o_{d}"
    lines += [
        f"    y_row = n * C_out * ({plane}) + {spatial}",
        "    y_mask = (rm[:, None] < M) & (rn[None, :] < cog)",
        f"    tl.store(y_ptr + (y_row[:, None] + ({co}) * ({plane})), "
        "acc.to(y_ptr.dtype.element_ty), mask=y_mask)",
    ]
    return "\n".join(lines)


# A plain convolution's A offset, ((n * C_in + c) * D_in + o_d * s - p + k_d * dil) * ..., is
# linear in the output position and the (channel, tap) column apart: a row part, where each
# output position's window starts (once a program), plus a column part (once a K step), one
# add an element instead of the whole index. Only padded dims check their bounds: without
# padding every tap of a valid output position is inside the input (torch's output size).
# (level1/54, 3 input channels of a 3-d input: the per-element index was most of the work.)
def _window_starts(spec: ConvSpec) -> list[str]:
    """Kernel lines (before the K loop): ``x_row``, the input offset of each output position's
    window start, and ``s_<dim>``, its first input coordinate where that dim is padded."""
    dims, sizes = spec.names, [f"{d.upper()}_in" for d in spec.names]
    parts = [f"(n * C_in + g * cig) * ({' * '.join(sizes)})"]
    lines = []
    for j, d in enumerate(dims):
        s, p = spec.stride[j], spec.padding[j]
        start = f"o_{d} * {s}" if s != 1 else f"o_{d}"
        if p:
            lines.append(f"    s_{d} = {start} - {p}")
            start = f"s_{d}"
        elif s != 1:
            start = f"({start})"
        after = " * ".join(sizes[j + 1:])
        parts.append(f"{start} * ({after})" if after else start)
    return lines + [f"    x_row = {' + '.join(parts)}"]


def _window_columns(spec: ConvSpec, ok: list[str]) -> list[str]:
    """Kernel lines (in the K loop): ``x_col``, the input offset of each column's channel and
    tap, the padded dims' bounds added to ``ok``, and the A tile's load."""
    dims, sizes = spec.names, [f"{d.upper()}_in" for d in spec.names]
    parts, lines = [f"ci * ({' * '.join(sizes)})"], []
    for j, d in enumerate(dims):
        dil = spec.dilation[j]
        tap = f"k_{d}"
        if dil != 1:
            lines.append(f"        t_{d} = k_{d} * {dil}")
            tap = f"t_{d}"
        after = " * ".join(sizes[j + 1:])
        parts.append(f"{tap} * ({after})" if after else tap)
        if spec.padding[j]:
            ok.append(f"(s_{d}[:, None] + {tap}[None, :] >= 0) & "
                      f"(s_{d}[:, None] + {tap}[None, :] < {sizes[j]})")
    return lines + [f"        x_col = {' + '.join(parts)}",
            f"        a_mask = {' & '.join(ok)}",
            "        a = tl.load(x_ptr + (x_row[:, None] + x_col[None, :]), mask=a_mask, "
            "other=0.0)"]


def wide(x: str, w: str, y: str) -> str:
    """The launch's WIDE flag: 64-bit offsets where the operands or the rows reach 2^30
    elements (half of int32's range: the rows and taps past the edges, masked, still compute
    their offsets)."""
    return f"WIDE=max({x}.numel(), {w}.numel(), {y}.numel(), M + BLOCK_M) >= 2**30"


def output_coordinates(index: str, dims) -> tuple[list[str], str]:
    """Kernel lines splitting a flat output index into its spatial coordinates ``o_<dim>``
    (innermost last), and the expression of what is left above them (the batch, the plane)."""
    lines, rest = [], index
    for d in reversed(dims):
        lines.append(f"    o_{d} = {rest} % {d.upper()}_out")
        rest = f"({rest} // {d.upper()}_out)"
    return lines, rest


def launch(name: str, spec: ConvSpec, x_expr: str, w_expr: str, b_expr: str | None,
           y: str, fn: str = "") -> list[str]:
    """Forward lines: the operands (contiguous), the output's sizes from the input's (torch's
    formulas, so held-out sizes follow), its buffer, the launch of ``fn`` (the jit function:
    ``name`` unless it shares another convolution's)."""
    fn = fn or name
    nd = spec.nd
    x, w, b = f"{name}_x", f"{name}_w", (f"{name}_b" if b_expr else None)
    if spec.flipped:
        w_expr = flipped_weight(spec, w_expr)
    w_read = conv_transposed.weight(spec, w_expr) if spec.direct else f"{w_expr}.contiguous()"
    if spec.nhwc:
        lines, sizes_in = conv_nhwc.operands(name, spec, x_expr, w_expr)
    else:
        lines = [f"{x}, {w} = {x_expr}.contiguous(), {w_read}"]
        sizes_in = [f"{x}.shape[{2 + j}]" for j in range(nd)]
    if b_expr:
        lines.append(f"{b} = {b_expr}.contiguous()")
    outs = []
    for j in range(nd):
        k, s, p, dil = spec.kernel[j], spec.stride[j], spec.padding[j], spec.dilation[j]
        if spec.transposed:
            outs.append(f"({sizes_in[j]} - 1) * {s} - {2 * p} + {dil * (k - 1)} "
                        f"+ {spec.output_padding[j]} + 1")
        else:
            outs.append(f"({sizes_in[j]} + {2 * p} - {dil * (k - 1)} - 1) // {s} + 1")
    c_out = f"{w_expr}.shape[1] * {spec.groups}" if spec.transposed else f"{w}.shape[0]"
    lines.append(f"{name}_out = ({', '.join(outs)},)")
    lines.append(f"{y} = torch.empty(({x}.shape[0], {c_out}, *{name}_out), device=device, "
                 f"dtype={x}.dtype)")
    if spec.depthwise:
        return lines + depthwise.launch(name, spec, x, w, b, y,
                                        [f"{name}_out[{j}]" for j in range(nd)], fn)
    m = " * ".join([f"{x}.shape[0]"] + [f"{name}_out[{j}]" for j in range(nd)])
    if spec.direct:  # (rows of one phase)
        m = conv_transposed.rows(spec, f"{x}.shape[0]", f"{name}_out")
    lines.append(f"M = {m}")
    sizes_out = [f"{name}_out[{j}]" for j in range(nd)]
    args = [x, w, b or y, y, *(conv_nhwc.launch_args(spec, x, y, sizes_in, sizes_out)
                               if spec.nhwc else
                               ["M", f"{x}.shape[1]", *sizes_in, f"{y}.shape[1]", *sizes_out]
                               + ([] if spec.direct else [wide(x, w, y)])),
            f"IEEE={x}.dtype == torch.float32 and not ({x}.is_cuda and torch.backends.cudnn.allow_tf32)",
            f"TF32X3={x}.dtype == torch.float32" if spec.exact else "TF32X3=False",
            f"UPCAST=INTERPRETED and {x}.dtype == torch.bfloat16", "BLOCK_M=BLOCK_M",
            "BLOCK_N=BLOCK_N", "BLOCK_K=BLOCK_K", "num_warps=NUM_WARPS",
            "num_stages=NUM_STAGES"]
    z = spec.groups * (conv_transposed.phases(spec) if spec.direct else 1)  # (x phases)
    lines.append(f"grid = (triton.cdiv(M, BLOCK_M), triton.cdiv({y}.shape[1] // {spec.groups}, "
                 f"BLOCK_N), {z})")
    lines.append(f"if M > 0 and {y}.shape[1] > 0:")
    lines.append(f"    {fn}[grid](" + ", ".join(args) + ")")
    return lines


def flipped_weight(spec: ConvSpec, w: str) -> str:
    """The expression of a stride-1 transposed convolution's weight as a plain convolution's:
    (C_in, C_out / g, *kernel) -> (C_out, C_in / g, *kernel), the kernel flipped."""
    dims = ", ".join(str(2 + j) for j in range(spec.nd))
    swap = f"{w}.transpose(0, 1)" if spec.groups == 1 else \
        f"{w}.unflatten(0, ({spec.groups}, -1)).transpose(1, 2).flatten(0, 1)"
    return f"{swap}.flip({dims})"


def describe(spec: ConvSpec) -> str:
    if spec.flipped:
        form = describe(replace(spec, flipped=False))
        return form.replace("convolution", "transposed convolution (stride 1)", 1) + \
            ", over its flipped kernel"
    if spec.direct:
        return conv_transposed.describe(spec)
    if spec.depthwise:
        return depthwise.describe(spec)
    if spec.nhwc:
        return conv_nhwc.describe(spec)
    if spec.transposed and any(s > 1 for s in spec.stride):
        return (f"{spec.nd}-d transposed convolution as a Triton implicit GEMM in the gradient "
                "form (every tap, those its stride skips masked)")
    kind = "transposed convolution" if spec.transposed else "convolution"
    return f"{spec.nd}-d {kind} as a Triton implicit GEMM"

