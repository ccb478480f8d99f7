"""Inductor's output module as a standalone candidate: plain ``@triton.jit`` kernels, explicit
launch grids, no ``torch._inductor`` at run time, library calls only where Inductor made them.

:func:`parse` reads the module Inductor wrote (``evaluation/worker/inductor.py`` captures it):
each ``async_compile.triton(...)`` kernel with its heuristics decorator, whose launch configs
are Inductor's own (its ``pointwise`` / ``reduction`` heuristics are asked for them, as its
autotuner would be; the choice among them is the seed's tunable), and the wrapper's ``call``.
:func:`render` writes the candidate: Inductor's ``triton_helpers`` functions it uses copied in
(prefixed ``_h_``), ``libdevice`` from Triton itself (``tl.math`` twins under the CPU
interpreter, which has no libdevice), and a ``ModelNew`` whose forward is the wrapper's body:
``empty_strided_cuda`` is ``torch.empty_strided``, ``reinterpret_tensor`` is ``as_strided``,
``extern_kernels.mm`` is ``torch.mm`` and each ``kernel.run(...)`` a launch on its grid. Sizes
stay the symbols Inductor read from the inputs (it compiled with dynamic sizes), so held-out
shapes run the same code; a capture at the benchmark's own sizes (:class:`StaticSeed`) has
constants instead, and runs on those shapes alone. Anything else Inductor may write (combo
kernels, cooperative or split-scan grids, its own memory pools) is refused with its name, never
guessed.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from unittest import mock

from openkernel import syntax

# "yz": Inductor's Grid2DWithYZOverflow, whose y blocks past the y grid's limit go on in z
_GRIDS = {"Grid1D": ("x",), "Grid2D": ("x", "y"), "Grid3D": ("x", "y", "z"),
          "Grid2DWithYZOverflow": ("x", "y", "yz")}
MAX_Y_GRID = 65535  # CUDA's limit on a grid's y (and z) extent, as Inductor's get_max_y_grid
_DROPPED_CALLS = {"assert_size_stride", "assert_alignment", "get_raw_stream", "set_device",
                  "copy_if_misaligned", "run_intermediate_hooks"}
_EXTERN = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_addmm_activation", "addmv", "mv"}


class Unsupported(ValueError):
    """Inductor wrote something the rewriter does not turn into plain code (its name)."""


@dataclass
class SeedKernel:
    name: str
    source: str  # the @triton.jit function, helpers renamed
    params: list[str]  # its parameters, in order
    configs: list[dict]  # Inductor's launch configs: block sizes, num_warps, num_stages
    grid: tuple[str, ...]  # the axes of its grid ("x", "y", "z")
    kind: str  # the heuristics: "pointwise", "reduction", "persistent_reduction", ...
    prefix: str = ""  # its constants' prefix (K<n>) when not its name's own (see _prefix)


@dataclass
class Seed:
    kernels: list[SeedKernel]
    helpers: dict[str, str]  # helper name -> its @triton.jit source (prefixed)
    body: list[str]  # the forward's statements (after the arguments are bound)
    arg_names: list[str]  # the wrapper's names for its arguments, in order
    args: list[str]  # what each one is: "state:NAME" or "input:I"
    outputs: int  # -1: one tensor, else a tuple of that many
    made: str
    state: dict  # state_dict name -> {"shape", "dtype", "parameter"} (the capture's)
    uses_libdevice: bool = False
    extern: list[str] = field(default_factory=list)  # library calls Inductor made


@dataclass
class StaticSeed:
    """A capture at the benchmark inputs' own sizes: run on exactly those shapes and dtypes."""
    shapes: list[list[int]]  # each tensor input's shape
    signature: list[list]  # each tensor input's [rank, dtype]
    seed: Seed


