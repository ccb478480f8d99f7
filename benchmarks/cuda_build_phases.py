"""Where a CUDA candidate's build time goes (issue 22): nvcc's .cu step as cpp_extension runs
it, with and without load_inline's implicit ``<torch/types.h>``, and NVRTC on the same kernel.

    python3 benchmarks/cuda_build_phases.py --out $OUT/cuda_build_phases.json

The kernel is the offline elementwise template's (GELU). For each variant, cpp_extension
writes its build.ninja (its ninja run is stopped: only the command is wanted) and the exact
.cu command is run ``--repeats`` times, timed by wall clock and by the CPU time of the child
(user + system: what a loaded machine cannot hide). The variants: load_inline's default
(``<torch/types.h>`` put in front of the .cu), ``no_implicit_headers`` (what the worker's
``lean_load_inline`` and the templates use), and the default without ``TORCH_CUDA_ARCH_LIST``
(cpp_extension then asks the visible GPUs; it needs one). NVRTC: ``RawKernel`` made cold (the
first in the process: cuda.core's import and set-up included) and warm. On a GPU machine the
whole ``load_inline`` build (bindings, .cu, link) is timed too, both ways. Runs on the CPU
(without the full builds) as well.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


class _Stop(Exception):
    pass


def gelu_sources() -> tuple[str, str, str]:
    """(cuda_sources, cpp_sources, the NVRTC source) of the offline GELU template."""
    from openkernel.generators.handwritten import elementwise as e

    expr = "0.5f * x * (1.0f + erff(x * 0.70710678118654752f))"
    cuda = ("#define OK_THREADS 256\n#define OK_ELEMS 4\n" + e._CUDA_SRC.replace(
        "{kparams}", "").replace("{kargs}", "").replace("{expr}", expr))
    cpp = e._CPP_SRC.replace("{kparams}", "")
    nvrtc = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + e._CUDA_KERNEL.replace(
        "{kparams}", "").replace("{expr}", expr)
    return cuda, cpp, nvrtc


def ninja_for(folder: Path, lean: bool, arch_list: str | None) -> tuple[list[str], Path]:
    """cpp_extension's .cu command for the GELU sources, and the folder it runs in."""
    from torch.utils import cpp_extension as ce

    cuda, cpp, _ = gelu_sources()
    folder.mkdir(parents=True, exist_ok=True)
    if ce.CUDA_HOME is None:  # a CPU build of torch: point it at nvcc's toolkit
        nvcc = subprocess.run(["which", "nvcc"], capture_output=True, text=True).stdout.strip()
        ce.CUDA_HOME = str(Path(os.path.realpath(nvcc)).parents[1])
    saved, env = ce._run_ninja_build, os.environ.get("TORCH_CUDA_ARCH_LIST")

    def stop(*_a, **_k):
        raise _Stop

    ce._run_ninja_build = stop
    if arch_list is None:
        os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
    else:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    try:
        ce.load_inline(name="gelu_phases", cpp_sources=[cpp], cuda_sources=cuda,
                       functions=["act_launch"], with_pytorch_error_handling=False,
                       extra_cuda_cflags=["-O3"],
                       build_directory=str(folder), no_implicit_headers=lean)
    except _Stop:
        pass
    finally:
        ce._run_ninja_build = saved
        if env is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = env
    values = dict(line.split(" = ", 1) for line in (folder / "build.ninja").read_text().splitlines()
                  if " = " in line and not line.startswith(" "))
    cmd = [values["nvcc"], *shlex.split(values["cuda_cflags"]), "-c", "cuda.cu", "-o", "cuda.cuda.o"]
    return cmd, folder


def timed(cmd: list[str], cwd: Path, repeats: int) -> dict:
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode:
            return {"error": proc.stderr[-2000:], "command": shlex.join(cmd)}
    return {"wall_s_median": round(statistics.median(walls), 3), "wall_s": [round(w, 3) for w in walls],
            "cpu_s_median": round(statistics.median(cpus), 3), "command": shlex.join(cmd)}


def nvrtc_times(repeats: int) -> dict:
    _, _, source = gelu_sources()
    t0 = time.perf_counter()
    from openkernel.nvrtc import RawKernel

    cold = RawKernel(source, "act_kernel<float>", defines={"OK_THREADS": 256, "OK_ELEMS": 4})
    cold_s = time.perf_counter() - t0
    warm = []
    for i in range(repeats):
        k = RawKernel(source, "act_kernel<float>", defines={"OK_THREADS": 256, "OK_ELEMS": 4 + i})
        warm.append(k.compile_s)
    return {"cold_s_with_import": round(cold_s, 3), "cold_compile_s": round(cold.compile_s, 3),
            "warm_compile_s_median": round(statistics.median(warm), 3), "targets": list(cold.cubins)}


def full_builds(tmp: Path) -> dict:
    """The whole load_inline build, both ways (a GPU machine: CUDA torch, a linker for it)."""
    import torch
    from torch.utils.cpp_extension import load_inline

    if not torch.cuda.is_available():
        return {"skipped": "no GPU: a CPU torch cannot link a CUDA extension"}
    cuda, cpp, _ = gelu_sources()
    out = {}
    for lean in (False, True):
        folder = tmp / f"full_{'lean' if lean else 'default'}"
        folder.mkdir()
        t0 = time.perf_counter()
        load_inline(name=f"gelu_full_{int(lean)}", cpp_sources=[cpp],
                    cuda_sources=cuda, functions=["act_launch"], with_pytorch_error_handling=False,
                    extra_cuda_cflags=["-O3"],
                    build_directory=str(folder), no_implicit_headers=lean)
        steps = {}
        for line in (folder / ".ninja_log").read_text().splitlines()[1:]:
            parts = line.split("\t")
            steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
        out["no_implicit_headers" if lean else "default"] = {
            "wall_s": round(time.perf_counter() - t0, 2), "ninja_steps_s": steps}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    arch = "9.0+PTX"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}.{minor}+PTX"
    record = {"benchmark": "cuda_build_phases", "date": datetime.now(timezone.utc).isoformat(
        timespec="seconds"), "machine": platform.node(), "cpu_count": os.cpu_count(),
        "load_avg_at_start": os.getloadavg(), "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
        "nvcc_cu_step": {}}
    with tempfile.TemporaryDirectory(prefix="ok-build-phases-") as tmp_name:
        tmp = Path(tmp_name)
        variants = [("no_implicit_headers", True, arch), ("default_implicit_torch_types_h", False, arch)]
        if torch.cuda.is_available():
            variants.append(("default_no_arch_list", False, None))
        for name, lean, arch_list in variants:
            cmd, folder = ninja_for(tmp / name, lean, arch_list)
            record["nvcc_cu_step"][name] = timed(cmd, folder, args.repeats)
            print(name, {k: v for k, v in record["nvcc_cu_step"][name].items() if k != "command"},
                  flush=True)
        record["nvrtc"] = nvrtc_times(args.repeats)
        print("nvrtc", record["nvrtc"], flush=True)
        record["load_inline_full"] = full_builds(tmp)
        print("load_inline", record["load_inline_full"], flush=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
