"""Where a suite's candidates spent their own time (issue 22), from the store a bench wrote.

    python benchmarks/own_time.py DB SUITE [--json FILE]

For every candidate of the suite's problems: its own seconds (as the bench table counts them:
its sweep and its evaluation, waits for another's GPU turn not counted), the worker's phases
(setup, build, warmup: the first calls where Triton compiles, queued, test, benchmark), its
compilations, the steps of its checks (``metadata.memory.steps_s``) and what the evaluator
spent them on (``spent_s``: a sweep's own work, its set-up, confinement, the combinations'
models and first calls among it, plus its winner's checks), the worker's start of the job
(``job_start_s``: reading it, pointing the caches), and where its winner was judged. Then the medians of each over the
suite, and each problem's float64 answer note (``costs.float64_answer``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

from sqlalchemy import create_engine, select

from openkernel.bench.summary import _own_seconds
from openkernel.store.tables import Kernel, SuiteProblem


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


def rows(db: str, suite: str) -> tuple[list[dict], dict[str, str]]:
    engine = create_engine(db if "://" in db else f"sqlite:///{db}")
    out, notes = [], {}
    with engine.connect() as conn:
        problems = conn.execute(select(SuiteProblem).where(SuiteProblem.suite == suite)
                                .order_by(SuiteProblem.position)).all()
        for p in problems:
            costs = p.costs if isinstance(p.costs, dict) else {}
            if costs.get("float64_answer"):
                notes[p.task_name] = costs["float64_answer"]
            kernels = conn.execute(select(Kernel.label, Kernel.meta.label("meta"), Kernel.template_results)
                                   .where(Kernel.task_name == p.task_name,
                                          Kernel.job_name == p.job_name,
                                          Kernel.is_program0.is_(False))).all()
            for k in kernels:
                meta = k.meta if isinstance(k.meta, dict) else {}
                if not meta.get("evaluation_s") or meta.get("duplicate_of"):
                    continue
                template = k.template_results if isinstance(k.template_results, dict) else {}
                phases = dict(template.get("phase_s") or meta.get("phase_s") or {})
                memory = meta.get("memory") or {}
                # a sweep's own work (screening its combinations), then its winner's checks
                spent = dict(template.get("spent_s") or {})
                for name, value in (memory.get("spent_s") or {}).items():
                    spent[name] = round(spent.get(name, 0.0) + value, 3)
                worker = template.get("worker") or meta.get("worker") or {}
                out.append({"problem": p.task_name, "label": k.label,
                            "own_s": round(_own_seconds(meta, template), 3),
                            "judged_in": meta.get("judged_in") or "its own worker",
                            "phases_s": phases,
                            "compilations": (meta.get("compile") or {}).get("compilations"),
                            "compiling_s": (meta.get("compile") or {}).get("compiling_s"),
                            "steps_s": memory.get("steps_s") or {},
                            "spent_s": spent, "job_start_s": worker.get("job_start_s"),
                            # Triton's key of its install: from the fork server, or made here
                            "triton_key": worker.get("triton_key"),
                            # the head start's launches of the evaluator's own kernels, and
                            # the one-pass kernel made there (fused_comparison)
                            "warm": worker.get("warm"),
                            "compare_kernel": worker.get("compare_kernel"),
                            # a sweep's first calls: their seconds, and whether one went alone
                            "first_calls_s": template.get("first_calls_s"),
                            "first_call_alone": template.get("first_call_alone")})
    return out, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("suite")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    found, notes = rows(args.db, args.suite)
    if not found:
        print(f"no judged candidate in suite {args.suite!r} of {args.db}")
        return 1
    for r in found:
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items() if v >= 0.05)
        print(f"{r['problem'][:34]:34} {r['label']:6} own {r['own_s']:5.1f} s  [{phases}]  "
              f"{r['compilations'] or 0} compilations {r['compiling_s'] or 0:.1f} s  "
              f"({r['judged_in']})")
    for name, note in notes.items():  # before the summary: a stage shows its last lines
        print(f"  {name}: {note}")
    medians = {}
    for key in ("phases_s", "steps_s", "spent_s"):
        values = defaultdict(list)
        for r in found:
            for name, value in r[key].items():
                values[name].append(value)
        medians[key] = {name: _median(v) for name, v in values.items()}
    medians["own_s"] = _median([r["own_s"] for r in found])
    medians["compiling_s"] = _median([r["compiling_s"] or 0.0 for r in found])
    medians["job_start_s"] = _median([r["job_start_s"] for r in found
                                      if r.get("job_start_s") is not None])
    print(f"\n{len(found)} candidates; own time median {medians['own_s']} s, compiling "
          f"{medians['compiling_s']} s, the worker's start of the job {medians['job_start_s']} s")
    for alone in (True, False):  # a sweep's first calls, with one alone first or all at once
        picked = [r["first_calls_s"] for r in found if r.get("first_call_alone") is alone
                  and r.get("first_calls_s") is not None]
        medians[f"first_calls_s_{'alone_first' if alone else 'all_at_once'}"] = _median(picked)
        if picked:
            print(f"sweeps' first calls {'one alone first' if alone else 'all at once'}: "
                  f"{len(picked)}, median {_median(picked)} s")
    keys = defaultdict(int)  # "computed here in 0.41 s" counted as "computed here"
    for r in found:
        if r.get("triton_key"):
            keys[r["triton_key"].split(" in ")[0]] += 1
    if keys:
        medians["triton_key"] = dict(keys)
        print("Triton's install key at the job's start: "
              + ", ".join(f"{k} {n}" for k, n in sorted(keys.items())))
    warm = [float(r["warm"].split()[0]) for r in found
            if isinstance(r.get("warm"), str) and not r["warm"].startswith("failed")]
    made = [r["compare_kernel"] for r in found if r.get("compare_kernel")]
    if warm or made:
        medians["warm_s"] = _median(warm)
        print(f"head start: the evaluator's kernels launched in {len(warm)} workers (median "
              f"{_median(warm)} s); the one-pass kernel made before {len(made)} jobs")
    for key in ("phases_s", "steps_s", "spent_s"):
        if medians[key]:
            top = sorted(medians[key].items(), key=lambda kv: -kv[1])
            print(f"{key} medians: " + ", ".join(f"{k} {v:.2f}" for k, v in top if v >= 0.01))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"suite": args.suite, "candidates": found, "medians": medians,
                       "float64_answers": notes}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
