"""Engine overhead per candidate, and the wall time of a whole default job.

Runs a real offline search (the embedded default) with one evaluation worker, so candidates
are judged one after another, and splits the wall time:

    overhead per candidate = (wall - probe - sum of evaluation time) / candidates

Evaluation time is the worker's build + correctness + benchmark as the loop measured it around
``Evaluator.evaluate`` (the worker process start included). What is left is the engine's own
work: sampling parents, the generator's proposal, prompt building, database writes, events.

    python benchmarks/engine_overhead.py --out benchmarks/results/engine_overhead_cpu.json
    python benchmarks/engine_overhead.py --job   # the default 5 x 4 job, default workers
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import openkernel
from openkernel import events as ev

ROOT = Path(__file__).resolve().parents[1]


def run(task: str, overrides: list[str]) -> dict:
    t0 = time.perf_counter()
    first_candidate_at = None
    evaluated = []
    finished = None
    started = None
    for event in openkernel.optimize(task, overrides=overrides):
        if isinstance(event, ev.RunStarted):
            started = event
        if isinstance(event, ev.CandidateStarted) and first_candidate_at is None:
            first_candidate_at = time.perf_counter()
        if isinstance(event, ev.CandidateEvaluated):
            evaluated.append(event)
        if isinstance(event, ev.RunFinished):
            finished = event
    wall = time.perf_counter() - t0
    probe_s = (first_candidate_at or t0) - t0
    eval_s = sum(e.program.metadata.get("evaluation_s", 0.0) for e in evaluated)
    gen_s = sum(e.program.metadata.get("generation_s", 0.0) for e in evaluated)
    n = max(len(evaluated), 1)
    statuses: dict[str, int] = {}
    for e in evaluated:
        statuses[e.status.value] = statuses.get(e.status.value, 0) + 1
    return {
        "hardware": started.hardware if started else None,
        "candidates": len(evaluated),
        "wall_s": round(wall, 3),
        "probe_and_setup_s": round(probe_s, 3),
        "evaluation_s_total": round(eval_s, 3),
        "generation_s_total": round(gen_s, 4),
        "engine_overhead_ms_per_candidate": round(1e3 * (wall - probe_s - eval_s) / n, 2),
        "evaluation_s_per_candidate": round(eval_s / n, 3),
        "best_speedup": finished.best_speedup if finished else None,
        "statuses": statuses,
        "reason": finished.reason if finished else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default=str(ROOT / "examples" / "gelu"))
    ap.add_argument("--job", action="store_true", help="the default job (5 x 4), default workers")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ok-bench-"))
    overrides = [f"paths.kernels_db_path={tmp / 'k.sqlite3'}", f"paths.scratch_dir={tmp / 'scratch'}",
                 "search.seed=0"]
    if not args.job:
        overrides += ["max_iters=3", "branches_per_iteration=4", "eval_config.max_workers=1"]
    load_before = os.getloadavg()[0]
    figures = run(args.task, overrides + args.overrides)
    if args.job:  # parallel workers: evaluation times overlap, so no per-candidate split
        figures.pop("engine_overhead_ms_per_candidate")
    figures["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {
        "benchmark": "engine_job" if args.job else "engine_overhead",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} ({os.cpu_count()} cores)",
        "commit": commit,
        "task": args.task,
        "overrides": args.overrides,
        **figures,
    }
    print(json.dumps(record, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
