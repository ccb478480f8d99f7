"""Fixed prompt text: language rules per backend and optimisation strategies per op class.

Op classes come from the probe's aten ops: matmul-like ops make a task compute bound, row
reductions need a reduction strategy, everything else is elementwise and memory bound. The
strategies are short on purpose: the model knows the techniques; it needs to know which apply.
"""

from __future__ import annotations

from openkernel.records import TaskProbe

MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution",
              "_convolution", "conv1d", "conv2d", "conv3d", "einsum", "_scaled_mm"}
REDUCTION_OPS = {"_softmax", "_log_softmax", "native_layer_norm", "native_group_norm",
                 "native_batch_norm", "_native_batch_norm_legit",
                 "_native_batch_norm_legit_no_training", "sum", "mean", "amax", "amin", "max",
                 "min", "var", "std", "var_mean", "norm", "linalg_vector_norm", "cumsum",
                 "argmax", "argmin", "logsumexp", "prod", "rms_norm", "_fused_rms_norm"}

LANGUAGE = {
    "triton": """Write the kernel in Triton (`import triton`, `import triton.language as tl`).
- Define `class ModelNew(nn.Module)` with the same `__init__` arguments and `forward` signature as `Model`; it must return what `Model.forward` returns (same shapes and dtypes).
- The computation happens in your `@triton.jit` kernels, launched from `forward` as `kernel[grid](...)`. In `forward`, torch is only for allocating outputs (`torch.empty*`), shapes and strides, `.contiguous()` and views: no torch compute ops (`torch.matmul`, `F.*`, `torch.softmax`, ...) and no fallback to the reference.
- Mask every load and store: inputs of any size must work, not only the benchmark shape (ragged tails, sizes that are not multiples of the block). Use 64-bit offsets where an index can exceed 2**31.
- Load, compute in float32, store in the output's dtype; accumulate matmuls in float32.
- Block sizes are `tl.constexpr` powers of two; pass `num_warps` / `num_stages` at launch. If you use `@triton.autotune`, keep the config list short.
- Keep parameters and buffers named and initialised as in `Model`, so the same state dict loads.
- Imports: torch, triton, math and the standard library only. No files, network, subprocesses, or tricks with timing or caching outputs: the evaluation checks for them.""",
    "cuda": """Write the kernel in CUDA C++, in one of two forms.
- Preferred, a raw kernel (builds in well under a second): the kernel's source in a string and `from openkernel.nvrtc import RawKernel`; at module level `k = RawKernel(SRC, "kernel_name", defines={"BLOCK": 256})` compiles it with NVRTC (a template kernel is named by its instance, e.g. `"act<float>"`). In `forward`, allocate outputs with torch and launch with a launch description: `k(grid=(blocks,), block=(threads,), args=(x, y, n), shared_mem=0)`, one argument per kernel parameter in order: a tensor for each pointer (its dtype must match the pointer type: `float*` float32, `__half*` float16, `__nv_bfloat16*` bfloat16; `float4*` needs a 16-byte aligned tensor), a Python number for each scalar (`long long` for sizes and indices that may exceed 2**31). It launches on PyTorch's current stream; the source may include CUDA headers (`<cuda_fp16.h>`, `<cuda_bf16.h>`) but no torch or C++ standard library headers. Every launch is checked against the kernel's parameters and CUDA's limits.
- Or a `torch.utils.cpp_extension.load_inline` extension, when you need what a raw kernel cannot do (host-side C++ logic, libraries such as cuBLAS, several kernels orchestrated in C++): a `cuda_sources` string and a `cpp_sources` string with the functions Python calls, and `load_inline(name=<unique name>, cpp_sources=..., cuda_sources=..., functions=[...], extra_cuda_cflags=["-O3"], no_implicit_headers=True)`. Split the build for speed: `cuda_sources` holds the `__global__` kernels and a plain launcher taking raw pointers, sizes and a `cudaStream_t`, with CUDA's own headers only (`<cuda_runtime.h>`, `<cuda_fp16.h>`, `<cuda_bf16.h>`, `<cstdint>`); ATen or torch headers there cost every build 12-30 s. `cpp_sources` starts with `#include <torch/csrc/utils/pybind.h>` and `#include <torch/csrc/Exceptions.h>` (precompiled: the bindings build in half the time `<torch/extension.h>` takes), uses `at::Tensor`, includes the per-operator header of each ATen function it calls (`<ATen/ops/empty_like.h>` for `at::empty_like`, `<ATen/ops/empty.h>`, ...), declares the launcher and may include `<c10/cuda/CUDAStream.h>`, `<c10/cuda/CUDAGuard.h>` and `<c10/cuda/CUDAException.h>`; launch on `c10::cuda::getCurrentCUDAStream()`, then `C10_CUDA_KERNEL_LAUNCH_CHECK()`, with the device guarded by `c10::cuda::CUDAGuard`.
- Define `class ModelNew(nn.Module)` with the same `__init__` arguments and `forward` signature as `Model`; `forward` launches your kernels and returns what `Model.forward` returns (same shapes and dtypes).
- Bounds-check every index so any input size works; use 64-bit indexing; make inputs contiguous or honour their strides.
- Handle each input dtype (a kernel per element type: template instances, or typed launchers) or reject the ones you do not support with a clear error; accumulate in float.
- No ATen compute (`at::matmul`, `torch::softmax`, `torch.*` math in `forward`, ...) in place of your kernel and no fallback to the reference. No files, network, subprocesses, or tricks with timing or caching outputs: the evaluation checks for them.""",
}