def _kernel_configs(source: str) -> tuple[list[dict], str]:
    """Inductor's launch configs for one kernel module's heuristics decorator (and its kind)."""
    from torch._inductor.runtime import triton_helpers, triton_heuristics

    found: dict = {}

    def record(size_hints, configs, triton_meta=None, heuristic_type=None, **_):
        found["configs"] = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
                            for c in configs]
        found["kind"] = getattr(heuristic_type, "name", str(heuristic_type)).lower()
        return lambda fn: fn

    from torch._inductor.runtime import hints

    decorator = next((d for n in syntax.parse(source).body if isinstance(n, ast.FunctionDef)
                      for d in n.decorator_list if isinstance(d, ast.Call)
                      and ast.unparse(d.func).startswith("triton_heuristics.")), None)
    if decorator is None:
        raise Unsupported("a kernel without Inductor's heuristics")
    names = {"triton_heuristics": triton_heuristics, "__file__": "<inductor kernel>",
             **{n: getattr(hints, n) for n in ("AutotuneHint", "ReductionHint", "TileHint",
                                               "DeviceProperties")}}
    with mock.patch.object(triton_heuristics, "cached_autotune", record), \
            mock.patch.object(triton_helpers, "set_driver_to_gpu", lambda: None):
        # Inductor's own heuristics, asked for the configs its autotuner would try
        eval(compile(ast.Expression(decorator), "<inductor heuristics>", "eval"), names)  # noqa: S307
    if not found.get("configs"):
        raise Unsupported("a kernel without launch configs")
    return found["configs"], found["kind"]


def _jit_function(source: str) -> tuple[ast.FunctionDef, dict]:
    tree = syntax.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            meta = {}
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call):
                    for kw in dec.keywords:
                        if kw.arg == "inductor_meta":
                            meta = ast.literal_eval(_strip_sets(kw.value))
            return node, meta
    raise Unsupported("a kernel module without a function")


def _strip_sets(node: ast.expr) -> ast.expr:
    """``set()`` (autotune_hints) as an empty tuple, so literal_eval reads the dict."""
    class Sets(ast.NodeTransformer):
        def visit_Call(self, call):
            if isinstance(call.func, ast.Name) and call.func.id == "set" and not call.args:
                return ast.Tuple(elts=[], ctx=ast.Load())
            return self.generic_visit(call)
    return Sets().visit(syntax.parse(ast.unparse(node), mode="eval").body)


def _helpers(text: str, found: dict[str, str]) -> str:
    """``triton_helpers.NAME`` as ``_h_NAME``, the helper's source (and its own) collected."""
    from torch._inductor.runtime import triton_helpers

    def jit_source(name: str) -> str | None:
        """A @triton.jit function's source (JITFunction, or InterpretedFunction under
        TRITON_INTERPRET), without its decorator."""
        fn = getattr(getattr(triton_helpers, name, None), "fn", None)
        if not inspect.isfunction(fn):
            return None
        src = textwrap.dedent(inspect.getsource(fn))
        return src[src.index("def "):]

    for name in sorted(set(re.findall(r"\btriton_helpers\.(\w+)", text))):
        if jit_source(name) is None:
            raise Unsupported(f"triton_helpers.{name} (not a Triton function)")
        _collect(name, jit_source, found)
    return re.sub(r"\btriton_helpers\.(\w+)", r"_h_\1", text)


def _collect(name: str, jit_source, found: dict[str, str]) -> None:
    if name in found:
        return
    src = jit_source(name)
    found[name] = ""  # before recursing: helpers may call each other
    for other in sorted(set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)", src))):
        if other != name and jit_source(other) is not None:
            _collect(other, jit_source, found)
    calls = {n for n in found if n != name}
    for other in calls | {name}:
        src = re.sub(rf"(?<![\w.]){other}\b", f"_h_{other}", src)
    found[name] = "@triton.jit\n" + src.strip() + "\n"


