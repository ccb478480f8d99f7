"""What checking every timed call found and cost over a suite a bench wrote (issue 56).

    python benchmarks/timed_checks.py DB SUITE [SUITE ...] [--json FILE]

Per suite: its candidates by verdict; every integrity violation by check, with those the timed
calls' checks made (a violation whose message names a timed call, or ``timed_calls`` and
``background_process``) listed one by one: the offline generator writes honest kernels, so each
of those is a false positive to explain; the timed calls each candidate made and checked, and
the seconds their inputs and checks took (``metadata.timed_calls``); the candidates' own time
(as the bench counts it), whose medians with the checks on and off say what they cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter

from sqlalchemy import create_engine, select

from openkernel.bench.summary import _own_seconds
from openkernel.store.tables import Kernel, SuiteProblem

NEW_CHECKS = ("timed_calls", "background_process")


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def suite_report(conn, suite: str) -> dict:
    problems = conn.execute(select(SuiteProblem).where(SuiteProblem.suite == suite)
                            .order_by(SuiteProblem.position)).all()
    verdicts, checks, blamed = Counter(), Counter(), []
    own, calls, inputs_s, checks_s, checked, unchecked = [], [], [], [], 0, 0
    for p in problems:
        rows = conn.execute(select(Kernel.label, Kernel.status, Kernel.meta.label("meta"),
                                   Kernel.template_results, Kernel.eval_log)
                            .where(Kernel.task_name == p.task_name, Kernel.job_name == p.job_name,
                                   Kernel.is_program0.is_(False))).all()
        for k in rows:
            meta = k.meta if isinstance(k.meta, dict) else {}
            verdicts[k.status] += 1
            check = meta.get("integrity_violation")
            if check:
                checks[check] += 1
                line = next((ln for ln in (k.eval_log or "").splitlines()
                             if ln.startswith("INTEGRITY VIOLATION")), "")
                if check in NEW_CHECKS or "timed call" in line:
                    blamed.append({"problem": p.task_name, "label": k.label, "check": check,
                                   "line": line[:400]})
            timed = meta.get("timed_calls") or {}
            if timed.get("checked"):
                checked += 1
                calls.append(timed.get("calls", 0))
                inputs_s.append(timed.get("inputs_s", 0.0))
                checks_s.append(timed.get("checks_s", 0.0))
            elif timed:
                unchecked += 1
            if meta.get("evaluation_s") and not meta.get("duplicate_of"):
                own.append(_own_seconds(meta, k.template_results))
    return {"suite": suite, "problems": len(problems), "candidates": sum(verdicts.values()),
            "verdicts": dict(verdicts), "violations": dict(checks),
            "blamed_by_timed_checks": blamed, "timed_checked": checked,
            "timed_unchecked": unchecked, "timed_calls_median": _median(calls),
            "timed_inputs_s_median": _median(inputs_s), "timed_checks_s_median": _median(checks_s),
            "own_s_median": _median(own), "own_s": [round(v, 3) for v in own]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    engine = create_engine(args.db if "://" in args.db else f"sqlite:///{args.db}")
    with engine.connect() as conn:
        reports = [suite_report(conn, s) for s in args.suites]
    for r in reports:
        print(f"{r['suite']}: {r['problems']} problems, {r['candidates']} candidates "
              f"{r['verdicts']}; violations {r['violations'] or 'none'}")
        print(f"  timed calls checked for {r['timed_checked']} candidates (not checked: "
              f"{r['timed_unchecked']}), median {r['timed_calls_median']} calls, inputs "
              f"{r['timed_inputs_s_median']} s, checks {r['timed_checks_s_median']} s; own time "
              f"median {r['own_s_median']} s")
        print(f"  blamed by the timed calls' checks: {len(r['blamed_by_timed_checks'])}")
        for b in r["blamed_by_timed_checks"]:
            print(f"    {b['problem']} {b['label']} [{b['check']}] {b['line'][:300]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"suites": reports}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