STRATEGIES = {
    "elementwise": [
        "Memory bound: one read and one write per element is the floor. Fuse every elementwise op into a single kernel and never write intermediates.",
        "Give each program plenty of work (blocks of 1024-8192 elements, or several blocks per program) and let each thread move 16 bytes at a time (vectorised loads).",
        "Compute in float32 registers and store the input dtype; avoid extra copies (`.contiguous()` only when the input is not).",
        "Compare the runtime with bytes moved / memory bandwidth: when close, stop tuning the kernel and remove launches instead.",
    ],
    "reduction": [
        "One program per row (several rows per program when rows are short); keep the row in registers when it fits one block.",
        "For long rows loop over the row with an online update (running max and rescaled sum) so the input is read at most twice.",
        "Reduce in float32 and subtract the maximum before exponentiating.",
        "Fuse the ops before and after the reduction into the same pass; scale num_warps with the row length.",
    ],
    "matmul": [
        "Compute bound: tile for tensor cores (BLOCK_M/BLOCK_N 64-256, BLOCK_K 32-64) with float16/bfloat16 inputs and float32 accumulation.",
        "Software-pipeline the K loop (num_stages 3-5) and order tiles in groups (GROUP_M) so neighbouring programs reuse A and B from L2.",
        "Fuse bias, activation and residual into the epilogue: never write the raw product to memory.",
        "Mask M, N and K edges; for small M*N with a large K consider split-K, for many small tiles a persistent kernel.",
    ],
}
_CUDA_EXTRA = {
    "elementwise": "In CUDA, use vector types (float4 / half2) for aligned bulk and a scalar tail loop.",
    "reduction": "In CUDA, reduce within a warp with __shfl_down_sync, then across warps in shared memory.",
    "matmul": "In CUDA, tile through shared memory with cp.async double buffering and use WMMA / mma.sync for tensor cores.",
}


def op_classes(probe: TaskProbe) -> list[str]:
    """The task's op classes, most demanding first: matmul, reduction, elementwise."""
    ops = {op.split(".")[1] if op.startswith("aten.") else op for op in probe.aten_ops}
    classes = []
    if ops & MATMUL_OPS:
        classes.append("matmul")
    if ops & REDUCTION_OPS:
        classes.append("reduction")
    if not classes:  # elementwise ops next to a matmul or reduction are its fused epilogue
        classes.append("elementwise")
    return classes


def strategies_for(probe: TaskProbe, backend: str) -> list[str]:
    """Strategy lines for this task's op classes and backend."""
    lines = []
    for cls in op_classes(probe):
        lines.extend(STRATEGIES[cls])
        if backend == "cuda":
            lines.append(_CUDA_EXTRA[cls])
    return lines
