"""Tiled matmul with a fused epilogue: C = act(A @ B + bias) in one kernel.

The classic Triton tiling: each program owns a BLOCK_M x BLOCK_N tile, walks K in BLOCK_K
steps accumulating in float32 with tl.dot, then adds the bias and applies the activation
before the only store. GROUP_M orders the tiles so that neighbouring programs share rows of A
(L2 reuse). Masks on every edge make any M, N, K correct; strides are passed, so transposed
views work without copies.
"""

from __future__ import annotations

import ast

from openkernel.generators.activations import ATEN_NAMES, bind
from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.handwritten.common import (
    FLOAT_DTYPES,
    TRITON_HEADER,
    act_args,
    dtype_name,
    init_method,
    module_preamble,
    op_bases,
)
from openkernel.generators.refparse import Reference, parse_reference
from openkernel.records import TaskProbe
from openkernel.task import Task

_KERNEL = '''
@triton.jit
def _matmul_epilogue(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     {params}HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M row-tiles are visited together, so A's rows stay in L2.
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        # Masks on the K tail as well as the M/N edges: zeros add nothing to the dot.
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0)
        if IEEE:  # float32 inputs: full precision rather than TF32
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
{epilogue}
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, x.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    """{label}: one Triton kernel, bias and activation fused into the epilogue."""

{init}
    def forward(self, {args}):
        # One tuple assignment: the right side is read before any name is rebound.
        a, b, bias = {a}, {b}, {bias}
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        if M == 0 or N == 0:
            return c
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        _matmul_epilogue[grid](
            a, b, bias if bias is not None else c, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            {call_args}HAS_BIAS=bias is not None, IEEE=a.dtype == torch.float32,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return c
'''

_BIAS = '''    if HAS_BIAS:
        x = x + tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
'''


def _operands(ref: Reference) -> tuple[str, str] | None:
    """Names (a, b) of ``a @ b`` / torch.mm / torch.matmul on forward's own arguments."""
    for node in ast.walk(ref.tree):
        pair = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            pair = (node.left, node.right)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("mm", "matmul")
              and len(node.args) == 2):
            pair = tuple(node.args)
        if pair and all(isinstance(p, ast.Name) and p.id in ref.forward_args for p in pair):
            return pair[0].id, pair[1].id
    return None


def _act_before_bias(ref: Reference, act_names: set[str]) -> bool:
    """True for ``act(a @ b) + bias``: an Add whose operand is the activation's call."""
    for node in ast.walk(ref.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if isinstance(side, ast.Call) and getattr(
                        side.func, "attr", getattr(side.func, "id", None)) in act_names:
                    return True
    return False


class MatmulEpilogue(Family):
    name = "matmul_epilogue"
    summary = "tiled tl.dot matmul, float32 accumulation, bias + activation fused in the epilogue"
    tunables = (
        Tunable("BLOCK_M", (16, 32, 64, 128), (32, 64), "rows of C per program"),
        Tunable("BLOCK_N", (16, 32, 64, 128, 256), (32, 64), "columns of C per program"),
        Tunable("BLOCK_K", (16, 32, 64), (32, 64), "depth of one tl.dot step"),
        Tunable("GROUP_M", (1, 4, 8), None, "row-tiles visited together (L2 reuse)"),
        Tunable("num_warps", (2, 4, 8), (4,), "warps per program"),
        Tunable("num_stages", (2, 3, 4, 5), (2,), "pipelined K steps in flight"),
    )
    starts = ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
               "num_stages": 4},
              {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
               "num_stages": 3},
              {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
               "num_stages": 4},
              {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 4,
               "num_stages": 3})
    cpu_starts = ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4,
                   "num_stages": 3},
                  {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4,
                   "num_stages": 2})

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        ops = op_bases(probe)
        if not ops or ops[0] not in ("mm", "matmul"):
            return None
        if backend != "triton":
            return "the matmul_epilogue family is Triton only"
        rest = [op for op in ops[1:] if op != "add"]
        has_bias = "add" in ops
        if len(rest) > 1 or (rest and rest[0] not in ATEN_NAMES):
            return f"the matmul_epilogue family fuses a bias and one activation, not {rest}"
        ref = parse_reference(task.reference_code)
        operands = _operands(ref) if ref else None
        if operands is None:
            return "the matmul_epilogue family needs `a @ b` (or torch.mm) on forward's own arguments"
        shapes = dict(zip(ref.forward_args, probe.input_shapes))
        a, b = operands
        if len(shapes.get(a, [])) != 2 or len(shapes.get(b, [])) != 2:
            return "the matmul_epilogue family handles 2-D operands only"
        others = [n for n in ref.forward_args if n not in operands]
        n = shapes[b][1]
        bias = None
        if has_bias:
            if len(others) != 1 or shapes.get(others[0]) != [n]:
                return "the matmul_epilogue family adds a 1-D bias of length N only"
            bias = others[0]
        elif others:
            return "the matmul_epilogue family takes the two operands (and a bias) only"
        if not {dtype_name(d) for d in probe.input_dtypes} <= FLOAT_DTYPES:
            return "the matmul_epilogue family handles floating inputs only"
        act = bind(rest[0], ref) if rest else None
        if isinstance(act, str):
            return act
        act_first = bool(act and has_bias and _act_before_bias(ref, set(act.act.callables)))
        label = f"{a} @ {b}" + (f" + {bias}" if bias and not act_first else "")
        label = f"{act.name}({label})" if act else label
        label = label + f" + {bias}" if act_first else label
        why = f"the reference is a 2-D matmul ({', '.join('aten.' + o for o in ops)})"
        return Match(self, why, {"ref": ref, "a": a, "b": b, "bias": bias, "act": act,
                                 "act_first": act_first, "label": label})

    def describe(self, match: Match, params: dict) -> str:
        return f"{match.spec['label']} matmul"

    def render(self, match: Match, params: dict, backend: str) -> str:
        spec = match.spec
        ref, act = spec["ref"], spec["act"]
        act_line = f"    x = {act.act.triton}\n" if act else ""
        epilogue = "    x = acc\n" + (act_line + _BIAS if spec["act_first"] else _BIAS + act_line)
        consts = "".join(f"{k} = {params[k]}\n" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K",
                                                          "GROUP_M"))
        consts += f"NUM_WARPS = {params['num_warps']}\nNUM_STAGES = {params['num_stages']}\n"
        body = _KERNEL.format(
            params=act.triton_params() if act else "", epilogue=epilogue.rstrip("\n"),
            label=spec["label"], init=init_method(ref, act), args=", ".join(ref.forward_args),
            a=spec["a"], b=spec["b"], bias=spec["bias"] or "None", call_args=act_args(act))
        return module_preamble(ref, TRITON_HEADER) + "\n" + consts + body
