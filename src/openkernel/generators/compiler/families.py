"""The compiler's kernel families: plans of the probe's traced aten graph, not matched from a list.

One planner (plan.py) turns the whole forward into kernels; three families name the kinds its
plans fall into, each with the tunables its kernels use:

* ``fused_pointwise``: any chain of pointwise ops over broadcast tensors, one kernel;
* ``fused_reduction``: row reductions with pointwise prologue and epilogue (softmax,
  log_softmax, logsumexp, LayerNorm, RMSNorm, GroupNorm, BatchNorm, cross-entropy, losses,
  sum/mean/max/min/argmax/argmin/var/std, norms), one pass or looped (online);
* ``fused_matmul``: nn.Linear, addmm, mm, bmm and matmul with the pointwise epilogue in the
  tiled ``tl.dot`` kernel (and reduction or pointwise kernels after it, where the graph has more).

A graph with an op no kernel knows is refused naming those ops and their place in the trace.
"""

from __future__ import annotations

import copy

from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.compiler.graph import build_graph
from openkernel.generators.compiler.plan import Plan, make_plan
from openkernel.generators.compiler.modelnew import describe, leaf_names, render
from openkernel.generators.refparse import parse_reference
from openkernel.records import OpTrace, TaskProbe
from openkernel.task import Task

WARPS = Tunable("num_warps", (2, 4, 8, 16), (4,), "warps per program")
STAGES = Tunable("num_stages", (1, 2, 3, 4), (2,), "software pipelining of K / column loops")
POINTWISE = (Tunable("BLOCK", (256, 512, 1024, 2048, 4096), (1024, 4096, 16384),
                     "elements per program of a pointwise kernel"),)
REDUCTION = (Tunable("TILE", (1024, 2048, 4096, 8192, 16384), (4096, 16384, 65536),
                     "elements per program of a one-pass reduction (rows x padded row)"),)
LOOPED = (Tunable("MAX_FUSED", (1024, 2048, 4096, 8192, 16384), (4096, 16384),
                  "longest row reduced in one pass (longer rows loop)"),
          Tunable("LOOP_BLOCK", (256, 512, 1024, 2048, 4096), (1024, 4096),
                  "columns per step of a looped reduction"))
MATMUL = (Tunable("BLOCK_M", (16, 32, 64, 128), (32, 64), "rows of C per program"),
          Tunable("BLOCK_N", (16, 32, 64, 128, 256), (32, 64), "columns of C per program"),
          Tunable("BLOCK_K", (16, 32, 64), (32, 64), "depth of one tl.dot step"),
          Tunable("GROUP_M", (1, 4, 8), None, "row-tiles visited together (L2 reuse)"))

# Curated start points per kernel kind, merged for a plan's kinds (missing keys: middle value).
_STARTS = {
    "pointwise": ({"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 2048, "num_warps": 8},
                  {"BLOCK": 512, "num_warps": 4}, {"BLOCK": 4096, "num_warps": 8}),
    "reduction": ({"TILE": 4096, "MAX_FUSED": 8192, "LOOP_BLOCK": 1024, "num_warps": 8},
                  {"TILE": 2048, "MAX_FUSED": 4096, "LOOP_BLOCK": 2048, "num_warps": 4},
                  {"TILE": 8192, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096, "num_warps": 16},
                  {"TILE": 1024, "MAX_FUSED": 2048, "LOOP_BLOCK": 512, "num_warps": 4}),
    "matmul": ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                "num_stages": 4},
               {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                "num_stages": 4},
               {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
                "num_stages": 3},
               {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 4,
                "num_stages": 3}),
}
_CPU_STARTS = {
    "pointwise": ({"BLOCK": 16384}, {"BLOCK": 4096}, {"BLOCK": 1024}),
    "reduction": ({"TILE": 65536, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096},
                  {"TILE": 16384, "MAX_FUSED": 4096, "LOOP_BLOCK": 1024},
                  {"TILE": 4096, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096}),
    "matmul": ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8},
               {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4}),
}

