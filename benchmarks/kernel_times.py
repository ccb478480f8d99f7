"""Where a kernel's time goes next to torch.compile's: per-kernel GPU time and the call's wall.

For each problem file, the best correct kernel a bench stored for it (highest ratio over
torch.compile) runs beside the reference in eager mode and under torch.compile (default mode),
on the benchmark inputs, in this one process (the same flags: cuDNN's TF32 as PyTorch's
default, GEMMs in full fp32). Each gets:

- ``wall_ms``: the median of CUDA-event-timed calls (what the bench compares);
- ``gpu_ms``: the summed device time of the kernels one call launches (torch.profiler);
- ``kernels``: those kernels by name, their count and milliseconds per call;
- ``gap_ms``: wall minus GPU time, the part no kernel fills (launch overhead, host work,
  synchronisation).

A loss to torch.compile is then either in a kernel (a slower or an extra one) or in the gap.

    python benchmarks/kernel_times.py PROBLEM.py ... --db kernels.sqlite3 [--suite S] --out F
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from openkernel.evaluation.worker.task_runtime import TaskRuntime, load_module, load_state  # noqa: E402

CALLS = 50
PROFILED_CALLS = 10


def best_kernel(db: str, task: str, suite: str | None) -> tuple[str, str, float] | None:
    """(id, code, ratio over compile) of the task's best correct stored kernel."""
    sql = ("select id, code, improve_over_compile from kernels where task_name = :task "
           "and correctness = 1 and origin != 'reference' and improve_over_compile > 0"
           + (" and job_name like :suite" if suite else "")
           + " order by improve_over_compile desc limit 1")
    with create_engine(f"sqlite:///{db}").connect() as conn:
        row = conn.execute(text(sql), {"task": task, "suite": f"{suite}%"}).first()
    return (row[0], row[1], float(row[2])) if row else None


def wall_ms(fn) -> float:
    times = []
    for _ in range(CALLS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernel_ms(fn) -> dict[str, dict]:
    """Each kernel's device milliseconds per call, by name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED_CALLS):
            fn()
        torch.cuda.synchronize()
    out: dict[str, dict] = defaultdict(lambda: {"count": 0, "ms": 0.0})
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = out[event.name[:120]]
            row["count"] += 1
            row["ms"] += event.device_time_total / 1000
    return {name: {"per_call": row["count"] / PROFILED_CALLS,
                   "ms": round(row["ms"] / PROFILED_CALLS, 4)}
            for name, row in sorted(out.items(), key=lambda kv: -kv[1]["ms"])}


def measure(fn) -> dict:
    with torch.no_grad():
        for _ in range(3):  # warm: compiles, cuDNN's plans, caches
            fn()
        torch.cuda.synchronize()
        wall = wall_ms(fn)
        kernels = kernel_ms(fn)
    gpu = sum(k["ms"] for k in kernels.values())
    return {"wall_ms": round(wall, 4), "gpu_ms": round(gpu, 4), "gap_ms": round(wall - gpu, 4),
            "launches": sum(k["per_call"] for k in kernels.values()), "kernels": kernels}


def problem(path: Path, db: str, suite: str | None) -> dict:
    task = f"{path.parent.name}/{path.stem}"
    found = best_kernel(db, task, suite)
    if found is None:
        return {"task": task, "error": "no correct kernel stored"}
    kid, code, ratio = found
    rt = TaskRuntime(str(path), None, "cuda")
    ref = rt.make_model(rt.ref.Model)
    inputs = rt.inputs(1)
    with tempfile.TemporaryDirectory() as tmp:
        cand_path = Path(tmp) / "candidate.py"
        cand_path.write_text(code)
        cand = rt.make_model(load_module(cand_path, f"candidate_{kid}").ModelNew)
        load_state(ref, cand)
        compiled = torch.compile(ref)
        out = {"task": task, "kernel": kid, "stored_vs_compile": round(ratio, 3),
               "eager": measure(lambda: ref(*inputs)),
               "compile": measure(lambda: compiled(*inputs)),
               "ours": measure(lambda: cand(*inputs))}
    out["vs_compile"] = round(out["compile"]["wall_ms"] / out["ours"]["wall_ms"], 3)
    torch._dynamo.reset()
    return out


def show(r: dict) -> None:
    if "error" in r:
        print(f"{r['task']}: {r['error']}")
        return
    print(f"\n{r['task']}: ours {r['vs_compile']}x torch.compile here "
          f"({r['stored_vs_compile']}x in the bench)")
    for mode in ("compile", "ours"):
        m = r[mode]
        print(f"  {mode:8s} wall {m['wall_ms']:.4f} ms = kernels {m['gpu_ms']:.4f} ms "
              f"({m['launches']:g} launches) + gap {m['gap_ms']:.4f} ms")
        for name, k in list(m["kernels"].items())[:8]:
            print(f"      {k['ms']:8.4f} ms  x{k['per_call']:g}  {name[:90]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="+", type=Path)
    ap.add_argument("--db", required=True, help="the bench's store (SQLite)")
    ap.add_argument("--suite", default=None, help="only kernels of this suite's jobs")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = []
    for path in args.problems:
        try:
            results.append(problem(path, args.db, args.suite))
        except Exception as err:  # one problem's failure is its line, the others go on
            results.append({"task": f"{path.parent.name}/{path.stem}",
                            "error": f"{type(err).__name__}: {err}"})
        show(results[-1])
        args.out.write_text(json.dumps({
            "benchmark": "kernel_times", "commit": commit, "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "calls": CALLS, "profiled_calls": PROFILED_CALLS, "results": results}, indent=1))


if __name__ == "__main__":
    main()
