"""Comparing outputs in one pass on the GPU (``eval_config.fused_comparison``).

``correctness._sums`` gets its figures from about 13 PyTorch passes over each block of an
output in float64 (copies included): ~170 bytes of memory traffic an element, 0.085 s for a
6 GiB float32 output on the H200, and a candidate's checks compare 8-11 such outputs (0.68 s
of a KernelBench candidate's own time, median, kb22-s26-fork). This kernel reads each element
of the two tensors once (8 bytes for float32) and does the same arithmetic per element in
float64: the difference, its absolute value and the bound ``|ref| * rtol + atol`` with
``__dsub_rn``/``__dmul_rn``/``__dadd_rn`` (never contracted into a fused multiply-add, so each
rounds as PyTorch's separate operations do), infinities masked as the masked pass masks them.
The elements outside the tolerance, the NaN and the infinity mismatches are therefore counted
exactly as there; only the sums of squares are added in another order (float64: a relative
difference of about 1e-12 at most, against tolerances of 1e-3 and up).

It is compiled with NVRTC (``cuda.core``) and loaded before the candidate is imported, and it
checks itself then against the PyTorch pass on crafted values (ties with the bound, infinities,
NaN); a kernel that does not agree, or cannot be made, is not used, and the evaluation says
why. The cubin is kept per machine (beside Triton's host-side modules), written only here,
before any candidate code runs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch

THREADS = 256  # the kernel's shared arrays are sized for it
MAX_BLOCKS = 1024  # a few per SM: enough to saturate the H200's memory
FIGURES = 8  # per block: NaN in out, infinity mismatches, NaN in ref, three sums, bad, max

SOURCE = r"""
#define FIGURES 8
#define THREADS 256
#define COMPARE_SUMS(NAME, T)                                                               \
extern "C" __global__ void NAME(const T* __restrict__ out, const T* __restrict__ ref,      \
                                double* __restrict__ partial, long long n, double atol,   \
                                double rtol) {                                            \
    double s[FIGURES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};                         \
    long long stride = (long long)gridDim.x * blockDim.x;                                 \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;           \
         i += stride) {                                                                   \
        double o = (double)out[i], r = (double)ref[i];                                    \
        bool oi = isinf(o), ri = isinf(r);                                                \
        s[0] += isnan(o) ? 1.0 : 0.0;                                                     \
        s[1] += ((oi || ri) && o != r) ? 1.0 : 0.0;                                       \
        s[2] += isnan(r) ? 1.0 : 0.0;                                                     \
        if (oi) o = 0.0;                                                                  \
        if (ri) r = 0.0;                                                                  \
        s[3] = __dadd_rn(s[3], __dmul_rn(o, o));                                          \
        s[4] = __dadd_rn(s[4], __dmul_rn(r, r));                                          \
        double d = fabs(__dsub_rn(o, r));                                                 \
        s[5] = __dadd_rn(s[5], __dmul_rn(d, d));                                          \
        double bound = __dadd_rn(__dmul_rn(fabs(r), rtol), atol);                         \
        s[6] += (d > bound) ? 1.0 : 0.0;                                                  \
        s[7] = fmax(s[7], d);                                                             \
    }                                                                                     \
    __shared__ double sh[FIGURES][THREADS];                                               \
    for (int k = 0; k < FIGURES; ++k) sh[k][threadIdx.x] = s[k];                          \
    __syncthreads();                                                                      \
    for (int w = THREADS / 2; w > 0; w >>= 1) {                                           \
        if (threadIdx.x < w) {                                                            \
            for (int k = 0; k < FIGURES - 1; ++k)                                         \
                sh[k][threadIdx.x] = __dadd_rn(sh[k][threadIdx.x], sh[k][threadIdx.x + w]); \
            sh[7][threadIdx.x] = fmax(sh[7][threadIdx.x], sh[7][threadIdx.x + w]);        \
        }                                                                                 \
        __syncthreads();                                                                  \
    }                                                                                     \
    if (threadIdx.x < FIGURES)                                                            \
        partial[(long long)blockIdx.x * FIGURES + threadIdx.x] = sh[threadIdx.x][0];      \
}
COMPARE_SUMS(compare_sums_float32, float)
COMPARE_SUMS(compare_sums_float64, double)
"""

NAMES = {torch.float32: "compare_sums_float32", torch.float64: "compare_sums_float64"}


def cubin(arch: str, cache_dir: str | None) -> bytes:
    """The kernels compiled for ``arch``, from the machine's cache when it holds them."""
    from openkernel.nvrtc.kernel import _cuda_core

    cc = _cuda_core()
    key = hashlib.sha256(f"{SOURCE}\0{arch}\0{cc.__name__}".encode()).hexdigest()[:20]
    path = Path(cache_dir, f"compare-{arch}-{key}.cubin") if cache_dir else None
    if path is not None and path.is_file():
        return path.read_bytes()
    program = cc.Program(SOURCE, "c++", cc.ProgramOptions(arch=arch, std="c++17"))
    data = bytes(program.compile("cubin").code)
    if path is not None:
        try:  # atomically: workers starting together may write it at once
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="tmp-compare-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            pass
    return data


