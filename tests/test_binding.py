"""The lean bindings of CUDA C++ candidates: main.cpp from torch/csrc/utils/pybind.h instead
of torch/extension.h (binding.py), built for real here with GCC and CPU torch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from openkernel.evaluation.worker import binding, pch
from openkernel.generators.handwritten import elementwise

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
@pytest.mark.skipif(not Path("/usr/local/cuda/include/cuda_runtime.h").is_file(),
                    reason="no CUDA headers")
def test_the_offline_extension_form_compiles_without_torch_extension_h(tmp_path):
    """The offline generator's tensor side (its cpp_sources) with the flags load_inline's
    main.cpp gets. CPU torch lacks one generated CUDA header (c10/cuda/impl/
    cuda_cmake_macros.h): a stand-in with what CUDA builds of torch define lets GCC check the
    rest; on the H200 the GPU tests build it for real."""
    stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    cpp = (elementwise._CPP_SRC.replace("{kparams}", ", float alpha")
           .replace("{hparams}", ", double alpha").replace("{hargs}", ", (float)alpha"))
    assert "torch/extension.h" not in cpp and cpp.lstrip().startswith(
        "#include <torch/csrc/utils/pybind.h>")
    (tmp_path / "main.cpp").write_text(
        cpp + '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
        'm.def("act_forward", torch::wrap_pybind_function(act_forward), "act_forward");\n}\n')
    compiler, flags = pch.compile_flags(with_cuda=False)
    run = subprocess.run([compiler, "-fsyntax-only", "-DTORCH_EXTENSION_NAME=ok_act", *flags,
                          "-I/usr/local/cuda/include", f"-I{tmp_path / 'stub'}",
                          str(tmp_path / "main.cpp")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
