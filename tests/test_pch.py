"""The precompiled <torch/extension.h>: built with load_inline's own flags, found through
CPATH, and actually used by GCC for a bindings file like load_inline's main.cpp."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from openkernel.evaluation.worker import binding, pch

# load_inline's main.cpp: its own include, then the candidate's cpp_sources, which often
# include the header again.
MAIN_CPP = """#include <torch/extension.h>
#include <torch/extension.h>
torch::Tensor act_forward(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("act_forward", &act_forward, "act"); }
"""


@pytest.mark.gpu  # the header serves CUDA C++ builds on a GPU only; here it cost ~2 min of CI
@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="no C++ compiler")
def test_precompiled_header_is_built_once_and_used(tmp_path, monkeypatch):
    first = pch.build(tmp_path / "pch", with_cuda=False)
    if first["pch_dir"] is None and "not GCC" in first["why"]:
        pytest.skip(first["why"])
    assert first["built"] is True, first
    gch = tmp_path / "pch" / os.path.basename(first["pch_dir"]) / "torch" / "extension.h.gch"
    assert gch.is_file() and not list(gch.parent.glob(".*"))  # no partial file left behind
    again = pch.build(tmp_path / "pch", with_cuda=False)
    assert again == {**again, "pch_dir": first["pch_dir"], "built": False}

    compiler, flags = pch.compile_flags(with_cuda=False)
    assert "-std=c++20" in flags or any(f.startswith("-std=") for f in flags)
    assert not any(f.startswith("-DTORCH_EXTENSION_NAME") for f in flags)
    (tmp_path / "main.cpp").write_text(MAIN_CPP)
    # Recorded, so that the CPATH pch.use sets is undone: left behind, it pointed every later
    # test's workers at this test's header, outside their sandbox (seen on the H200)
    monkeypatch.setenv("CPATH", "")
    monkeypatch.delenv("CPATH")
    pch.use(first["pch_dir"])
    assert os.environ["CPATH"].split(os.pathsep)[0] == first["pch_dir"]
    # -H lists each header read; "!" marks a precompiled header GCC accepted.
    run = subprocess.run([compiler, "-H", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=cand_1", *flags,
                          str(tmp_path / "main.cpp")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"! {gch}" in run.stderr.splitlines()[0], run.stderr[:500]
    # Flags the header was not built with: GCC sets the .gch aside and the build still works.
    other = [f for f in flags if not f.startswith("-std=")] + [
        "-std=c++20" if "-std=c++17" in flags else "-std=c++17"]
    run = subprocess.run([compiler, "-H", "-Winvalid-pch", "-fsyntax-only",
                          "-DTORCH_EXTENSION_NAME=cand_2", *other, str(tmp_path / "main.cpp")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "not used because" in run.stderr and f"! {gch}" not in run.stderr
    # A lean main.cpp (binding.py) is served by the precompiled torch/csrc/utils/pybind.h
    lean = gch.parent / "csrc" / "utils" / "pybind.h.gch"
    (tmp_path / "lean.cpp").write_text(binding.HEADER + "torch::Tensor act_forward(torch::Tensor x);\n"
                                       "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"act_forward\", "
                                       "torch::wrap_pybind_function(act_forward), \"act\"); }\n")
    run = subprocess.run([compiler, "-H", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=cand_3", *flags,
                          str(tmp_path / "lean.cpp")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"! {lean}" in run.stderr.splitlines()[0], run.stderr[:500]


@pytest.mark.gpu
def test_gpu_cuda_run_builds_against_the_precompiled_header(tmp_path):
    """On the H200: a cuda-backend evaluator precompiles the header while it probes, and a
    CUDA C++ candidate built with it (header read-only to the candidate) is judged correct."""
    from pathlib import Path

    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.schemas import Status
    from openkernel.task import load_task

    root = Path(__file__).resolve().parents[1]
    config = build_config({"backend": "cuda", "eval_config": {"correctness_seeds": 1, "profile": False},
                           "paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")}})
    ev = Evaluator(load_task(root / "examples" / "gelu"), config)
    assert ev.probe().ok
    assert ev.pch.get("pch_dir"), ev.pch
    assert (Path(ev.pch["pch_dir"]) / "torch" / "extension.h.gch").is_file()
    assert (Path(ev.pch["pch_dir"]) / "torch" / "csrc" / "utils" / "pybind.h.gch").is_file()
    result = ev.evaluate((root / "tests" / "candidates" / "cuda_ok.py").read_text(), "cuda", "pch")
    assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
    logs = list(ev.build_cache_root.glob("*/torch-*/torch_extensions/*/.ninja_log"))
    assert logs, "no extension was built"
    print("pch", ev.pch, "ninja", [log.read_text() for log in logs])
    # cuda_ok's .cu names nothing of torch: built without load_inline's implicit
    # <torch/types.h> (build.lean_load_inline), for the one target of the GPU here.
    cu = [f.read_text() for f in ev.build_cache_root.glob("*/torch-*/torch_extensions/*/cuda.cu")]
    assert cu and all("torch/types.h" not in text for text in cu), cu
    ninja = [f.read_text() for f in ev.build_cache_root.glob("*/torch-*/torch_extensions/*/build.ninja")]
    assert all(text.count("-gencode=arch=compute_90,code=sm_90") == 1 for text in ninja), ninja
    # A cpp_sources of declarations only: main.cpp from the precompiled pybind.h (binding.py),
    # the .cu with its own torch headers as written
    result = ev.evaluate((root / "tests" / "candidates" / "cuda_declared.py").read_text(), "cuda",
                         "declared")
    assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
    mains = [f.read_text() for f in ev.build_cache_root.glob(
        "*/torch-*/torch_extensions/ok_gelu_declared*/main.cpp")]
    assert mains and all(text.startswith("#include <torch/csrc/utils/pybind.h>")
                         and "torch/extension.h" not in text for text in mains), mains
    print("ninja (declared)", [log.read_text() for log in ev.build_cache_root.glob(
        "*/torch-*/torch_extensions/ok_gelu_declared*/.ninja_log")])
    ev.close()
