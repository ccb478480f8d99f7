"""Building a candidate inside a worker: importing it, and compiling CUDA C++ without a GPU.

An NVRTC candidate (``openkernel.nvrtc.RawKernel``) builds at import on any machine: NVRTC
needs no GPU, so its kernels compile for real here too.

On a GPU a CUDA C++ candidate builds itself at import through
``torch.utils.cpp_extension.load_inline`` (nvcc, ~50 s on the H200). Without a GPU, a CPU-only
torch cannot link a CUDA extension, so :func:`check_cuda_sources` replaces ``load_inline`` for
the duration of the import with a stand-in that records the sources the candidate passes and
compiles its CUDA part to device code with nvcc (``-fatbin``, one ``-gencode`` per configured
target: the device compiler parses the whole translation unit, torch headers included, for
each architecture, and ptxas assembles it, so an error any one target rejects is reported;
the slow host compile and link are skipped). The import then stops with :class:`NotRunnable`;
the candidate is reported as compiled but not runnable here. Sources that never reach
``load_inline`` during the import are found statically (string constants holding
``__global__``).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from openkernel import syntax
from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker import binding
from openkernel.evaluation.worker.task_runtime import load_module
from openkernel.nvrtc import ARCHS_VAR, COMPILED, KernelCompileError, KernelSourceError, RawKernel
from openkernel.targets import gencode_flags, same_arch, torch_arch_list

CANDIDATE_MODULE = "openkernel_candidate"
DEFAULT_TARGET = "sm_90"  # the CPU check's target when none is configured: the H200's


class NotRunnable(Exception):
    """Raised by the load_inline stand-in once the CUDA sources were compiled (or failed)."""

    def __init__(self, ok: bool, log: str):
        super().__init__(log)
        self.ok = ok
        self.log = log


def import_candidate(path: Path) -> ModuleType:
    """Import the candidate file; it must define ``ModelNew``."""
    module = load_module(path, CANDIDATE_MODULE)
    if not hasattr(module, "ModelNew"):
        raise AttributeError("the candidate defines no ModelNew class")
    return module


def _as_text(sources: Any) -> str:
    if sources is None:
        return ""
    if isinstance(sources, (list, tuple)):
        return "\n".join(str(s) for s in sources)
    return str(sources)


def nvcc_compile(cuda_source: str, workdir: Path, archs: list[str] | str,
                 timeout_s: float) -> tuple[bool, str]:
    """Compile CUDA source for every target with torch's include paths; returns (ok, log)."""
    nvcc = shutil.which("nvcc") or (shutil.which("/usr/local/cuda/bin/nvcc"))
    if nvcc is None:
        return False, "nvcc not found: the CUDA source could not be compiled on this machine"
    from torch.utils.cpp_extension import include_paths

    targets = cuda_targets([archs] if isinstance(archs, str) else archs)
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "candidate_kernel.cu"
    src.write_text(cuda_source, encoding="utf-8")
    # -v prints each step nvcc runs, so a failure can be pinned on the target that failed.
    cmd = [nvcc, "-fatbin", "-v", "-std=c++17", *gencode_flags(targets), "-w",
           "-DTORCH_EXTENSION_NAME=candidate", f"-I{sysconfig.get_paths()['include']}",
           *[f"-I{p}" for p in include_paths()], *_cpu_torch_shim(workdir),
           "-o", str(workdir / "candidate_kernel.fatbin"), str(src)]
    what = f"nvcc -fatbin for {', '.join(targets)}"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    except subprocess.TimeoutExpired:
        return False, f"{what} did not finish within {timeout_s:.0f} s"
    output = proc.stdout + proc.stderr
    log = "\n".join(line for line in output.splitlines() if not line.startswith("#$")).strip()
    if proc.returncode != 0:
        failed = _failing_target(output, targets)
        where = f" (the {failed} build failed)" if failed and len(targets) > 1 else ""
        return False, f"{what} failed{where}, exit {proc.returncode}:\n{log[-4000:]}"
    return True, f"{what}: compiled" + (f"\n{log[-2000:]}" if log else "")


# The one generated header a CPU build of torch leaves out of c10/cuda (CUDA builds ship it):
# without it no source that includes <c10/cuda/...> could be checked on a CPU machine.
_CUDA_CMAKE_MACROS = """#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
"""


