"""Trace capture: one Parquet row per judged candidate, readable as one dataset.

The rows carry the design's IterationTrace fields (iteration, intent, prompt, response, kernel
code, the evaluation result, the critic's diagnosis, the decision, tokens, latency) and its
OptimizationTrace fields (session id, problem, hardware, backend, model, final speedup and
kernel, total tokens and time), flattened so pandas, polars and pyarrow read them as plain
columns (dicts as JSON text). ``COLUMNS`` is the schema (version ``SCHEMA_VERSION``) and its
documentation; README's "Traces" section is generated from the same list.

Layout: ``<dir>/<task>/<job>/<label>-<kernel id>.parquet``, one small file per candidate,
written (to a hidden temporary name, then renamed) as soon as the candidate is judged, so a
crash loses nothing judged and never leaves half a file. While a job runs its session columns
hold the values so far (``session_status`` "running"); when a run ends they are rewritten in
each of the job's files with the final values. Every text is redacted against the engine's
secret values before it is written.
"""

from __future__ import annotations

import hashlib
import math
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from openkernel.errors import ConfigError
from openkernel.redaction import Redactor  # noqa: F401 - the one redactor (export uses it too)
from openkernel.schemas import NOT_JUDGED, Status

SCHEMA_VERSION = 1

# (name, arrow type, what it holds). Types are pyarrow factory names, resolved in _schema().
COLUMNS: list[tuple[str, str, str]] = [
    ("schema_version", "int32", "version of this schema (1)"),
    # OptimizationTrace: the session (one job, all its runs)
    ("session_id", "string", "stable id of the job: a digest of task, job and its first start"),
    ("problem", "string", "the task name (KernelBench file or task folder name)"),
    ("job_name", "string", "the job"),
    ("hardware", "string", "GPU (or CPU, Triton interpreter) the job ran on"),
    ("gpu_arch", "string", "the architecture results are filed under"),
    ("backend", "string", "the job's configured backend: triton or cuda"),
    ("generator", "string", "llm or offline"),
    ("model", "string", "which models the job used, comma-separated"),
    ("final_speedup", "float64", "best correct speedup over the reference (-1: none yet)"),
    ("final_kernel_id", "string", "id of the best kernel"),
    ("final_kernel", "string", "code of the best kernel"),
    ("total_tokens", "int64", "tokens (prompt and answer) of every model call of the job"),
    ("total_cost_usd", "float64", "their cost in US dollars (unknown prices count 0)"),
    ("unpriced_calls", "int64", "calls whose price was unknown"),
    ("total_time_seconds", "float64", "wall time of the job's runs"),
    ("session_status", "string", "running (values so far), completed, stopped or failed"),
    # IterationTrace: this candidate
    ("kernel_id", "string", "the candidate's id in the results database"),
    ("label", "string", "i<N>-b<M> (start: a starting kernel)"),
    ("iteration", "int32", "iteration (-1 for a starting kernel)"),
    ("branch", "int32", "branch within the iteration"),
    ("parent_id", "string", "the kernel it was derived from"),
    ("origin", "string", "llm, offline, file or best"),
    ("candidate_model", "string", "the model (or offline kernel family) that wrote it"),
    ("candidate_backend", "string", "its language: triton or cuda"),
    ("intent", "string", "what it tried (the answer's Idea line)"),
    ("prompt", "string", "the full prompt"),
    ("response", "string", "the full answer"),
    ("kernel_code", "string", "the extracted kernel module"),
    ("user_instructions", "string", "instructions that shaped it (task, config, steering)"),
    ("status", "string", "faster, correct, incorrect, test_timeout, compile_error, "
                         "build_timeout, not_run, evaluator_fault or generation_failed"),
    ("compiled", "bool", "it built"),
    ("correctness", "bool", "it matched the reference on every seed and shape"),
    ("runtime_ms", "float64", "median runtime in ms (-1: not timed)"),
    ("speedup", "float64", "reference median over its median (-1: not timed)"),
    ("speedup_over_compile", "float64", "the same against torch.compile (-1: not timed)"),
    ("perf_score", "int32", "the 0-5 quality ladder of EvalResult"),
    ("integrity_violation", "string", "the integrity check it failed, if any"),
    ("runtime_stats", "string", "JSON: median, mean, std, min, max, cv, n_trials"),
    ("profiler_data", "string", "JSON: Nsight Compute metrics or the analytic estimate"),
    ("eval_metadata", "string", "JSON: the rest of EvalResult.metadata"),
    ("eval_log", "string", "the evaluation log"),
    ("critic_diagnosis", "string", "the critic's diagnoses its prompt carried, one per line"),
    ("critic_source", "string", "rules or llm (empty: none)"),
    ("decision", "string", "keep (became the best), discard, or error (failed)"),
    ("tokens_used", "int64", "tokens of its model calls (generation and log summaries)"),
    ("prompt_tokens", "int64", "prompt tokens of those calls"),
    ("completion_tokens", "int64", "answer tokens of those calls"),
    ("cost_usd", "float64", "their cost in US dollars"),
    ("price", "string", "where the price came from: litellm, config, unknown, mixed"),
    ("latency_seconds", "float64", "time to generate it (the model call)"),
    ("evaluation_seconds", "float64", "time to judge it"),
    ("evaluated_at", "timestamp", "when it was judged (UTC)"),
]
SESSION_COLUMNS = [name for name, *_ in COLUMNS[1:17]]


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("traces need pyarrow: pip install 'openkernel[traces]'") from None
    return pa, pq


