"""How long a worker takes from its start to its first answer: forked by the fork server
(``eval_config.fork_workers``, host/zygote.py) against started anew (its own interpreter and
imports), one alone and N at once (the throughput job starts 16 together).

Each worker is given a ``hardware`` job (device detection; on a GPU its CUDA context first):
the time is from asking for the worker to its result, as a candidate's would be on the
critical path without a spare waiting. The fork server is started (and its imports done)
before the clock starts: it is started once per process, as the engine's first worker
would pay.

    python benchmarks/worker_start.py --device cuda --at-once 1 16 --out results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from openkernel.evaluation.host import zygote  # noqa: E402
from openkernel.evaluation.host.process import WorkerProcess, drive  # noqa: E402
from openkernel.evaluation.protocol import Job  # noqa: E402


def one(root: Path, device: str, server, i: int) -> dict:
    scratch = Path(tempfile.mkdtemp(dir=root, prefix=f"w{i}-"))
    t0 = time.perf_counter()
    gpu = 0 if device == "cuda" else None
    worker = WorkerProcess(scratch, device, gpu, 600, None, zygote=server)
    run = drive(worker, Job(mode="hardware", device=device, scratch=str(scratch)),
                build_timeout_s=300, test_timeout_s=300)
    wall = time.perf_counter() - t0
    timing = (run.payload or {}).get("worker_timing") or {}
    return {"wall_s": round(wall, 3), "ok": bool(run.payload) and "fatal" not in run.payload,
            "forked": timing.get("forked"), "preload_s": timing.get("preload_s")}


def batch(root: Path, device: str, server, n: int) -> dict:
    with ThreadPoolExecutor(n) as pool:
        rows = list(pool.map(lambda i: one(root, device, server, i), range(n)))
    walls = [r["wall_s"] for r in rows]
    return {"workers": n, "all_ok": all(r["ok"] for r in rows),
            "forked": sorted({str(r["forked"]) for r in rows}),
            "median_s": round(statistics.median(walls), 3), "max_s": round(max(walls), 3),
            "preload_median_s": round(statistics.median(r["preload_s"] or 0 for r in rows), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--at-once", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--repeats", type=int, default=3, help="batches of each size, each way")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ok-worker-start-"))
    server = zygote.Zygote(args.device)
    # the server's imports done before the clock starts (a first worker waits for them)
    one(root, args.device, server, -1)
    out = {"benchmark": "worker_start", "device": args.device, "cores": os.cpu_count(),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip(),
           "runs": []}
    if args.device == "cuda":
        import torch

        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    for n in args.at_once:
        for _ in range(args.repeats):  # alternated, so drift in the machine's load hits both
            for how, srv in (("forked", server), ("started anew", None)):
                row = {"how": how, **batch(root, args.device, srv, n)}
                out["runs"].append(row)
                print(json.dumps(row))
    summary = {}
    for n in args.at_once:
        for how in ("forked", "started anew"):
            rows = [r for r in out["runs"] if r["workers"] == n and r["how"] == how]
            summary[f"{how}, {n} at once"] = round(statistics.median(r["median_s"] for r in rows), 3)
    out["median_of_medians_s"] = summary
    print(json.dumps(summary, indent=1))
    server.stop()
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