def _cpu_torch_shim(workdir: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    rel = Path("c10/cuda/impl/cuda_cmake_macros.h")
    if any((Path(p) / rel).exists() for p in include_paths()):
        return []
    shim = workdir / "torch_shim"
    (shim / rel).parent.mkdir(parents=True, exist_ok=True)
    (shim / rel).write_text(_CUDA_CMAKE_MACROS, encoding="utf-8")
    return [f"-I{shim}"]


def cuda_targets(archs: list[str]) -> list[str]:
    """The sm_NN targets to compile for (the default when none is named, e.g. on a CPU run)."""
    return [a for a in dict.fromkeys(archs) if a and a.startswith("sm_")] or [DEFAULT_TARGET]


_STEP_ARCH = re.compile(r"-arch[= ](?:compute|sm)_(\w+)|-D__CUDA_ARCH__=(\d+)")


def _failing_target(verbose_output: str, targets: list[str]) -> str | None:
    """The target whose step was running when nvcc printed its first error (from ``-v``)."""
    current = None
    for line in verbose_output.splitlines():
        if line.startswith("#$"):
            m = _STEP_ARCH.search(line)
            if m:  # -D__CUDA_ARCH__=900 starts the steps of sm_90 (or of sm_90a)
                step = "sm_" + (m[1] or m[2][:-1])
                current = next((t for t in targets if t == step), None) or next(
                    (t for t in targets if same_arch(t, step)), current)
        elif "error" in line.lower():
            return current
    return None


def set_cuda_targets(job: Job) -> None:
    """Have cpp_extension build a CUDA C++ candidate for every target (a fat binary), with
    lean headers in its .cu (:func:`lean_load_inline`).

    Set per job, inside the worker, before the candidate's ``load_inline`` runs; the profile
    run of a candidate sets the same list, so its build cache is reused, not rebuilt. Without
    configured targets the list is the judging GPU's own architecture, named exactly rather
    than left to cpp_extension's device query.
    """
    targets = cuda_targets(job.cuda_targets or [job.gpu_arch or ""]) if (
        job.cuda_targets or (job.gpu_arch or "").startswith("sm_")) else []
    arch_list = torch_arch_list(targets)
    if arch_list:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    if targets:  # NVRTC kernels compile for the same targets (openkernel.nvrtc)
        os.environ[ARCHS_VAR] = ",".join(targets)
    import torch.utils.cpp_extension as cpp

    if not getattr(cpp.load_inline, "_openkernel_lean", False):
        cpp.load_inline = lean_load_inline(cpp.load_inline)


# What in a .cu needs the torch headers load_inline puts in front of it by default.
_NEEDS_TORCH = re.compile(r"\b(?:torch|at|c10)::|#\s*include\s*[<\"](?:torch|ATen|c10)/|"
                          r"\b(?:TORCH|AT|C10)_[A-Z_]+\b")


def lean_load_inline(load_inline):
    """``load_inline`` that gives each file only the headers it needs.

    By default ``load_inline`` puts ``#include <torch/types.h>`` in front of ``cuda_sources``,
    so nvcc parses the ATen headers twice (device and host passes) for every candidate, even
    one whose .cu includes CUDA's own headers only: on the 2-core development machine with
    nvcc 13.0 the exact command cpp_extension runs took 92 CPU seconds with it and 3.1 without
    (``benchmarks/cuda_build_phases.py``; the H200's ~30 s .cu step). A .cu that names nothing
    of torch is built with ``no_implicit_headers`` and the two CUDA headers the default adds.
    main.cpp gets the lean bindings header (``binding.py``) when the cpp_sources only declare
    functions, ``<torch/extension.h>`` (precompiled, ``pch.py``) otherwise. Should that build
    fail, the sources are built again as written, so a source this misjudges costs a failed
    build, never a wrong verdict.
    """
    def lean(name: str = "", cpp_sources: Any = None, cuda_sources: Any = None,
             *args: Any, **kwargs: Any) -> Any:
        cuda = _as_text(cuda_sources)
        if args or kwargs.get("no_implicit_headers") or not cuda.strip():
            return load_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
        lean_cu = not _NEEDS_TORCH.search(cuda)
        declared = binding.declarations_only(_as_text(cpp_sources))
        if not lean_cu and declared is None:
            return load_inline(name, cpp_sources, cuda_sources, **kwargs)
        cpp_list = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or [])
        main = ([binding.HEADER, declared] if declared is not None
                else ["#include <torch/extension.h>", *cpp_list])
        cu_headers = "#include <cuda.h>\n#include <cuda_runtime.h>"
        try:
            return load_inline(name, main, [cu_headers if lean_cu else
                                            "#include <torch/types.h>\n" + cu_headers, cuda],
                               no_implicit_headers=True, **kwargs)
        except Exception:  # built again as written: its own error is the one reported
            return load_inline(name, cpp_sources, cuda_sources, **kwargs)

    lean._openkernel_lean = True
    lean.__wrapped__ = load_inline
    return lean


def static_cuda_sources(code: str) -> str:
    """String constants of the candidate that hold a ``__global__`` kernel."""
    try:
        tree = syntax.parse(code)
    except SyntaxError:
        return ""
    return "\n".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str) and "__global__" in n.value)