def schema():
    """The Parquet schema of a trace row."""
    pa, _ = _pyarrow()
    kinds = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(),
             "float64": pa.float64(), "bool": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind, _ in COLUMNS],
                     metadata={"openkernel.trace_schema": str(SCHEMA_VERSION)})


@dataclass
class Session:
    """The OptimizationTrace fields of one job, as known when a row is written."""

    session_id: str
    problem: str
    job_name: str
    hardware: str = ""
    gpu_arch: str = ""
    backend: str = ""
    generator: str = ""
    model: str = ""
    final_speedup: float = -1.0
    final_kernel_id: str = ""
    final_kernel: str = ""
    total_tokens: int = 0
    total_cost_usd: float = 0.0
    unpriced_calls: int = 0
    total_time_seconds: float = 0.0
    session_status: str = "running"
    extra: dict = field(default_factory=dict)  # not written


def session_id(task_name: str, job_name: str, first_started: datetime | None) -> str:
    """Stable for a job in its database, distinct across databases' jobs of the same name."""
    when = first_started.replace(tzinfo=None).isoformat() if first_started else ""
    return hashlib.sha1(f"{task_name}\0{job_name}\0{when}".encode()).hexdigest()[:16]


def decision(status: str, became_best: bool) -> str:
    """keep: it became the job's best; error: it failed (not_run, evaluator faults and
    generation failures say nothing about the kernel: discard); discard: anything else."""
    if became_best:
        return "keep"
    if status in (Status.FASTER.value, Status.CORRECT.value) or status in {
            s.value for s in NOT_JUDGED}:
        return "discard"
    return "error"


def _json(value) -> str:
    return json.dumps(value or {}, sort_keys=True, default=str)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def row_of(kernel: Mapping, session: Session, became_best: bool) -> dict:
    """A trace row from a ``kernels`` row (the Store's column values, ``meta`` included)."""
    meta = dict(kernel.get("meta") or {})
    llm = meta.pop("llm", None) or {}
    critic = meta.pop("critic", None) or []
    meta.pop("params", None)
    row = {name: value for name, value in asdict(session).items() if name in SESSION_COLUMNS}
    row.update(
        schema_version=SCHEMA_VERSION, kernel_id=kernel["id"], label=kernel.get("label", ""),
        iteration=kernel.get("iteration", 0), branch=kernel.get("branch", 0),
        parent_id=kernel.get("parent_id") or "", origin=kernel.get("origin", ""),
        candidate_model=kernel.get("model", ""), candidate_backend=kernel.get("backend", ""),
        intent=kernel.get("description", ""), prompt=kernel.get("prompt", ""),
        response=kernel.get("answer", ""), kernel_code=kernel.get("code", ""),
        user_instructions=kernel.get("user_instructions", ""), status=kernel.get("status", ""),
        compiled=bool(kernel.get("compiled")), correctness=bool(kernel.get("correctness")),
        runtime_ms=float(kernel.get("runtime", -1.0)),
        speedup=float(kernel.get("runtime_improvement", -1.0)),
        speedup_over_compile=float(kernel.get("improve_over_compile", -1.0)),
        perf_score=int(kernel.get("perf_score", -1)),
        integrity_violation=str(meta.get("integrity_violation") or ""),
        runtime_stats=_json(kernel.get("runtime_stats")),
        profiler_data=_json(kernel.get("profiler_data")), eval_metadata=_json(meta),
        eval_log=kernel.get("eval_log", ""),
        critic_diagnosis="\n".join(_said(d) for d in critic),
        critic_source=",".join(dict.fromkeys(d.get("source", "") for d in critic)),
        decision=decision(kernel.get("status", ""), became_best),
        tokens_used=int(kernel.get("tokens_used", 0)),
        prompt_tokens=int(llm.get("prompt_tokens", 0)),
        completion_tokens=int(llm.get("completion_tokens", 0)),
        cost_usd=float(llm.get("cost_usd", 0.0)), price=str(llm.get("price", "")),
        latency_seconds=float(kernel.get("generation_s", 0.0)),
        evaluation_seconds=float(kernel.get("evaluation_s", 0.0)),
        evaluated_at=_utc(kernel.get("evaluated_at") or kernel.get("created_at")),
    )
    return row


def _said(d: Mapping) -> str:
    if d.get("source") != "llm":
        return str(d.get("text", ""))
    who = ("Best so far " if d.get("role") == "best" else "Parent ") + str(d.get("label", ""))
    return f"{who} (critic model {d.get('model', '')}): {d.get('text', '')}"


