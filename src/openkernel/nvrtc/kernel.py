"""RawKernel: CUDA C++ source compiled with NVRTC (``cuda.core``) and launched on tensors.

The kernel compiles when the object is made (at the candidate's import: that is its build),
to a cubin for each target: the judging GPU's architecture, or the targets the worker names in
``OPENKERNEL_NVRTC_ARCHS``. Without a GPU it still compiles for real, so a build error shows
on any machine, and a launch is checked but not run (:attr:`RawKernel.launches` keeps the
checked descriptions). On a GPU it loads into the CUDA context PyTorch already uses and
launches on PyTorch's current stream, so CUDA events, the profiler and stream checks see it
as any other kernel launch.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from pathlib import Path

import torch

from openkernel.nvrtc.launch import MAX_SHARED, STATIC_SHARED, Launch, LaunchError, check_launch
from openkernel.nvrtc.signature import KernelSourceError, parse_params

ARCHS_VAR = "OPENKERNEL_NVRTC_ARCHS"  # comma-separated sm_NN targets (set by the worker)
DEFAULT_ARCH = "sm_90"  # without a GPU and without targets: the H200's


class KernelCompileError(RuntimeError):
    """NVRTC rejected the source (its log is the message)."""


def _cuda_core():
    """``cuda.core`` (1.x), or its ``experimental`` namespace in the 0.x releases."""
    try:
        import cuda.core as cc

        cc.Program  # noqa: B018 - 0.x keeps everything under cuda.core.experimental
        return cc
    except (ImportError, AttributeError):
        try:
            import cuda.core.experimental as cc
        except ImportError as err:
            raise KernelCompileError("raw CUDA kernels need cuda-python's cuda.core (pip install "
                                     "cuda-core cuda-bindings nvidia-cuda-nvrtc)") from err
        return cc


def cuda_include_dirs() -> list[str]:
    """Where NVRTC finds CUDA's headers (cuda_fp16.h, ...): it has no search path of its own."""
    found = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found.append(find_nvidia_header_directory("cudart"))
    except Exception:  # an older cuda-python without pathfinder: the toolkit's folders
        pass
    nvcc = shutil.which("nvcc")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
                 str(Path(os.path.realpath(nvcc)).parents[1]) if nvcc else None):
        if root:
            found.append(str(Path(root) / "include"))
    return [d for d in dict.fromkeys(found) if d and Path(d, "cuda_runtime.h").is_file()]


def target_archs() -> list[str]:
    """The sm_NN targets to compile for (the GPU's own first when there is one)."""
    named = [a.strip() for a in os.environ.get(ARCHS_VAR, "").split(",") if a.strip()]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        here = f"sm_{major}{minor}"
        return list(dict.fromkeys([here, *named]))
    return named or [DEFAULT_ARCH]


