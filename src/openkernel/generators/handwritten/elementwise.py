"""Elementwise activation: one read and one write per element, any shape, any length.

Triton: each program handles UNROLL consecutive blocks of BLOCK elements (more bytes in flight
per program without bigger register tiles); with PERSISTENT > 0 the grid is PERSISTENT programs
per SM (the CPU counts as one), each looping over tiles (fewer launches of programs, and
num_stages pipelines the loop); EVICT is the loads' and stores' L2 eviction policy
("evict_first": streamed data should not push out what others reuse). CUDA C++: a grid-stride
loop where each thread handles ELEMS elements THREADS apart (coalesced), dispatched over float,
double, half and bfloat16.
"""

from __future__ import annotations

import hashlib

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
from openkernel.generators.refparse import parse_reference
from openkernel.records import TaskProbe
from openkernel.task import Task

_TRITON_KERNEL = '''
@triton.jit
def _act_kernel(x_ptr, y_ptr, n_elements, {params}BLOCK: tl.constexpr, UNROLL: tl.constexpr,
                EVICT: tl.constexpr):
    tiles = tl.cdiv(n_elements, BLOCK * UNROLL)
    # A program per tile, or (persistent) fewer programs looping over the tiles.
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        # 64-bit offsets: tensors past 2**31 elements must not wrap.
        base = tl.cast(tile, tl.int64) * (BLOCK * UNROLL)
        for u in tl.static_range(UNROLL):
            offs = base + u * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n_elements  # the ragged tail of the last tile
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            y = {expr}
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy=EVICT)


def _programs(x, tiles):
    if not PERSISTENT:
        return tiles
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
    return max(1, min(tiles, PERSISTENT * sms))


class ModelNew(nn.Module):
    """{label} in one Triton kernel (computes in float32, stores the input dtype)."""

{init}
    def forward(self, {arg}):
        x = {arg}.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (_programs(x, triton.cdiv(n, BLOCK * UNROLL)),)
        _act_kernel[grid](x, y, n, {call_args}BLOCK=BLOCK, UNROLL=UNROLL, EVICT=EVICT,
                          num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y
'''

# The kernel, shared by both CUDA forms. The NVRTC form (BUILD=nvrtc) compiles it alone in
# well under a second and launches it through openkernel.nvrtc; the extension form
# (BUILD=extension) builds it with load_inline.
_CUDA_KERNEL = r'''
__device__ __forceinline__ float ok_load(float v) { return v; }
__device__ __forceinline__ float ok_load(double v) { return (float)v; }
__device__ __forceinline__ float ok_load(__half v) { return __half2float(v); }
__device__ __forceinline__ float ok_load(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T ok_store(float v) { return (T)v; }
template <> __device__ __forceinline__ __half ok_store<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 ok_store<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

template <typename scalar_t>
__global__ void act_kernel(const scalar_t* __restrict__ xp, scalar_t* __restrict__ yp,
                           long long n{kparams}) {
    const long long tile = (long long)OK_THREADS * OK_ELEMS;
    for (long long start = (long long)blockIdx.x * tile; start < n; start += (long long)gridDim.x * tile) {
        #pragma unroll
        for (int k = 0; k < OK_ELEMS; ++k) {
            const long long i = start + (long long)k * OK_THREADS + threadIdx.x;
            if (i < n) {
                const float x = ok_load(xp[i]);
                yp[i] = ok_store<scalar_t>({expr});
            }
        }
    }
}
'''

# The extension form's .cu holds the kernel and a launcher on raw pointers, with CUDA's own
# headers: ATen headers in a .cu cost every build ~12-30 s of host parsing (measured: 11.3 s vs
# 0.75 s of nvcc here, 30 s on a loaded H200), which is why load_inline is told
# no_implicit_headers (by default it puts <torch/types.h> in front of the .cu). The tensor side
# (checks, output, stream) is Python's, as in the NVRTC form: the bindings file then only
# declares the launcher, from the precompiled torch/csrc/utils/pybind.h (evaluation/worker/
# pch.py), 4.6 s of GCC against 14.4 s for a tensor side in C++ from <torch/extension.h>
# (2-core machine, benchmarks/bindings_build.py).
_CUDA_SRC = r'''
#include <cstdint>
#include <stdexcept>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
''' + _CUDA_KERNEL + r'''
// dtype: 0 float32, 1 float16, 2 bfloat16, 3 float64 (the Python side maps torch's types).
// Pointers and the stream come as integers: the bindings need no torch headers.
void act_launch(int64_t x, int64_t y, int64_t n, int64_t dtype, int64_t stream_handle{kparams}) {
    const int64_t tiles = (n + (int64_t)OK_THREADS * OK_ELEMS - 1) / ((int64_t)OK_THREADS * OK_ELEMS);
    const int blocks = (int)(tiles < (1 << 22) ? tiles : (1 << 22));
    cudaStream_t stream = (cudaStream_t)stream_handle;
    switch (dtype) {
    case 0: act_kernel<float><<<blocks, OK_THREADS, 0, stream>>>((const float*)x, (float*)y, n{kargs}); break;
    case 1: act_kernel<__half><<<blocks, OK_THREADS, 0, stream>>>((const __half*)x, (__half*)y, n{kargs}); break;
    case 2: act_kernel<__nv_bfloat16><<<blocks, OK_THREADS, 0, stream>>>(
                (const __nv_bfloat16*)x, (__nv_bfloat16*)y, n{kargs}); break;
    default: act_kernel<double><<<blocks, OK_THREADS, 0, stream>>>((const double*)x, (double*)y, n{kargs});
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
}
'''