def _slug(name: str) -> str:
    """A folder name from a task or job name; names that had to change get a short digest."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "job"
    if clean != name:
        clean += "-" + hashlib.sha1(name.encode()).hexdigest()[:6]
    return clean


def job_folder(root: Path, task_name: str, job_name: str) -> Path:
    return Path(root) / _slug(task_name) / _slug(job_name)


def write_table(path: Path, rows: list[dict]) -> Path:
    """Write rows to ``path`` through a hidden temporary file (readers never see half a file)."""
    pa, pq = _pyarrow()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema()), tmp)
    os.replace(tmp, path)
    return path


class TraceWriter:
    """The live writer: a file per judged candidate, the session's values rewritten at the end."""

    def __init__(self, root: str | Path, session: Session,
                 env: Mapping[str, str] | None = None) -> None:
        _pyarrow()  # fail at the start of the run, not at the first candidate
        self.folder = job_folder(Path(root).expanduser(), session.problem, session.job_name)
        self.session = session
        self.redactor = Redactor(env)
        self.written = 0

    def add(self, kernel: Mapping, became_best: bool) -> Path:
        """Write one judged candidate's row (with the session's values so far)."""
        row = self.redactor.row(row_of(kernel, self.session, became_best))
        name = f"{_slug(str(row['label']))}-{row['kernel_id']}.parquet"
        self.written += 1
        return write_table(self.folder / name, [row])

    def drop(self, kernel_id: str) -> int:
        """Remove a candidate's file (a generation failure its retry replaces); how many."""
        gone = 0
        for path in self.folder.glob(f"*-{kernel_id}.parquet"):
            path.unlink(missing_ok=True)
            gone += 1
        return gone

    def finish(self) -> int:
        """Rewrite the session's columns of every file of this job (earlier runs' included)."""
        pa, pq = _pyarrow()
        values = self.redactor.row({k: v for k, v in asdict(self.session).items()
                                    if k in SESSION_COLUMNS})
        count = 0
        for path in sorted(self.folder.glob("*.parquet")):
            rows = pq.read_table(path).to_pylist()
            for row in rows:
                row.update(values)
            write_table(path, rows)
            count += 1
        return count


def read_dataset(root: str | Path):
    """Every trace row under ``root`` as one pyarrow Table (files of this schema version)."""
    import pyarrow.dataset as ds

    return ds.dataset(str(root), format="parquet", schema=schema()).to_table()


def rows_for_sft(rows: Iterable[Mapping], top: float,
                 min_speedup: float | None = None) -> list[dict]:
    """Instruction pairs from the best ``top`` share of each problem's correct candidates.

    Speedups are only comparable within a problem, so the share is taken per problem (at
    least one pair for a problem with a correct candidate). Only candidates with a model's
    prompt and answer qualify (the offline generator writes no instruction to learn from);
    identical pairs count once. ``min_speedup`` leaves out candidates slower than that over
    the reference; every pair says whether it is slower than the reference
    (``slower_than_reference``), which a correct kernel of a slow run can be.
    """
    if not 0 < top <= 1:
        raise ConfigError(f"--top {top}: expected a share in (0, 1], e.g. 0.1 for the best 10%")
    if min_speedup is not None and min_speedup < 0:
        raise ConfigError(f"--min-speedup {min_speedup}: expected a speedup of 0 or more, e.g. "
                          "1 to leave out kernels slower than the reference")
    by_problem: dict[str, list[Mapping]] = {}
    seen = set()
    for r in rows:
        ok = (r.get("correctness") and r.get("status") in ("faster", "correct")
              and r.get("origin") == "llm" and str(r.get("prompt") or "").strip()
              and str(r.get("response") or "").strip() and float(r.get("speedup") or -1) > 0
              and float(r.get("speedup") or -1) >= (min_speedup or 0))
        key = (r.get("prompt"), r.get("response"))
        if ok and key not in seen:
            seen.add(key)
            by_problem.setdefault(str(r.get("problem")), []).append(r)
    out = []
    for problem, cands in sorted(by_problem.items()):
        cands.sort(key=lambda r: float(r["speedup"]), reverse=True)
        keep = max(1, math.ceil(round(len(cands) * top, 9)))  # round: 0.1 * 30 is 3.0000000000000004
        for r in cands[:keep]:
            out.append({
                "messages": [{"role": "user", "content": r["prompt"]},
                             {"role": "assistant", "content": r["response"]}],
                "prompt": r["prompt"], "answer": r["response"], "problem": problem,
                "kernel_id": r.get("kernel_id"), "model": r.get("candidate_model"),
                "backend": r.get("candidate_backend"), "hardware": r.get("hardware"),
                "speedup": float(r["speedup"]),
                "speedup_over_compile": float(r.get("speedup_over_compile") or -1),
                "slower_than_reference": float(r["speedup"]) < 1.0,
            })
    return out
