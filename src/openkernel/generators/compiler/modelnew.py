"""The candidate module for a plan: its kernels, and a ``ModelNew`` that launches them.

``ModelNew`` declares the reference's parameters and buffers under their ``state_dict`` names
and shapes (empty: the evaluator copies the reference's weights in, ``load_state``), takes the
sizes the trace found symbolic from its inputs, and launches the kernels in order; between them
only ``torch.empty`` buffers and views. Shapes of weights and constructor scalars are the ones
the reference was traced with (``get_init_inputs()``).
"""

from __future__ import annotations

import ast
import keyword
import re
import textwrap

from openkernel.generators.compiler.kernels import conv, split, welford
from openkernel.generators.compiler.kernels.matmul import K_MAJOR
from openkernel.generators.compiler.graph import Graph
from openkernel.generators.compiler.library import VENDOR
from openkernel.generators.compiler.plan import Kernel, Plan
from openkernel.generators.compiler.replay import NOTE, REPLAY, graphed
from openkernel.generators.compiler.sizes import Size, numel
from openkernel.generators.compiler.writer import KernelWriter
from openkernel.syntax import parse

HEADER = '''import os

import torch
import torch.nn as nn
import triton
import triton.language as tl
'''

DECLARE = '''

def _declare(module, name, shape, dtype, parameter):
    """An empty parameter or buffer at a dotted state_dict name (the weights are loaded)."""
    *path, leaf = name.split(".")
    for part in path:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    tensor = torch.empty(shape, dtype=dtype)
    if parameter:
        module.register_parameter(leaf, nn.Parameter(tensor, requires_grad=False))
    else:
        module.register_buffer(leaf, tensor)
'''

_RESERVED = {"self", "torch", "nn", "triton", "tl", "grid", "n_rows", "n_cols", "n_elements",
             "block_c", "rows", "device", "M", "N", "K", "B", "a", "b", "n_inner", "parts",
             "chunk", "programs"}


def leaf_names(graph: Graph, arg_names: list[str]) -> dict[str, str]:
    """Readable, unique Python names for the tensors the forward holds."""
    names: dict[str, str] = {}
    used = set(_RESERVED)

    def pick(base: str) -> str:
        base = re.sub(r"\W", "_", base).strip("_") or "t"
        if base[0].isdigit() or keyword.iskeyword(base) or \
                re.fullmatch(r"(s|d|buf|k|part)\d+", base):
            base = "t_" + base
        name, k = base, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        return name

    use_args = len(arg_names) == len(graph.inputs) and all(n.isidentifier() for n in arg_names)
    for i, v in enumerate(graph.inputs):
        names[v.id if v is not None else f"arg{i}"] = pick(arg_names[i] if use_args else f"in{i}")
    for v in graph.values.values():
        if v.kind == "state":
            names[v.id] = pick(v.id[2:])
        elif v.kind == "const":
            names[v.id] = pick(f"const{v.id[1:]}")
    return names


def _tl_dtype(dtype: str) -> str:
    return f"torch.{dtype}"