class RawKernel:
    """One ``__global__`` kernel, compiled with NVRTC; call it with a launch description.

    Args:
        source: CUDA C++ source (``extern "C"`` or not; CUDA headers such as cuda_fp16.h may
            be included, torch headers may not).
        name: The kernel's name, or a template instance (``"act<float>"``).
        defines: Macros to define (``{"BLOCK": 256}``), e.g. for a template's parameters.
        fast_math: Compile with ``--use_fast_math``.

    Raises:
        KernelSourceError: no kernel of that name, or a parameter that cannot be passed.
        KernelCompileError: NVRTC's error log, for each target that failed.
    """

    def __init__(self, source: str, name: str, defines: dict | None = None,
                 fast_math: bool = False):
        self.source, self.name = source, name
        self.params = parse_params(source, name)
        self.defines = {str(k): str(v) for k, v in (defines or {}).items()}
        self.fast_math = fast_math
        self.launches: list[Launch] = []  # without a GPU: the descriptions checked
        self._kernels: dict[int, object] = {}  # device index -> loaded kernel
        self._streams: dict[int, object] = {}
        self._opted_in = 0
        t0 = time.perf_counter()
        self.cubins = {arch: self._compile(arch) for arch in target_archs()}
        self.compile_s = time.perf_counter() - t0
        COMPILED.append(self)

    def _compile(self, arch: str):
        cc = _cuda_core()
        options = cc.ProgramOptions(
            arch=arch, std="c++17", include_path=cuda_include_dirs() or None,
            define_macro=[(k, v) for k, v in self.defines.items()] or None,
            use_fast_math=self.fast_math or None)
        try:
            program = cc.Program(self.source, "c++", options)
            return program.compile("cubin", name_expressions=(self.name,))
        except Exception as err:
            log = str(err).split("compilation log:", 1)[-1].strip()
            raise KernelCompileError(f"NVRTC could not compile {self.name} for {arch}:\n"
                                     f"{log[-4000:]}") from None

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        """Launch on PyTorch's current stream (see :meth:`launch`)."""
        self.launch(grid, block, args, shared_mem)

    def launch(self, grid, block, args, shared_mem: int = 0) -> None:
        """Check the description, then launch (on a GPU) on PyTorch's current stream.

        Args:
            grid: Blocks: an int or a tuple of 1-3 ints.
            block: Threads per block: an int or a tuple of 1-3 ints (at most 1024 threads).
            args: One per kernel parameter, in order: a tensor for each pointer (its dtype
                must match), a Python number for each scalar (packed to the declared type).
            shared_mem: Dynamic shared memory per block in bytes (``extern __shared__``).

        Raises:
            LaunchError: the description does not fit the kernel or the device.
        """
        gpu = torch.cuda.is_available()
        limit = self._max_shared() if gpu else MAX_SHARED
        launch = check_launch(self.params, self.name, grid, block, args, shared_mem,
                              max_shared=limit, need_cuda=gpu)
        if not gpu:
            self.launches.append(launch)
            return
        index = torch.cuda.current_device()
        if any(d.index != index for d in launch.devices):
            raise LaunchError(f"{self.name}: tensor arguments on {', '.join(map(str, launch.devices))},"
                              f" but the current device is cuda:{index}")
        cc = _cuda_core()
        kernel = self._kernel(cc, index)
        if launch.shared_mem > max(STATIC_SHARED, self._opted_in):
            self._opt_in(kernel, launch.shared_mem)
        config = cc.LaunchConfig(grid=launch.grid, block=launch.block, shmem_size=launch.shared_mem)
        cc.launch(self._stream(cc, index), config, kernel, *launch.args)

    # -- the device side ----------------------------------------------------------------------
    def _kernel(self, cc, index: int):
        kernel = self._kernels.get(index)
        if kernel is None:
            device = cc.Device(index)
            device.set_current()  # the primary context: the one PyTorch's runtime uses
            arch = arch_of(index)
            code = self.cubins.get(arch) or self.cubins.setdefault(arch, self._compile(arch))
            kernel = self._kernels[index] = code.get_kernel(self.name)
        return kernel

    def _stream(self, cc, index: int):
        return torch_stream(cc, index, self._streams)

    @staticmethod
    @functools.cache
    def _max_shared_of(index: int) -> int:
        props = torch.cuda.get_device_properties(index)
        return int(getattr(props, "shared_memory_per_block_optin", MAX_SHARED))

    def _max_shared(self) -> int:
        return self._max_shared_of(torch.cuda.current_device())

    def _opt_in(self, kernel, nbytes: int) -> None:
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        handle = kernel.handle
        if isinstance(handle, driver.CUkernel):  # a library kernel (cuda.core 0.2 on)
            (err,) = driver.cuKernelSetAttribute(attr, nbytes, handle,
                                                 torch.cuda.current_device())
        else:
            (err,) = driver.cuFuncSetAttribute(handle, attr, nbytes)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"{self.name}: the device refused {nbytes} bytes of dynamic "
                              f"shared memory ({err})")
        self._opted_in = nbytes


def arch_of(index: int) -> str:
    """The sm_NN target of CUDA device ``index``."""
    return f"sm_{''.join(str(v) for v in torch.cuda.get_device_capability(index))}"


def torch_stream(cc, index: int, streams: dict, current=torch.cuda.current_stream):
    """PyTorch's current stream on device ``index`` as a ``cuda.core`` stream (kept in
    ``streams`` by handle, so each is wrapped once). ``current`` is bound when this module is
    imported, before any candidate code."""
    handle = current(index).cuda_stream
    stream = streams.get(handle)
    if stream is None:
        if hasattr(cc.Stream, "from_handle"):
            stream = cc.Stream.from_handle(handle)
        else:  # cuda.core 0.x: a foreign stream through the __cuda_stream__ protocol
            stream = cc.Device(index).create_stream(_ForeignStream(handle))
        streams[handle] = stream
    return stream


class _ForeignStream:
    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


COMPILED: list[RawKernel] = []  # every kernel made in this process (the worker reads it)
