"""The engine end to end on the CPU: a real offline search, what the database holds, resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import select

import openkernel
from openkernel import events as ev
from openkernel.store import Kernel, Run, Store


def _overrides(tmp_path, *extra):
    return [f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}", "search.seed=1", *extra]


@pytest.fixture(scope="module")
def gelu_run(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("gelu")
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=e2e", "max_iters=2", "branches_per_iteration=2")))
    return tmp, events


def test_event_stream_shape(gelu_run):
    _, events = gelu_run
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    started = events[0]
    assert started.generator == "offline" and "CPU" in started.hardware
    assert kinds.count("IterationStarted") == 2 and kinds.count("IterationFinished") == 2
    evaluated = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(e.label for e in evaluated) == ["i0-b0", "i0-b1", "i1-b0", "i1-b1"]
    assert events[-1].reason == "completed" and events[-1].candidates == 4
    assert any(e.program.kernel_exec_result.correctness for e in evaluated)
    assert any(isinstance(e, ev.CriticDiagnosed) for e in events)


def test_database_holds_every_candidate(gelu_run, examples_dir):
    tmp, events = gelu_run
    store = Store(tmp / "k.sqlite3")
    rows = store.job_kernels("gelu", "e2e")
    assert len(rows) == 5  # program 0 + 4 candidates
    ref = [r for r in rows if r.is_program0]
    assert len(ref) == 1 and ref[0].label == "ref"
    reference = (examples_dir / "gelu" / "reference.py").read_text()
    for row in rows:
        assert row.task_name == "gelu" and row.job_name == "e2e"
        assert row.reference_code == reference
        assert row.hardware and row.status and row.created_at and row.evaluated_at
        if row.is_program0:
            continue
        assert row.label == f"i{row.iteration}-b{row.branch}"
        assert row.parent_id and row.model.startswith("offline") and row.origin == "offline"
        assert row.prompt and row.answer and "ModelNew" in row.code and row.eval_log
    correct = [r for r in rows if r.correctness and not r.is_program0]
    assert correct
    for row in correct:
        assert row.runtime > 0 and row.runtime_stats.get("n_trials", 0) >= 1
        assert row.runtime_improvement > 0
    with store.session() as s:
        run = s.scalars(select(Run)).one()
    assert run.status == "completed" and run.finished_at is not None


def test_each_iteration_stores_its_critic_line(gelu_run):
    tmp, events = gelu_run
    said = [(e.iteration, e.text) for e in events if isinstance(e, ev.CriticDiagnosed)]
    assert [i for i, _ in said] == [0, 1]  # one per iteration, the event kept
    store = Store(tmp / "k.sqlite3")
    rows = [r for r in store.job_critiques("gelu", "e2e") if r.iteration in (0, 1)]
    assert [(r.iteration, r.text) for r in rows] == said
    run_id = events[0].run_id
    assert all(r.run_id == run_id and r.task_name == "gelu" and r.source == "rules" for r in rows)


def test_resume_runs_only_what_is_missing(gelu_run, examples_dir):
    tmp, _ = gelu_run
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=e2e", "max_iters=3", "branches_per_iteration=2")))
    assert events[0].resumed_candidates == 5
    labels = [e.label for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(labels) == ["i2-b0", "i2-b1"]
    rows = Store(tmp / "k.sqlite3").job_kernels("gelu", "e2e")
    assert len(rows) == 7 and sum(r.is_program0 for r in rows) == 1
    critiques = Store(tmp / "k.sqlite3").job_critiques("gelu", "e2e")
    # The first run diagnosed 0 (before iteration 1) and 1 (after the last); the resumed run
    # diagnoses 1 again for the parents it sampled for iteration 2, then 2.
    first, resumed = critiques[0].run_id, events[0].run_id
    assert [(r.iteration, r.run_id) for r in critiques if r.role == "best"] == [
        (0, first), (1, first), (1, resumed), (2, resumed)]


def test_bad_task_fails_with_one_message(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    with pytest.raises(openkernel.errors.TaskError, match="get_inputs"):
        list(openkernel.optimize(bad, overrides=_overrides(tmp_path)))


def _cli(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "openkernel.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def test_cli_bad_input_is_one_message(tmp_path, examples_dir):
    r = _cli("run", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such task" in r.stderr and "Traceback" not in r.stderr
    r = _cli("run", str(examples_dir / "gelu"), "--set", "max_iterz=1")
    assert r.returncode == 2 and "unknown key 'max_iterz'" in r.stderr and "Traceback" not in r.stderr
    r = _cli("eval", str(examples_dir / "gelu"), str(tmp_path / "missing.py"))
    assert r.returncode == 2 and "no such candidate" in r.stderr
    r = _cli("show", "abc", "--db", str(tmp_path / "none.sqlite3"))
    assert r.returncode == 2 and "no such database" in r.stderr


def test_cli_runs_and_show(gelu_run):
    tmp, events = gelu_run
    r = _cli("runs", "--db", str(tmp / "k.sqlite3"))
    assert r.returncode == 0 and "gelu" in r.stdout and "e2e" in r.stdout
    kid = next(e.program.id for e in events if isinstance(e, ev.CandidateEvaluated))
    r = _cli("show", kid, "--db", str(tmp / "k.sqlite3"))
    assert r.returncode == 0 and kid in r.stdout and "ModelNew" in r.stdout


def test_cli_eval_json(tmp_path, gelu_run, examples_dir):
    tmp, events = gelu_run
    program = next(e.program for e in events if isinstance(e, ev.CandidateEvaluated)
                   and e.program.kernel_exec_result.correctness)
    cand = tmp_path / "cand.py"
    cand.write_text(program.code)
    r = _cli("eval", str(examples_dir / "gelu"), str(cand), "--json",
             "--set", f"paths.scratch_dir={tmp_path / 's'}")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["status"] in ("faster", "correct") and data["correctness"] is True
    assert data["runtime_stats"]["n_trials"] >= 1


@pytest.mark.slow
def test_kill_9_keeps_candidates_and_resumes(tmp_path, examples_dir):
    db = tmp_path / "k.sqlite3"
    args = ["run", str(examples_dir / "gelu"), "--set", "job_name=killed", "--set", "max_iters=3",
            "--set", "branches_per_iteration=2", "--set", f"paths.kernels_db_path={db}",
            "--set", f"paths.scratch_dir={tmp_path / 'scratch'}", "--set", "eval_config.max_workers=1"]
    proc = subprocess.Popen([sys.executable, "-m", "openkernel.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    count = 0
    while time.time() < deadline:
        time.sleep(1)
        if db.exists():
            count = len(Store(db).job_kernels("gelu", "killed"))
            if count >= 3:  # program 0 + 2 judged candidates
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert count >= 3
    stored = {r.id for r in Store(db).job_kernels("gelu", "killed")}
    assert len(stored) >= count
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    rows = Store(db).job_kernels("gelu", "killed")
    assert stored <= {r.id for r in rows}
    labels = sorted(r.label for r in rows if not r.is_program0)
    assert labels == sorted({f"i{i}-b{b}" for i in range(3) for b in range(2)})


def test_start_from_best_and_from_a_file(gelu_run, examples_dir):
    tmp, _ = gelu_run
    best = max((r for r in Store(tmp / "k.sqlite3").job_kernels("gelu", "e2e")
                if r.correctness and not r.is_program0), key=lambda r: r.score)
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=seeded", "max_iters=1", "branches_per_iteration=1", "start_from_best=true")))
    assert events[-1].reason == "completed"
    rows = Store(tmp / "k.sqlite3").job_kernels("gelu", "seeded")
    start = [r for r in rows if r.label == "start"]
    assert len(start) == 1 and start[0].origin == "best" and start[0].code == best.code
    assert start[0].correctness
    kernel = tmp / "start.py"
    kernel.write_text(best.code)
    list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=from-file", "max_iters=1", "branches_per_iteration=1",
        f"kernels_iter_0_path={kernel}")))
    rows = Store(tmp / "k.sqlite3").job_kernels("gelu", "from-file")
    assert [r.origin for r in rows if r.label == "start"] == ["file"]