def _shape(shape) -> str:
    inner = ", ".join(s.code() for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _short(aten: str) -> str:
    parts = aten.split(".")
    return parts[1] if len(parts) > 1 else aten


def describe(kernel: Kernel) -> str:
    ops = list(dict.fromkeys(_short(o) for o in kernel.ops))
    if kernel.kind == "conv":
        return conv.describe(kernel.conv)
    if kernel.kind == "scan":
        return f"{_short(kernel.anchor.aten)} over dim {kernel.domain.dims[0]} ({', '.join(ops)})"
    if kernel.kind == "library":
        op = kernel.anchor.op
        return f"{_short(kernel.anchor.aten)} by torch ({VENDOR.get(op, 'its library')} on a GPU)"
    if kernel.kind == "matmul":
        core = _short(kernel.anchor.aten)
        rest = list(dict.fromkeys(_short(o) for o in kernel.ops if o != kernel.anchor.aten))
        if kernel.domain is not None:
            whole = kernel.domain.shape == tuple(kernel.anchor.outputs[0].shape)
            return (f"{core} reducing {'whole rows' if whole else 'groups of whole rows'} in its "
                    f"epilogue ({', '.join(rest)})")
        return core + (f" with a fused epilogue ({', '.join(rest)})" if rest else "")
    if kernel.kind == "reduction":
        d = kernel.domain
        dims = ", ".join(str(x) for x in d.dims)
        text = f"reduction over dim{'s' if len(d.dims) > 1 else ''} {dims} ({', '.join(ops)})"
        if kernel.split is not None:  # (a kernel of long rows: split.py)
            text += ", few long rows split" if kernel.splits else \
                f", rows never split: {kernel.split.why}"
        return text
    return f"fused pointwise ({', '.join(ops)})" if ops else "copy"


def _signature(kernel: Kernel, w: KernelWriter, name: str, variant: str = "") -> list[str]:
    ptrs = [f"{w.names[v.id]}_ptr" for v in kernel.reads] + \
           [f"{w.names[v.id]}_ptr" for v in kernel.writes]
    if kernel.kind == "pointwise":
        extra, consts = ["n_elements"], ["BLOCK", "INDEX"]
    elif kernel.kind in ("reduction", "scan"):
        extra, consts = ["n_rows", "n_cols"], ["ROWS", "BLOCK_C", "INDEX"]
        if variant == "middle" or (variant in ("partial", "split") and kernel.middle):
            extra.append("n_inner")
        if variant in ("partial", "split"):
            ptrs += kernel.split.pointers
            extra += ["n_parts", "chunk"]
            consts += ["SPLITS"] if variant == "split" else []
    else:
        strides = ["stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn"]
        if kernel.anchor.op == "mm":
            strides = [s for s in strides if not s.endswith("b")]
        extra, consts = ["M", "N", "K"] + strides, ["IEEE", "TF32X3", "UPCAST", "BLOCK_M",
                                                     "BLOCK_N", "BLOCK_K", "GROUP_M"]
    params = ptrs + extra + kernel.symbols + [f"{c}: tl.constexpr" for c in consts]
    lines, line = [], f"def {name}("
    for k, p in enumerate(params):
        piece = p + (", " if k < len(params) - 1 else "):")
        if len(line) + len(piece) > 96:
            lines.append(line.rstrip())
            line = " " * (len(name) + 5)
        line += piece
    return ["@triton.jit", *lines, line]


def kernel_source(kernel: Kernel) -> str:
    if kernel.kind == "conv":
        return conv.source(kernel.name, kernel.conv)
    out = []
    for variant, w in kernel.bodies.items():
        name = kernel.name + (f"_{variant}" if variant else "")
        what = describe(kernel)
        if variant == "fused":
            what += ": one pass, each row in registers"
        elif variant == "looped" and kernel.kind == "scan":
            what += ": each row in BLOCK_C steps, a carry between them"
        elif variant == "looped":
            what += ": rows longer than MAX_FUSED, in BLOCK_C steps"
        elif variant == "middle":
            what += (": ROWS neighbouring outputs a program, the reduced dims in BLOCK_C steps "
                     "([BLOCK_C, ROWS] tiles, coalesced)")
        elif variant == "partial":
            what += ": few long rows, each split into n_parts parts of chunk columns, one " \
                "program a part; each part's partial reductions to scratch"
        elif variant == "split":
            what += ": each program combines its row's n_parts partials, then writes its part"
        writes = ", ".join(w.names[v.id] for v in kernel.writes)
        out.append("\n".join(_signature(kernel, w, name, variant)
                             + [f'    """{what[:1].upper() + what[1:]}; writes {writes}."""']
                             + w.root.render()))
    return "\n\n\n".join(out)


def _canonical(kernel: Kernel) -> str:
    """The kernel's code up to its names: its functions' own (the variant's suffix kept), its
    variables' and the parameters its launch passes by position (numbered in order of use:
    pointers, sizes, and the locals named after its tensors; constexprs go by keyword and keep
    theirs), its docstrings and comments (the op numbers of its lines)."""
    tree = parse(kernel_source(kernel))
    for fn in tree.body:
        fn.name = fn.name[len(kernel.name):]
        if ast.get_docstring(fn) is not None:
            fn.body = fn.body[1:]
        bound = {a.arg for a in fn.args.args if a.annotation is None} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        number: dict[str, str] = {}
        for node in ast.walk(fn):  # (whole identifiers: never a substring of another)
            field = "arg" if isinstance(node, ast.arg) else "id" if isinstance(node, ast.Name) \
                else None
            if field and getattr(node, field) in bound:
                name = getattr(node, field)
                setattr(node, field, number.setdefault(name, f"<{len(number)}>"))
    return ast.dump(tree)


def shared_functions(kernels: list[Kernel]) -> dict[str, str]:
    """Each Triton kernel's jit function: the first one's of the same code (``_canonical``),
    launched with its own arguments in the same order, so Triton compiles that code once (a
    deep network's identical layers: 16 ReLUs, 16 GEMMs)."""
    first: dict[str, str] = {}
    return {k.name: first.setdefault(_canonical(k), k.name) for k in kernels}


def _sharing(kernel: Kernel, fns: dict[str, str]) -> str:
    """A comment naming the other kernels that launch ``kernel``'s functions ("" if none)."""
    others = [k for k, f in fns.items() if f == kernel.name and k != kernel.name]
    if not others:
        return ""
    functions = len(kernel.bodies) if kernel.kind != "conv" else 1
    text = ("Also" if functions == 1 else f"The {functions} functions below are also") + \
        f" launched for {', '.join(others)} (the same code over their own tensors: compiled once)."
    return textwrap.fill(text, 96, initial_indent="# ", subsequent_indent="# ") + "\n"


def _launch(kernel: Kernel, plan: Plan, fn: str = "") -> list[str]:
    """Forward lines: the kernel's output buffers, then its launch (skipped on empty grids).
    ``fn``: the jit function it launches (its own unless it shares one: ``shared_functions``)."""
    names, fn = plan.names, fn or kernel.name
    head = [f"# {kernel.name}: {describe(kernel)}"[:96]]
    if kernel.kind == "library":  # the kernels after it index its result as contiguous
        return head + [f"{names[kernel.outputs[0].id]} = {kernel.call}.contiguous()"]
    if kernel.kind == "conv":
        x, w, b = kernel.views
        return head + conv.launch(kernel.name, kernel.conv, x, w, None if b == "None" else b,
                                  names[kernel.outputs[0].id], fn)
    for v in kernel.writes:
        head.append(f"{names[v.id]} = torch.empty({_shape(v.shape)}, device=device, "
                    f"dtype={_tl_dtype(v.dtype)})")
    ptrs = [names.get(v.id, "") for v in kernel.reads] + [names[v.id] for v in kernel.writes]
    syms = kernel.symbols
    if kernel.kind == "pointwise":
        n = numel(kernel.outputs[0].shape).code()
        body = [f"grid = (triton.cdiv({n}, BLOCK),)",
                *_call(f"{fn}[grid]", ptrs + [n] + syms
                       + ["BLOCK=BLOCK", f"INDEX={index_type(kernel.reads + kernel.writes)}",
                          "num_warps=NUM_WARPS"])]
        return head + _guard(body, n)
    if kernel.kind == "matmul":
        mm = kernel.anchor
        a, b = f"{kernel.name}_a", f"{kernel.name}_b"
        head.append(f"{a}, {b} = {kernel.views[0]}, {kernel.views[1]}")
        if kernel.to_k_major:  # (strides follow the copies: the launch reads them after)
            copied = " and ".join(x.upper() for x in kernel.to_k_major)
            head.append(f"if KMAJOR:  # {copied} copied K-major (Hopper's TF32 tensor-core "
                        "tiles are K-major only)")
            head += [f"    {t} = _k_major({t}, {-1 if x == 'a' else -2})"
                     for x, t in zip("ab", (a, b)) if x in kernel.to_k_major]
        ptrs = [a, b] + ptrs[2:]
        sizes = [f"{a}.shape[-2]", f"{b}.shape[-1]", f"{a}.shape[-1]"]
        if mm.op == "bmm":
            strides = [f"{t}.stride({i})" for t in (a, b) for i in range(3)]
            batch = f"{a}.shape[0]"
        else:
            strides = [f"{t}.stride({i})" for t in (a, b) for i in range(2)]
            batch = "1"
        head.append(f"M, N, K = {sizes[0]}, {sizes[1]}, {sizes[2]}")
        tiles = ["BLOCK_N=BLOCK_N", "GROUP_M=GROUP_M"]
        grid = f"grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), {batch})"
        if kernel.domain is not None:  # each program owns whole rows: one tile spans N
            # (at least 16 columns: tl.dot's smallest tile on a GPU)
            tiles = ["BLOCK_N=max(16, triton.next_power_of_2(N))", "GROUP_M=1"]
            grid = f"grid = (triton.cdiv(M, BLOCK_M), {batch})"
        body = [grid,
                *_call(f"{fn}[grid]", ptrs + ["M", "N", "K"] + strides + syms
                       + [f"IEEE={a}.dtype == torch.float32 and not ({a}.is_cuda and "
                          "torch.backends.cuda.matmul.allow_tf32)", "TF32X3=TF32X3",
                          f"UPCAST=INTERPRETED and {a}.dtype == torch.bfloat16", "BLOCK_M=BLOCK_M",
                          tiles[0], "BLOCK_K=BLOCK_K", tiles[1],
                          "num_warps=NUM_WARPS", "num_stages=NUM_STAGES"])]
        return head + _guard(body, numel(mm.outputs[0].shape).code())
    d = kernel.domain
    args = ptrs + ["n_rows", "n_cols"] + syms
    index = f"INDEX={index_type(kernel.reads + kernel.writes)}"
    head.append(f"n_rows, n_cols = {d.rows.code()}, {d.cols.code()}")
    if kernel.kind == "scan":
        return head + _guard([
            "rows = min(triton.next_power_of_2(n_rows), max(1, TILE // LOOP_BLOCK))",
            *_call(f"{fn}_looped[(triton.cdiv(n_rows, rows),)]", args
                   + ["ROWS=rows", "BLOCK_C=LOOP_BLOCK", index, "num_warps=NUM_WARPS"])],
            d.rows.code())
    if kernel.middle:  # a BLOCK_B-wide tile, deeper where the inner dims are narrower
        middle = _call(f"{fn}_middle[(programs,)]",
                       ptrs + ["n_rows", "n_cols", "n_inner"] + syms
                       + ["ROWS=rows", "BLOCK_C=block_c", index, "num_warps=NUM_WARPS",
                          "num_stages=NUM_STAGES"])
        if kernel.splits:
            middle = split.launch(kernel.name, kernel.split, ptrs, syms, True, "programs", "rows",
                                  "block_c", middle, _call, index, fn)
        return head + _guard([
            f"n_inner = {numel(d.inner).code()}",
            "rows = min(BLOCK_B, triton.next_power_of_2(n_inner))",
            "block_c = min(triton.next_power_of_2(n_cols), BLOCK_R * (BLOCK_B // rows))",
            "programs = n_rows // n_inner * triton.cdiv(n_inner, rows)", *middle], d.rows.code())
    fused = [
        "block_c = triton.next_power_of_2(n_cols)",
        "rows = min(triton.next_power_of_2(n_rows), max(1, TILE // block_c))",
        *_call(f"{fn}_fused[(triton.cdiv(n_rows, rows),)]", args
               + ["ROWS=rows", "BLOCK_C=block_c", index, "num_warps=NUM_WARPS"])]
    if not kernel.looped:
        return head + _guard(fused, d.rows.code())
    looped = [
        "rows = min(triton.next_power_of_2(n_rows), max(1, TILE // LOOP_BLOCK))",
        *_call(f"{fn}_looped[(triton.cdiv(n_rows, rows),)]", args
               + ["ROWS=rows", "BLOCK_C=LOOP_BLOCK", index, "num_warps=NUM_WARPS",
                  "num_stages=NUM_STAGES"])]
    body = ["if n_cols <= MAX_FUSED:"] + ["    " + x for x in fused] + ["else:"] + \
        ["    " + x for x in looped]
    if kernel.splits:  # one row a program, each split into parts
        body = split.launch(kernel.name, kernel.split, ptrs, syms, False, "n_rows", "1",
                            "LOOP_BLOCK", body, _call, index, fn)
    return head + _guard(body, d.rows.code())


def _call(head: str, items: list[str], width: int = 92) -> list[str]:
    """``head(item, item, ...)`` broken into lines of at most ``width`` characters."""
    lines, line = [], head + "("
    for k, item in enumerate(items):
        piece = item + (", " if k < len(items) - 1 else ")")
        if len(line) + len(piece) > width and line.strip() not in (head + "(",):
            lines.append(line.rstrip())
            line = "    "
        line += piece
    return lines + [line]


# Elements of the largest tensor a kernel touches from which its index arithmetic is int64. Half
# the int32 range: masked lanes past the last element, and the index sums they make, stay inside.
WIDE = 1 << 30


def index_type(values: list) -> str:
    """A launch's ``INDEX``: int32, as Inductor's, unless a tensor of ``values`` has ``WIDE``
    elements or more; decided at each call where sizes follow the inputs."""
    codes = list(dict.fromkeys(numel(v.shape).code() for v in values))
    static = [int(c) for c in codes if c.isdigit()]
    if static and max(static) >= WIDE:
        return "tl.int64"
    dynamic = [c for c in codes if not c.isdigit()]
    if not dynamic:
        return "tl.int32"
    largest = dynamic[0] if len(dynamic) == 1 else f"max({', '.join(dynamic)})"
    return f"tl.int32 if {largest} < {WIDE} else tl.int64"


def _guard(lines: list[str], n: str) -> list[str]:
    """Skip the launch of an empty grid (a static size is never empty)."""
    if n.isdigit():
        return lines
    return [f"if {n} > 0:"] + ["    " + x for x in lines]


def render(plan: Plan, params: dict) -> str:
    """The candidate module for ``params`` (the tunables: module constants)."""
    graph = plan.graph
    replayed = bool(params.get("CUDA_GRAPH"))  # (written as the code it picks, not a constant)
    consts = "".join(f"{k} = {params[k]}\n" for k in params if k.isupper() and k != "CUDA_GRAPH")
    consts += "".join(f"{k.upper()} = {params[k]}\n" for k in ("num_warps", "num_stages")
                      if k in params)
    state = [v for v in graph.values.values() if v.kind == "state"]
    constants = [v for v in graph.values.values() if v.kind == "const" and v.numel != Size(1)]
    n, fns = len(plan.triton), shared_functions(plan.triton)
    shared = len(set(fns.values()))
    doc = [f"{n} Triton kernel{'s' if n > 1 else ''}"
           + (f" ({shared} jit function{'s' if shared > 1 else ''}: kernels of the same "
              "code launch one)" if shared < n else "")
           + " written from the reference's traced aten graph (openkernel's offline generator)"
           + (", around torch's own kernel for what is left to it" if n < len(plan.kernels) else "")
           + (NOTE if replayed else "") + ":"] + [f"{k.name}: {describe(k)}." for k in plan.kernels]
    if any(k.splits for k in plan.kernels) and "SPLIT" not in params:
        consts += "SPLIT = 0  # (not given: rows are never split)\n"
    if any(k.kind == "matmul" for k in plan.kernels) and "TF32X3" not in params:
        consts += "TF32X3 = 0  # (not given: float32 GEMM tiles in IEEE float32)\n"
    copies = any(k.to_k_major for k in plan.kernels)
    if copies and "KMAJOR" not in params:
        consts += "KMAJOR = 0  # (not given: GEMM operands read in their own layout)\n"
    if any(k.kind in ("matmul", "conv") for k in plan.kernels):
        consts += 'INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton on the CPU\n'
    header = HEADER if "INTERPRETED" in consts or replayed else HEADER.replace("import os\n\n", "")
    head = '"""' + "\n".join(doc) + '\n"""\n\n' + header + "\n" + consts
    parts = [DECLARE.strip("\n")] if state else []
    sources = [_sharing(k, fns) + kernel_source(k) for k in plan.triton if fns[k.name] == k.name]
    if any("_welford_combine" in text for text in sources):
        parts.append(welford.COMBINE)
    if any(k.splits for k in plan.kernels):
        parts.append(split.CHOOSE)
    if copies:
        parts.append(K_MAJOR.strip("\n"))
    parts += sources
    if replayed:
        parts.append(REPLAY.strip("\n"))
    model = _model(plan, state, constants, fns)
    parts.append("\n".join(graphed(model.split("\n"))) if replayed else model)
    return head + "\n\n" + "\n\n\n".join(parts) + "\n"


def _model(plan: Plan, state, constants, fns: dict[str, str]) -> str:
    graph, names = plan.graph, plan.names
    args = [names[v.id if v is not None else f"arg{i}"] for i, v in enumerate(graph.inputs)]
    init = ["    def __init__(self, *init_args):",
            "        # Shapes and scalars are those of the traced get_init_inputs().",
            "        super().__init__()"]
    if state:
        init.append("        # The reference's parameters and buffers, by state_dict name: the "
                    "evaluator copies its weights in.")
        for v in state:
            dims = ", ".join(str(s.coeff) for s in v.shape)
            init.append(f'        _declare(self, "{v.id[2:]}", ({dims}{"," if len(v.shape) == 1 else ""}), '
                        f"{_tl_dtype(v.dtype)}, {'True' if _is_param(graph, v) else 'False'})")
    for v in constants:
        c = graph.trace.constants[int(v.id[1:])]
        init.append(f'        self.register_buffer("{names[v.id]}", torch.tensor({c["values"]!r}, '
                    f'dtype={_tl_dtype(v.dtype)}).reshape({_shape(v.shape)}), persistent=False)')
    body = [f"    def forward(self, {', '.join(args)}):"]
    sizes = graph.trace.sizes
    if sizes:
        names_s = sorted(sizes, key=lambda s: int(s[1:]))
        body.append(f"        {', '.join(names_s)} = "
                    + ", ".join(f"{args[sizes[s][0]]}.shape[{sizes[s][1]}]" for s in names_s)
                    + "  # the sizes the kernels follow")
    for name, expr in graph.sizes.derived.items():
        body.append(f"        {name} = {expr}")
    for i, v in enumerate(graph.inputs):
        if v is None:
            body.append(f"        # {args[i]} is not a tensor: the kernels hold the value it had "
                        "when traced")
    used = {v.id for k in plan.kernels for v in k.reads + k.bases} | {v.id for v in graph.outputs}
    tensors = [v for v in graph.inputs if v is not None and v.id in used
               and not _channels_last_only(plan, v)]
    if tensors:
        body.append(f"        {', '.join(names[v.id] for v in tensors)} = "
                    + ", ".join(f"{names[v.id]}.contiguous()" for v in tensors)
                    + "  # kernels index their inputs as contiguous")
    first = next((v for v in graph.inputs if v is not None), None)
    body.append(f"        device = {names[first.id]}.device" if first else
                '        device = torch.device("cpu")')
    for v in graph.values.values():
        if v.id in used and v.kind == "state":
            kind = "parameter" if _is_param(graph, v) else "buffer"
            body.append(f'        {names[v.id]} = self.get_{kind}("{v.id[2:]}")')
        elif v.id in used and v.kind == "const" and v.numel != Size(1):
            body.append(f"        {names[v.id]} = self.{names[v.id]}")
    for kernel in plan.kernels:
        body += ["        " + line for line in _launch(kernel, plan, fns.get(kernel.name, ""))]
    outs = [names.get(graph.values[r].id, "None") for r in graph.trace.outputs]
    if graph.trace.output_kind == "tensor":
        body.append(f"        return {outs[0]}")
    elif graph.trace.output_kind == "list":
        body.append(f"        return [{', '.join(outs)}]")
    else:
        body.append(f"        return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    doc = f'    """{len(plan.triton)} Triton kernel(s): ' + "; ".join(
        describe(k) for k in plan.kernels) + '."""'
    return "\n".join(["class ModelNew(nn.Module):", doc, "", *init, "", *body])


def _channels_last_only(plan: Plan, v) -> bool:
    """Whether input ``v`` is read only as the input of channels-last convolutions: they copy
    it channels-last themselves, none where it already is (an NCHW copy first would force one)."""
    name = plan.names[v.id]
    readers = [k for k in plan.kernels if v in k.reads or v in k.bases]
    return bool(readers) and v not in plan.graph.outputs and all(
        k.kind == "conv" and k.conv.nhwc and k.views[0] == name and name not in k.views[1:]
        for k in readers)


def _is_param(graph: Graph, v) -> bool:
    entry = next((s for s in graph.trace.state if f"s:{s.name}" == v.id), None)
    return entry is not None and entry.kind == "parameter"
