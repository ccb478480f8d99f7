"""EvalResult, Program and CompilationResult: the records every part of openkernel shares.

Field names follow the product brief (seeds/schemas.txt) so that results read the same in the
database, the dashboard and the prompts.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field


class Status(str, Enum):
    """How far a candidate got; each value is one colour class of the generation graph."""

    FASTER = "faster"  # green: correct and faster than the reference
    CORRECT = "correct"  # blue: correct, but no faster than the reference
    INCORRECT = "incorrect"  # orange: compiled, failed a correctness (or integrity) test
    TEST_TIMEOUT = "test_timeout"  # yellow: compiled, but the tests timed out
    COMPILE_ERROR = "compile_error"  # red: did not compile (or import)
    BUILD_TIMEOUT = "build_timeout"  # pink: the build itself timed out
    NOT_RUN = "not_run"  # grey: compiled, but this machine cannot run it (CUDA without a GPU)
    # dark grey, outside the seed's candidate colours: the evaluator's own code failed (out of
    # memory in a check, the reference failing, a CUDA error before the candidate ran); it
    # says nothing about the candidate, which was retried once with a smaller plan.
    EVALUATOR_FAULT = "evaluator_fault"
    # purple, outside the seed's colours too: no kernel to judge, because generating failed
    # (the model's service answered with an error, or its answer held no kernel).
    GENERATION_FAILED = "generation_failed"
    # brown, outside the seed's colours: it passed every check, but ran faster than the
    # hardware allows (below the roofline floor; on the CPU, an implausible jump over the
    # reference) on a second judgement with fresh inputs too. Kept for a person to review,
    # never the best, an elite or a bench's winner (evaluation/host/results.py).
    FLAGGED = "flagged"

    @property
    def label(self) -> str:
        return STATUS_LABELS[self]


STATUS_LABELS = {
    Status.FASTER: "Correct and faster than the reference",
    Status.CORRECT: "Correct, but no faster than the reference",
    Status.INCORRECT: "Compiled, but failed a correctness test",
    Status.TEST_TIMEOUT: "Compiled, but the tests timed out",
    Status.COMPILE_ERROR: "Did not compile",
    Status.BUILD_TIMEOUT: "The build itself timed out",
    Status.NOT_RUN: "Compiled, but not runnable on this machine",
    Status.EVALUATOR_FAULT: "The evaluator failed, not the candidate",
    Status.GENERATION_FAILED: "Generation failed: no kernel to judge",
    Status.FLAGGED: "Passed the checks, but faster than the hardware allows: flagged for review",
}

# Statuses that say nothing about a candidate's code (none was run, or none came back): never
# counted as its errors.
NOT_JUDGED = frozenset({Status.NOT_RUN, Status.EVALUATOR_FAULT, Status.GENERATION_FAILED})

# perf_score: the discrete quality ladder that compute_performance_score starts from.
# The program's own metadata stored with its evaluation's in ``kernels.meta`` (and read back on
# resume): its model calls, the critic's diagnoses its prompt carried, its precision records.
PROGRAM_META = ("llm", "critic", "precision")

PERF_NONE = 0  # nothing usable (build failed or timed out)
PERF_COMPILED = 1  # built / imported
PERF_RAN = 2  # ran to completion on the test inputs
PERF_CORRECT = 3  # matched the reference on every seed and shape
PERF_FASTER = 4  # correct and faster than the eager reference
PERF_FASTER_THAN_COMPILE = 5  # correct and faster than torch.compile of the reference


class EvalResult(BaseModel):
    """Results from evaluating a single kernel.

    ``runtime`` is the candidate's median in milliseconds; ``runtime_improvement`` is the
    reference's median over the candidate's (a speedup, -1 when the reference was not timed);
    ``improve_over_compile`` is the same against ``torch.compile`` of the reference.
    ``metadata`` carries what the seed leaves open: ``timeout`` ("build" | "test"),
    ``runnable`` (False when the hardware cannot run the candidate), ``integrity_violation``
    (the name of the check that caught it), ``hardware``, ``timing_method``,
    ``generation_failed`` ("service" | "no_code": no kernel came back to be judged).
    """

    compiled: bool = False
    correctness: bool = False
    metadata: dict = Field(default_factory=dict)
    runtime: float = -1.0
    runtime_stats: dict = Field(default_factory=dict)
    runtime_improvement: float = -1.0
    improve_over_compile: float = -1.0
    perf_score: int = -1
    profiler_data: dict = Field(default_factory=dict)
    template_results: dict = Field(default_factory=dict)
    eval_log: str = ""

    @staticmethod
    def compute_performance_score(eval_result: "EvalResult") -> float:
        """Composite performance score (higher is better).

        Base: perf_score (0-5). If runtime_improvement > 0, add the speedup; else if it is -1
        (reference not timed) and the kernel is correct, add 1/runtime to prefer faster kernels.
        """
        score = float(max(eval_result.perf_score, 0))
        if eval_result.runtime_improvement > 0:
            score += eval_result.runtime_improvement
        elif (
            eval_result.runtime_improvement == -1
            and eval_result.correctness
            and eval_result.runtime > 0
        ):
            score += 1.0 / eval_result.runtime
        return score

    @staticmethod
    def get_eval_status(compiled: bool, correctness: bool, for_prompt: bool = False) -> str:
        """Turn the two flags into a status word (a sentence when ``for_prompt``)."""
        if not compiled:
            status = Status.COMPILE_ERROR
        elif not correctness:
            status = Status.INCORRECT
        else:
            status = Status.CORRECT
        return status.label if for_prompt else status.value

    def get_status(self) -> Status:
        """The colour class of this result (timeouts and speed included)."""
        if self.metadata.get("generation_failed"):
            return Status.GENERATION_FAILED
        if self.metadata.get("evaluator_fault"):
            return Status.EVALUATOR_FAULT
        timeout = self.metadata.get("timeout")
        if timeout == "build":
            return Status.BUILD_TIMEOUT
        if not self.compiled:
            return Status.COMPILE_ERROR
        if self.metadata.get("runnable") is False:
            return Status.NOT_RUN
        if timeout == "test":
            return Status.TEST_TIMEOUT
        if self.metadata.get("flagged_for_review"):
            return Status.FLAGGED
        if not self.correctness:
            return Status.INCORRECT
        if self.runtime_improvement > 1.0 and not self.runtime_stats.get("tie"):
            return Status.FASTER  # a speedup inside the measured noise is a tie: "correct"
        return Status.CORRECT

    def format_for_prompt(self) -> str:
        """A short account of this result for the next generation's prompt."""
        from openkernel.wording import speedup_text  # (wording reads this module)

        status = self.get_status()
        lines = [f"Status: {status.label}."]
        if self.correctness and self.runtime > 0:
            lines.append(f"Runtime: {self.runtime:.3g} ms (median).")
            if self.runtime_improvement > 0:
                lines.append(f"Speedup over the reference: {speedup_text(self.runtime_improvement)}.")
            if self.improve_over_compile > 0:
                lines.append(f"Speedup over torch.compile: {speedup_text(self.improve_over_compile)}.")
        violation = self.metadata.get("integrity_violation")
        if violation:
            lines.append(f"Integrity check failed: {violation}.")
        if self.eval_log:
            lines.append("Evaluation log:\n" + self.eval_log.strip())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Convert exec result to dictionary (with ``status``)."""
        data = self.model_dump()
        data["status"] = self.get_status().value
        return data


def exec_result_columns(result: EvalResult) -> dict[str, Any]:
    """The ``kernels`` columns an evaluation fills (``openkernel.store.tables.Kernel``)."""
    return dict(
        status=result.get_status().value, compiled=result.compiled,
        correctness=result.correctness, runtime=result.runtime,
        runtime_stats=result.runtime_stats, runtime_improvement=result.runtime_improvement,
        improve_over_compile=result.improve_over_compile, perf_score=result.perf_score,
        profiler_data=result.profiler_data, template_results=result.template_results,
        eval_log=result.eval_log)


@dataclass
class CompilationResult:
    """Results from compiling a kernel."""

    idx: int
    binary: object | None
    kernel_exec_result: object | None
    compile_success: bool
    error: str | None = None
    worker_info: dict | None = None


def new_program_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class Program:
    """A kernel program candidate: its code, lineage and evaluation."""

    id: str
    code: str
    is_program0: bool = False
    raw_llm_code: str | None = None
    language: str = "python"
    parent_id: str | None = None
    generation: int = 0
    timestamp: float = field(default_factory=time.time)
    iteration_found: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    complexity: float = 0.0
    diversity: float = 0.0
    is_templated: bool = False
    template_parameter_combinations: list | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    kernel_exec_result: EvalResult | None = None
    feedback: str | None = None
    task: Any | None = None  # openkernel.task.Task; not serialised

    @property
    def status(self) -> Status | None:
        return self.kernel_exec_result.get_status() if self.kernel_exec_result else None

    @property
    def score(self) -> float:
        if self.kernel_exec_result is None:
            return 0.0
        return EvalResult.compute_performance_score(self.kernel_exec_result)

    @property
    def can_be_best(self) -> bool:
        """The one rule for a job's best kernel (``openkernel.store.summary`` says it in SQL):
        a correct candidate, never the reference; the highest ``score`` is the best. (Failing
        the held-out shapes is an integrity violation, so such a kernel is not correct; the
        flag is checked too, in case a result says otherwise.)"""
        result = self.kernel_exec_result
        return bool(result is not None and result.correctness and not self.is_program0
                    and result.metadata.get("heldout_ok", True) is not False)

    @property
    def label(self) -> str:
        """``i<N>-b<M>``: iteration N, branch M; or the stored label (``ref``, ``start``)."""
        return str(self.metadata.get("label") or
                   f"i{self.iteration_found}-b{self.metadata.get('branch', 0)}")

    def to_dict(self) -> dict[str, Any]:
        """Convert to dictionary representation."""
        data = asdict(self) if self.kernel_exec_result is None else {
            k: v for k, v in asdict(self).items() if k != "kernel_exec_result"
        }
        data.pop("task", None)
        data["kernel_exec_result"] = (
            self.kernel_exec_result.model_dump() if self.kernel_exec_result else None
        )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Program":
        """Create from dictionary representation."""
        data = dict(data)
        data.pop("task", None)
        result = data.pop("kernel_exec_result", None)
        prog = cls(**data)
        if result is not None:
            prog.kernel_exec_result = (
                result if isinstance(result, EvalResult) else EvalResult(**result)
            )
        return prog

    def kernel_columns(self) -> dict[str, Any]:
        """The ``kernels`` columns this program fills, its evaluation's included (the job's
        own columns, run and task, are the caller's)."""
        result = self.kernel_exec_result or EvalResult()
        meta = self.metadata
        return dict(
            id=self.id, iteration=self.iteration_found, branch=meta.get("branch", 0),
            label=meta.get("label") or self.label, parent_id=self.parent_id,
            inspiration_ids=meta.get("inspiration_ids", []), is_program0=self.is_program0,
            origin=meta.get("origin", "offline"), model=meta.get("model", ""),
            author=meta.get("author", ""),
            backend=meta.get("backend", "triton"), language=self.language,
            description=meta.get("description", ""), prompt=meta.get("prompt", ""),
            answer=self.raw_llm_code or "", code=self.code,
            user_instructions=meta.get("user_instructions", ""), score=self.score,
            features=meta.get("features", {}),
            meta={**result.metadata, "params": meta.get("params", {}),
                  **{k: meta[k] for k in PROGRAM_META if meta.get(k)}},
            generation_log=meta.get("generation_log", ""),
            tokens_used=int(meta.get("tokens_used", 0)),
            generation_s=float(meta.get("generation_s", 0.0)),
            evaluation_s=float(meta.get("evaluation_s", 0.0)),
            **exec_result_columns(result))

    @staticmethod
    def populate_kernel_from_exec_result(kernel: Any, exec_result: EvalResult) -> None:
        """Write an evaluation onto a ``kernels`` row (``openkernel.store.tables.Kernel``):
        status, verdict, timings, profile, log; its metadata joins the row's."""
        for name, value in exec_result_columns(exec_result).items():
            setattr(kernel, name, value)
        kernel.meta = {**(getattr(kernel, "meta", None) or {}), **exec_result.metadata}

    def update_Kernel(self, kernel: Any) -> None:
        """Populate a Kernel database object from this Program (every column but the job's:
        run, task, job, hardware, reference)."""
        for name, value in self.kernel_columns().items():
            setattr(kernel, name, value)

    def get_artifact(self) -> str:
        """The evaluation log, from here or from the EvalResult."""
        if self.feedback:
            return self.feedback
        return self.kernel_exec_result.eval_log if self.kernel_exec_result else ""

    def add_eval_results(
        self,
        exec_result: EvalResult,
        artifact_path: str | None = None,
        artifact_str: str | None = None,
    ) -> None:
        """Attach an evaluation and refresh the metrics derived from it."""
        self.kernel_exec_result = exec_result
        self.metrics = {
            "combined_score": EvalResult.compute_performance_score(exec_result),
            "runtime": exec_result.runtime,
            "speedup": exec_result.runtime_improvement,
        }
        if artifact_str is not None:
            self.feedback = artifact_str
        elif artifact_path is not None:
            with open(artifact_path, encoding="utf-8") as fh:
                self.feedback = fh.read()
