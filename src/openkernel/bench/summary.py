"""A suite's table and figures, read from the results database (the CLI and the dashboard).

Per problem: how its job ended, whether it has a correct kernel, the best correct kernel's
speedup over the eager reference and over torch.compile, candidates judged, time, evaluator
faults. The strongest compiler baseline is torch.compile's max-autotune-no-cudagraphs mode,
timed in the same interleaved rounds as eager and the default mode: a kernel's speedup over it is
its speedup over eager times (autotune time / eager time). Over the suite, KernelBench's ``fast_p``: the share of *all* problems with a correct
kernel faster than ``p`` times the reference (fast_0 is the share with a correct kernel), for
p = 0, 1, 1.5, 2; and the geometric means of the best speedups over eager, over
torch.compile and over max-autotune, over the problems with a correct kernel (with their counts).

Only portable SQLAlchemy Core is used, so the same queries run on the engine's store and on
the dashboard's read-only connection.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Engine

from openkernel.store.tables import Kernel, ReferenceTiming, Run, SuiteProblem

FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass
class ProblemResult:
    name: str
    status: str = "not started"  # the newest run's: completed, failed, stopped, running, ...
    correct: bool = False
    speedup: float | None = None  # best correct kernel over the eager reference
    over_compile: float | None = None  # the same kernel over torch.compile of the reference
    candidates: int = 0
    evaluator_faults: int = 0  # candidates the evaluator could not judge (after their retry)
    retried: int = 0  # candidates judged only on the retry after an evaluator fault
    time_s: float = 0.0  # all runs of the job
    over_autotune: float | None = None  # ... over torch.compile max-autotune-no-cudagraphs
    eager_ms: float | None = None
    compile_ms: float | None = None
    autotune_ms: float | None = None
    best_kernel: str | None = None
    footprint_bytes: int = 0  # the reference's own footprint (the probe's)
    peak_over_footprint: float | None = None  # the worst candidate's worker peak over it
    candidate_s: float | None = None  # median of a candidate's own time (not waiting for a turn)
    hardware: str = ""
    error: str = ""
    path: str = ""


@dataclass
class SuiteSummary:
    suite: str
    problems: list[ProblemResult] = field(default_factory=list)
    fast_p: dict[str, float] = field(default_factory=dict)
    geomean_eager: float | None = None
    geomean_compile: float | None = None
    geomean_autotune: float | None = None
    n_correct: int = 0
    n_compile: int = 0  # problems with a correct kernel and a torch.compile timing
    n_autotune: int = 0  # ... and a max-autotune timing

    def to_json(self) -> dict:
        return {"suite": self.suite, "problems": [asdict(p) for p in self.problems],
                "fast_p": self.fast_p, "geomean_eager": self.geomean_eager,
                "geomean_compile": self.geomean_compile,
                "geomean_autotune": self.geomean_autotune, "n_problems": len(self.problems),
                "n_correct": self.n_correct, "n_compile": self.n_compile,
                "n_autotune": self.n_autotune}


def p_label(p: float) -> str:
    return f"{p:g}"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarize(suite: str, problems: list[ProblemResult]) -> SuiteSummary:
    """The suite's figures from its problems' rows (pure)."""
    n = len(problems)
    correct = [p for p in problems if p.correct and p.speedup]
    with_compile = [p for p in correct if p.over_compile]
    with_autotune = [p for p in correct if p.over_autotune]
    return SuiteSummary(
        suite=suite, problems=problems,
        fast_p={p_label(p): (sum(1 for r in correct if r.speedup > p) / n if n else 0.0)
                for p in FAST_P},
        geomean_eager=geomean([p.speedup for p in correct]),
        geomean_compile=geomean([p.over_compile for p in with_compile]),
        geomean_autotune=geomean([p.over_autotune for p in with_autotune]),
        n_correct=len(correct), n_compile=len(with_compile), n_autotune=len(with_autotune))


def has_suites(engine: Engine) -> bool:
    return inspect(engine).has_table(SuiteProblem.__tablename__)


def list_suites(engine: Engine) -> list[dict]:
    """Every suite: name, number of problems, when its newest problem was filed."""
    if not has_suites(engine):
        return []
    q = (select(SuiteProblem.suite, func.count(), func.max(SuiteProblem.added_at))
         .group_by(SuiteProblem.suite).order_by(func.max(SuiteProblem.added_at).desc()))
    with engine.connect() as conn:
        return [{"suite": s, "problems": n, "added": str(t or "")[:19]}
                for s, n, t in conn.execute(q)]


def suite_summary(engine: Engine, suite: str) -> SuiteSummary | None:
    """The suite's table and figures, or None when no such suite is stored."""
    if not has_suites(engine):
        return None
    with engine.connect() as conn:
        entries = conn.execute(select(SuiteProblem).where(SuiteProblem.suite == suite)
                               .order_by(SuiteProblem.position)).all()
        if not entries:
            return None
        return summarize(suite, [_problem(conn, e) for e in entries])


