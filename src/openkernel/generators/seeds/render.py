"""The candidate module of a seed (rewrite.py) for one launch config per kernel."""

from __future__ import annotations

import re

from openkernel.generators.compiler.modelnew import DECLARE
from openkernel.generators.compiler.replay import NOTE, REPLAY, graphed
from openkernel.generators.seeds.beyond import scaled
from openkernel.generators.seeds.rewrite import Seed, StaticSeed, _prefix, describe, shapes
from openkernel.records import OpTrace

# libdevice functions as the CPU interpreter can run them (it has no libdevice): x, y floats.
_TWINS = {
    "exp": "tl.exp(x)", "exp2": "tl.exp2(x)", "expm1": "tl.exp(x) - 1.0", "log": "tl.log(x)",
    "log2": "tl.log2(x)", "log10": "tl.log(x) * 0.4342944819032518", "log1p": "tl.log(1.0 + x)",
    "sqrt": "tl.sqrt(x)", "rsqrt": "tl.rsqrt(x)", "erf": "tl.erf(x)", "erfc": "1.0 - tl.erf(x)",
    "sin": "tl.sin(x)", "cos": "tl.cos(x)", "tan": "tl.sin(x) / tl.cos(x)",
    "tanh": "2.0 * tl.sigmoid(2.0 * x) - 1.0", "fast_tanhf": "2.0 * tl.sigmoid(2.0 * x) - 1.0",
    "sinh": "0.5 * (tl.exp(x) - tl.exp(-x))", "cosh": "0.5 * (tl.exp(x) + tl.exp(-x))",
    "floor": "tl.floor(x)", "ceil": "tl.ceil(x)", "abs": "tl.abs(x)", "fabs": "tl.abs(x)",
    "trunc": "tl.where(x < 0, tl.ceil(x), tl.floor(x))", "isnan": "x != x",
    "isinf": "tl.abs(x) == float('inf')", "signbit": "x < 0",
    "nearbyint": "tl.floor(x + 0.5)", "pow": "tl.exp2(y * tl.log2(x))",
    "fmod": "x - tl.where(x / y < 0, tl.ceil(x / y), tl.floor(x / y)) * y",
}


# Inductor's reductions by a combine function (NaN-propagating), as plain ones under the
# interpreter.
_REDUCE_TWINS = {
    "max2": "\n    @triton.jit\n    def _h_max2(a, dim):\n        return tl.max(a, dim)\n",
    "min2": "\n    @triton.jit\n    def _h_min2(a, dim):\n        return tl.min(a, dim)\n",
}


def render(seed: Seed, params: dict, trace: OpTrace | None) -> str:
    """The module for ``params`` (``K<n>``: the index of kernel n's launch config)."""
    return _module(seed, params, lambda state: _model(seed, state, trace))


def render_signatures(seeds: list[tuple[list, Seed]], params: dict, trace: OpTrace | None,
                      static: StaticSeed | None = None, checked: bool = True) -> str:
    """One module for captures of several input signatures (``[[rank, dtype], ...]`` each,
    parsed with distinct kernel names and ``K<n>``): every signature's kernels, and a forward
    that runs the wrapper of its inputs' signature, or raises naming the ones it has.

    With ``static`` (a capture at the benchmark inputs' sizes), the forward runs its wrapper
    first when the inputs have exactly those shapes and dtypes; ``checked=False`` (one
    signature covers every input set) runs the first wrapper on any other inputs, unchecked.
    """
    every = [s for _, s in seeds] + ([static.seed] if static else [])
    whole = Seed([k for s in every for k in s.kernels],
                 {n: h for s in every for n, h in s.helpers.items()}, [], [],
                 list(dict.fromkeys(a for s in every for a in s.args)), every[0].outputs,
                 every[0].made, {n: e for s in every for n, e in s.state.items()},
                 any(s.uses_libdevice for s in every), [e for s in every for e in s.extern])
    note = ("; one wrapper per input signature (" + "; ".join(describe(sig) for sig, _ in seeds)
            + "), run by the inputs' ranks and dtypes") if checked else ""
    if static is not None:
        whole.made = static.seed.made.replace("static sizes", "dynamic and static sizes")
        note += (f"; the static specialisation: {', '.join(k.name for k in static.seed.kernels)}"
                 f", Inductor's kernels for the benchmark shapes ({shapes(static.shapes)}) as "
                 "torch.compile's default mode compiles a first call, run on exactly those "
                 "shapes and dtypes (the other kernels are shape-generic and run on any other)")
    return _module(whole, params, lambda state: _dispatch(seeds, whole, state, trace, static,
                                                          checked), note)