class CompareKernel:
    """The loaded kernels of this worker's device, launched on PyTorch's current stream."""

    def __init__(self, device: torch.device, cache_dir: str | None = None):
        import numpy as np

        from openkernel.nvrtc.kernel import _cuda_core, arch_of, torch_stream

        cc = _cuda_core()
        index = device.index if device.index is not None else torch.cuda.current_device()
        cc.Device(index).set_current()  # the primary context: PyTorch's
        code = cc.ObjectCode.from_cubin(cubin(arch_of(index), cache_dir))
        self.kernels = {dtype: code.get_kernel(name) for dtype, name in NAMES.items()}
        self.index = index
        self.blocks = min(MAX_BLOCKS, 8 * torch.cuda.get_device_properties(index).multi_processor_count)
        # Captured now, before any candidate code: what a launch goes through
        self._cc, self._launch, self._config = cc, cc.launch, cc.LaunchConfig
        self._u64, self._i64, self._f64 = np.uint64, np.int64, np.float64
        self._streams: dict[int, object] = {}
        self._zeros, self._sum, self._stream_of = torch.zeros, torch.sum, torch_stream

    def fits(self, out: torch.Tensor, ref: torch.Tensor) -> bool:
        """Whether the kernel can compare these (else the PyTorch pass does)."""
        return (out.dtype in self.kernels and out.is_cuda and out.device.index == self.index
                and out.is_contiguous() and ref.is_contiguous() and out.numel() > 0)

    def figures(self, out: torch.Tensor, ref: torch.Tensor, atol: float,
                rtol: float) -> list[float]:
        """``[NaN in out, infinity mismatches, NaN in ref, |out|^2, |ref|^2, |out-ref|^2,
        elements outside atol + rtol * |ref|, max |out - ref|]`` (infinities masked)."""
        n = out.numel()
        blocks = max(1, min(self.blocks, -(-n // THREADS)))
        partial = self._zeros((blocks, FIGURES), dtype=torch.float64, device=out.device)
        config = self._config(grid=(blocks,), block=(THREADS,), shmem_size=0)
        self._launch(self._stream_of(self._cc, self.index, self._streams), config,
                     self.kernels[out.dtype],
                     self._u64(out.data_ptr()), self._u64(ref.data_ptr()),
                     self._u64(partial.data_ptr()), self._i64(n), self._f64(atol), self._f64(rtol))
        sums = self._sum(partial[:, :7], dim=0)
        peak = partial[:, 7].max()
        return [*sums.tolist(), peak.item()]


def self_check_values(dtype: torch.dtype, device,
                      finite: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Crafted outputs and references: values of every magnitude, ties with the float64 bound
    of rtol = atol = 1e-2 on both sides and a step past it; not ``finite``: infinities in the
    same and in different places and a NaN in the output too."""
    g = torch.Generator().manual_seed(0)
    ref = (torch.randn(70_000, generator=g, dtype=torch.float64) *
           torch.logspace(-30, 30, 70_000, dtype=torch.float64)).to(dtype)
    out = ref.clone()
    noise = torch.randn(70_000, generator=g, dtype=torch.float64) * 1e-2
    out += (noise * (ref.abs().to(torch.float64) * 1e-2 + 1e-2)).to(dtype)
    wide = ref.to(torch.float64)
    bound = wide.abs() * 1e-2 + 1e-2  # the float64 bound of rtol = atol = 1e-2
    k = torch.arange(0, 2000, 4)  # on the bound (as the dtype rounds it), a step past it, below
    on = (wide[k] + bound[k]).to(dtype)
    out[k], out[k + 1] = on, torch.nextafter(on, torch.full_like(on, float("inf")))
    out[k + 2] = (wide[k + 2] - bound[k + 2]).to(dtype)
    if not finite:
        ref[3000], out[3000] = float("inf"), float("inf")
        ref[3001], out[3001] = float("-inf"), float("inf")
        ref[3002], out[3002] = 1.0, float("inf")
        out[3003] = float("nan")
    return out.to(device), ref.to(device)
