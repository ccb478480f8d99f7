"""A templated CUDA C++ GELU for examples/gelu (float32 8192 x 8192 on a GPU): 4 x 4 = 16
combinations of threads per block and items per thread, each a build of its own."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

TEMPLATE_PARAMS = {
    "THREADS": [128, 256, 512, 1024],
    "ITEMS": [1, 2, 4, 8],
}
THREADS = 256
ITEMS = 4

# The kernel and a raw-pointer launcher: CUDA headers only (quick to compile).
CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <cstdint>
#define THREADS %(THREADS)d
#define ITEMS %(ITEMS)d

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t base = ((int64_t)blockIdx.x * THREADS * ITEMS) + threadIdx.x;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int64_t i = base + (int64_t)k * THREADS;
        if (i < n) {
            const float v = x[i];
            y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        }
    }
}

void gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int64_t per_block = (int64_t)THREADS * ITEMS;
    const int64_t blocks = (n + per_block - 1) / per_block;
    if (blocks > 0) gelu_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(x, y, n);
}
""" % {"THREADS": THREADS, "ITEMS": ITEMS}

# The tensor side: torch headers, in cpp_sources.
CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
void gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "float32 CUDA tensors only");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    gelu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name=f"gelu_t{THREADS}_i{ITEMS}", cpp_sources=CPP_SRC,
                   cuda_sources=CUDA_SRC, functions=["gelu_forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.gelu_forward(x)
