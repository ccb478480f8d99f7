"""A CUDA C++ GELU whose kernel declares a thread-block cluster (__cluster_dims__): legal for
sm_90, rejected by nvcc for sm_80 (clusters came with Hopper)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
__global__ void __cluster_dims__(1, 1, 1) gelu_kernel(const float* x, float* out, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f)); }
}
void gelu_launch(const float* x, float* out, long n, cudaStream_t stream) {
    gelu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, n);
}
"""
cpp_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
void gelu_launch(const float* x, float* out, long n, cudaStream_t stream);
torch::Tensor gelu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    gelu_launch(xc.data_ptr<float>(), out.data_ptr<float>(), xc.numel(),
                at::cuda::getCurrentCUDAStream());
    return out;
}
"""
ext = load_inline(name="cluster_gelu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["gelu"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.gelu(x)