def check_cuda_sources(path: Path, scratch: Path, archs: list[str],
                       timeout_s: float) -> tuple[bool, str, ModuleType | None]:
    """Import a CUDA candidate with ``load_inline`` replaced; returns (compiled, log, module).

    ``module`` is the imported candidate when its kernels are NVRTC kernels
    (``openkernel.nvrtc``): they compiled for real at its import, and its launches can still be
    checked without a GPU; None otherwise.
    """
    import torch.utils.cpp_extension as cpp

    def fake_load_inline(name: str = "", cpp_sources: Any = None, cuda_sources: Any = None,
                         *args: Any, **kwargs: Any) -> Any:
        cuda = _as_text(cuda_sources)
        if not cuda.strip():
            raise NotRunnable(False, f"load_inline({name!r}) was given no cuda_sources")
        ok, log = nvcc_compile(cuda, scratch / "nvcc", archs, timeout_s)
        raise NotRunnable(ok, log)

    original = cpp.load_inline
    cpp.load_inline = fake_load_inline
    os.environ[ARCHS_VAR] = ",".join(cuda_targets(archs))
    before = len(COMPILED)
    try:
        module = import_candidate(path)
    except NotRunnable as stop:
        return stop.ok, stop.log, None
    except (KernelCompileError, KernelSourceError) as err:
        return False, str(err), None
    finally:
        cpp.load_inline = original
    kernels = COMPILED[before:]
    if kernels:
        return True, "\n".join(
            f"NVRTC: {k.name} compiled for {', '.join(k.cubins)} in {k.compile_s:.2f} s"
            for k in kernels), module
    source = static_cuda_sources(path.read_text(encoding="utf-8"))
    if not source:
        return False, "no CUDA source found: load_inline was not called at import and no string holds a __global__ kernel", None
    return (*nvcc_compile(source, scratch / "nvcc", archs, timeout_s), None)


# What Triton's interpreter wraps when a kernel's code is not Triton a compiler would take
# (its language's own checks raise these); a fault while the kernel runs is another error.
_REJECTED_BY_THE_LANGUAGE = (ValueError, TypeError, NameError, AttributeError, AssertionError,
                             NotImplementedError, SyntaxError)


def is_compile_error(err: BaseException) -> bool:
    """Whether an exception from the first call is a kernel compilation failure: Triton's
    compiler's own errors, and under the interpreter (the CPU) its ``InterpreterError`` around
    what the language rejected (a non-constexpr ``tl.arange`` bound: the compiler's error on
    a GPU, stored as incorrect here before)."""
    names = {c.__name__ for c in type(err).__mro__}
    if names & {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"} or (
            type(err).__module__.startswith("triton.compiler")):
        return True
    cause = err.__cause__
    return "InterpreterError" in names and cause is not None and (
        is_compile_error(cause) or isinstance(cause, _REJECTED_BY_THE_LANGUAGE))


def python_executable() -> str:
    return sys.executable or os.environ.get("PYTHON", "python3")


class CompileNotifier:
    """Tells the engine when a kernel compilation starts and ends, wherever it happens.

    Triton compiles at a kernel's first launch (and again for a new shape), a CUDA C++
    candidate may call ``load_inline`` from its forward: that time is build time, so the
    engine applies ``build_timeout_s`` while it lasts and ``test_timeout_s`` otherwise (a
    forward that never returns is then a test timeout, not a build timeout). Wraps
    ``triton.compiler.compile`` (what a JIT function's binder calls) and cpp_extension's
    ``load_inline`` and ``load``, and NVRTC kernels' compilation.
    """

    def __init__(self, ch):
        self.ch = ch
        self.depth = 0  # compilations under way, in any thread (a sweep's first calls)
        self.lock = threading.Lock()
        self.count = 0  # compilations started (Triton's cache hits included)
        self.busy_s = 0.0  # seconds with at least one compilation under way
        self._since = 0.0

    def report(self) -> dict:
        """How much of the worker's time went to compiling: where a first call's seconds go."""
        return {"compilations": self.count, "compiling_s": round(self.busy_s, 3)}

    def _wrap(self, fn):
        notifier = self

        def wrapped(*args, **kwargs):
            with notifier.lock:
                notifier.depth += 1
                notifier.count += 1
                if notifier.depth == 1:
                    notifier._since = time.perf_counter()
                    notifier.ch.send(compiling=True)
            try:
                return fn(*args, **kwargs)
            finally:
                with notifier.lock:
                    notifier.depth -= 1
                    if notifier.depth == 0:
                        notifier.busy_s += time.perf_counter() - notifier._since
                        notifier.ch.send(compiling=False)

        wrapped.__wrapped__ = fn
        return wrapped

    def install(self) -> None:
        try:
            import triton.compiler as tc

            tc.compile = self._wrap(tc.compile)
        except Exception:  # no Triton (CUDA C++ only): nothing to wrap
            pass
        import torch.utils.cpp_extension as cpp

        cpp.load_inline = self._wrap(cpp.load_inline)
        cpp.load = self._wrap(cpp.load)
        RawKernel._compile = self._wrap(RawKernel._compile)  # an NVRTC kernel made in forward
        return self