def _module(seed: Seed, params: dict, model, note: str = "") -> str:
    replayed = bool(params.get("CUDA_GRAPH"))  # (the tunable of compiler/replay.py)
    note += NOTE if replayed else ""
    lines = ['"""' + f"{len(seed.kernels)} Triton kernel{'s' if len(seed.kernels) > 1 else ''}"
             f" written by {seed.made}, rewritten as a standalone module (openkernel's offline "
             "generator): the kernels as Inductor wrote them, launched on explicit grids with "
             "the launch config of each chosen among Inductor's own"
             + (f"; library calls where Inductor made them ({', '.join(dict.fromkeys(seed.extern))})"
                if seed.extern else "") + note + '.\n"""',
             "", "import os", "", "import torch", "import torch.nn as nn", "import triton",
             "import triton.language as tl", "from triton.language import math as tl_math"]
    names = sorted({n for k in seed.kernels for n in re.findall(r"\blibdevice\.(\w+)", k.source)}
                   | {n for h in seed.helpers.values() for n in re.findall(r"\blibdevice\.(\w+)", h)})
    if names:
        lines.append("from triton.language.extra import libdevice")
    lines += ["", 'INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton on the CPU',
              "aten = torch.ops.aten", ""]
    for kernel in seed.kernels:
        k = _prefix(kernel)
        config, moved = scaled(kernel, kernel.configs[params.get(k, 0) % len(kernel.configs)],
                               params)
        lines.append(f"# {kernel.name}: launch config {params.get(k, 0) % len(kernel.configs)} "
                     f"of Inductor's {len(kernel.configs)}"
                     + (f", moved past it: {', '.join(moved)}" if moved else ""))
        for key, value in config.items():
            name = {"num_warps": "WARPS", "num_stages": "STAGES"}.get(key, key)
            lines.append(f"{k}_{name} = {value}")
    parts = ["\n".join(lines)]
    if names:
        parts.append(_interpreted_libdevice(names))
    parts += list(seed.helpers.values())
    twins = [_REDUCE_TWINS[h] for h in seed.helpers if h in _REDUCE_TWINS]
    if twins:
        parts.append("if INTERPRETED:  # the interpreter runs a reduction's combine function "
                     "outside a kernel,\n    # where it cannot call another: plain twins there\n"
                     + "\n".join(twins))
    parts += [k.source for k in seed.kernels]
    state = [a.split(":", 1)[1] for a in seed.args if a.startswith("state:")]
    if state:
        parts.append(DECLARE.strip("\n"))
    if replayed:
        parts += [REPLAY.strip("\n"), "\n".join(graphed(model(state).split("\n")))]
    else:
        parts.append(model(state))
    return "\n\n\n".join(p.strip("\n") for p in parts) + "\n"


def _interpreted_libdevice(names: list[str]) -> str:
    out = ["if INTERPRETED:  # the interpreter has no libdevice: these twins run there"]
    members = []
    for name in names:
        expr = _TWINS.get(name)
        if expr is None:
            out.append(f"    raise ImportError('no interpreter twin for libdevice.{name}')")
            continue
        out += ["", "    @triton.jit", f"    def _ld_{name}(x, y=0.0):", f"        return {expr}"]
        members.append(f"{name}=_ld_{name}")
    if members:
        out += ["", "    class libdevice:  # noqa: N801 - stands in for the module",
                *[f"        {m.replace('=', ' = ')}" for m in members]]
    return "\n".join(out)


def _entries(seed: Seed, trace: OpTrace | None) -> dict:
    return {s.name: {"shape": s.shape, "dtype": s.dtype.replace("torch.", ""),
                     "parameter": s.kind == "parameter"}
            for s in (trace.state if trace is not None else [])} | seed.state