def parse(captured: dict, tag: str = "", first: int | None = None) -> Seed:
    """The seed of an Inductor capture (``{"code", "args", "outputs", "made"}``).

    Args:
        captured: the capture (``evaluation/worker/inductor.py``).
        tag: appended to each kernel's name, so that captures for several input signatures
            share one module (``triton_poi_fused_0_sig1``).
        first: number the kernels' constants from here (``K<first>``, ``K<first + 1>``, ...)
            instead of by their names' own index, so that they stay distinct across captures.
    """
    tree = syntax.parse(captured["code"])
    kernels: dict[str, SeedKernel] = {}
    helpers: dict[str, str] = {}
    libdevice = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                ast.unparse(node.value.func) == "async_compile.triton":
            name = node.value.args[0].value
            source = node.value.args[1].value
            fn, meta = _jit_function(source)
            grid = _GRIDS.get(meta.get("grid_type", ""))
            if grid is None:
                raise Unsupported(f"kernel {name}: grid {meta.get('grid_type')}")
            configs, kind = _kernel_configs(source)
            text = ast.get_source_segment(source, fn)
            text = text[text.index("def "):] if "def " in text else text
            text = _helpers(text, helpers)
            libdevice |= "libdevice." in text
            if tag:
                text = text.replace(f"def {name}(", f"def {name}{tag}(", 1)
            kernels[name] = SeedKernel(name + tag, "@triton.jit\n" + text.strip() + "\n",
                                       [a.arg for a in fn.args.args], configs, grid, kind,
                                       "" if first is None else f"K{first + len(kernels)}")
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"),
                None)
    if call is None:
        raise Unsupported("a module without call()")
    if not kernels:
        raise Unsupported("no Triton kernel: Inductor left it all to library calls")
    seed = Seed(list(kernels.values()), {k: v for k, v in helpers.items()}, [], [],
                list(captured["args"]), int(captured.get("outputs", -1)),
                str(captured.get("made", "")), dict(captured.get("state") or {}), libdevice)
    _body(call, kernels, seed)
    return seed


def _body(call: ast.FunctionDef, kernels: dict[str, SeedKernel], seed: Seed) -> None:
    """The wrapper's statements as the forward's (see the module docstring)."""
    arg = call.args.args[-1].arg if call.args.args else "args"  # call(args) or call(self, args)
    out: list[str] = []

    def walk(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.With):  # torch.cuda._DeviceGuard(0): the tensors' device
                walk(st.body)
                continue
            if isinstance(st, ast.Delete) or isinstance(st, ast.Pass):
                continue
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and \
                    st.value.id == arg and isinstance(st.targets[0], ast.Tuple):
                seed.arg_names = [e.id for e in st.targets[0].elts]
                continue
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                func = ast.unparse(st.value.func)
                laid = _laid_out(seed, st.value) if func == "assert_size_stride" else None
                if laid:
                    out.append(laid)
                    continue
                if func == f"{arg}.clear" or func.split(".")[-1] in _DROPPED_CALLS:
                    continue
                if func.endswith(".run") and func[:-4] in kernels:
                    out.extend(_launch(kernels[func[:-4]], st.value))
                    continue
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and \
                    ast.unparse(st.value.func).split(".")[-1] in _DROPPED_CALLS:
                continue
            if isinstance(st, ast.Return):
                out.append("return " + ast.unparse(_Plain(seed).visit(st.value)))
                continue
            out.extend(ast.unparse(_Plain(seed).visit(st)).splitlines())
    walk(call.body)
    if not seed.arg_names:
        raise Unsupported("call() does not unpack its arguments")
    seed.body = out


LAID_OUT = '''
def _laid_out(t, size, stride):
    """A library call's result in the layout Inductor asserted for it, the one the kernels
    after it index: as it is where the library made that layout (cuDNN on the GPU Inductor
    compiled for), else a copy (another backend may lay a channels-last convolution out
    otherwise)."""
    if tuple(t.stride()) == tuple(stride) or t.numel() == 0:
        return t
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)
'''


