"""The Ray executor against the local pipeline on the same job: judged per minute, GPU busy.

On the one-GPU H200 (Ray started here, on this machine's GPU):

    python3 benchmarks/ray_vs_local.py --iters 2 --branches 16 --out $OUT/ray_vs_local.json

On the CPU, as a check that it works (a tiny job; Ray gets one logical GPU):

    python3 benchmarks/ray_vs_local.py --iters 1 --branches 2 --logical-gpus 1 \
        --out /tmp/ray_vs_local.json

Each run is ``pipeline_throughput.run_job`` (fresh database and build cache, the same seed):
first the local pipeline, then ``executor: ray`` with every GPU's actor on this machine (or
the cluster at ``--ray-address``). What it costs to go through Ray shows as the difference in
judged per minute and in the share of wall time each GPU's timed turns were held; both count
from the first candidate on, so starting the actors and probing the task are left out.
Results go to ``--out`` under ``local`` and ``ray``, with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_throughput import ROOT, run_job  # noqa: E402


def _summary(run: dict) -> dict:
    gpus = run["gpus"]
    return {"judged_per_min": run["judged_per_min"], "wall_s": run["wall_s"],
            "judged": run["judged"], "statuses": run["statuses"],
            "judged_once_stored_once": run["judged_once_stored_once"],
            "gpu_busy_fraction": {s: g["busy_fraction"] for s, g in gpus.items()},
            "gpu_busy_after_warmup": {s: g["busy_fraction_after_warmup"] for s, g in gpus.items()},
            "nvml_util_mean_pct": {s: g["nvml_util_mean_pct"] for s, g in gpus.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default=str(ROOT / "examples" / "gelu"))
    ap.add_argument("--backend", default="triton", choices=("triton", "cuda"))
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--branches", type=int, default=16)
    ap.add_argument("--ray-address", default=None, help="a running cluster (default: start a "
                    "local Ray on this machine for the run)")
    ap.add_argument("--logical-gpus", type=int, default=None, help="GPUs the local Ray "
                    "announces (on the CPU: 1, a logical GPU; default: those detected)")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("RAY_DISABLE_IMPORT_WARNING", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    task = Path(args.task).resolve()

    print("== local pipeline", flush=True)
    local = run_job(task, args.backend, args.iters, args.branches, args.overrides)

    import ray

    print("== Ray executor", flush=True)
    if args.ray_address:
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
    else:  # joined here, so the run keeps it; stopped below
        ray.init(num_gpus=args.logical_gpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 << 20)
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        on_ray = run_job(task, args.backend, args.iters, args.branches,
                         [*args.overrides, "executor=ray", f"ray.gpus={gpus}"])
    finally:
        ray.shutdown()

    def ratio(key: str) -> float | None:
        a, b = local[key], on_ray[key]
        return round(b / a, 3) if a else None

    commit = os.environ.get("OPENKERNEL_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
        text=True).stdout.strip()
    record = {
        "benchmark": "ray_vs_local", "commit": commit, "machine": platform.node(),
        "cpu_count": os.cpu_count(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "job": {"task": str(task), "backend": args.backend, "iters": args.iters,
                "branches": args.branches, "overrides": args.overrides},
        "ray_gpus": gpus, "summary": {"local": _summary(local), "ray": _summary(on_ray),
                                      "ray_over_local_judged_per_min": ratio("judged_per_min")},
        "runs": {"local": local, "ray": on_ray},
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"], indent=2))


if __name__ == "__main__":
    main()
