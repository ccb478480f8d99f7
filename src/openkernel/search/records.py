"""Program <-> database row: what the loop stores for each candidate and reads back on resume."""

from __future__ import annotations

from datetime import datetime, timezone

from openkernel.schemas import EvalResult, Program
from openkernel.store.tables import Kernel


def kernel_fields(program: Program, *, run_id: int, task_name: str, job_name: str,
                  hardware: str, gpu_arch: str, reference_code: str) -> dict:
    """Column values of the ``kernels`` row for a judged program."""
    result = program.kernel_exec_result or EvalResult()
    meta = program.metadata
    return dict(
        id=program.id,
        run_id=run_id,
        task_name=task_name,
        job_name=job_name,
        iteration=program.iteration_found,
        branch=meta.get("branch", 0),
        label=meta.get("label") or program.label,
        parent_id=program.parent_id,
        inspiration_ids=meta.get("inspiration_ids", []),
        is_program0=program.is_program0,
        origin=meta.get("origin", "offline"),
        model=meta.get("model", ""),
        author=meta.get("author", ""),
        hardware=hardware,
        gpu_arch=gpu_arch,
        backend=meta.get("backend", "triton"),
        language=program.language,
        description=meta.get("description", ""),
        prompt=meta.get("prompt", ""),
        answer=program.raw_llm_code or "",
        reference_code=reference_code,
        code=program.code,
        user_instructions=meta.get("user_instructions", ""),
        status=result.get_status().value,
        compiled=result.compiled,
        correctness=result.correctness,
        runtime=result.runtime,
        runtime_stats=result.runtime_stats,
        runtime_improvement=result.runtime_improvement,
        improve_over_compile=result.improve_over_compile,
        perf_score=result.perf_score,
        score=program.score,
        features=meta.get("features", {}),
        profiler_data=result.profiler_data,
        template_results=result.template_results,
        meta={**result.metadata, "params": meta.get("params", {}),
              # what its model calls used, and the critic's diagnoses its prompt carried
              **{k: meta[k] for k in ("llm", "critic") if meta.get(k)}},
        eval_log=result.eval_log,
        generation_log=meta.get("generation_log", ""),
        tokens_used=int(meta.get("tokens_used", 0)),
        generation_s=float(meta.get("generation_s", 0.0)),
        evaluation_s=float(meta.get("evaluation_s", 0.0)),
        evaluated_at=datetime.now(timezone.utc),
    )


def program_from_row(row: Kernel) -> Program:
    """Rebuild a Program (with its EvalResult) from a stored row."""
    meta = dict(row.meta or {})
    params = meta.pop("params", {})
    shaped = {k: meta.pop(k) for k in ("llm", "critic") if k in meta}
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
