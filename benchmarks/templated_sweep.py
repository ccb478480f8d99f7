"""Templated kernels judged at every combination: the H200 record of issue 13.

    python3 benchmarks/templated_sweep.py --out $OUT/templated.json

Two templates (benchmarks/candidates/): a Triton matmul + bias + relu (48 combinations) on
examples/matmul_bias_relu and a CUDA C++ GELU (16 combinations) on examples/gelu. Each is judged
the way `openkernel eval` judges it: every combination built, checked on one input set and timed
in one GPU turn, the winner given the full checks. Per template: every combination's status and
runtime, the winner, the seconds of the sweep and of the whole judgement, and the combinations
judged per minute (combinations / whole judgement, probe excluded).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from openkernel.evaluation.host.executor import Evaluator
from openkernel.runner import resolve_run

ROOT = Path(__file__).resolve().parents[1]
CASES = (("matmul_bias_relu", "templated_matmul_triton.py", "triton"),
         ("gelu", "templated_gelu_cuda.py", "cuda"))


def judge(task: str, candidate: str, backend: str, extra: list[str]) -> dict:
    overrides = [f"backend={backend}", "prompt.max_template_combinations=64",
                 "eval_config.profile=false", *extra]
    task_obj, config = resolve_run(str(ROOT / "examples" / task), overrides)
    code = (ROOT / "benchmarks" / "candidates" / candidate).read_text()
    evaluator = Evaluator(task_obj, config, None)
    try:
        t0 = time.perf_counter()
        probe = evaluator.probe()
        probe_s = time.perf_counter() - t0
        assert probe.ok, probe.error
        t1 = time.perf_counter()
        result, winner_code = evaluator.evaluate_template(code, backend, label=candidate)
        judge_s = time.perf_counter() - t1
    finally:
        evaluator.close()
    tr = result.template_results or {}
    rows = tr.get("combinations", [])
    out = {
        "task": task, "candidate": candidate, "backend": backend,
        "hardware": evaluator.hardware.label,
        "space_size": tr.get("space_size"), "combinations_judged": len(rows),
        "correct": sum(1 for r in rows if r["speedup"] > 0),
        "winner": tr.get("winner"), "winner_status": result.get_status().value,
        "winner_runtime_ms": result.runtime, "winner_speedup_eager": result.runtime_improvement,
        "winner_speedup_compile": result.improve_over_compile,
        "reference_ms": (tr.get("reference_stats") or {}).get("median"),
        "probe_s": round(probe_s, 2), "sweep_s": tr.get("sweep_s"), "judged_s": round(judge_s, 2),
        "combinations_per_minute": round(len(rows) / (judge_s / 60), 2) if judge_s else None,
        "timing_method": tr.get("timing_method"),
        "combinations": [{"params": r["params"], "status": r["status"],
                          "runtime_ms": r["runtime"], "speedup": r["speedup"],
                          "cv": (r.get("runtime_stats") or {}).get("cv"),
                          "error": r["error"][-300:]} for r in rows],
        "log": result.eval_log[-3000:],
    }
    print(f"{task:18} {backend:6} {len(rows)}/{out['space_size']} combinations, "
          f"{out['correct']} correct, winner {out['winner']} {result.get_status().value} "
          f"{result.runtime_improvement:.2f}x eager, {result.improve_over_compile:.2f}x compile; "
          f"sweep {out['sweep_s']} s, judged in {out['judged_s']} s: "
          f"{out['combinations_per_minute']} combinations/min", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=[c[2] for c in CASES], default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()
    except FileNotFoundError:
        gpu = []
    record = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit,
              "gpu": gpu[0] if gpu else "none", "host": platform.node(), "templates": []}
    for task, candidate, backend in CASES:
        if args.only and backend != args.only:
            continue
        record["templates"].append(judge(task, candidate, backend, args.overrides))
        Path(args.out).write_text(json.dumps(record, indent=2, default=str))


if __name__ == "__main__":
    main()
