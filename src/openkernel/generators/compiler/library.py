"""What the compiler leaves to the vendor libraries, and how it calls them.

torch.compile keeps cuBLAS for GEMMs and cuDNN for convolutions and fuses only what surrounds
them; a library-backed plan does the same (``make_plan(library=True)``): each GEMM or
convolution is a torch call whose result the Triton kernels around it read. Before planning,
:func:`fold_epilogues` moves what the library can compute on its own output into the call: a
GEMM's bias add into ``addmm`` (cuBLASLt adds a broadcast bias in its epilogue), and a ReLU
after it into ``_addmm_activation`` (cuBLASLt's bias + ReLU epilogue). GELU is not folded: the
library's GELU epilogue is tanh-approximated on a GPU and exact on the CPU, so it would match
the reference on one device only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openkernel.generators.compiler.graph import Graph, Node, Value
from openkernel.generators.compiler.matvec import product_of
from openkernel.records import KernelPrecision, PrecisionFlags

if TYPE_CHECKING:
    from openkernel.generators.compiler.plan import Plan

# Ops that are always library calls (a convolution may become a Triton kernel: plan.py).
LIBRARY_OPS = {"convolution", "addmm", "_addmm_activation"}
# What each library op runs on a GPU, for the candidate's description.
VENDOR = {"convolution": "cuDNN", "mm": "cuBLAS", "bmm": "cuBLAS", "addmm": "cuBLASLt",
          "_addmm_activation": "cuBLASLt"}


def kernel_precision(plan: "Plan", gpu: bool, flags: PrecisionFlags | None,
                     conv_exact: bool = False, tf32x3: bool = False) -> list[KernelPrecision]:
    """How each GEMM and convolution of ``plan`` computes on this device under these flags:
    a float32 one in TF32 only on a GPU whose flag allows it (the Triton kernels read the same
    flags at run time as cuBLAS and cuDNN do) and, for a convolution, only where the
    reference's cuDNN kernels were not measured exact (``conv_exact``: cuDNN computes such
    shapes in float32, our Triton convolutions in 3xTF32), other dtypes in their own.
    ``tf32x3``: the Triton GEMMs' full-precision tiles are three TF32 products ("3xtf32").
    A GEMV summed by a reduction kernel (matvec.py) is float32 under any flags."""
    flags = flags or PrecisionFlags()
    out = []
    for kernel in plan.kernels:
        for node in kernel.products:  # (float64 sums in float64; halves in float32)
            out.append(KernelPrecision(kernel.name, product_of(node), "triton",
                                       "fp64" if node.outputs[0].dtype == "float64" else "fp32"))
        if kernel.kind not in ("matmul", "conv", "library"):
            continue
        node = kernel.anchor
        conv = node.op == "convolution"
        x = next((a for a in (node.args[:1] if conv else node.args[-2:]) if isinstance(a, Value)),
                 node.outputs[0])
        dtype = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                 "float64": "fp64"}.get(x.dtype, x.dtype)
        fmas = kernel.kind == "conv" and kernel.conv.depthwise  # float32 FMAs, no tensor cores
        if dtype == "fp32" and gpu and not (conv and conv_exact) and not fmas and (
                flags.conv_tf32 if conv else flags.matmul_tf32):
            dtype = "tf32"
        if dtype == "fp32" and gpu and tf32x3 and kernel.kind == "matmul":
            dtype = "3xtf32"
        by = VENDOR.get(node.op, "torch") if kernel.kind == "library" else "triton"
        out.append(KernelPrecision(kernel.name, node.op, by, dtype))
    return out


def library_call(node: Node, args: list[str]) -> str:
    """The forward's torch call for a library node, its tensor arguments already as views."""
    if node.op == "_addmm_activation":  # beta, alpha and use_gelu are keyword-only
        return f"torch.ops.aten._addmm_activation({', '.join(args[:3])})"
    return f"torch.ops.aten.{node.op}({', '.join(args)})"


def _broadcasts_into(bias: Value, out: Value) -> bool:
    """Whether ``bias`` broadcasts to the 2-D GEMM result ``out`` (what addmm accepts)."""
    if len(bias.shape) > 2 or bias.dtype != out.dtype:
        return False
    tail = out.shape[len(out.shape) - len(bias.shape):]
    return all(b == o or b.coeff == 1 and not b.syms for b, o in zip(bias.shape, tail))


def _only_consumer(graph: Graph, v: Value, consumers: dict) -> Node | None:
    users = consumers.get(id(v), [])
    if v in graph.outputs or len(users) != 1:
        return None
    return users[0]


def fold_epilogues(graph: Graph, relu: bool) -> int:
    """Rewrite ``mm`` + bias add (+ ReLU) into one ``addmm`` (``_addmm_activation``) node, in
    place; returns how many GEMMs took their epilogue in."""
    live = graph.reachable()
    consumers: dict[int, list[Node]] = {}
    for n in live:
        for v in n.tensors():
            consumers.setdefault(id(v), []).append(n)
    folded = 0
    for mm in [n for n in live if n.op == "mm"]:
        out = mm.outputs[0]
        add = _only_consumer(graph, out, consumers)
        if add is None or add.op != "add" or add.arg(2, "alpha", 1) != 1:
            continue
        others = [a for a in add.args[:2] if a is not out]
        if len(others) != 1 or not isinstance(others[0], Value) or \
                not _broadcasts_into(others[0], out):
            continue
        result, op, args = add.outputs[0], "addmm", [others[0], *mm.args[:2]]
        act = _only_consumer(graph, result, consumers) if relu else None
        if act is not None and act.op == "relu":
            result, op = act.outputs[0], "_addmm_activation"
        node = Node(op, args, {}, [result], add.index, mm.origin, f"aten.{op}.default", "default")
        result.node, result.index = node, 0
        graph.nodes.insert(graph.nodes.index(add), node)
        folded += 1
    return folded
