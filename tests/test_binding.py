"""The lean bindings of CUDA C++ candidates: main.cpp from torch/csrc/utils/pybind.h instead
of torch/extension.h (binding.py), built for real here with GCC and CPU torch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from openkernel.evaluation.worker import binding, pch

needs_gcc = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")


@pytest.mark.parametrize("cpp, lean", [
    ("torch::Tensor gelu_forward(torch::Tensor x);", True),
    ("#include <torch/extension.h>\n// two\ntorch::Tensor f(torch::Tensor x, float a);\n"
     "std::vector<torch::Tensor> g(const torch::Tensor& a, std::vector<at::Tensor> xs, int64_t n);",
     True),
    ("std::tuple<torch::Tensor, torch::Tensor> f(torch::Tensor x, c10::optional<torch::Tensor> b,"
     " unsigned int k);", True),
    ("torch::Tensor f(const torch::Tensor&);", True),
    ("torch::Tensor f(torch::Tensor x) { return x; }", False),  # a definition
    ("torch::Tensor f(Foo x);", False),  # a type the casters may not know
    ("torch::Tensor f(const Foo&);", False),
    ("#include <torch/extension.h>\n#include <cuda.h>\ntorch::Tensor f(torch::Tensor x);", False),
    ("#define X 1\ntorch::Tensor f(torch::Tensor x);", False),
    ("torch::Tensor f(torch::Tensor x)", False),  # no semicolon
    ("torch::Tensor f(torch::Tensor x); PYBIND11_MODULE(a, m) { m.def(\"f\", &f); }", False),
    ("", False),
])
def test_only_declarations_over_known_types_get_the_lean_header(cpp, lean):
    declared = binding.declarations_only(cpp)
    assert (declared is not None) is lean
    if lean:
        assert "#include" not in declared and declared.endswith(";")


@needs_gcc
def test_declared_functions_bind_through_the_lean_header(tmp_path):
    """What a candidate's declarations-only cpp_sources become: the lean header, the
    declarations, load_inline's bindings (here with the definitions after them, as the .cu
    would hold them); built and called like any extension."""
    from torch.utils.cpp_extension import load_inline

    cpp = ("torch::Tensor scale(torch::Tensor x, double a);\n"
           "std::vector<torch::Tensor> both(const torch::Tensor& x, c10::optional<torch::Tensor> y, int64_t k);")
    declared = binding.declarations_only(cpp)
    assert declared is not None
    definitions = """
torch::Tensor scale(torch::Tensor x, double a) { return x.mul(a); }
std::vector<torch::Tensor> both(const torch::Tensor& x, c10::optional<torch::Tensor> y, int64_t k) {
    TORCH_CHECK(k > 0, "k must be positive");
    return {x.add(k), y.has_value() ? *y : x};
}
"""
    ext = load_inline("ok_lean_binding_test", [binding.HEADER, declared, definitions],
                      functions=["scale", "both"], no_implicit_headers=True,
                      build_directory=str(tmp_path))
    x = torch.arange(4.0)
    assert torch.equal(ext.scale(x, 2.0), x * 2)
    first, second = ext.both(x, None, 3)
    assert torch.equal(first, x + 3) and torch.equal(second, x)
    with pytest.raises(RuntimeError, match="k must be positive"):  # torch's error handling
        ext.both(x, x, 0)
    assert "torch/extension.h" not in (tmp_path / "main.cpp").read_text()


@needs_gcc
def test_the_offline_extension_form_binds_a_launcher_on_integers(tmp_path):
    """The offline generator's CUDA C++ form: main.cpp only declares the .cu's launcher on
    integers (pointers, sizes, the stream; its tensor side is Python's), from the precompiled
    pybind.h, bound with a plain m.def. Built here with a C++ stand-in for the .cu's launcher:
    the pointers and a float parameter arrive intact."""
    from torch.utils.cpp_extension import load_inline

    from openkernel.generators.handwritten.elementwise import _CPP_SRC, _CUDA_MODULE, _CUDA_SRC

    cpp = _CPP_SRC.replace("{kparams}", ", float alpha")
    assert cpp.lstrip().startswith("#include <torch/csrc/utils/pybind.h>")
    assert "torch/" not in _CUDA_SRC and "torch/extension.h" not in _CUDA_MODULE
    stand_in = """
void act_launch(int64_t x, int64_t y, int64_t n, int64_t dtype, int64_t stream_handle, float alpha) {
    if (dtype != 0 || stream_handle != 7) throw std::runtime_error("bad dtype or stream");
    for (int64_t i = 0; i < n; ++i) ((float*)y)[i] = ((const float*)x)[i] * alpha;
}
"""
    ext = load_inline("ok_int_launcher_test", [cpp, stand_in], functions=["act_launch"],
                      with_pytorch_error_handling=False, no_implicit_headers=True,
                      build_directory=str(tmp_path))
    x, y = torch.arange(5.0), torch.zeros(5)
    ext.act_launch(x.data_ptr(), y.data_ptr(), x.numel(), 0, 7, 1.5)
    assert torch.equal(y, x * 1.5)
    with pytest.raises(RuntimeError, match="bad dtype or stream"):
        ext.act_launch(x.data_ptr(), y.data_ptr(), x.numel(), 1, 7, 1.5)
    assert "torch/extension.h" not in (tmp_path / "main.cpp").read_text()
