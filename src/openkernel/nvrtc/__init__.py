"""Raw CUDA kernels without an extension build: NVRTC compiles, ``cuda.core`` launches.

A CUDA candidate can be a kernel's source and a launch description instead of a
``torch.utils.cpp_extension`` build (nvcc, a host compiler and a link: seconds to a minute)::

    from openkernel.nvrtc import RawKernel

    SRC = r'''
    extern "C" __global__ void scale(const float* x, float* y, float a, long long n) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }'''
    _scale = RawKernel(SRC, "scale")          # compiled here, in well under a second

    class ModelNew(nn.Module):
        def forward(self, x):
            x = x.contiguous()
            y = torch.empty_like(x)
            n = x.numel()
            _scale(grid=((n + 255) // 256,), block=(256,), args=(x, y, 2.0, n))
            return y

Each launch is checked against the kernel's parameter list and CUDA's limits first
(``launch.py``, ``signature.py``). Why cuda-python and not pycuda: README, "Raw CUDA kernels".
"""

from openkernel.nvrtc.kernel import COMPILED, ARCHS_VAR, KernelCompileError, RawKernel
from openkernel.nvrtc.launch import Launch, LaunchError, check_launch
from openkernel.nvrtc.signature import KernelSourceError, Param, parse_params

__all__ = ["ARCHS_VAR", "COMPILED", "KernelCompileError", "KernelSourceError", "Launch",
           "LaunchError", "Param", "RawKernel", "check_launch", "parse_params"]
