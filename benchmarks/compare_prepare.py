"""Where making the one-pass comparison kernel (``eval_config.fused_comparison``) spends its time,
one process alone and N at once, torch's CPU threads as they are or one, with and without other
processes keeping the GPU busy (issue 22).

In a process alone on the H200 making it took 0.08-0.31 s; inside a bench's workers 2.0-2.3 s a
job (kb22-s27-b), and its import and CPU figures made before the job took workers' start to
17-19 s (kb22-s27-c). Each process here does a GPU worker's steps in order and times each:
torch's CUDA context, ``import cuda.core``, the self-check's figures on the CPU
(``correctness.self_check_sets``), the values on the GPU, the kernel loaded from the machine's
cache (``CompareKernel``) and ``correctness.prepare`` (its self-check launches). ``--threads``:
torch's CPU threads while the figures are made (0: as a process starts, one per core; the
worker makes them on one since session 28). ``--busy K``: K more processes run large
elementwise kernels back to back on the GPU meanwhile, as a bench's timed candidates do;
``--cpu-busy K``: K processes keep a core each busy, as a bench's compilations do.
``--cpu-only``: the CPU steps alone (no GPU needed).

    python benchmarks/compare_prepare.py --at-once 1 8 16 --threads 0 1 --busy 0 2 --out x.json
    python benchmarks/compare_prepare.py --cpu-only --at-once 1 --threads 0 1 --cpu-busy 0 6
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(cache: str, threads: int) -> dict:
    """One process's steps (run with --child; ``cache`` empty: the CPU steps only)."""
    steps: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        fn()
        steps[name] = round(time.perf_counter() - t0, 3)

    timed("import torch", lambda: __import__("torch"))
    import torch

    from openkernel.evaluation.worker import correctness

    if not cache:
        timed("self-check figures (CPU)", lambda: correctness.self_check_sets(threads or None))
        return {"steps_s": steps, "how": "CPU steps only"}
    timed("CUDA context", lambda: (torch.empty(1, device="cuda"), torch.cuda.synchronize()))
    from openkernel.evaluation.worker.compare_kernel import CompareKernel
    from openkernel.nvrtc.kernel import _cuda_core

    timed("import cuda.core", _cuda_core)
    timed("self-check figures (CPU)", lambda: correctness.self_check_sets(threads or None))
    timed("self-check values to the GPU", lambda: [(o.cuda(), r.cuda()) for o, r, _ in
                                                   correctness.self_check_sets().values()])
    timed("kernel loaded", lambda: CompareKernel(torch.device("cuda"), cache))
    out = {}
    timed("prepare", lambda: out.update(how=correctness.prepare("cuda", cache)))
    return {"steps_s": steps, "how": out["how"]}


def busy_child() -> None:
    """Keeps the GPU busy until killed: 1 GiB read and written per kernel, back to back."""
    import torch

    x = torch.ones(1 << 28, device="cuda")
    while True:
        x.mul_(1.0000001)


def cpu_busy_child() -> None:
    """Keeps one core busy until killed (pure Python: no threads of its own)."""
    while True:
        sum(range(100_000))


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def batch(n: int, threads: int, cache: str, busy: int = 0, cpu_busy: int = 0) -> dict:
    env = _env()
    loads = [subprocess.Popen([sys.executable, __file__, "--busy-child"], env=env)
             for _ in range(busy)]
    loads += [subprocess.Popen([sys.executable, __file__, "--cpu-busy-child"], env=env)
              for _ in range(cpu_busy)]
    if loads:
        time.sleep(8 if busy else 1)  # their contexts made and their kernels running
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", cache or "", str(threads)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(n)]
    runs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode:
                raise SystemExit(f"a process failed: {err[-2000:]}")
            runs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for load in loads:
            load.kill()
            load.wait()
    names = list(runs[0]["steps_s"])
    return {"at_once": n, "busy": busy, "cpu_busy": cpu_busy, "cores": os.cpu_count(),
            "torch_threads": threads or torch_threads_default(),
            "wall_s": round(time.perf_counter() - t0, 3), "how": sorted({r["how"] for r in runs}),
            "median_s": {k: round(statistics.median(r["steps_s"][k] for r in runs), 3) for k in names},
            "max_s": {k: max(r["steps_s"][k] for r in runs) for k in names}}


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"


def torch_threads_default() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--busy-child":
        busy_child()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--cpu-busy-child":
        cpu_busy_child()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at-once", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, nargs="+", default=[0, 1],
                    help="torch's CPU threads while the figures are made (0: as it starts)")
    ap.add_argument("--busy", type=int, nargs="+", default=[0],
                    help="processes keeping the GPU busy meanwhile")
    ap.add_argument("--cpu-busy", type=int, nargs="+", default=[0],
                    help="processes keeping a core busy each meanwhile")
    ap.add_argument("--cpu-only", action="store_true", help="the CPU steps alone (no GPU)")
    ap.add_argument("--repeat", type=int, default=1, help="batches of each setting")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cache = None if args.cpu_only else tempfile.mkdtemp(prefix="compare-kernel-")
    if cache:
        batch(1, 0, cache)  # compiles the cubin into the cache: every batch below reads it
    rows = []
    for busy in [0] if args.cpu_only else args.busy:
        for cpu_busy in args.cpu_busy:
            for threads in args.threads:
                for n in args.at_once:
                    for _ in range(args.repeat):
                        rows.append(batch(n, threads, cache, busy, cpu_busy))
                        print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    res = {"benchmark": "compare_prepare", "rows": rows, "commit": commit,
           "machine": f"{platform.node()}: {os.cpu_count()} cores" + (
               "" if args.cpu_only else f", {gpu_name()}"),
           "command": " ".join(["python", "benchmarks/compare_prepare.py", *sys.argv[1:]]),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z")}
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
