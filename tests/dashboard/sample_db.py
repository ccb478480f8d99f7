"""A results database written by real ``openkernel.optimize`` runs on the CPU: what users have.

Three jobs of the shipped GELU example:

- ``JOB`` ("llm job": a space exercises URL quoting): the LLM generator against a real
  OpenAI-compatible server on 127.0.0.1 (tests/llm_server.py) answering with the test
  candidates, so every status occurs: correct ones (the best among them), a compile error, an
  incorrect one, an integrity violation (inputs_modified), a test and a build timeout, a
  service error (generation_failed), an answer without a kernel, and, after the backend
  switches to CUDA for the last iteration, CUDA C++ that is compiled but not run here (not_run)
  and CUDA C++ that does not compile.
- ``OFFLINE_JOB``: the offline generator, run and then resumed (two runs, completed).
- ``KILLED_JOB``: an ``openkernel run`` killed with SIGKILL after its first candidate: its
  engine is gone, so it reads interrupted (and it has no critic line yet).

The answers of one iteration go to its branches in whatever order their requests arrive, so
tests find kernels by status, not by label.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import openkernel
from openkernel import events as ev
from openkernel.search.control import RunControl
from openkernel.store import open_readonly
from openkernel.store.db import iter_kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llm_server import ChatServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gelu"
CANDIDATES = ROOT / "tests" / "candidates"
TASK, JOB, OFFLINE_JOB, KILLED_JOB = "gelu", "llm job", "offline", "killed"
MODEL = "openai/test-model"
BRANCHES, ITERS = 4, 3
KEY_ENV = "OPENKERNEL_SAMPLE_KEY"


def _answer(name: str, plan: str) -> str:
    code = (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")
    return f"Plan: {plan}\n\n```python\n{code}```\n"


def _faster_gelu() -> str:
    """good_gelu with twice the block: another correct kernel, timed apart."""
    code = (CANDIDATES / "good_gelu.py").read_text(encoding="utf-8")
    return code.replace("triton.cdiv(n, 4096)", "triton.cdiv(n, 8192)").replace("BLOCK=4096", "BLOCK=8192")


# One entry per request, iteration by iteration (the last one runs with the cuda backend).
SCRIPT = [
    _answer("good_gelu", "one masked elementwise pass, BLOCK=4096 (ANSWER-MARKER)"),
    _answer("bad_triton", "a block size from the input"),
    _answer("wrong", "a cheaper approximation"),
    (503, "The server is overloaded (SERVICE-MARKER)"),
    f"Plan: wider blocks.\n\n```python\n{_faster_gelu()}```\n",
    _answer("mutate_inputs", "reuse the input buffer"),
    _answer("loop_forward", "a persistent loop"),
    _answer("loop_import", "tune at import"),
    _answer("cuda_ok", "CUDA C++ with one thread per element"),
    _answer("cuda_broken", "CUDA C++ with a fused constant"),
    "I would rather not write a kernel for this one.",
    _answer("cuda_ok", "the same CUDA C++ again"),
]


def _overrides(path: Path, scratch: Path, job: str, *extra: str) -> list[str]:
    return [f"paths.kernels_db_path={path}", f"paths.scratch_dir={scratch}", f"job_name={job}",
            "search.seed=1", *extra]


def _llm_job(path: Path, scratch: Path) -> list[object]:
    os.environ.setdefault(KEY_ENV, "sk-sample-not-a-key")
    control = RunControl()
    events: list[object] = []
    with ChatServer(default="no more answers") as server:
        server.script = list(SCRIPT)
        inference = ('[{"model": "%s", "api_base": "%s", "api_key_env": "%s", "num_retries": 0}]'
                     % (MODEL, server.url, KEY_ENV))
        for event in openkernel.optimize(EXAMPLE, control=control, overrides=_overrides(
                path, scratch, JOB, f"inference={inference}", f"max_iters={ITERS}",
                f"branches_per_iteration={BRANCHES}", "eval_config.max_workers=2",
                "eval_config.correctness_seeds=1", "eval_config.build_timeout_s=20",
                "eval_config.test_timeout_s=10", "user_instructions=PROMPT-MARKER, one pass over memory.")):
            events.append(event)
            if isinstance(event, ev.IterationFinished) and event.iteration == ITERS - 2:
                control.set_backend("cuda")  # taken when the last iteration starts
    return events


def _killed_job(path: Path, scratch: Path) -> int:
    """An engine process killed with SIGKILL once it stored its first candidate (the second is
    still being judged, so no iteration ended and no critic line was written); returns its pid."""
    args = ["run", str(EXAMPLE), *sum((["--set", o] for o in _overrides(
        path, scratch, KILLED_JOB, "max_iters=3", "branches_per_iteration=2",
        # one combination: a candidate is one worker, not a sweep and a judge (three seeds
        # keep the second candidate in its worker long after the first is stored)
        "eval_config.max_workers=1", "prompt.max_template_combinations=1")), [])]
    proc = subprocess.Popen([sys.executable, "-m", "openkernel.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            time.sleep(0.5)
            if path.exists() and sum(not r.is_program0 for r in iter_kernels(
                    open_readonly(path), TASK, KILLED_JOB)) >= 1:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.pid


def build(path: Path) -> dict:
    """Run the three jobs into ``path``; returns their events, the LLM job's best id and the
    killed engine's pid."""
    scratch = path.parent / "scratch"
    llm = _completed(_llm_job(path, scratch))
    first = _completed(list(openkernel.optimize(EXAMPLE, overrides=_overrides(
        path, scratch, OFFLINE_JOB, "max_iters=1", "branches_per_iteration=2"))))
    resumed = _completed(list(openkernel.optimize(EXAMPLE, overrides=_overrides(
        path, scratch, OFFLINE_JOB, "max_iters=2", "branches_per_iteration=2",
        # the first run's kernels are the swept ones (test_combinations); these need no sweep
        "prompt.max_template_combinations=1", "eval_config.correctness_seeds=1"))))
    pid = _killed_job(path, scratch)
    with sqlite3.connect(path) as conn:  # the killed engine's WAL into the file: copies hold all
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"events": llm, "offline_events": first + resumed, "best": llm[-1].best_program_id,
            "best_speedup": llm[-1].best_speedup, "killed_pid": pid}


def _completed(events: list) -> list:
    """A sample job's events, once it completed (else every dashboard test would fail on a
    missing job instead of on why the job did not run)."""
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "completed", (
        f"a sample job did not complete: {getattr(end, 'reason', end)}: {getattr(end, 'error', '')}")
    return events


def copy_to(path: Path, url: str) -> str:
    """The sample in a PostgreSQL database, copied as a user moves one (``openkernel db
    copy``: verified); returns the URL."""
    from openkernel.store.copy import copy_database

    report = copy_database(path, url)
    assert report.ok and report.runs_copied == report.runs, report
    return url


def by_status(path: Path, job: str = JOB) -> dict[str, list]:
    """The job's kernels (rows, read-only) by status."""
    out: dict[str, list] = {}
    for row in iter_kernels(open_readonly(path), TASK, job):
        out.setdefault(row.status, []).append(row)
    return out