_CPP_SRC = r'''
#include <torch/csrc/utils/pybind.h>
#include <cstdint>
void act_launch(int64_t x, int64_t y, int64_t n, int64_t dtype, int64_t stream_handle{kparams});
'''

_CUDA_MODULE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{constants}
THREADS = {THREADS}
ELEMS = {ELEMS}

_CUDA_SRC = r"""
#define OK_THREADS {THREADS}
#define OK_ELEMS {ELEMS}
{src}"""

_CPP_SRC = r"""{cpp}"""

_ext = load_inline(
    name="{ext_name}",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["act_launch"],
    with_pytorch_error_handling=False,
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
    verbose=False,
)
_DTYPES = {{torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}}


class ModelNew(nn.Module):
    """{label} in one CUDA C++ kernel (computes in float, stores the input dtype)."""

{init}
    def forward(self, {arg}):
        x = {arg}.contiguous()
        if not x.is_cuda or x.dtype not in _DTYPES:
            raise TypeError(f"a CUDA tensor of float32, float16, bfloat16 or float64 expected, "
                            f"got {{x.dtype}} on {{x.device}}")
        y = torch.empty_like(x)
        n = x.numel()
        if n:
            _ext.act_launch(x.data_ptr(), y.data_ptr(), n, _DTYPES[x.dtype],
                            torch.cuda.current_stream(x.device).cuda_stream{call_args})
        return y
'''


_NVRTC_MODULE = '''import functools

import torch
import torch.nn as nn
from openkernel.nvrtc import RawKernel
{constants}
THREADS = {THREADS}
ELEMS = {ELEMS}

_SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
{src}"""
_CTYPES = {{torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16",
           torch.float64: "double"}}


@functools.cache
def _kernel(dtype):
    return RawKernel(_SRC, f"act_kernel<{{_CTYPES[dtype]}}>",
                     defines={{"OK_THREADS": THREADS, "OK_ELEMS": ELEMS}})


for _dtype in ({dtypes}):  # compiled at import: the build
    _kernel(_dtype)


class ModelNew(nn.Module):
    """{label} in one CUDA kernel compiled with NVRTC (computes in float, stores the input dtype)."""

{init}
    def forward(self, {arg}):
        x = {arg}.contiguous()
        if x.dtype not in _CTYPES:
            raise TypeError(f"unsupported dtype {{x.dtype}}")
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        tiles = -(-n // (THREADS * ELEMS))
        _kernel(x.dtype)(grid=min(tiles, 1 << 22), block=THREADS, args=(x, y, n{call_args}))
        return y
'''


class Elementwise(Family):
    name = "elementwise"
    summary = "one activation applied elementwise (masked tail, 64-bit offsets)"
    backends = ("triton", "cuda")
    tunables = (
        Tunable("BLOCK", (256, 512, 1024, 2048, 4096, 8192), (1024, 2048, 4096, 8192, 16384),
                "elements per block (a power of two)"),
        Tunable("UNROLL", (1, 2, 4), None, "consecutive blocks per tile"),
        Tunable("PERSISTENT", (0, 1, 4), None,
                "0: a program per tile; else programs per SM, each looping over tiles"),
        # Under the interpreter the policy changes no timing, but it stays a choice there: the
        # CPU's kernels are the GPU's, and the default job needs distinct candidates to run on.
        Tunable("EVICT", ("normal", "evict_first"), None,
                "L2 eviction policy of the loads and stores (evict_first: streamed data)"),
        Tunable("num_warps", (2, 4, 8, 16), (4,), "warps per program"),
        Tunable("num_stages", (1, 2, 3), (1,), "software pipelining of the persistent loop"),
    )
    cuda_tunables = (
        Tunable("THREADS", (128, 256, 512, 1024), None, "threads per block"),
        Tunable("ELEMS", (1, 2, 4, 8), None, "elements per thread (THREADS apart)"),
        Tunable("BUILD", ("nvrtc", "extension"), None, "NVRTC and a raw launch (builds in under "
                "a second), or a cpp_extension (nvcc, host compile, link)"),
    )
    starts = ({"BLOCK": 1024, "UNROLL": 1, "PERSISTENT": 0, "EVICT": "normal", "num_warps": 4,
               "num_stages": 1},
              {"BLOCK": 2048, "UNROLL": 2, "PERSISTENT": 0, "EVICT": "evict_first",
               "num_warps": 8, "num_stages": 1},
              {"BLOCK": 4096, "UNROLL": 1, "PERSISTENT": 4, "EVICT": "normal", "num_warps": 8,
               "num_stages": 2},
              {"BLOCK": 512, "UNROLL": 4, "PERSISTENT": 1, "EVICT": "evict_first",
               "num_warps": 4, "num_stages": 3})
    cpu_starts = ({"BLOCK": 4096, "UNROLL": 1, "PERSISTENT": 0, "EVICT": "normal"},
                  {"BLOCK": 2048, "UNROLL": 2, "PERSISTENT": 4, "EVICT": "normal"},
                  {"BLOCK": 8192, "UNROLL": 1, "PERSISTENT": 1, "EVICT": "evict_first"},
                  {"BLOCK": 1024, "UNROLL": 4, "PERSISTENT": 0, "EVICT": "evict_first"})
    cuda_starts = tuple({**p, "BUILD": b} for b in ("nvrtc", "extension") for p in (
        {"THREADS": 256, "ELEMS": 4}, {"THREADS": 512, "ELEMS": 2},
        {"THREADS": 128, "ELEMS": 8}, {"THREADS": 1024, "ELEMS": 1}))

    def tunables_for(self, backend: str) -> tuple[Tunable, ...]:
        return self.cuda_tunables if backend == "cuda" else self.tunables

    def neighbours(self, params, interpreter, backend):
        # A sweep's variants share one build form: the same kernel built twice says nothing
        # about the kernel, and one extension build costs more than a whole NVRTC sweep.
        return [p for p in super().neighbours(params, interpreter, backend)
                if p.get("BUILD") == params.get("BUILD")]

    def start(self, rng, interpreter, index, backend):
        if backend == "cuda" and index < len(self.cuda_starts):
            return dict(self.cuda_starts[index])
        return super().start(rng, interpreter, index, backend)

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        ops = op_bases(probe)
        if len(ops) != 1 or ops[0] not in ATEN_NAMES:
            return None
        ref = parse_reference(task.reference_code)
        if ref is None or len(ref.forward_args) != 1 or len(probe.input_shapes) != 1:
            return "the elementwise family takes exactly one tensor input"
        dtypes = {dtype_name(d) for d in probe.input_dtypes}
        if not dtypes <= FLOAT_DTYPES:
            return f"the elementwise family handles floating inputs only (got {sorted(dtypes)})"
        act = bind(ops[0], ref)
        if isinstance(act, str):
            return act
        why = f"the reference runs one elementwise op (aten.{ops[0]}) on one tensor"
        return Match(self, why, {"act": act, "ref": ref, "label": f"{act.name} elementwise",
                                 "dtypes": sorted(dtypes)})

    def render(self, match: Match, params: dict, backend: str) -> str:
        act, ref = match.spec["act"], match.spec["ref"]
        arg = ref.forward_args[0]
        if backend == "cuda":
            return self._render_cuda(match, params)
        consts = "".join(f"{k} = {params[k]!r}\n" for k in ("BLOCK", "UNROLL", "PERSISTENT"))
        evict = "" if params["EVICT"] == "normal" else params["EVICT"]  # "": Triton's default
        consts += f"EVICT = {evict!r}\n"
        consts += f"NUM_WARPS = {params['num_warps']}\nNUM_STAGES = {params['num_stages']}\n"
        body = _TRITON_KERNEL.format(
            params=act.triton_params(), expr=act.act.triton, label=act.describe(),
            init=init_method(ref, act), arg=arg, call_args=act_args(act))
        return module_preamble(ref, TRITON_HEADER) + "\n" + consts + body

    def _render_cuda(self, match: Match, params: dict) -> str:
        act, ref = match.spec["act"], match.spec["ref"]
        names = act.act_param_names()
        kparams = "".join(f", float {n}" for n in names)
        kernel = _CUDA_KERNEL.replace("{kparams}", kparams).replace("{expr}", act.act.cuda)
        common = dict(constants=("\n" + ref.constants + "\n") if ref.constants else "",
                      THREADS=params["THREADS"], ELEMS=params["ELEMS"], label=act.describe(),
                      init=init_method(ref, act), arg=ref.forward_args[0])
        if params.get("BUILD", "extension") == "nvrtc":
            dtypes = "".join(f"torch.{d}, " for d in match.spec.get("dtypes", ["float32"]))
            return _NVRTC_MODULE.format(src=kernel, dtypes=dtypes, **common, call_args="".join(
                f", float(self.{n})" for n in names))
        src = (_CUDA_SRC.replace("{kparams}", kparams)
               .replace("{kargs}", "".join(f", {n}" for n in names))
               .replace("{expr}", act.act.cuda))
        cpp = _CPP_SRC.replace("{kparams}", kparams)
        digest = hashlib.sha1(f"{src}{cpp}{params}".encode()).hexdigest()[:10]
        return _CUDA_MODULE.format(
            src=src, cpp=cpp, ext_name=f"ok_{act.name}_{digest}",
            call_args="".join(f", float(self.{n})" for n in names), **common)