def _own_seconds(meta: dict) -> float:
    """A candidate's own time: its evaluation, less the wait for another candidate's GPU turn."""
    return float(meta["evaluation_s"]) - float((meta.get("phase_s") or {}).get("queued", 0.0))


def _problem(conn, entry) -> ProblemResult:
    row = ProblemResult(name=entry.task_name, path=entry.path, status=entry.outcome or "not started",
                        error=entry.error or "")
    runs = conn.execute(select(Run.status, Run.error, Run.started_at, Run.finished_at, Run.hardware,
                               Run.config)
                        .where(Run.task_name == entry.task_name, Run.job_name == entry.job_name)
                        .order_by(Run.id)).all()
    if runs:
        row.status, row.hardware = runs[-1].status, runs[-1].hardware
        footprint = (runs[-1].config or {}).get("footprint") if isinstance(runs[-1].config, dict) else None
        row.footprint_bytes = int((footprint or {}).get("peak_bytes") or 0)
        row.error = runs[-1].error or row.error
        row.time_s = round(sum((r.finished_at - r.started_at).total_seconds() for r in runs
                               if r.finished_at and r.started_at), 1)
    kernels = conn.execute(select(Kernel.id, Kernel.status, Kernel.correctness, Kernel.is_program0,
                                  Kernel.runtime_improvement, Kernel.improve_over_compile,
                                  Kernel.runtime_stats, Kernel.meta.label("meta"))
                           .where(Kernel.task_name == entry.task_name,
                                  Kernel.job_name == entry.job_name)).all()
    candidates = [k for k in kernels if not k.is_program0]
    row.candidates = len(candidates)
    row.evaluator_faults = sum(1 for k in candidates if k.status == "evaluator_fault")
    row.retried = sum(1 for k in candidates if k.status != "evaluator_fault"
                      and isinstance(k.meta, dict) and k.meta.get("retried"))
    memory = [k.meta.get("memory") or {} for k in candidates if isinstance(k.meta, dict)]
    ratios = [m["peak_over_footprint"] for m in memory if m.get("peak_over_footprint") is not None]
    row.footprint_bytes = row.footprint_bytes or max((m.get("footprint_bytes") or 0 for m in memory),
                                                     default=0)
    row.peak_over_footprint = max(ratios) if ratios else None
    own = [_own_seconds(k.meta) for k in candidates if isinstance(k.meta, dict)
           and k.meta.get("evaluation_s") and not k.meta.get("duplicate_of")]
    row.candidate_s = round(statistics.median(own), 2) if own else None
    correct = [k for k in candidates if k.correctness]
    if correct:
        best = max(correct, key=lambda k: k.runtime_improvement)
        row.correct, row.best_kernel = True, best.id
        row.speedup = best.runtime_improvement if best.runtime_improvement > 0 else None
        row.over_compile = best.improve_over_compile if best.improve_over_compile > 0 else None
    timing = conn.execute(select(ReferenceTiming.runtime_stats).where(
        ReferenceTiming.task_digest == entry.task_digest, ReferenceTiming.kind == "compile",
        *([ReferenceTiming.hardware == row.hardware] if row.hardware else []))).first()
    if timing and isinstance(timing.runtime_stats, dict):
        stats = timing.runtime_stats
        row.eager_ms = (stats.get("eager") or {}).get("median")
        row.compile_ms = (stats.get("compile") or {}).get("median")
        row.autotune_ms = (stats.get("autotune") or {}).get("median")
        if row.speedup and row.autotune_ms and row.eager_ms:
            row.over_autotune = row.speedup * row.autotune_ms / row.eager_ms
    if row.eager_ms is None and correct:  # no cached baseline (the CPU): the reference timed
        stats = best.runtime_stats if isinstance(best.runtime_stats, dict) else {}  # beside it
        row.eager_ms = (stats.get("reference") or {}).get("median")
    return row
