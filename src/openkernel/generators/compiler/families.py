"""The compiler's kernel families: plans of the probe's traced aten graph, not matched from a list.

One planner (plan.py) turns the whole forward into kernels; three families name the kinds its
plans fall into, each with the tunables its kernels use:

* ``fused_pointwise``: any chain of pointwise ops over broadcast tensors, one kernel;
* ``fused_reduction``: row reductions with pointwise prologue and epilogue (softmax,
  log_softmax, logsumexp, LayerNorm, RMSNorm, GroupNorm, BatchNorm, cross-entropy, losses,
  sum/mean/max/min/argmax/argmin/var/std, norms), one pass or looped (online softmax, Welford
  variance), or over middle dims in tiles coalesced along the dims after them; few long rows
  split over several programs each (``SPLIT``: kernels/split.py); matrix-vector products too
  (a GEMM of one row, or of at most 8 columns, summed over K: matvec.py);
* ``fused_matmul``: nn.Linear, addmm, mm, bmm, matmul and convolutions, each either a Triton
  kernel (a tiled ``tl.dot`` with the pointwise epilogue fused; an implicit-GEMM convolution)
  or a library call (cuBLAS, cuBLASLt with its bias + ReLU epilogue, cuDNN: library.py) with
  the rest of the graph fused into Triton kernels around it. The tunable ``LIBRARY`` picks
  which, so timing decides between them; a lone GEMM or convolution has no library-backed
  plan (that would be the reference's own call, not a kernel). Where a GEMM's rows are
  reduced after it (softmax, logsumexp, mean over its output features) and fit one tile, the
  tunable ``FUSE_ROWS`` picks between one kernel that reduces them in the GEMM's epilogue and
  the GEMM followed by a reduction kernel reading its result back. A Triton transposed
  convolution is written in two forms, the tunable ``TCONV_DIRECT`` picking: the gradient form
  (every tap, those the stride skips masked) or directly, one dense GEMM per output phase over
  only that phase's taps (kernels/conv_transposed.py); any other Triton convolution (not
  depthwise) in three forms, the tunable ``CONV_NHWC`` picking: NCHW, each element of an A tile
  gathered at its own computed index, or taps outer and channel blocks inner
  (kernels/conv_nhwc.py: torch.compile's) over a channels-last copy of the input (contiguous
  channel blocks) or over the input as it is (no copy). A float32 Triton GEMM whose flags keep
  it in full precision multiplies its tiles in IEEE float32 FMAs or as three TF32 tensor-core
  products (``TF32X3``, float32's error at Hopper's TF32 rate): timing picks, the precision
  check holds either to the reference's own error, and the record says which ("3xtf32").
  Where such a GEMM's operand is not K-contiguous (``A @ B`` with B row-major, ``att @ v``),
  the tunable ``KMAJOR`` picks between reading it in place and copying it K-major first (TF32
  tensor-core tiles are K-major only on Hopper: kernels/matmul.py).

Where a call's work is small beside what its launches cost, the tunable ``CUDA_GRAPH`` picks
between launching the kernels one by one and replaying them as a CUDA graph (replay.py).
A graph with an op no kernel knows is refused naming those ops and their place in the trace.
Tunables that a plan does not use are pinned (:meth:`CompiledFamily.clean`), so no two points
of a family's space write the same code.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterator

from openkernel.generators.compiler.graph import build_graph
from openkernel.generators.compiler.kernels import conv_transposed
from openkernel.generators.compiler.library import fold_epilogues, kernel_precision
from openkernel.generators.compiler.matvec import FEW, lower_matvecs
from openkernel.generators.compiler.modelnew import describe, leaf_names, render
from openkernel.generators.compiler.plan import ROW_TILE, Plan, make_plan
from openkernel.generators.compiler.replay import CUDA_GRAPH, offered
from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.refparse import parse_reference
from openkernel.records import KernelPrecision, OpTrace, TaskProbe
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
MIDDLE = (Tunable("BLOCK_B", (16, 32, 64, 128, 256), (64, 256),
                  "neighbouring outputs per program of a reduction over middle dims"),
          Tunable("BLOCK_R", (4, 8, 16, 32, 64), (16, 64),
                  "reduced rows per step of a reduction over middle dims"))
SPLIT = Tunable("SPLIT", (0, 256, 512, 1024, 2048), (0, 16, 64),
                "programs a reduction of few long rows aims for, each row split into parts "
                "(kernels/split.py); 0: rows are never split")
LIBRARY = Tunable("LIBRARY", (0, 1), None, "1: GEMMs and convolutions are library calls "
                  "(cuBLAS, cuDNN), the rest Triton kernels around them; 0: all Triton")
FUSE_ROWS = Tunable("FUSE_ROWS", (0, 1), None, "1: a GEMM whose rows fit one tile (at most "
                    f"{ROW_TILE} columns) reduces them in its own epilogue (softmax, logsumexp: "
                    "one kernel); 0: the reduction is a kernel of its own, reading C back")
TCONV_DIRECT = Tunable("TCONV_DIRECT", (0, 1), None, "1: a transposed convolution computes "
                       "directly, each output phase (o mod stride) a GEMM over only its own taps; "
                       "0: in the gradient form, every tap, those the stride skips masked")
CONV_NHWC = Tunable("CONV_NHWC", (0, 1, 2), None, "1: a convolution runs taps outer and "
                    "BLOCK_K input channels inner over a channels-last copy of its input "
                    "(kernels/conv_nhwc.py); 2: the same over the input as it is (no copy; "
                    "NCHW: channel blocks strided); 0: NCHW, each element of an A tile gathered")
# (On the CPU the interpreter multiplies in float32 either way: pinned to 0 there.)
TF32X3 = Tunable("TF32X3", (0, 1), (0,), "1: a float32 GEMM tile multiplies as three TF32 "
                 "tensor-core products (split precision: float32's error, at Hopper's TF32 "
                 "rate); 0: in IEEE float32 FMAs (where the run's flags keep GEMMs in float32)")
# (Offered where a float32 GEMM's operand is not K-contiguous by construction; pinned to 0 on
# the CPU, as TF32X3: the tests render it forced.)
KMAJOR = Tunable("KMAJOR", (0, 1), (0,), "1: a float32 GEMM operand that is not K-contiguous "
                 "(an N-major B, an M-major A) is copied K-major before the launch (Hopper's "
                 "TF32 tensor-core tiles are K-major only); 0: read in place, in its own layout")
MODES = ("LIBRARY", "FUSE_ROWS", "TCONV_DIRECT")  # the tunables that pick a plan, not a launch
MATMUL = (Tunable("BLOCK_M", (16, 32, 64, 128), (32, 64), "rows of C per program"),
          Tunable("BLOCK_N", (16, 32, 64, 128, 256), (32, 64), "columns of C per program"),
          Tunable("BLOCK_K", (16, 32, 64), (32, 64), "depth of one tl.dot step"),
          Tunable("GROUP_M", (1, 4, 8), None, "row-tiles visited together (L2 reuse)"))

# Curated start points per kernel kind, merged for a plan's kinds (missing keys: middle value).
# Float32 GEMMs start in 3xTF32 with their operands K-major: its fast path on Hopper.
_FAST_FP32 = {"TF32X3": 1, "KMAJOR": 1}
_STARTS = {
    "pointwise": ({"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 2048, "num_warps": 8},
                  {"BLOCK": 512, "num_warps": 4}, {"BLOCK": 4096, "num_warps": 8}),
    "reduction": ({"TILE": 4096, "MAX_FUSED": 8192, "LOOP_BLOCK": 1024, "BLOCK_B": 64,
                   "BLOCK_R": 16, "SPLIT": 512, "num_warps": 8},
                  {"TILE": 2048, "MAX_FUSED": 4096, "LOOP_BLOCK": 2048, "BLOCK_B": 128,
                   "BLOCK_R": 8, "SPLIT": 1024, "num_warps": 4},
                  {"TILE": 8192, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096, "BLOCK_B": 256,
                   "BLOCK_R": 32, "SPLIT": 256, "num_warps": 16},
                  {"TILE": 1024, "MAX_FUSED": 2048, "LOOP_BLOCK": 512, "BLOCK_B": 32,
                   "BLOCK_R": 32, "SPLIT": 0, "num_warps": 4}),
    "matmul": ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                "num_stages": 4, **_FAST_FP32},
               {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4,
                "num_stages": 4, **_FAST_FP32},
               {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
                "num_stages": 3, **_FAST_FP32},
               {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4, "num_warps": 4,
                "num_stages": 3, **_FAST_FP32}),
    # Taps outer over the input as it is (2) won every lone convolution of 16+ input channels
    # on the H200 (session 20, benchmarks/results/h200_conv_points_2026-12-03.json): 1.12x
    # cuDNN on level1/67 and 1.52x on 76, where the channels-last copy (1) of a 1-8 GiB input
    # cost as much as the convolution; 128x128 fp32 tiles want BLOCK_K 16 at 4 warps (32 at
    # 8 warps, 3 stages), 1.5-2x faster than BLOCK_K 32 at 4 warps, 4 stages. (Start points
    # take the plans in turn, the library-backed one first where there is one: the all-Triton
    # starts are then the second and fourth, the best two.)
    "conv": ({"CONV_NHWC": 2, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 8,
              "num_stages": 3},
             {"CONV_NHWC": 2, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16, "num_warps": 4,
              "num_stages": 4},
             {"CONV_NHWC": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16, "num_warps": 4,
              "num_stages": 4},
             {"CONV_NHWC": 2, "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4,
              "num_stages": 4}),
    # Narrow convolutions start NCHW: over 3 input channels (level1/50's 11x11, level1/54's
    # 3-d) the channels-last form ran 10-17x slower than it on the H200 (session 19), each
    # tap's channel block mostly padding where NCHW flattens channels x taps into one K.
    # Their best tiles there: 128x128x32 at 4 warps on level1/50 (1.31x torch.compile,
    # 12 K steps); on level1/54 (K = 81: two steps of 64) one stage, 2.5-2.8 ms at 128x64x64
    # and 64x64x64, where every branch that started at 3-4 stages ended at 5.7-7.8 ms
    # (session 21): a short K loop gains nothing from pipelining its gathers.
    "narrow": ({"CONV_NHWC": 0},
               {"CONV_NHWC": 0, "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4,
                "num_stages": 1},
               {"CONV_NHWC": 0, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4,
                "num_stages": 1},
               {"CONV_NHWC": 0, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4,
                "num_stages": 1}),
}
# Input channels per group from which a convolution starts taps outer too: level1/63's 16 ran
# 0.92x torch.compile channels-last, 0.53x NCHW (H200, sessions 19-20), half of a 32-channel
# block padding notwithstanding.
NHWC_MIN_CHANNELS = 16
_CPU_STARTS = {
    "pointwise": ({"BLOCK": 16384}, {"BLOCK": 4096}, {"BLOCK": 1024}),
    "reduction": ({"TILE": 65536, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096, "BLOCK_B": 256,
                   "BLOCK_R": 64, "SPLIT": 0},
                  {"TILE": 16384, "MAX_FUSED": 4096, "LOOP_BLOCK": 1024, "BLOCK_B": 64,
                   "BLOCK_R": 16, "SPLIT": 16},
                  {"TILE": 4096, "MAX_FUSED": 16384, "LOOP_BLOCK": 4096, "BLOCK_B": 256,
                   "BLOCK_R": 16, "SPLIT": 64}),
    "matmul": ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8},
               {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4}),
    "conv": ({"CONV_NHWC": 0}, {"CONV_NHWC": 1}),
    "narrow": ({"CONV_NHWC": 0},),
}

_CACHE: dict[tuple, tuple[OpTrace, object]] = {}


def plan_for(task: Task | None, trace: OpTrace, library: bool = False,
             rows: bool = False) -> Plan | str:
    """The plan of a traced task (cached per task, trace object and kind of plan); without the
    task the forward's arguments keep neutral names. ``library``: the library-backed plan,
    each GEMM's bias and ReLU folded into its library call, or only its bias where the ReLU
    is all that would be left to Triton. ``rows``: GEMMs reduce their own rows where they fit
    one tile (``make_plan(rows=True)``). In Triton plans, GEMMs of one row or few columns are
    reductions (matvec.py): of at most ``matvec.FEW`` columns, or of one where ``rows``."""
    key = (task.digest if task is not None else None, id(trace), library, rows)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is trace:
        return hit[1]
    ref = parse_reference(task.reference_code) if task is not None else None
    result: Plan | str = ""
    for relu in (True, False) if library else (False,):
        graph = build_graph(trace)
        folded = fold_epilogues(graph, relu) if library else 0
        if not library:  # (a GEMM that reduces its own rows keeps N >= 2: FUSE_ROWS picks)
            lower_matvecs(graph, 1 if rows else FEW)
        result = make_plan(graph, leaf_names(graph, ref.forward_args if ref else []), library,
                           rows)
        if not isinstance(result, str) or not folded:
            break  # (a bias is never split off again: a lone addmm is the reference's own)
    if len(_CACHE) > 32:
        _CACHE.clear()
    _CACHE[key] = (trace, result)
    return result


def _tunables(plan: Plan) -> tuple[Tunable, ...]:
    kinds = _kinds(plan)
    out: list[Tunable] = []
    if "matmul" in kinds:
        # A GEMM that owns whole rows spans N in one tile, in row order (no BLOCK_N, GROUP_M).
        gemms = any(k.kind == "matmul" for k in plan.kernels)
        whole = gemms and all(k.domain is not None for k in plan.kernels if k.kind == "matmul")
        # (GROUP_M orders a GEMM's tiles; a convolution's grid is its own: not theirs)
        out += [t for t in MATMUL if not (whole and t.name in ("BLOCK_N", "GROUP_M"))
                and (gemms or t.name != "GROUP_M")]
        if any(k.kind == "matmul" and k.anchor.outputs[0].dtype == "float32" for k in plan.kernels):
            out.append(TF32X3)
        if any(k.to_k_major for k in plan.kernels):
            out.append(KMAJOR)
        if any(_layouts(k) for k in plan.kernels):
            out.append(CONV_NHWC)
    if "reduction" in kinds:
        if any(not k.middle for k in plan.kernels if k.kind in ("reduction", "scan")):
            out += REDUCTION
        if any(k.looped for k in plan.kernels):
            out += LOOPED
        if any(k.middle for k in plan.kernels):
            out += MIDDLE
        if any(k.splits for k in plan.kernels):
            out.append(SPLIT)
    if "pointwise" in kinds:
        out += POINTWISE
    out.append(WARPS)
    if "matmul" in kinds or any(k.looped or k.middle for k in plan.kernels):
        out.append(STAGES)
    return tuple(out)


def _kinds(plan: Plan) -> set[str]:
    """The kinds whose tunables and start points a plan uses (a Triton convolution tiles as a
    matmul does, a depthwise one blocks its outputs as a pointwise kernel does; a library call
    has none; "conv": a convolution in either layout, CONV_NHWC's start points; "narrow":
    only convolutions of fewer than NHWC_MIN_CHANNELS input channels, NCHW starts only)."""
    alias = {"conv": "matmul", "scan": "reduction"}
    convs = [k for k in plan.kernels if _layouts(k)]
    layouts = set() if not convs else {"conv"} if any(
        k.conv.channels >= NHWC_MIN_CHANNELS for k in convs) else {"narrow"}
    return {"pointwise" if k.kind == "conv" and k.conv.depthwise else alias.get(k.kind, k.kind)
            for k in plan.kernels} - {"library"} | layouts


def _layouts(kernel) -> bool:
    """A Triton convolution written in either layout (CONV_NHWC): not transposed, not
    depthwise (those have kernels of their own)."""
    return kernel.kind == "conv" and not kernel.conv.transposed and not kernel.conv.depthwise


def _merged(table: dict, kinds: set[str]) -> tuple[dict, ...]:
    order = [k for k in ("conv", "narrow", "matmul", "reduction", "pointwise") if k in kinds]
    count = max(len(table[k]) for k in order)
    return tuple({key: value for k in reversed(order) for key, value in
                  table[k][i % len(table[k])].items()} for i in range(count))


class CompiledFamily(Family):
    """A family of plans of the traced graph (see the module docstring)."""

    kind = ""
    # Set on the copy a match returns: mode (the MODES' values) -> plan, and the tunables each
    # plan uses.
    plans: dict = {}
    used: dict = {}
    bounds: dict = {}  # mode -> what its GEMM tiles may span (_bounds)

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
        plans = {(0, 0, 0): result}
        library = plan_for(task, trace, library=True)
        if not isinstance(library, str) and _kernel_kinds(library) != _kernel_kinds(result):
            plans[(1, 0, 0)] = library
        rows, notes = _whole_rows(task, trace, result)
        if rows is not None:
            plans[(0, 1, 0)] = rows
        for mode in [m for m in plans if m[0] == 0]:  # (a library plan calls cuDNN instead)
            direct = _direct(plans[mode])
            if direct is not None:
                plans[mode[:2] + (1,)] = direct
        if probe.conv_exact:  # the reference's cuDNN kernels computed float32 exactly
            plans = {mode: _exact(plan) for mode, plan in plans.items()}
        fitted = copy.copy(self)
        fitted.plans = plans
        per_plan = {mode: _tunables(plan) for mode, plan in plans.items()}
        union = list(dict.fromkeys(t for mode in plans for t in per_plan[mode]))
        picks = [t for k, t in enumerate((LIBRARY, FUSE_ROWS, TCONV_DIRECT))
                 if len({m[k] for m in plans}) > 1]
        # CUDA_GRAPH where a plan's launches can cost as much as its work (replay.py).
        graphs = {mode: offered(probe, len(plan.kernels)) for mode, plan in plans.items()}
        fitted.tunables = tuple(picks + union + ([CUDA_GRAPH] if any(graphs.values()) else []))
        fitted.bounds = {mode: _bounds(plan) for mode, plan in plans.items()}
        fitted.used = {mode: {t.name for t in ts} | set(MODES)
                       | ({CUDA_GRAPH.name} if graphs[mode] else set())
                       for mode, ts in per_plan.items()}
        kinds = set().union(*(_kinds(plan) for plan in plans.values()))
        fitted.starts, fitted.cpu_starts = _merged(_STARTS, kinds), _merged(_CPU_STARTS, kinds)
        # Start points take the plans in turn: library-backed first, then whole rows, then the
        # GEMM and its reduction apart (each with a direct transposed convolution first).
        modes = sorted(plans, key=lambda m: tuple(-x for x in m))
        if len(plans) > 1:
            fitted.starts, fitted.cpu_starts = (
                tuple({**p, **dict(zip(MODES, modes[k % len(modes)]))}
                      for k, p in enumerate(starts))
                for starts in (fitted.starts, fitted.cpu_starts))
        if any(graphs.values()):  # each plan replayed first, then launched kernel by kernel
            fitted.starts = tuple({**p, CUDA_GRAPH.name: 1 - k // len(modes) % 2}
                                  for k, p in enumerate(fitted.starts))
        labels = {mode: _label(plan) for mode, plan in plans.items()}
        for mode in [m for m in labels if notes and m[:2] == (0, 0)]:
            labels[mode] += f" ({notes})"  # why no GEMM reduces its own rows
        n = len(result.kernels)
        why = (f"the traced graph ({len(trace.top_ops)} aten ops) is {n} kernel"
               f"{'s' if n > 1 else ''}: {labels[(0, 0, 0)]}")
        if (1, 0, 0) in plans:
            why += f"; or, library-backed: {labels[(1, 0, 0)]}"
        if (0, 1, 0) in plans:
            why += f"; or, with whole rows in the GEMM: {labels[(0, 1, 0)]}"
        if (0, 0, 1) in plans:
            why += f"; or, with direct transposed convolutions: {labels[(0, 0, 1)]}"
        return Match(fitted, why, {"plans": plans, "labels": labels, "label": labels[(0, 0, 0)]})

    def describe(self, match: Match, params: dict) -> str:
        mode = _mode(params)
        label = match.spec["labels"][mode]
        if any(k.splits for k in match.spec["plans"][mode].kernels):
            n = params.get("SPLIT", 0)
            label += f"; rows split over about {n} programs where the grid has fewer" if n \
                else "; rows never split (SPLIT 0)"
        form = _channels_last(params, self.used.get(mode, ()))
        if form:
            plan = match.spec["plans"][mode]
            label = label.replace(_label(plan), _label(_nhwc(plan, form)), 1)
        replayed = params.get(CUDA_GRAPH.name) and CUDA_GRAPH.name in self.used.get(mode, ())
        return label + ("; replayed as a CUDA graph" if replayed else "")

    def precision(self, match: Match, params: dict, probe: TaskProbe) -> list[KernelPrecision]:
        hw = probe.hardware
        return kernel_precision(match.spec["plans"][_mode(params)],
                                hw is not None and hw.device == "cuda", probe.flags,
                                probe.conv_exact, tf32x3=bool(params.get(TF32X3.name)))

    def render(self, match: Match, params: dict, backend: str) -> str:
        mode = _mode(params)
        used = self.used.get(mode, params)
        plan = match.spec["plans"][mode]
        form = _channels_last(params, used)
        if form:
            plan = _nhwc(plan, form)
        return render(plan, {k: v for k, v in params.items() if k in used and k not in MODES})

    # -- the space: a tunable its plan does not use is pinned ------------------------------
    def _pin(self, t: Tunable, interpreter: bool):
        if t is CUDA_GRAPH:
            return 0  # (a plan that no graph is offered for launches its kernels)
        values = t.values(interpreter)
        starts = self.cpu_starts if interpreter and self.cpu_starts else self.starts
        value = starts[0].get(t.name) if starts else None
        return value if value in values else values[len(values) // 2]

    def clean(self, params: dict, interpreter: bool, backend: str) -> dict:
        out = super().clean(params, interpreter, backend)
        for name in MODES[1:]:  # (whole rows, direct forms: plans of Triton kernels only)
            if not self.plans or _mode(out) in self.plans:
                break
            if name in out:
                out[name] = 0
        used = self.used.get(_mode(out))
        if used is not None:
            for t in self.tunables_for(backend):
                if t.name not in used:
                    out[t.name] = self._pin(t, interpreter)
        bounds = self.bounds.get(_mode(out))
        if bounds:  # no tile wider than what it covers: the rest of it would be masked work
            nhwc = bool(_channels_last(out, used if used is not None else out))
            for t in self.tunables_for(backend):
                bound = bounds.get(f"{t.name}/nhwc" if nhwc else t.name) or bounds.get(t.name)
                if bound and t.name in out:
                    values = t.values(interpreter)
                    cap = min((v for v in values if v >= bound), default=max(values))
                    out[t.name] = min(out[t.name], cap)
        return out

    def start(self, rng, interpreter: bool, index: int, backend: str) -> dict:
        return self.clean(super().start(rng, interpreter, index, backend), interpreter, backend)

    def mutate(self, params: dict, rng, interpreter: bool, backend: str) -> tuple[dict, list[str]]:
        params = self.clean(params, interpreter, backend)
        for _ in range(16):  # a move of a pinned tunable changes nothing: move again
            moved, changed = super().mutate(params, rng, interpreter, backend)
            moved = self.clean(moved, interpreter, backend)
            if moved != params:
                return moved, [c for c in changed if moved[c.split()[0]] != params[c.split()[0]]]
        return params, []

    def crossover(self, a: dict, b: dict, rng, interpreter: bool, backend: str) -> dict:
        return self.clean(super().crossover(a, b, rng, interpreter, backend), interpreter, backend)

    def neighbours(self, params: dict, interpreter: bool, backend: str) -> list[dict]:
        params = self.clean(params, interpreter, backend)
        out: list[dict] = []
        for point in super().neighbours(params, interpreter, backend):
            point = self.clean(point, interpreter, backend)
            if point != params and point not in out:
                out.append(point)
        return out

    def points(self, interpreter: bool, backend: str) -> Iterator[dict]:
        if not self.used:
            yield from super().points(interpreter, backend)
            return
        for mode, used in self.used.items():
            free = [t for t in self.tunables_for(backend) if t.name in used and t.name not in MODES]
            base = self.clean(dict(zip(MODES, mode)), interpreter, backend)
            for values in itertools.product(*(t.values(interpreter) for t in free)):
                yield {**base, **dict(zip((t.name for t in free), values))}


def _whole_rows(task: Task | None, trace: OpTrace, result: Plan) -> tuple[Plan | None, str]:
    """The plan whose GEMMs reduce their own rows (None where none does), and why one does not
    (said of ``result``'s own GEMMs only: a GEMV that ``result`` sums as a reduction, matvec.py,
    is a GEMM again in the other plan where it has columns enough)."""
    gemms = any(k.kind == "matmul" for k in result.kernels)
    if not gemms and not any(k.products for k in result.kernels):
        return None, ""
    rows = plan_for(task, trace, rows=True)
    if isinstance(rows, str):
        return None, ""
    if any(k.kind == "matmul" and k.domain is not None for k in rows.kernels):
        return rows, ""
    return None, "; ".join(rows.notes.values()) if gemms else ""


def _direct(plan: Plan) -> Plan | None:
    """The plan with its Triton transposed convolutions in the direct form (None: it has none)."""
    def direct(k) -> bool:  # (its phases share grid axis 2 with the groups: 65535 at most)
        return k.kind == "conv" and k.conv.transposed and \
            k.conv.groups * conv_transposed.phases(k.conv) <= 65535

    if not any(direct(k) for k in plan.kernels):
        return None
    out = copy.copy(plan)
    out.kernels = [dataclasses.replace(k, conv=dataclasses.replace(k.conv, direct=True))
                   if direct(k) else k for k in plan.kernels]
    return out


def _bounds(plan: Plan) -> dict:
    """What a plan's GEMM-like tiles may span: ``BLOCK_N``, the widest GEMM's or
    convolution's output columns (a convolution's output channels per group), and ``BLOCK_K``,
    a convolution's K (input channels per group x taps; ``BLOCK_K/nhwc``: taps outer, a
    channel block), each only where every such kernel's is known (a GEMM's K is not taken).
    On the H200 level1/57's 64 output channels won at BLOCK_N 64 in all four branches, which
    had started at 128 (half of every tile masked) and reached 64 only as one neighbour."""
    n, k, k_nhwc = [], [], []
    for kernel in plan.kernels:
        if kernel.kind == "conv" and not kernel.conv.depthwise:
            spec, out = kernel.conv, kernel.anchor.outputs[0]
            channels = out.shape[1] if len(out.shape) > 1 else None
            n.append(channels.coeff // spec.groups if channels is not None and channels.static
                     else None)
            taps = 1
            for size in spec.kernel:
                taps *= size
            k.append(spec.channels * taps)
            k_nhwc.append(spec.channels if _layouts(kernel) else spec.channels * taps)
        elif kernel.kind == "matmul" and kernel.domain is None:  # (whole rows: no BLOCK_N)
            cols = kernel.anchor.outputs[0].shape[-1] if kernel.anchor is not None else None
            n.append(cols.coeff if cols is not None and cols.static else None)
            k.append(None)
            k_nhwc.append(None)
    out = {}
    for name, sizes in (("BLOCK_N", n), ("BLOCK_K", k), ("BLOCK_K/nhwc", k_nhwc)):
        if sizes and all(s for s in sizes):
            out[name] = max(sizes)
    return out


def _channels_last(params: dict, used) -> int:
    """CONV_NHWC's value where the plan uses it (0: NCHW gathers, 1: a channels-last copy,
    2: taps outer over the input as it is)."""
    return int(params.get(CONV_NHWC.name) or 0) if CONV_NHWC.name in used else 0


def _nhwc(plan: Plan, form: int = 1) -> Plan:
    """The plan with its Triton convolutions (but transposed and depthwise ones) taps outer:
    over a channels-last copy of the input (form 1) or the input as it is (2)."""
    out = copy.copy(plan)
    out.kernels = [dataclasses.replace(k, conv=dataclasses.replace(k.conv, nhwc=True,
                                                                   in_place=form == 2))
                   if _layouts(k) else k for k in plan.kernels]
    return out


def _exact(plan: Plan) -> Plan:
    """The plan with its float32 Triton convolutions near-exact (3xTF32) under cuDNN's TF32."""
    if not any(k.kind == "conv" for k in plan.kernels):
        return plan
    out = copy.copy(plan)
    out.kernels = [dataclasses.replace(k, conv=dataclasses.replace(k.conv, exact=True))
                   if k.kind == "conv" else k for k in plan.kernels]
    return out


