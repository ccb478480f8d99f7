"""Program <-> database row: what the loop stores for each candidate and reads back on resume."""

from __future__ import annotations

from datetime import datetime, timezone

from openkernel.schemas import PROGRAM_META, EvalResult, Program
from openkernel.store.tables import Kernel


def kernel_fields(program: Program, *, run_id: int, task_name: str, job_name: str,
                  hardware: str, gpu_arch: str, reference_code: str) -> dict:
    """Column values of the ``kernels`` row for a judged program: the job's, and the
    program's own (``Program.kernel_columns``, which ``Program.update_Kernel`` writes too)."""
    return dict(run_id=run_id, task_name=task_name, job_name=job_name, hardware=hardware,
                gpu_arch=gpu_arch, reference_code=reference_code,
                evaluated_at=datetime.now(timezone.utc), **program.kernel_columns())


def program_from_row(row: Kernel) -> Program:
    """Rebuild a Program (with its EvalResult) from a stored row."""
    meta = dict(row.meta or {})
    params = meta.pop("params", {})
    shaped = {k: meta.pop(k) for k in PROGRAM_META if k in meta}
    result = EvalResult(
        compiled=row.compiled,
        correctness=row.correctness,
        metadata=meta,
        runtime=row.runtime,
        runtime_stats=row.runtime_stats or {},
        runtime_improvement=row.runtime_improvement,
        improve_over_compile=row.improve_over_compile,
        perf_score=row.perf_score,
        profiler_data=row.profiler_data or {},
        template_results=row.template_results or {},
        eval_log=row.eval_log,
    )
    program = Program(
        id=row.id,
        code=row.code,
        is_program0=row.is_program0,
        raw_llm_code=row.answer,
        language=row.language,
        parent_id=row.parent_id,
        iteration_found=row.iteration,
        metadata={
            "branch": row.branch,
            "label": row.label,
            "origin": row.origin,
            "model": row.model,
            "author": row.author or "",
            "backend": row.backend,
            "description": row.description,
            "params": params,
            "features": row.features or {},
            "prompt": row.prompt,
            **shaped,
        },
    )
    program.add_eval_results(result)
    if result.template_results:
        program.is_templated = True
        program.template_parameter_combinations = [
            c.get("params") for c in result.template_results.get("combinations", [])]
    return program
