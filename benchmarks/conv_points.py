"""Points of the offline generator's compiled family on convolution problems, timed against
cuDNN: where our Triton convolutions stand and which forms and tiles win (issue 23).

    python3 benchmarks/conv_points.py KB_DIR/level1/*conv*.py --out $OUT/conv.json \\
        [--vary CONV_NHWC=1,2] [--points '[{"BLOCK_M": 128, ...}, ...]'] [--compile]

For each KernelBench problem: the family's plan of its traced forward (the all-Triton plan),
rendered at each point: the given points (default: the family's curated GPU start points), each
crossed with every ``--vary`` value; every candidate checked against the reference's output,
then timed with ``triton.testing.do_bench`` beside the reference (cuDNN under torch's default
flags: TF32 allowed) and, with ``--compile``, torch.compile's default mode. ``--limit`` seconds
a problem: the points left are skipped (said in the JSON). Prints a line a point and a problem;
the JSON holds every point's time and, for each tunable that differs between the points, each
value's best.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import tempfile
import time
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


def _points(family, given: list[dict] | None, vary: dict[str, list]) -> list[dict]:
    base = given if given is not None else [dict(p) for p in family.starts
                                            if p.get("LIBRARY", 0) == 0]
    names = list(vary)
    out = []
    for point in base:
        for values in itertools.product(*(vary[n] for n in names)):
            p = family.clean({**point, "LIBRARY": 0, **dict(zip(names, values))}, False, "triton")
            if p not in out:
                out.append(p)
    return out


def problem(path: Path, scratch: Path, args) -> dict:
    ref = _load(path, "ref_" + path.stem.split("_")[0])
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    out = {"problem": path.stem, "input": list(inputs[0].shape)}
    conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
    if conv is not None:
        out.update(stride=list(conv.stride), kernel=list(conv.kernel_size),
                   dilation=list(conv.dilation), groups=conv.groups,
                   channels=[conv.in_channels, conv.out_channels])
    t0 = time.perf_counter()
    with torch.no_grad():
        want = model(*inputs)
        out["cudnn_ms"] = triton.testing.do_bench(lambda: model(*inputs))
        if args.compile:
            compiled = torch.compile(model)
            compiled(*inputs)
            out["compile_ms"] = triton.testing.do_bench(lambda: compiled(*inputs))
        match = FusedMatmul().match(None, TaskProbe(ok=True, trace=trace_forward(model, inputs)),
                                    "triton")
        family = match.family
        points = []
        todo = _points(family, args.points, args.vary)
        for k, params in enumerate(todo):
            if time.perf_counter() - t0 > args.limit:
                out["skipped"] = len(todo) - k
                break
            code = family.render(match, params, "triton")
            file = scratch / f"{path.stem.split('_')[0]}_{k}.py"
            file.write_text(code)
            point = {key: params[key] for key in sorted(params)}
            try:
                t1 = time.perf_counter()
                candidate = _load(file, file.stem).ModelNew(*ref.get_init_inputs()).cuda()
                candidate.load_state_dict(model.state_dict(), strict=False)
                got = candidate(*inputs)
                torch.cuda.synchronize()
                point["first_call_s"] = round(time.perf_counter() - t1, 2)
                point["max_abs_err"] = (got.float() - want.float()).abs().max().item()
                point["ms"] = triton.testing.do_bench(lambda: candidate(*inputs))
                del got
            except Exception as exc:  # a point that fails to compile or launch
                point["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            points.append(point)
            print(f"  {path.stem[:32]} {point}", flush=True)
    out["points"] = points
    timed = [p for p in points if "ms" in p]
    if timed:
        best = min(timed, key=lambda p: p["ms"])
        out["best_ms"], out["best"] = best["ms"], best
    varied = {n: sorted({p[n] for p in todo if n in p}) for n in {n for p in todo for n in p}}
    out["best_by"] = {name: {str(v): min((p["ms"] for p in timed if p.get(name) == v), default=None)
                             for v in values} for name, values in varied.items() if len(values) > 1}
    out["description"] = family.describe(match, todo[0]) if todo else ""
    return out


def _vary(text: str) -> tuple[str, list]:
    name, _, values = text.partition("=")
    return name, [int(v) for v in values.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vary", action="append", type=_vary, default=[],
                        help="NAME=v1,v2: every point at each value")
    parser.add_argument("--points", type=json.loads, default=None,
                        help="a JSON list of points (default: the family's GPU start points)")
    parser.add_argument("--compile", action="store_true", help="time torch.compile too")
    parser.add_argument("--limit", type=float, default=1e9, help="seconds a problem")
    args = parser.parse_args()
    args.vary = dict(args.vary)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for path in args.problems:
            try:
                row = problem(path, Path(scratch), args)
            except Exception as exc:  # the next problem still runs
                row = {"problem": path.stem, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rows.append(row)
            args.out.write_text(json.dumps(rows, indent=1))
            by = "; ".join(f"{n} " + ", ".join(f"{v}: {ms:.3f}" for v, ms in best.items() if ms)
                           for n, best in row.get("best_by", {}).items())
            print(f"{row['problem'][:48]:48} cudnn {row.get('cudnn_ms', 0):8.3f} ms  "
                  f"compile {row.get('compile_ms') or float('nan'):8.3f}  best "
                  f"{row.get('best_ms') or float('nan'):8.3f} ({by})  "
                  f"cudnn/best {row.get('cudnn_ms', 0) / (row.get('best_ms') or float('inf')):5.2f}x",
                  flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
