"""Capture the code torch.compile's Inductor writes for KernelBench-format problems, as JSON.

    python benchmarks/capture_inductor.py PROBLEM.py... --out DIR

One file per problem (``DIR/<name>.json``: ``code``, ``args``, ``outputs``, ``made``, and the
machine's torch): the reference is built from ``get_init_inputs()`` in eval mode, traced on fake
tensors with dynamic sizes and lowered by Inductor's default mode; nothing is compiled for a
device or run (``openkernel.evaluation.worker.inductor``). On a GPU that is plain Inductor; on a
machine without one a stand-in H200 answers Inductor's device questions, and ``made`` says so.
The offline generator's rewriting is tested on such files (``tests/data/inductor``); the H200
stage ``inductor-capture`` of ``benchmarks/h200_session.sh`` makes them on the real device.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from openkernel.evaluation.worker.inductor import capture


def capture_file(path: Path, static: bool = False) -> dict:
    spec = importlib.util.spec_from_file_location(f"problem_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    inputs = module.get_inputs()
    if torch.cuda.is_available():
        model = model.cuda()
        inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in inputs]
    result = capture(model, inputs, dynamic=not static)
    return {"name": path.stem, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} ({platform.machine()})",
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
            **result}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--static", action="store_true",
                    help="at the inputs' own sizes (as torch.compile's first call), not dynamic")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in args.paths:
        result = capture_file(path, args.static)
        (args.out / f"{path.stem}.json").write_text(json.dumps(result, indent=1) + "\n")
        kernels = result.get("code", "").count("async_compile.triton(")
        print(f"{path.stem:50} {'error: ' + result['error'][:80] if 'error' in result else f'{kernels} Triton kernel(s)'}",
              flush=True)
        failed += "error" in result
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
