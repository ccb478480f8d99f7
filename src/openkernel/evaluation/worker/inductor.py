"""The code torch.compile's Inductor writes for the reference, captured without running it.

The forward is traced with ``make_fx`` on fake CUDA tensors whose sizes are symbols (the
parameters and buffers as graph inputs, in ``state_dict`` order, then the forward's tensors),
lowered by Inductor's ``compile_fx_inner`` (default mode), and the wrapper module it writes is
read where Inductor would load it; nothing is compiled for, or run on, a device. On a GPU that
is plain Inductor. On a machine without one, a stand-in CUDA device (an H200: sm_90, 132 SMs)
answers Inductor's questions about the device and Triton's about its target, which is how the
CPU tests get genuine Inductor output (labelled as made so). The offline generator turns the
code into a standalone candidate (``generators/seeds``).
"""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace
from unittest import mock

import torch

STAND_IN = "a stand-in CUDA device (sm_90, 132 SMs; no GPU here)"
# What capture_signatures returns, as the store keeps it: stored captures of another format
# are made again (bump it when the captures change for the same task and software).
# 4: the forward's outputs in eager's strides, as torch.compile keeps them (3: laid out as
# Inductor liked, channels-last after a convolution: one more copy of the whole output);
# 3: the inference graph (2: a training graph, NCHW where compile went channels-last)
CAPTURES_FORMAT = 4


class _Captured(Exception):
    def __init__(self, code: str) -> None:
        super().__init__("captured")
        self.code = code


@contextlib.contextmanager
def _stand_in_cuda():
    """torch.cuda and Triton's driver answering as one H200, for code generation only."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    props = SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=141 << 30,
        warp_size=32, max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
        max_threads_per_block=1024, shared_memory_per_block_optin=232448, L2_cache_size=60 << 20,
        gcnArchName="", uuid="stand-in")

    class Utils:
        @staticmethod
        def get_device_properties(device):
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536,
                    "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000,
                    "mem_bus_width": 6144}

    class Driver:
        utils = Utils()

        def is_active(self):
            return True

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            return torch.device("cuda", 0)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_device_interface(self):
            return torch.cuda

        def map_python_to_cpp_type(self, ty):
            return ty

        def get_benchmarker(self):
            return lambda *a, **k: [0.0]

    patches = [mock.patch(f"torch.cuda.{name}", value, create=True) for name, value in {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "get_device_properties": lambda *a: props, "_get_device_properties": lambda *a: props,
        "get_device_capability": lambda *a: (9, 0), "_lazy_init": lambda: None,
        "get_rng_state": lambda *a: torch.zeros(8, dtype=torch.uint8),
        "set_rng_state": lambda *a: None, "_exchange_device": lambda d: 0,
        "_maybe_exchange_device": lambda d: 0, "set_device": lambda d: None,
        "synchronize": lambda *a: None}.items()]
    previous = driver._active
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        driver.set_active(Driver())
        try:
            yield
        finally:
            driver._active = previous


def capture(model: torch.nn.Module, inputs: list, stand_in: bool | None = None,
            dynamic: bool = True) -> dict:
    """Inductor's output code for ``model(*inputs)`` (default mode, dynamic sizes; with
    ``dynamic=False``, the inputs' own sizes, as torch.compile's default compiles a first call).

    Returns ``{"code", "args", "outputs", "made", "state"}``: ``args`` names the wrapper's
    ``call`` arguments in order (``"state:NAME"`` or ``"input:I"``), ``outputs`` how many
    tensors the forward returns (``-1``: one, not in a tuple), ``made`` how the code was made,
    ``state`` each state_dict entry's shape, dtype and whether it is a parameter; or
    ``{"error": ...}``. ``stand_in``: use the stand-in device (default: when CUDA is absent).
    """
    from torch._inductor import config as inductor_config
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )
    from torch.func import functional_call

    stand_in = (not torch.cuda.is_available()) if stand_in is None else stand_in
    state = dict(model.state_dict(keep_vars=True))
    names = list(state)
    tensors = [(i, t) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())

    def fake(t: torch.Tensor, dynamic: bool) -> torch.Tensor:
        sizes = [DimDynamic.DYNAMIC if dynamic else DimDynamic.STATIC] * t.dim()
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")  # no copy
        shaped = mode.from_tensor(meta, symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=sizes))
        with mode:
            return torch.empty_strided(shaped.shape, shaped.stride(), dtype=t.dtype,
                                       device="cuda")

    count = [0]  # outputs of the forward (-1: one tensor, not in a tuple)

    def forward(*flat):
        params = dict(zip(names, flat[:len(names)]))
        args = list(inputs)
        for (i, _), t in zip(tensors, flat[len(names):]):
            args[i] = t
        out = functional_call(model, params, tuple(args))
        count[0] = -1 if isinstance(out, torch.Tensor) else len(out)
        return (out,) if count[0] == -1 else tuple(out)

    def load(cls, key, path, *args, **kwargs):
        with open(path, encoding="utf-8") as f:
            raise _Captured(f.read())

    made = (f"torch.compile's Inductor (default mode, {'dynamic' if dynamic else 'static'} "
            "sizes) on "
            + (STAND_IN if stand_in else "the GPU") + f", torch {torch.__version__}")
    with contextlib.ExitStack() as stack:
        if stand_in:
            stack.enter_context(_stand_in_cuda())
        stack.enter_context(mock.patch.object(PyCodeCache, "load_by_key_path", classmethod(load)))
        stack.enter_context(inductor_config.patch(
            {"compile_threads": 1, "force_disable_caches": True, "fx_graph_cache": False}))
        try:
            flat = [fake(t, False) for t in state.values()] + [fake(t, dynamic) for _, t in tensors]
            with mode, torch.no_grad():
                gm = make_fx(forward, decomposition_table=select_decomp_table(),
                             tracing_mode="symbolic")(*flat)
                _user_visible_outputs(gm)
                # as torch.compile compiles a forward under no_grad (how every baseline is
                # timed): an inference graph, whose layout choice (channels-last convolutions on
                # TF32 tensor cores) differs from a training graph's
                compile_fx_inner(gm, flat, is_inference=True)
        except Exception as err:  # Inductor wraps the capture in its own error types
            found = err
            while found is not None and not isinstance(found, _Captured):
                found = found.__cause__ or found.__context__
            if found is None:
                return {"error": f"{type(err).__name__}: {str(err)[:600]}"}
            params = {n for n, _ in model.named_parameters()}
            return {"code": found.code, "made": made, "outputs": count[0],
                    "args": [f"state:{n}" for n in names] + [f"input:{i}" for i, _ in tensors],
                    "state": {n: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix(
                        "torch."), "parameter": n in params} for n, t in state.items()}}
    return {"error": "Inductor wrote no module"}


def _user_visible_outputs(gm: torch.fx.GraphModule) -> None:
    """Mark every output the user sees, as torch.compile does before Inductor: Inductor then
    returns them in the strides eager gave them. A bare ``compile_fx_inner`` lays them out as it
    likes (KernelBench level3/17: a channels-last output behind one more full copy, 0.72x)."""
    node = next(iter(gm.graph.find_nodes(op="output")))
    outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else node.args
    node.meta["user_visible_output_idxs"] = [i for i, n in enumerate(outs)
                                             if isinstance(n, torch.fx.Node)]


def signature(inputs: list) -> list[list]:
    """The input signature a capture is specialised to: each tensor input's ``[rank, dtype]``
    (its sizes stay symbols, so any shape of that rank runs the same code)."""
    return [[t.dim(), str(t.dtype).removeprefix("torch.")] for t in inputs
            if isinstance(t, torch.Tensor)]


def shapes_only(inputs: list) -> list:
    """``inputs`` with each tensor a meta tensor of its shape, strides and dtype: all a capture
    reads, without holding a held-out set's memory."""
    return [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
            if isinstance(t, torch.Tensor) else t for t in inputs]


