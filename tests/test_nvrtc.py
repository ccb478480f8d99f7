"""Raw CUDA kernels (openkernel.nvrtc): the launch description parsed and checked, one clear
message for each thing wrong; NVRTC compiling for real without a GPU; and on a GPU, launched
on the tensors' memory and seen by the integrity checks as a kernel launch."""

from __future__ import annotations

import pytest
import torch

from openkernel.nvrtc import (
    KernelCompileError,
    KernelSourceError,
    LaunchError,
    RawKernel,
    check_launch,
    parse_params,
)

pytest.importorskip("cuda.core")

SRC = r"""
#include <cuda_fp16.h>
// a comment with a decoy: __global__ void scale(int nothing)
extern "C" __global__ void scale(const float* __restrict__ x, float* y, float a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
template <typename T, int N>
__global__ void __launch_bounds__(256) copy4(const T* __restrict__ x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
extern "C" __global__ void vec(const float4* x, float4* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def test_parameters_are_read_from_the_source():
    assert [p.describe() for p in parse_params(SRC, "scale")] == [
        "float* x", "float* y", "float a", "long long n"]
    assert [p.describe() for p in parse_params(SRC, "copy4<__half, 4>")] == [
        "__half* x", "__half* y", "int n"]
    x, _, n = parse_params(SRC, "vec")
    assert (x.ctype, x.pointer, x.align, n.ctype) == ("float", True, 16, "unsigned int")


@pytest.mark.parametrize("name, source, message", [
    ("nope", SRC, "the source has no __global__ void nope(...) (its kernels: scale, copy4, vec)"),
    ("copy4", SRC, "copy4 is a template <typename T, int N>: name it with its 2 argument(s)"),
    ("scale<float>", SRC, "scale is not a template, but the name gives template arguments <float>"),
    ("f", 'struct P { int a; }; extern "C" __global__ void f(P p) {}',
     "f: parameter 'P p' has type P: only pointers and arithmetic scalars"),
    ("f", 'extern "C" __global__ void f(float** p) {}',
     "f: parameter 'float** p': only pointers (one level)"),
    ("f", 'extern "C" __global__ void f(Foo* p) {}', "points to Foo, which no tensor dtype matches"),
    ("1x", SRC, "kernel name '1x' is not a C identifier"),
], ids=["missing", "template-unnamed", "not-a-template", "struct", "pointer-pointer",
        "unknown-pointee", "bad-name"])
def test_bad_sources_and_names_get_one_clear_message(name, source, message):
    with pytest.raises(KernelSourceError) as err:
        parse_params(source, name)
    assert message in str(err.value)


X = torch.arange(64, dtype=torch.float32)
Y = torch.empty(64)


def test_a_good_description_is_normalised_and_packed():
    launch = check_launch(parse_params(SRC, "scale"), "scale", 4, (16,), (X, Y, 2, 64),
                          need_cuda=False)
    assert launch.grid == (4, 1, 1) and launch.block == (16, 1, 1) and launch.shared_mem == 0
    ptr_x, ptr_y, a, n = launch.args
    assert int(ptr_x) == X.data_ptr() and int(ptr_y) == Y.data_ptr()
    assert a.dtype.name == "float32" and float(a) == 2.0  # an int given to a float: converted
    assert n.dtype.name == "int64" and int(n) == 64
    big = check_launch(parse_params(SRC, "scale"), "scale", (2**31 - 1, 2), (32, 32),
                       [X, Y, 1.5, 2**40], shared_mem=100_000, need_cuda=False)
    assert big.grid == (2**31 - 1, 2, 1) and big.block == (32, 32, 1)


@pytest.mark.parametrize("grid, block, args, shared, message", [
    ((0,), 256, (X, Y, 2.0, 64), 0, "grid.x = 0 is outside 1..2147483647 (an empty input needs no launch"),
    ((1, 70000), 256, (X, Y, 2.0, 64), 0, "grid.y = 70000 is outside 1..65535"),
    (4.0, 256, (X, Y, 2.0, 64), 0, "grid must be an int or a tuple of 1-3 ints, got 4.0"),
    ((1, 1, 1, 1), 256, (X, Y, 2.0, 64), 0, "grid must be an int or a tuple of 1-3 ints"),
    (4, 2048, (X, Y, 2.0, 64), 0, "block.x = 2048 is outside 1..1024"),
    (4, (32, 32, 2), (X, Y, 2.0, 64), 0, "block (32, 32, 2) has 2048 threads, over the limit of 1024"),
    (4, 256, (X, Y, 2.0), 0, "scale takes 4 argument(s) (float* x, float* y, float a, long long n), got 3"),
    (4, 256, X, 0, "args must be a tuple or list of arguments, got Tensor"),
    (4, 256, (X.half(), Y, 2.0, 64), 0, "argument 'x' (float* x) is a float16 tensor; float* reads float32"),
    (4, 256, (X.data_ptr(), Y, 2.0, 64), 0, "argument 'x' (float* x) must be a tensor, got int"),
    (4, 256, (X, Y, torch.tensor(2.0), 64), 0, "argument 'a' (float a) is a scalar: pass a Python number"),
    (4, 256, (X, Y, 2.0, 64.5), 0, "argument 'n' (long long n) must be an integer, got 64.5"),
    (4, 256, (X, Y, "2", 64), 0, "argument 'a' (float a) must be a number, got '2'"),
    (4, 256, (X, Y, 2.0, 64), -1, "shared_mem must be an int of bytes in 0..232448"),
    (4, 256, (X, Y, 2.0, 64), 10**6, "shared_mem must be an int of bytes in 0..232448"),
])
def test_bad_descriptions_get_one_clear_message(grid, block, args, shared, message):
    with pytest.raises(LaunchError) as err:
        check_launch(parse_params(SRC, "scale"), "scale", grid, block, args, shared,
                     need_cuda=False)
    assert message in str(err.value)


def test_integer_width_dtype_and_alignment_are_checked():
    params = parse_params(SRC, "copy4<int, 4>")
    ints = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(LaunchError, match=r"'n' = 3000000000 does not fit int .*declare it long long"):
        check_launch(params, "copy4<int, 4>", 1, 32, (ints, ints, 3_000_000_000), need_cuda=False)
    with pytest.raises(LaunchError, match="int\\* reads int32"):
        check_launch(params, "copy4<int, 4>", 1, 32, (ints.long(), ints, 8), need_cuda=False)
    vec = parse_params(SRC, "vec")
    with pytest.raises(LaunchError, match="is not 16-byte aligned"):
        check_launch(vec, "vec", 1, 32, (X[1:], Y, 4), need_cuda=False)
    with pytest.raises(LaunchError, match="is a tensor on cpu; kernels read CUDA tensors only"):
        check_launch(vec, "vec", 1, 32, (X, Y, 4), need_cuda=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path (a GPU launches instead)")
def test_nvrtc_compiles_for_real_without_a_gpu(monkeypatch):
    monkeypatch.setenv("OPENKERNEL_NVRTC_ARCHS", "sm_90,sm_80")
    kernel = RawKernel(SRC, "scale")
    assert set(kernel.cubins) == {"sm_90", "sm_80"} and kernel.compile_s > 0
    kernel(grid=1, block=64, args=(X, Y, 2.0, 64))  # checked and kept, not run
    assert kernel.launches[-1].grid == (1, 1, 1)
    with pytest.raises(LaunchError, match="got 3"):
        kernel(1, 64, (X, Y, 2.0))
    with pytest.raises(KernelCompileError) as err:
        RawKernel(SRC.replace("a * x[i]", "a * x[i] + undefined_thing"), "scale")
    assert "NVRTC could not compile scale for sm_90" in str(err.value)
    assert 'identifier "undefined_thing" is undefined' in str(err.value)


@pytest.mark.gpu
def test_raw_kernel_launches_on_the_tensors_memory():
    """On the GPU: results on PyTorch's current stream, a template instance, >48 KiB of dynamic
    shared memory, and the profiler's view (what the kernel_launches check reads)."""
    from openkernel.evaluation.worker import integrity as ig

    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    scale = RawKernel(SRC, "scale")
    scale(grid=((x.numel() + 255) // 256,), block=(256,), args=(x, y, 3.0, x.numel()))
    torch.testing.assert_close(y, 3 * x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # launched on the current stream, whichever it is
        z = torch.empty_like(x)
        scale((x.numel() + 255) // 256, 256, (x, z, -1.0, x.numel()))
    side.synchronize()
    torch.testing.assert_close(z, -x)
    h = x.half()
    copy = RawKernel(SRC, "copy4<__half, 4>")
    out = torch.empty_like(h)
    copy((h.numel() + 255) // 256, 256, (h, out, h.numel()))
    torch.testing.assert_close(out, h)
    shared = RawKernel(r"""extern "C" __global__ void tail(float* y, int n) {
        extern __shared__ float buf[];
        int i = threadIdx.x;
        buf[n - 1 - i] = (float)i;
        __syncthreads();
        y[i] = buf[n - 1 - i];  // the far end of 64 KiB
    }""", "tail")
    n = 16384  # 64 KiB: over the 48 KiB a launch gets without opting in
    ys = torch.empty(1024, device="cuda")
    shared(1, 1024, (ys, n), shared_mem=n * 4)
    torch.testing.assert_close(ys, torch.arange(1024, device="cuda", dtype=torch.float32))
    names, _ = ig.kernel_profile(lambda: scale(4096, 256, (x, y, 1.0, x.numel())),
                                 torch.cuda.synchronize)
    assert "scale" in " ".join(names) and ig.custom_kernels(names)
    with pytest.raises(LaunchError, match="kernels read CUDA tensors only"):
        scale(1, 1, (x.cpu(), y, 1.0, 1))