def _init(state: list[str], entries: dict) -> list[str]:
    init = ["    def __init__(self, *init_args):", "        super().__init__()"]
    for name in state:
        entry = entries.get(name)
        if entry is None:
            raise ValueError(f"neither the capture nor the trace has state {name}")
        dims = ", ".join(str(int(d)) for d in entry["shape"])
        init.append(f'        _declare(self, "{name}", ({dims}{"," if len(entry["shape"]) == 1 else ""}), '
                    f"torch.{entry['dtype']}, {entry['parameter']})")
    return init


def _forward(seed: Seed, entries: dict, name: str = "forward") -> list[str]:
    """The wrapper's body as the method ``name`` (of the module's inputs)."""
    body = [f"    def {name}(self, *inputs):",
            "        device = next(t.device for t in inputs if isinstance(t, torch.Tensor))",
            "        args = ["]
    for a in seed.args:
        kind, what = a.split(":", 1)
        if kind == "state":
            getter = "get_parameter" if entries[what]["parameter"] else "get_buffer"
            body.append(f'            self.{getter}("{what}"),')
        else:  # Inductor compiled for contiguous inputs (its size/stride asserts are dropped)
            body.append(f"            inputs[{what}].contiguous(),")
    body += ["        ]", f"        {', '.join(seed.arg_names)}{',' if len(seed.arg_names) == 1 else ''}"
             " = args"]
    for line in seed.body:
        if line.startswith("return "):
            line = "result = " + line[len("return "):]
        body.append("        " + line)
    body.append("        return result[0]" if seed.outputs == -1 else "        return tuple(result)")
    return body


def _model(seed: Seed, state: list[str], trace: OpTrace | None) -> str:
    entries = _entries(seed, trace)
    doc = '    """Inductor\'s wrapper (call) as a forward: its buffers, library calls and launches."""'
    return "\n".join(["class ModelNew(nn.Module):", doc, "", *_init(state, entries), "",
                      *_forward(seed, entries)])


def _dispatch(seeds: list[tuple[list, Seed]], whole: Seed, state: list[str],
              trace: OpTrace | None, static: StaticSeed | None = None,
              checked: bool = True) -> str:
    """ModelNew with one method per signature's wrapper (and the static capture's) and a
    forward choosing among them."""
    entries = _entries(whole, trace)
    known = "; ".join(describe(sig) for sig, _ in seeds)
    doc = ('    """Inductor\'s wrappers (call), one per input signature (each tensor input\'s rank '
           'and dtype:\n    Inductor specialises its code to them), as methods: the forward runs '
           'its inputs\' one."""')
    body = ["    def forward(self, *inputs):"]
    methods = []
    if static is not None:
        doc = ('    """Inductor\'s wrappers (call) as methods: _static_shapes for the benchmark '
               'inputs\' shapes and dtypes\n    exactly (its kernels specialised to them), the '
               'shape-generic one' + ('s by input signature' if checked else '')
               + ' for any other."""')
        exact = [(tuple(s), d) for s, (_, d) in zip(static.shapes, static.signature)]
        body += ["        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]",
                 "        if [(tuple(t.shape), str(t.dtype).removeprefix(\"torch.\")) "
                 f"for t in tensors] == {exact!r}:",
                 f"            return self._static_shapes(*inputs)  # the benchmark's shapes"]
        methods += ["", *_forward(static.seed, entries, "_static_shapes")]
    if not checked:
        body.append("        return self._any_shapes(*inputs)")
        methods += ["", *_forward(seeds[0][1], entries, "_any_shapes")]
        return "\n".join(["class ModelNew(nn.Module):", doc, "", *_init(state, entries), "",
                          *body, *methods])
    body.append("        signature = tuple((t.dim(), str(t.dtype).removeprefix(\"torch.\")) "
                "for t in inputs if isinstance(t, torch.Tensor))")
    for n, (sig, seed) in enumerate(seeds):
        body += [f"        if signature == {tuple(tuple(e) for e in sig)!r}:  # {describe(sig)}",
                 f"            return self._signature_{n}(*inputs)"]
        methods += ["", *_forward(seed, entries, f"_signature_{n}")]
    # inputs outside the captured signatures are refused by name, not computed wrongly
    body += ["        raise ValueError(",
             '            "no Inductor code for inputs of ranks and dtypes " + ", ".join('
             'f"{r}-D {d}" for r, d in signature)',
             f'            + " (this seed has it for {known} only)")']
    return "\n".join(["class ModelNew(nn.Module):", doc, "", *_init(state, entries), "", *body,
                      *methods])