def capture_signatures(model: torch.nn.Module, sets: list[list], stand_in: bool | None = None,
                       static: bool = True) -> tuple[list[dict], list[str]]:
    """One capture per distinct input signature among ``sets`` (the benchmark inputs first,
    then the held-out sets): Inductor specialises its code to each input's rank and dtype.

    With ``static``, also the benchmark inputs' capture at their own sizes (last, with their
    ``"shapes"``), as torch.compile's default mode compiles them: persistent reductions and
    constant sizes where the dynamic capture loops over runtime ones. It is left out where its
    kernels are the dynamic capture's (names aside), and a warning says when it failed.

    Returns the captures (each with its ``"signature"``; the benchmark's first) and a warning
    per signature whose capture failed (the others are kept). No capture at all when the
    benchmark inputs' fails.
    """
    captures: list[dict] = []
    warnings: list[str] = []
    seen: list[list] = []
    for k, inputs in enumerate(sets):
        sig = signature(inputs)
        if sig in seen:
            continue
        seen.append(sig)
        captured = _capture(model, inputs, stand_in, True)
        if "error" in captured:
            what = "the reference" if k == 0 else (f"held-out set {k - 1} (inputs of ranks and "
                                                   f"dtypes {sig}; the seed does not cover it)")
            warnings.append(f"capturing Inductor's code for {what} failed: {captured['error']}")
            if k == 0:
                return [], warnings
            continue
        captures.append({**captured, "signature": sig})
    if static and sets:
        captured = _capture(model, sets[0], stand_in, False)
        if "error" in captured:
            warnings.append("capturing Inductor's code for the reference at its own sizes failed "
                            f"(the seed has the shape-generic code alone): {captured['error']}")
        elif kernel_sources(captured["code"]) != kernel_sources(captures[0]["code"]):
            captures.append({**captured, "signature": seen[0], "shapes": [
                list(t.shape) for t in sets[0] if isinstance(t, torch.Tensor)]})
    return captures, warnings


def _capture(model: torch.nn.Module, inputs: list, stand_in: bool | None, dynamic: bool) -> dict:
    try:
        return capture(model, inputs, stand_in, dynamic)
    except Exception as err:  # our own capture failed: the task still runs without it
        return {"error": f"{type(err).__name__}: {err}"[:600]}


_KERNEL = re.compile(r"async_compile\.triton\('(\w+)', '\'\'(.*?)'\'\'", re.S)


def kernel_sources(code: str) -> list[str]:
    """The Triton kernels' sources in an Inductor module, each with its name as ``KERNEL``
    (a dynamic and a static capture name theirs apart: ``triton_red_...`` or ``triton_per_...``)."""
    return [re.sub(rf"\b{name}\b", "KERNEL", source) for name, source in _KERNEL.findall(code)]