def _mode(params: dict) -> tuple[int, int, int]:
    """The plan a point of the space renders: its MODES' values."""
    return tuple(params.get(name, 0) for name in MODES)


def _kernel_kinds(plan: Plan) -> list[str]:
    return [k.kind for k in plan.kernels]


def _label(plan: Plan) -> str:
    return "; ".join(describe(k) for k in plan.kernels)


class FusedPointwise(CompiledFamily):
    name = "fused_pointwise"
    kind = "pointwise"
    summary = "any chain of pointwise ops over broadcast tensors, fused into one kernel"
    tunables = POINTWISE + (WARPS,)


class FusedReduction(CompiledFamily):
    name = "fused_reduction"
    kind = "reduction"
    summary = ("row reductions with pointwise prologue and epilogue (softmax, norms, losses, "
               "sum/mean/max/argmax): one pass, or looped with online softmax and Welford "
               "variance; over middle dims in coalesced tiles")
    tunables = REDUCTION + LOOPED + MIDDLE + (SPLIT,) + POINTWISE + (WARPS, STAGES)


class FusedMatmul(CompiledFamily):
    name = "fused_matmul"
    kind = "matmul"
    summary = ("Linear / addmm / mm / bmm / matmul and convolutions: a tiled tl.dot kernel with "
               "its pointwise epilogue fused, or the library call (cuBLAS, cuDNN) with the rest "
               "fused into Triton kernels around it")
    tunables = (LIBRARY, FUSE_ROWS, TCONV_DIRECT) + MATMUL + REDUCTION + LOOPED + MIDDLE + \
        (SPLIT,) + POINTWISE + (WARPS, STAGES)
