"""A suite's table and figures, read from the results database (the CLI and the dashboard).

Per problem: how its job ended, whether it has a correct kernel, the best correct kernel's
speedup over the eager reference and over torch.compile (faster, a tie or slower by the tie
rule: :func:`against_compile`), candidates judged, time, evaluator faults. The strongest compiler baseline is torch.compile's max-autotune-no-cudagraphs mode,
timed in the same interleaved rounds as eager and the default mode: a kernel's speedup over it is
its speedup over eager times (autotune time / eager time). torch.compile's reduce-overhead mode
(``cudagraphs``: its kernels replayed from CUDA graphs) is timed in the same rounds too: the
like-for-like yardstick for a best kernel that replays a CUDA graph itself (``cuda_graph``, read
from its code), whose ratio over the modes without graphs is labelled so. Over the suite,
KernelBench's ``fast_p``: the share of *all* problems with a correct
kernel faster than ``p`` times the reference (fast_0 is the share with a correct kernel), for
p = 0, 1, 1.5, 2; and the geometric means of the best speedups over eager, over
torch.compile, over max-autotune and over cudagraphs, over the problems with a correct kernel
(with their counts).

A problem whose reference is nothing but library GEMMs or convolutions (one GEMM, one
convolution) is *library-bound*: no kernel of ours can be "the library call with more around
it", so its ratio is our own kernel's, and the suite lists those problems apart (their count
and geomean over torch.compile). Every figure is labelled with the precision float32 GEMMs ran
in (``eval_config.allow_tf32``: the reference, torch.compile and the candidates alike).

What a problem cost: its fixed cost (the probe and the reference's baselines, which cost
nothing when found in the store) and each candidate's own time (its sweep and evaluation, less
the waits for another candidate's GPU turn); over the suite, the medians of both. A baseline
that ran past its wall is named with the seconds it ran; a problem that ran past the bench's
``--problem-timeout`` has the status ``timed_out``.

Only portable SQLAlchemy Core is used, so the same queries run on the engine's store and on
the dashboard's read-only connection.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import Engine

from openkernel.evaluation.host.baselines import notes as baseline_notes
from openkernel.records import baseline_kind, software_key
from openkernel.store.tables import Kernel, ReferenceTiming, Run, SuiteProblem
from openkernel.wording import flagged_why, speedup_text

FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass
class ProblemResult:
    name: str
    status: str = "not started"  # the newest run's: completed, failed, stopped, running, ...
    correct: bool = False
    speedup: float | None = None  # best correct kernel over the eager reference
    over_compile: float | None = None  # the same kernel over torch.compile of the reference
    # against torch.compile by the tie rule: "faster", "tie" or "slower" ("" without a ratio)
    vs_compile: str = ""
    candidates: int = 0
    evaluator_faults: int = 0  # candidates the evaluator could not judge (after their retry)
    retried: int = 0  # candidates judged only on the retry after an evaluator fault
    flagged: int = 0  # candidates faster than the hardware allows, twice: kept for review
    flagged_note: str = ""  # why the first of them was, and what it measured (never the winner)
    time_s: float = 0.0  # all runs of the job
    over_autotune: float | None = None  # ... over torch.compile max-autotune-no-cudagraphs
    eager_ms: float | None = None
    compile_ms: float | None = None
    autotune_ms: float | None = None
    over_cudagraphs: float | None = None  # ... over torch.compile reduce-overhead (CUDA graphs)
    cudagraphs_ms: float | None = None
    cuda_graph: bool = False  # the best kernel replays a CUDA graph (compare over cudagraphs)
    best_kernel: str | None = None
    # what the best kernel's GEMMs and convolutions multiply in ("mm triton 3xtf32", ...)
    best_precision: list[str] = field(default_factory=list)
    footprint_bytes: int = 0  # the reference's own footprint (the probe's)
    peak_over_footprint: float | None = None  # the worst candidate's worker peak over it
    candidate_s: float | None = None  # median of a candidate's own time (not waiting for a turn)
    candidate_times_s: list[float] = field(default_factory=list)  # each candidate's own time
    # beside each: the combinations its sweep judged (0: a plain candidate, one kernel)
    candidate_combinations: list[int] = field(default_factory=list)
    # candidates whose worker the fork server did not fork (started anew: seconds more each),
    # and the first reason given
    started_anew: int = 0
    fork_error: str = ""
    fixed_s: float | None = None  # the probe and the baselines (0 s when they were stored)
    probe_s: float | None = None
    probe_steps_s: dict[str, float] = field(default_factory=dict)  # the probe's split (costs)
    baselines_s: float | None = None  # the baseline workers' own seconds; 0: read from the store
    baselines_stored: bool | None = None  # the baselines came from the store
    # max-autotune and cudagraphs, timed after the candidates (0: read from the store)
    late_baselines_s: float | None = None
    baseline_timeouts: dict[str, float] = field(default_factory=dict)  # baseline -> seconds run
    baseline_note: str = ""  # baselines that timed out or failed, and why
    problem_s: float | None = None  # the problem's last attempt, wall clock (probe to baselines)
    hardware: str = ""
    error: str = ""
    path: str = ""
    library_bound: str = ""  # the reference's library ops when it is nothing else (e.g. "mm")
    allow_tf32: bool = False  # its run's eval_config.allow_tf32
    # the depth curve: after each iteration k (0, 1, ...), the best correct kernel so far's
    # speedup over eager and over torch.compile (None: nothing correct yet)
    depth: list[float | None] = field(default_factory=list)
    depth_compile: list[float | None] = field(default_factory=list)


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
    geomean_cudagraphs: float | None = None
    n_cudagraphs: int = 0  # ... and a reduce-overhead timing
    n_cuda_graph: int = 0  # problems whose best kernel replays a CUDA graph
    n_compile_faster: int = 0  # of n_compile: faster than torch.compile by the tie rule
    n_compile_tie: int = 0  # ... a tie with it
    library_bound: list[str] = field(default_factory=list)  # their names, listed apart
    geomean_compile_library_bound: float | None = None  # over those with a compile ratio
    precision: str = ""  # what float32 GEMMs ran in, for every table's label
    n_timed_out: int = 0  # problems that ran past --problem-timeout
    fixed_s_median: float | None = None  # over the problems with a recorded fixed cost
    candidate_s_median: float | None = None  # over every candidate of the suite
    candidate_s_median_plain: float | None = None  # ... of the plain candidates (one kernel)
    candidate_s_median_sweep: float | None = None  # ... of those that swept a template
    sweep_combinations_median: float | None = None  # combinations a sweep judged
    started_anew: int = 0  # candidates whose worker was started anew for want of a fork
    fork_error: str = ""  # the first reason given
    # after each iteration k: {"iteration", "geomean_eager", "geomean_compile", "n", "n_compile"}
    # over the problems with a correct kernel by then (a job that ended earlier keeps its best)
    depth: list[dict] = field(default_factory=list)
    n_rising: int = 0  # problems whose last best beats their iteration-0 best by RISING
    n_depth: int = 0  # problems with a correct kernel after iteration 0 and more than one iteration

    def to_json(self) -> dict:
        return {"suite": self.suite, "problems": [asdict(p) for p in self.problems],
                "fast_p": self.fast_p, "geomean_eager": self.geomean_eager,
                "geomean_compile": self.geomean_compile,
                "geomean_autotune": self.geomean_autotune, "n_problems": len(self.problems),
                "n_correct": self.n_correct, "n_compile": self.n_compile,
                "n_autotune": self.n_autotune, "geomean_cudagraphs": self.geomean_cudagraphs,
                "n_cudagraphs": self.n_cudagraphs, "n_cuda_graph": self.n_cuda_graph,
                "n_compile_faster": self.n_compile_faster, "n_compile_tie": self.n_compile_tie,
                "library_bound": self.library_bound,
                "geomean_compile_library_bound": self.geomean_compile_library_bound,
                "precision": self.precision, "n_timed_out": self.n_timed_out,
                "fixed_s_median": self.fixed_s_median,
                "candidate_s_median": self.candidate_s_median,
                "candidate_s_median_plain": self.candidate_s_median_plain,
                "candidate_s_median_sweep": self.candidate_s_median_sweep,
                "sweep_combinations_median": self.sweep_combinations_median,
                "started_anew": self.started_anew, "fork_error": self.fork_error,
                "depth": self.depth, "n_rising": self.n_rising, "n_depth": self.n_depth}


def p_label(p: float) -> str:
    return f"{p:g}"


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def precision_label(problems: list[ProblemResult]) -> str:
    """What float32 GEMMs ran in across the suite (the reference and torch.compile too)."""
    tf32 = {p.allow_tf32 for p in problems if p.status != "not started"}
    if tf32 == {True}:
        return "fp32 GEMMs in TF32 (eval_config.allow_tf32; torch.compile timed alike)"
    if tf32 == {True, False}:
        return "fp32 GEMMs: TF32 in some problems only (eval_config.allow_tf32 differs)"
    return "fp32 GEMMs in full fp32 (PyTorch's default; convolutions as cuDNN's default, TF32)"


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


# A best kernel "rises" with depth when its last iteration's best is 2% over iteration 0's:
# past the run-to-run spread of a best kernel's median (issue 57's depth curve)
RISING = 1.02


def depth_curve(problems: list[ProblemResult]) -> tuple[list[dict], int, int]:
    """(the suite's depth curve, problems rising, problems it could tell for) (pure)."""
    deepest = max((len(p.depth) for p in problems), default=0)
    curve = []
    for k in range(deepest):
        at = [_at(p.depth, k) for p in problems]
        over = [_at(p.depth_compile, k) for p in problems]
        curve.append({"iteration": k, "geomean_eager": geomean([v for v in at if v]),
                      "n": sum(1 for v in at if v), "geomean_compile": geomean([v for v in over if v]),
                      "n_compile": sum(1 for v in over if v)})
    told = [p for p in problems if len(p.depth) > 1 and p.depth[0]]
    rising = 0
    for p in told:  # over torch.compile where both ends have it (the same ratio otherwise)
        ends = p.depth_compile if p.depth_compile and p.depth_compile[0] and p.depth_compile[-1] \
            else p.depth
        rising += ends[-1] > RISING * ends[0]
    return curve, rising, len(told)


def _at(values: list, k: int):
    """The curve's value after iteration k; past its end, its last (the job had ended)."""
    return values[min(k, len(values) - 1)] if values else None


def depth_text(summary) -> str:
    """The depth curve in words: "after iteration 0 1.00x, 2 1.12x, 5 1.21x over torch.compile
    (geomean); rising on 12 of 20" (empty for a suite of one iteration)."""
    if len(summary.depth) < 2:
        return ""
    key = "geomean_compile" if any(d["geomean_compile"] for d in summary.depth) else "geomean_eager"
    shown = [d for d in summary.depth if d["iteration"] in (0, 2, 5) or d is summary.depth[-1]]
    return ("after iteration " + ", ".join(f"{d['iteration']} {speedup_text(d[key])}" for d in shown)
            + (" over torch.compile" if key == "geomean_compile" else " over eager")
            + f" (geomean); rising on {summary.n_rising} of {summary.n_depth}")


def problem_depth(p: ProblemResult) -> str:
    """One problem's curve, e.g. "1.00x→1.31x (i5)": its first and last best."""
    values = p.depth_compile if any(p.depth_compile) else p.depth
    if len(values) < 2 or not values[-1]:
        return "-"
    return f"{speedup_text(values[0])}→{speedup_text(values[-1])} (i{len(values) - 1})"


def summarize(suite: str, problems: list[ProblemResult]) -> SuiteSummary:
    """The suite's figures from its problems' rows (pure)."""
    curve, rising, told = depth_curve(problems)
    n = len(problems)
    correct = [p for p in problems if p.correct and p.speedup]
    with_compile = [p for p in correct if p.over_compile]
    with_autotune = [p for p in correct if p.over_autotune]
    with_cudagraphs = [p for p in correct if p.over_cudagraphs]
    bound = [p for p in problems if p.library_bound]
    return SuiteSummary(
        library_bound=[p.name for p in bound], precision=precision_label(problems),
        geomean_compile_library_bound=geomean([p.over_compile for p in bound
                                               if p.over_compile and p.correct]),
        suite=suite, problems=problems,
        fast_p={p_label(p): (sum(1 for r in correct if r.speedup > p) / n if n else 0.0)
                for p in FAST_P},
        geomean_eager=geomean([p.speedup for p in correct]),
        geomean_compile=geomean([p.over_compile for p in with_compile]),
        geomean_autotune=geomean([p.over_autotune for p in with_autotune]),
        n_correct=len(correct), n_compile=len(with_compile), n_autotune=len(with_autotune),
        geomean_cudagraphs=geomean([p.over_cudagraphs for p in with_cudagraphs]),
        n_cudagraphs=len(with_cudagraphs), n_cuda_graph=sum(p.cuda_graph for p in correct),
        n_compile_faster=sum(p.vs_compile == "faster" for p in with_compile),
        n_compile_tie=sum(p.vs_compile == "tie" for p in with_compile),
        n_timed_out=sum(p.status == "timed_out" for p in problems),
        fixed_s_median=median([p.fixed_s for p in problems if p.fixed_s is not None]),
        candidate_s_median=median([t for p in problems for t in p.candidate_times_s]),
        candidate_s_median_plain=median(_own_times(problems, sweeps=False)),
        candidate_s_median_sweep=median(_own_times(problems, sweeps=True)),
        sweep_combinations_median=median([n for p in problems for n in p.candidate_combinations
                                          if n]),
        started_anew=sum(p.started_anew for p in problems),
        fork_error=next((p.fork_error for p in problems if p.fork_error), ""),
        depth=curve, n_rising=rising, n_depth=told)


def own_split(summary: SuiteSummary) -> str:
    """The own time's medians by kind of candidate (a sweep judges several kernels in one
    worker), for the figures under a suite's table; empty without a judged candidate."""
    parts = []
    if summary.candidate_s_median_plain is not None:
        parts.append(f"plain candidates {summary.candidate_s_median_plain:.2f} s")
    if summary.candidate_s_median_sweep is not None:
        parts.append(f"sweeps {summary.candidate_s_median_sweep:.2f} s, "
                     f"{summary.sweep_combinations_median:g} combinations each (median)")
    return "; ".join(parts)


def _own_times(problems: list[ProblemResult], sweeps: bool) -> list[float]:
    """The own times of the plain candidates, or of those that swept a template."""
    return [t for p in problems
            for t, n in zip(p.candidate_times_s, p.candidate_combinations or
                            [0] * len(p.candidate_times_s)) if bool(n) == sweeps]


def against_compile(over_compile: float | None, speedup: float | None,
                    stats: dict | None) -> str:
    """The tie rule against torch.compile: the kernel's 95% interval of its speedup over eager
    (timed in the same rounds as the reference), scaled by torch.compile's own ratio over
    eager, holding 1.0 is a tie; outside it, faster or slower. Without an interval (the CPU,
    an old row), the ratio alone decides."""
    if not over_compile or not speedup:
        return ""
    ci = (stats or {}).get("speedup_ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(ci):
        scale = over_compile / speedup
        if ci[0] * scale <= 1.0 <= ci[1] * scale:
            return "tie"
    return "faster" if over_compile > 1.0 else "slower"


def replays_graph(code: str) -> bool:
    """Whether a kernel's code replays a CUDA graph (the offline generator's CUDA_GRAPH, or any
    candidate that captures one)."""
    return any(mark in code for mark in ("torch.cuda.CUDAGraph", "torch.cuda.graph(",
                                         "make_graphed_callables"))


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
    # A database the engine has not opened since has neither costs nor keyed baselines.
    later = {(table, c["name"]) for table in (SuiteProblem.__tablename__,
                                              ReferenceTiming.__tablename__)
             for c in inspect(engine).get_columns(table)}
    keyed = (ReferenceTiming.__tablename__, "environment") in later
    columns = [c for c in SuiteProblem.__table__.c if (SuiteProblem.__tablename__, c.name) in later]
    with engine.connect() as conn:
        entries = conn.execute(select(*columns).where(SuiteProblem.suite == suite)
                               .order_by(SuiteProblem.position)).all()
        if not entries:
            return None
        return summarize(suite, [_problem(conn, e, keyed) for e in entries])


def _own_seconds(meta: dict, template: dict | None) -> float:
    """A candidate's own time: its sweep (a templated one) and its evaluation, less the waits
    for another candidate's GPU turn."""
    own = float(meta["evaluation_s"]) - float((meta.get("phase_s") or {}).get("queued", 0.0))
    if isinstance(template, dict) and template.get("sweep_s"):
        own += float(template["sweep_s"]) - float(template.get("sweep_queued_s") or 0.0)
    return own


def fork_error(meta: dict, template: dict | None) -> str:
    """Why a candidate's worker was started anew rather than forked (empty if it was forked,
    or forking was off): its sweep's worker where it swept a template."""
    worker = (template.get("worker") if isinstance(template, dict) else None) or meta.get("worker")
    return str((worker or {}).get("fork_error") or "") if isinstance(worker, dict) else ""


def _combinations(template: dict | None) -> int:
    """How many combinations a candidate's sweep judged (0: it swept none)."""
    if not isinstance(template, dict) or not template.get("sweep_s"):
        return 0
    return len(template.get("combinations") or [])


def _problem(conn, entry, keyed: bool) -> ProblemResult:
    row = ProblemResult(name=entry.task_name, path=entry.path, status=entry.outcome or "not started",
                        error=entry.error or "")
    costs = getattr(entry, "costs", None)  # absent from databases the engine has not opened
    if isinstance(costs, dict) and costs:
        row.fixed_s, row.probe_s = costs.get("fixed_s"), costs.get("probe_s")
        row.probe_steps_s = dict(costs.get("probe_steps_s") or {})
        row.baselines_s, row.baselines_stored = costs.get("baselines_s"), costs.get("baselines_stored")
        row.late_baselines_s = costs.get("late_baselines_s")
        row.problem_s = costs.get("problem_s")
    runs = conn.execute(select(Run.status, Run.error, Run.started_at, Run.finished_at, Run.hardware,
                               Run.config)
                        .where(Run.task_name == entry.task_name, Run.job_name == entry.job_name)
                        .order_by(Run.id)).all()
    if runs:
        row.hardware = runs[-1].hardware
        if entry.outcome != "timed_out":  # its run stopped because the problem did
            row.status = runs[-1].status
        config = runs[-1].config if isinstance(runs[-1].config, dict) else {}
        footprint = config.get("footprint")
        row.footprint_bytes = int((footprint or {}).get("peak_bytes") or 0)
        row.library_bound = str(config.get("library_bound") or "")
        row.allow_tf32 = bool((config.get("eval_config") or {}).get("allow_tf32"))
        row.error = runs[-1].error or row.error
        row.time_s = round(sum((r.finished_at - r.started_at).total_seconds() for r in runs
                               if r.finished_at and r.started_at), 1)
    kernels = conn.execute(select(Kernel.id, Kernel.status, Kernel.correctness, Kernel.is_program0,
                                  Kernel.iteration,
                                  Kernel.runtime_improvement, Kernel.improve_over_compile,
                                  Kernel.runtime_stats, Kernel.meta.label("meta"),
                                  Kernel.template_results)
                           .where(Kernel.task_name == entry.task_name,
                                  Kernel.job_name == entry.job_name)
                           # one order on every database (each candidate's own time is listed)
                           .order_by(Kernel.iteration, Kernel.branch, Kernel.created_at)).all()
    candidates = [k for k in kernels if not k.is_program0]
    row.candidates = len(candidates)
    row.evaluator_faults = sum(1 for k in candidates if k.status == "evaluator_fault")
    flagged = [k for k in candidates if k.status == "flagged"]
    row.flagged = len(flagged)
    if flagged:
        meta = flagged[0].meta if isinstance(flagged[0].meta, dict) else {}
        said = meta.get("flagged_for_review")
        speed = said.get("speedup") if isinstance(said, dict) else None
        row.flagged_note = (f"{len(flagged)} flagged for review, never the winner: "
                            f"{flagged_why(meta)}" + (f" ({speedup_text(speed)} measured)"
                                                      if speed else ""))
    row.retried = sum(1 for k in candidates if k.status != "evaluator_fault"
                      and isinstance(k.meta, dict) and k.meta.get("retried"))
    memory = [k.meta.get("memory") or {} for k in candidates if isinstance(k.meta, dict)]
    ratios = [m["peak_over_footprint"] for m in memory if m.get("peak_over_footprint") is not None]
    row.footprint_bytes = row.footprint_bytes or max((m.get("footprint_bytes") or 0 for m in memory),
                                                     default=0)
    row.peak_over_footprint = max(ratios) if ratios else None
    judged = [k for k in candidates if isinstance(k.meta, dict) and k.meta.get("evaluation_s")
              and not k.meta.get("duplicate_of")]
    own = [round(_own_seconds(k.meta, k.template_results), 2) for k in judged]
    row.candidate_s, row.candidate_times_s = median(own), own
    row.candidate_combinations = [_combinations(k.template_results) for k in judged]
    reasons = [fork_error(k.meta, k.template_results) for k in judged]
    row.started_anew = sum(bool(r) for r in reasons)
    row.fork_error = next((r for r in reasons if r), "")
    correct = [k for k in candidates if k.correctness]
    row.depth, row.depth_compile = _depth(candidates)
    if correct:
        best = max(correct, key=lambda k: k.runtime_improvement)
        row.correct, row.best_kernel = True, best.id
        records = best.meta.get("precision") if isinstance(best.meta, dict) else None
        row.best_precision = [f"{r.get('op')} {r.get('by')} {r.get('precision')}"
                              for r in records or [] if isinstance(r, dict)]
        row.speedup = best.runtime_improvement if best.runtime_improvement > 0 else None
        row.over_compile = best.improve_over_compile if best.improve_over_compile > 0 else None
        row.vs_compile = against_compile(row.over_compile, row.speedup, best.runtime_stats)
        row.cuda_graph = replays_graph(conn.execute(select(Kernel.code).where(
            Kernel.id == best.id)).scalar() or "")
    stats = _baselines(conn, entry.task_digest, row.hardware, runs[-1].config if runs else None,
                       keyed, baseline_kind(row.allow_tf32))
    if stats:
        row.baseline_timeouts = {k: v.get("elapsed_s") for k, v in
                                 (stats.get("timed_out") or {}).items()}
        row.baseline_note = baseline_notes(stats)
        row.eager_ms = (stats.get("eager") or {}).get("median")
        row.compile_ms = (stats.get("compile") or {}).get("median")
        # max-autotune and reduce-overhead against the eager run timed beside them (baselines.py)
        late = (stats.get("eager_late") or {}).get("median") or row.eager_ms
        row.autotune_ms = (stats.get("autotune") or {}).get("median")
        if row.speedup and row.autotune_ms and late:
            row.over_autotune = row.speedup * row.autotune_ms / late
        row.cudagraphs_ms = (stats.get("cudagraphs") or {}).get("median")
        if row.speedup and row.cudagraphs_ms and late:
            row.over_cudagraphs = row.speedup * row.cudagraphs_ms / late
    if row.eager_ms is None and correct:  # no cached baseline (the CPU): the reference timed
        stats = best.runtime_stats if isinstance(best.runtime_stats, dict) else {}  # beside it
        row.eager_ms = (stats.get("reference") or {}).get("median")
    return row


def _depth(candidates) -> tuple[list, list]:
    """After each iteration (0 to the job's last), the best correct kernel so far: its speedup
    over eager and over torch.compile (None before the first correct one)."""
    last = max((k.iteration for k in candidates if k.iteration is not None and k.iteration >= 0),
               default=-1)
    eager, compiled = [], []
    for it in range(last + 1):
        so_far = [k for k in candidates if k.correctness and k.iteration is not None
                  and k.iteration <= it and (k.runtime_improvement or 0) > 0]
        best = max(so_far, key=lambda k: k.runtime_improvement, default=None)
        eager.append(best.runtime_improvement if best else None)
        compiled.append(best.improve_over_compile if best and (best.improve_over_compile or 0) > 0
                        else None)
    return eager, compiled


def _baselines(conn, digest: str, hardware: str, config, keyed: bool, kind: str) -> dict | None:
    """The problem's stored baselines (of ``kind``: with or without the TF32 opt-in): those of
    its run's software when stored, else the newest for its task and hardware (older
    databases: the one row per task and hardware)."""
    where = [ReferenceTiming.task_digest == digest, ReferenceTiming.kind == kind,
             *([ReferenceTiming.hardware == hardware] if hardware else [])]
    if keyed:
        software = ((config or {}).get("hardware") or {}).get("software") if isinstance(
            config, dict) else None
        key = software_key(software)
        if key:
            exact = conn.execute(select(ReferenceTiming.runtime_stats).where(
                *where, ReferenceTiming.environment == key)).first()
            if exact and isinstance(exact.runtime_stats, dict):
                return exact.runtime_stats
    newest = conn.execute(select(ReferenceTiming.runtime_stats).where(*where)
                          .order_by(ReferenceTiming.created_at.desc())).first()
    return newest.runtime_stats if newest and isinstance(newest.runtime_stats, dict) else None