_CACHE: dict[tuple, tuple[OpTrace, object]] = {}


def plan_for(task: Task | None, trace: OpTrace) -> Plan | str:
    """The plan of a traced task (cached per task and trace object); without the task the
    forward's arguments keep neutral names."""
    key = (task.digest if task is not None else None, id(trace))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is trace:
        return hit[1]
    ref = parse_reference(task.reference_code) if task is not None else None
    graph = build_graph(trace)
    result = make_plan(graph, leaf_names(graph, ref.forward_args if ref else []))
    if len(_CACHE) > 32:
        _CACHE.clear()
    _CACHE[key] = (trace, result)
    return result


def _tunables(plan: Plan) -> tuple[Tunable, ...]:
    kinds = _kinds(plan)
    out: list[Tunable] = []
    if "matmul" in kinds:
        out += MATMUL
    if "reduction" in kinds:
        out += REDUCTION
        if any(k.looped for k in plan.kernels):
            out += LOOPED
    if "pointwise" in kinds:
        out += POINTWISE
    out.append(WARPS)
    if "matmul" in kinds or any(k.looped for k in plan.kernels):
        out.append(STAGES)
    return tuple(out)


def _kinds(plan: Plan) -> set[str]:
    """The kinds whose tunables and start points a plan uses (a Triton convolution tiles as a
    matmul does; a library call has none)."""
    alias = {"conv": "matmul", "scan": "reduction"}
    return {alias.get(k.kind, k.kind) for k in plan.kernels} - {"library"}


def _merged(table: dict, kinds: set[str]) -> tuple[dict, ...]:
    order = [k for k in ("matmul", "reduction", "pointwise") if k in kinds]
    count = max(len(table[k]) for k in order)
    return tuple({key: value for k in reversed(order) for key, value in
                  table[k][i % len(table[k])].items()} for i in range(count))


class CompiledFamily(Family):
    """A family of plans of the traced graph (see the module docstring)."""

    kind = ""

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        trace = probe.trace
        if trace is None:
            return None
        result = plan_for(task, trace)
        if isinstance(result, str):
            return result if self.kind == "pointwise" else None  # said once, not thrice
        if result.kind != self.kind:
            return None
        if backend != "triton":
            return f"the {self.name} family is Triton only"
        fitted = copy.copy(self)
        fitted.tunables = _tunables(result)
        kinds = _kinds(result)
        fitted.starts, fitted.cpu_starts = _merged(_STARTS, kinds), _merged(_CPU_STARTS, kinds)
        label = "; ".join(describe(k) for k in result.kernels)
        n = len(result.kernels)
        why = (f"the traced graph ({len(trace.top_ops)} aten ops) is {n} kernel"
               f"{'s' if n > 1 else ''}: {label}")
        return Match(fitted, why, {"plan": result, "label": label})

    def describe(self, match: Match, params: dict) -> str:
        return match.spec["label"]

    def render(self, match: Match, params: dict, backend: str) -> str:
        return render(match.spec["plan"], params)


class FusedPointwise(CompiledFamily):
    name = "fused_pointwise"
    kind = "pointwise"
    summary = "any chain of pointwise ops over broadcast tensors, fused into one kernel"
    tunables = POINTWISE + (WARPS,)


class FusedReduction(CompiledFamily):
    name = "fused_reduction"
    kind = "reduction"
    summary = ("row reductions with pointwise prologue and epilogue (softmax, norms, losses, "
               "sum/mean/max/argmax): one pass, or looped with online softmax")
    tunables = REDUCTION + LOOPED + POINTWISE + (WARPS, STAGES)


class FusedMatmul(CompiledFamily):
    name = "fused_matmul"
    kind = "matmul"
    summary = ("Linear / addmm / mm / bmm / matmul as a tiled tl.dot kernel with its pointwise "
               "epilogue fused")
    tunables = MATMUL + REDUCTION + LOOPED + POINTWISE + (WARPS, STAGES)
