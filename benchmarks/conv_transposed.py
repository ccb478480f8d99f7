"""The two forms of a Triton transposed convolution against cuDNN: the H200 record of issue 23's
direct transposed convolution.

    python3 benchmarks/conv_transposed.py KB_DIR/level1/*conv_transposed*.py --out $OUT/tconv.json

For each KernelBench problem: the offline generator's plan of its traced forward, rendered in
the direct form (TCONV_DIRECT=1: each output phase a GEMM over its own taps) and in the
gradient form (0), each at the family's curated GPU start points; every candidate checked
against the reference's output, then timed with ``triton.testing.do_bench`` beside the
reference (cuDNN, under torch's default flags: TF32 allowed) and, with ``--compile``,
torch.compile's default mode. Prints one line a problem; the JSON holds every point's time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul
from openkernel.records import TaskProbe


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def problem(path: Path, scratch: Path, compile_too: bool) -> dict:
    ref = _load(path, "ref_" + path.stem.split("_")[0])
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    out = {"problem": path.stem, "stride": list(conv.stride), "kernel": list(conv.kernel_size),
           "dilation": list(conv.dilation), "groups": conv.groups,
           "channels": [conv.in_channels, conv.out_channels],
           "input": list(inputs[0].shape)}
    with torch.no_grad():
        want = model(*inputs)
        out["cudnn_ms"] = triton.testing.do_bench(lambda: model(*inputs))
        if compile_too:
            compiled = torch.compile(model)
            compiled(*inputs)
            out["compile_ms"] = triton.testing.do_bench(lambda: compiled(*inputs))
        match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(model, inputs)),
                                    "triton")
        family, points = match.family, []
        for form in (1, 0):
            for k, start in enumerate(family.starts):
                params = family.clean({**start, "TCONV_DIRECT": form}, False, "triton")
                code = family.render(match, params, "triton")
                file = scratch / f"{path.stem.split('_')[0]}_{form}_{k}.py"
                file.write_text(code)
                point = {"form": "direct" if form else "gradient", **params}
                try:
                    candidate = _load(file, file.stem).ModelNew(*ref.get_init_inputs()).cuda()
                    candidate.load_state_dict(model.state_dict(), strict=False)
                    got = candidate(*inputs)
                    err = (got.float() - want.float()).abs().max().item()
                    point["max_abs_err"] = err
                    point["ms"] = triton.testing.do_bench(lambda: candidate(*inputs))
                except Exception as exc:  # a point that fails to compile or launch
                    point["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                points.append(point)
                print(f"  {path.stem[:40]} {point}", flush=True)
    out["points"] = points
    for form in ("direct", "gradient"):
        times = [p["ms"] for p in points if p["form"] == form and "ms" in p]
        out[f"{form}_ms"] = min(times) if times else None
    out["description"] = family.describe(match, {"TCONV_DIRECT": 1})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compile", action="store_true", help="time torch.compile too")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in args.problems:
            try:
                row = problem(path, Path(scratch), args.compile)
            except Exception as exc:  # the next problem still runs
                row = {"problem": path.stem, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1))
            best = min((row.get(k) or float("inf")) for k in ("direct_ms", "gradient_ms"))
            print(f"{row['problem'][:48]:48} cudnn {row.get('cudnn_ms', 0):8.3f} ms  direct "
                  f"{row.get('direct_ms') or float('nan'):8.3f}  gradient "
                  f"{row.get('gradient_ms') or float('nan'):8.3f}  best/cudnn "
                  f"{row.get('cudnn_ms', 0) / best:5.2f}x", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
