"""Candidates judged per minute and how busy the GPUs were: the record of issues 6 and 7.

    python3 benchmarks/pipeline_throughput.py --backend triton --iters 2 --branches 16 \
        --label triton-1gpu --out $OUT/throughput.json

Runs a real search job (offline generator, fresh database and build cache, so nothing is
reused from an earlier run) and reports: candidates judged per minute; per GPU the share of
wall time its timed turns were held (tests, trials, profiles: the evaluator's own accounting),
also after warm-up (from the first turn on), and NVML's utilisation sampled every 100 ms (the
share of time a kernel was running); how stable the timings were (the reference's median as
each candidate's rounds timed it, its spread across candidates, the candidates' own CVs: with
``--set eval_config.overlap_checks=true`` they show that checks sharing the GPU leave timing
alone); and whether every candidate was judged once and stored once. Results are appended to ``--out`` under ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import openkernel
from openkernel import events as ev

ROOT = Path(__file__).resolve().parents[1]


class NvmlSampler(threading.Thread):
    """utilization.gpu of each visible GPU every ``period`` seconds (nothing without NVML)."""

    def __init__(self, period: float = 0.1):
        super().__init__(daemon=True)
        self.period, self.samples, self.stop = period, [], threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = [int(i) for i in visible.split(",") if i.strip()] if visible else range(
                pynvml.nvmlDeviceGetCount())
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
            self.nvml = pynvml
        except Exception as err:  # no GPU, no NVML: the evaluator's accounting still stands
            self.handles, self.error = [], repr(err)

    def run(self) -> None:
        while not self.stop.wait(self.period):
            now = time.monotonic()
            self.samples.append((now, [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu
                                       for h in self.handles]))

    def mean_after(self, slot: int, start: float, end: float) -> float | None:
        vals = [u[slot] for t, u in self.samples if start <= t <= end]
        return round(sum(vals) / len(vals), 1) if vals else None


def run_job(task: Path, backend: str, iters: int, branches: int, extra: list[str]) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="ok-throughput-"))
    db = tmp / "kernels.sqlite3"
    overrides = [f"backend={backend}", f"max_iters={iters}", f"branches_per_iteration={branches}",
                 "search.seed=0", f"paths.kernels_db_path={db}", f"paths.scratch_dir={tmp / 'scratch'}",
                 f"paths.build_cache_dir={tmp / 'builds'}", "job_name=throughput", *extra]
    sampler = NvmlSampler()
    if sampler.handles:
        sampler.start()
    rows, finished, t_first = [], None, None
    t0 = time.monotonic()
    for event in openkernel.optimize(task, overrides=overrides):
        if isinstance(event, ev.IterationStarted) and t_first is None:
            t_first = time.monotonic()
        elif isinstance(event, ev.CandidateEvaluated):
            r = event.program.kernel_exec_result
            code = event.program.code or ""
            rows.append({"label": event.label, "status": event.status.value,
                         "form": "nvrtc" if "openkernel.nvrtc" in code else
                         "extension" if "load_inline" in code else backend,
                         "speedup": r.runtime_improvement, "gpu_slot": r.metadata.get("gpu_slot"),
                         "evaluation_s": r.metadata.get("evaluation_s"),
                         "phase_s": r.metadata.get("phase_s"), "prestarted": r.metadata.get("prestarted"),
                         "worker": r.metadata.get("worker"),
                         "duplicate_of": r.metadata.get("duplicate_of"),
                         "profile_s": (r.profiler_data or {}).get("profile_s"),
                         "profile_phase_s": (r.profiler_data or {}).get("profile_phase_s"),
                         "profile_prestarted": (r.profiler_data or {}).get("profile_prestarted"),
                         # the reference as this candidate's rounds timed it, and their spread
                         "ref_ms": r.runtime * r.runtime_improvement
                         if r.runtime > 0 and r.runtime_improvement > 0 else None,
                         "cv": (r.runtime_stats or {}).get("cv")})
            print(f"{event.label:8} {event.status.value:13} {r.runtime_improvement:6.2f}x "
                  f"gpu {r.metadata.get('gpu_slot')} {r.metadata.get('evaluation_s', 0):.1f} s", flush=True)
        elif isinstance(event, ev.LogEmitted):
            print(f"[{event.level}] {event.message}", flush=True)
        elif isinstance(event, ev.RunFinished):
            finished = event
    t_end = time.monotonic()
    sampler.stop.set()
    wall = t_end - t_first  # from the first candidate on: probing the task is not the pipeline
    judged = [r for r in rows if not r["duplicate_of"]]
    with sqlite3.connect(db) as conn:
        stored = conn.execute("select label, count(*) from kernels where job_name='throughput' "
                              "and not is_program0 group by label").fetchall()
    per_label = Counter(label for label, _ in stored)
    busy = (finished.extra or {}).get("gpu_busy", {}) if finished else {}
    run_wall = (finished.extra or {}).get("wall_s") if finished else None
    gpus = {}
    for slot, b in busy.items():
        first = b["first_turn_s"]
        after = (run_wall - first) if (run_wall and first is not None) else None
        gpus[str(slot)] = {
            "busy_s": b["busy_s"], "turns": b["turns"], "first_turn_s": first,
            "busy_fraction": round(b["busy_s"] / run_wall, 3) if run_wall else None,
            "busy_fraction_after_warmup": round(b["busy_s"] / after, 3) if after else None,
            "candidates": sum(1 for r in judged if r["gpu_slot"] == int(slot)),
            "nvml_util_mean_pct": sampler.mean_after(int(slot), t0 + first, t_end)
            if sampler.handles and first is not None else None,
        }
    statuses = Counter(r["status"] for r in rows)
    refs = [r["ref_ms"] for r in judged if r["ref_ms"]]
    cvs = sorted(r["cv"] for r in judged if r["cv"] is not None)
    timing = {  # timing stability within the job (the same reference, timed by every candidate)
        "ref_ms_median": statistics.median(refs) if refs else None,
        "ref_ms_cv_across_candidates": round(statistics.pstdev(refs) / statistics.fmean(refs), 4)
        if len(refs) > 1 else None,
        "candidate_cv_median": cvs[len(cvs) // 2] if cvs else None,
    }
    return {
        "timing": timing,
        "forms": forms(judged),
        "pch": (finished.extra or {}).get("pch") if finished else None,
        "ninja_steps_s": ninja_steps(tmp / "builds"),
        "task": str(task.relative_to(ROOT) if task.is_relative_to(ROOT) else task),
        "backend": backend, "iters": iters, "branches": branches, "overrides": overrides,
        "candidates": len(rows), "judged": len(judged), "duplicates": len(rows) - len(judged),
        "wall_s": round(wall, 2), "judged_per_min": round(len(judged) / wall * 60, 2),
        "statuses": dict(statuses), "gpus": gpus,
        "stored_rows": sum(n for _, n in stored), "stored_labels_distinct": len(per_label),
        "judged_once_stored_once": len(stored) == len(rows) and all(n == 1 for _, n in stored),
        "nvml": "sampled" if sampler.handles else getattr(sampler, "error", "off"),
        "profiled": sum(bool(r["profile_s"]) for r in rows),  # (eval_config.profile_scope)
        "rows": rows,
    }


def forms(judged: list[dict]) -> dict:
    """Per build form (NVRTC, cpp_extension, Triton): candidates, and the median and range of
    their build phase (import and compile) and of their whole evaluation, in seconds."""
    out = {}
    for form in sorted({r["form"] for r in judged}):
        rows = [r for r in judged if r["form"] == form]
        build = sorted((r["phase_s"] or {}).get("build", 0.0) + (r["phase_s"] or {}).get("setup", 0.0)
                       for r in rows)
        total = sorted(r["evaluation_s"] or 0.0 for r in rows)
        out[form] = {"candidates": len(rows),
                     "build_s": {"median": build[len(build) // 2], "min": build[0], "max": build[-1]},
                     "evaluation_s_median": total[len(total) // 2]}
    return out


def ninja_steps(builds: Path) -> dict:
    """Median and range of each CUDA C++ build step (main.o: the bindings, the .cu's object,
    the link), from the .ninja_log of every extension built in the run."""
    steps: dict[str, list[float]] = {}
    for log in builds.glob("*/torch-*/torch_extensions/*/.ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4:
                kind = "link" if parts[3].endswith(".so") else parts[3].rsplit(".", 2)[-2]
                steps.setdefault(kind, []).append((int(parts[1]) - int(parts[0])) / 1000)
    return {k: {"n": len(v), "median": sorted(v)[len(v) // 2], "min": min(v), "max": max(v)}
            for k, v in steps.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default=str(ROOT / "examples" / "gelu"))
    ap.add_argument("--backend", default="triton", choices=("triton", "cuda"))
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--branches", type=int, default=16)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--label", required=True, help="the key this run is stored under")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.exists() else {"benchmark": "pipeline_throughput",
                                                               "runs": {}}
    commit = os.environ.get("OPENKERNEL_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    result = run_job(Path(args.task).resolve(), args.backend, args.iters, args.branches, args.overrides)
    result.update(commit=commit, machine=platform.node(), cpu_count=os.cpu_count(),
                  cpu_affinity=len(os.sched_getaffinity(0)),
                  cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                  date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    record["runs"][args.label] = result
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
