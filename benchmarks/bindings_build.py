"""How long GCC takes over a CUDA C++ candidate's main.cpp (its bindings), by what it includes
(issue 22: the H200's ``main`` ninja step was 11.8 s median beside 15 other builds).

    python3 benchmarks/bindings_build.py --out $OUT/bindings_build.json

Each form is compiled (``-c``, with the flags ``load_inline`` gives main.cpp) ``--repeats``
times, timed by wall clock and by the child's CPU time:

- ``declared, extension.h``: load_inline's default main.cpp for a cpp_sources that only
  declares its function, without and with the precompiled <torch/extension.h>;
- ``declared, pybind.h``: the same through ``binding.py``'s lean header (what the worker's
  ``lean_load_inline`` now writes), with the precompiled torch/csrc/utils/pybind.h;
- ``offline form before`` / ``now``: the offline generator's extension form, its tensor side
  (checks, ``empty_like``, device guard, stream) in C++ from <torch/extension.h> as it was,
  and as it is: the tensor side in Python, main.cpp declaring a launcher on integers (pointers,
  sizes, the stream) from pybind.h; each with its header precompiled.

CPU builds of torch lack one generated CUDA header (c10/cuda/impl/cuda_cmake_macros.h): there
a stand-in defining what CUDA builds define lets the offline forms compile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DECLARED = "torch::Tensor act_forward(torch::Tensor x);\n"
BIND = ('PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
        'm.def("act_forward", torch::wrap_pybind_function(act_forward), "act_forward");\n}\n')


# The offline generator's tensor side in C++ as it was before session 24 (it is Python's now)
BEFORE = """#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

void act_launch(const void* x, void* y, int64_t n, int dtype, cudaStream_t stream);

torch::Tensor act_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    const auto t = x.scalar_type();
    TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble,
                "unsupported dtype ", t);
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(xc.device());
    const int dtype = t == at::kFloat ? 0 : t == at::kHalf ? 1 : t == at::kBFloat16 ? 2 : 3;
    act_launch(xc.data_ptr(), y.data_ptr(), n, dtype, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""


def forms() -> dict[str, tuple[str, bool]]:
    """name -> (main.cpp, whether the precompiled headers are on CPATH)."""
    from openkernel.evaluation.worker import binding
    from openkernel.generators.handwritten import elementwise

    now = elementwise._CPP_SRC.replace("{kparams}", "") + (
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("act_launch", act_launch, "act_launch");\n}\n')
    default = "#include <torch/extension.h>\n" + DECLARED + BIND
    return {
        "declared, extension.h, not precompiled": (default, False),
        "declared, extension.h precompiled": (default, True),
        "declared, pybind.h precompiled (binding.py)": (binding.HEADER + DECLARED + BIND, True),
        "offline form before: tensor side in C++, extension.h precompiled": (BEFORE + BIND, True),
        "offline form now: a launcher on integers, pybind.h precompiled": (now, True),
    }


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from openkernel.evaluation.worker import pch

    cuda = torch.version.cuda is not None
    work = Path(tempfile.mkdtemp(prefix="ok-bindings-"))
    compiler, flags = pch.compile_flags(with_cuda=cuda)
    t0 = time.monotonic()
    built = pch.build(work / "pch", with_cuda=cuda)
    pch_s = round(time.monotonic() - t0, 2)
    print(json.dumps({"precompiled headers": built, "seconds": pch_s}), flush=True)
    if not built.get("pch_dir"):
        return 1
    extra = []
    if not cuda:  # see the docstring
        stub = work / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        extra = [f"-I{work / 'stub'}"]
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    extra.append(f"-I{cuda_home}/include")
    rows = []
    for name, (text, precompiled) in forms().items():
        source = work / f"main_{len(rows)}.cpp"
        source.write_text(text)
        env = dict(os.environ)
        env.pop("CPATH", None)
        if precompiled:
            env["CPATH"] = built["pch_dir"]
        walls, cpus, ok = [], [], True
        for _ in range(args.repeats):
            before, t = child_cpu_s(), time.monotonic()
            run = subprocess.run([compiler, "-c", "-DTORCH_EXTENSION_NAME=ok_bind", *flags, *extra,
                                  str(source), "-o", str(source.with_suffix(".o"))],
                                 capture_output=True, text=True, env=env, timeout=900)
            walls.append(time.monotonic() - t)
            cpus.append(child_cpu_s() - before)
            if run.returncode != 0:
                ok = False
                print(run.stderr[-1500:], file=sys.stderr)
                break
        row = {"form": name, "ok": ok, "wall_s": round(statistics.median(walls), 2),
               "cpu_s": round(statistics.median(cpus), 2), "repeats": len(walls)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {
        "benchmark": "bindings_build", "compiler": compiler,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cores": os.cpu_count(),
        "machine": platform.machine(), "precompiled_headers_s": pch_s, "rows": rows,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, cwd=ROOT).stdout.strip(),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