def _laid_out(seed: Seed, call: ast.Call) -> str | None:
    """``assert_size_stride(buf, size, stride, what)`` of a library call's result as a line
    that makes it so (the inputs' are dropped: the forward makes them contiguous)."""
    if len(call.args) < 3 or not isinstance(call.args[0], ast.Name):
        return None
    what = call.args[3].value if len(call.args) > 3 and isinstance(call.args[3], ast.Constant) \
        else ""
    name = call.args[0].id
    if what == "input" or name in seed.arg_names:
        return None
    seed.helpers.setdefault("_laid_out", LAID_OUT.strip("\n"))
    size, stride = (ast.unparse(_Plain(seed).visit(a)) for a in call.args[1:3])
    return f"{name} = _laid_out({name}, {size}, {stride})"


class _Plain(ast.NodeTransformer):
    """Inductor's wrapper helpers as plain torch."""

    def __init__(self, seed: Seed) -> None:
        self.seed = seed

    def visit_Call(self, node: ast.Call):
        node = self.generic_visit(node)
        func = ast.unparse(node.func)
        if func == "empty_strided_cuda":  # (size, stride, dtype)
            return _parse(f"torch.empty_strided({ast.unparse(node.args[0])}, "
                          f"{ast.unparse(node.args[1])}, dtype={ast.unparse(node.args[2])}, "
                          "device=device)")
        if func == "reinterpret_tensor":  # (tensor, size, stride, offset added to its own)
            t, size, stride, offset = (ast.unparse(a) for a in node.args)
            return _parse(f"{t}.as_strided({size}, {stride}, {t}.storage_offset() + {offset})")
        if func.startswith("extern_kernels."):
            name = func.split(".", 1)[1]
            if name not in _EXTERN:
                raise Unsupported(f"extern_kernels.{name}")
            self.seed.extern.append(name)
            node.func = _parse(f"torch.{name}")
            return node
        if func.split(".")[0] in ("empty_strided_cpu", "alloc_from_pool", "inductor_ops",
                                  "empty_strided_p2p", "torch._inductor"):
            raise Unsupported(func)
        return node


def _parse(text: str) -> ast.expr:
    return syntax.parse(text, mode="eval").body


def _launch(kernel: SeedKernel, call: ast.Call) -> list[str]:
    """``kernel.run(a, b, xnumel, ..., stream=s)`` as a launch on its grid."""
    args = [ast.unparse(a) for a in call.args]
    by_name = dict(zip(kernel.params, args))
    k = _prefix(kernel)
    grid = []
    for axis in kernel.grid:
        if axis == "yz":  # the kernel's y offset is (pid 1 + pid 2 * programs on 1) * YBLOCK
            blocks = grid[1]
            grid[1] = f"triton.cdiv({blocks}, max(1, triton.cdiv({blocks}, {MAX_Y_GRID})))"
            grid.append(f"triton.cdiv({blocks}, {MAX_Y_GRID})")
            continue
        numel = by_name.get(f"{axis}numel")
        block = f"{k}_{axis.upper()}BLOCK"
        grid.append(f"triton.cdiv({numel}, {block})" if numel is not None and
                    axis.upper() + "BLOCK" in kernel.configs[0] else "1")
    consts = [f"{key}={k}_{key}" for key in kernel.configs[0]
              if key not in ("num_warps", "num_stages")]
    launch = (f"{kernel.name}[({', '.join(grid)},)]({', '.join(args)}, "
              + ", ".join(consts + [f"num_warps={k}_WARPS", f"num_stages={k}_STAGES"]) + ")")
    return [launch]


def _prefix(kernel: SeedKernel) -> str:
    """The kernel's constants' prefix: ``K0`` for ``triton_poi_fused_..._0``."""
    if kernel.prefix:
        return kernel.prefix
    tail = kernel.name.rsplit("_", 1)[-1]
    return f"K{tail}" if tail.isdigit() else kernel.name.upper()


def describe(signature: list) -> str:
    """An input signature (``[[rank, dtype], ...]``, one per tensor input) in words."""
    return ", ".join(f"{rank}-D {dtype}" for rank, dtype in signature) or "no tensors"


def shapes(sizes: list[list[int]]) -> str:
    """Tensor inputs' shapes in words (``16x256, 256``)."""
    return ", ".join("x".join(map(str, s)) or "scalar" for s in sizes)
