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
from openkernel.wording import speedup_text


def _overrides(tmp_path, *extra):
    return [f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}", "search.seed=1", *extra]


# One combination and one seed: a gelu candidate is one worker, not a sweep worker and then a
# judge (the sweep is covered by test_an_exhausted_sweep..., which keeps `_overrides` alone).
FAST = ("prompt.max_template_combinations=1", "eval_config.correctness_seeds=1")


@pytest.fixture(scope="module")
def gelu_run(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("gelu")
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=e2e", "max_iters=2", "branches_per_iteration=2", *FAST)))
    return tmp, events


def _trouble(events) -> str:
    """What the run said went wrong (for a failed assertion's message): its warnings and errors,
    withdrawn and abandoned candidates."""
    lines = [f"{e.level}: {e.message}" for e in events
             if isinstance(e, ev.LogEmitted) and e.level in ("warning", "error")]
    lines += [f"withdrawn {e.label}: {e.reason}" for e in events if isinstance(e, ev.CandidateWithdrawn)]
    lines += [f"abandoned {e.label}" for e in events
              if isinstance(e, ev.CandidatePhaseChanged) and e.phase == "abandoned"]
    # nothing said: every event that names a candidate, in order, to show where one was lost
    return "\n".join(lines) or "nothing said; the candidates' events:\n" + "\n".join(
        f"{type(e).__name__} {e.label} {getattr(e, 'phase', '')}" for e in events
        if isinstance(getattr(e, "label", None), str))


def test_event_stream_shape(gelu_run):
    _, events = gelu_run
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    started = events[0]
    assert started.generator == "offline" and "CPU" in started.hardware
    assert kinds.count("IterationStarted") == 2 and kinds.count("IterationFinished") == 2
    evaluated = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(e.label for e in evaluated) == ["i0-b0", "i0-b1", "i1-b0", "i1-b1"], _trouble(events)
    assert events[-1].reason == "completed" and events[-1].candidates == 4
    assert events[-1].new_candidates == 4
    assert any(e.program.kernel_exec_result.correctness for e in evaluated)
    assert any(isinstance(e, ev.CriticDiagnosed) for e in events)
    # a best found before the last iteration: the log says what became of the later ones
    best = [e for e in events if isinstance(e, ev.BestImproved)][-1].program
    stall = [e.message for e in events if isinstance(e, ev.LogEmitted)
             and e.message.startswith("The best (")]
    if best.iteration_found == 0:
        assert len(stall) == 1 and "has not improved since iteration 0: of the 2 candidates" \
            in stall[0], stall
    else:
        assert stall == []


def test_each_candidate_goes_through_named_phases(gelu_run):
    """Queued, sweeping, building, testing and timing are told apart (not one "running")."""
    _, events = gelu_run
    phases: dict[str, list[str]] = {}
    for e in events:
        if isinstance(e, ev.CandidatePhaseChanged):
            phases.setdefault(e.label, []).append(e.phase)
            assert e.phase in ev.PHASES
        elif isinstance(e, ev.CandidateEvaluated):
            seen = phases[e.label]
            # a sweep of the offline generator's tunables is judged as one templated candidate
            swept = [p for p in seen if p != "sweeping"]
            assert swept[:3] == ["generating", "queued", "building"], seen
            if e.program.kernel_exec_result.correctness:
                assert seen[-2:] == ["testing", "timing"], seen
    assert sorted(phases) == ["i0-b0", "i0-b1", "i1-b0", "i1-b1"]
    # CPU: no GPU turn to wait for, so no candidate is ever "waiting_for_gpu"
    assert not any("waiting_for_gpu" in p for p in phases.values())


def test_one_worker_leaves_the_other_candidate_queued(tmp_path, examples_dir):
    """With one worker, the second candidate waits "queued" while the first builds and runs."""
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp_path, "job_name=one-worker", "max_iters=1", "branches_per_iteration=2",
        "eval_config.max_workers=1", *FAST)))
    now: dict[str, str] = {}
    overlap = False
    for e in events:
        if isinstance(e, ev.CandidatePhaseChanged):
            now[e.label] = e.phase
            busy = [label for label, phase in now.items() if phase in ("building", "testing", "timing")]
            waiting = [label for label, phase in now.items() if phase == "queued"]
            overlap = overlap or bool(busy and waiting)
            assert len(busy) <= 1  # one worker: never two candidates in it at once
        elif isinstance(e, ev.CandidateEvaluated):
            now[e.label] = "judged"
    assert overlap


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
    numel = 1 << 16  # examples/gelu/task.py on the CPU: one float32 tensor in, one out
    for row in correct:
        assert row.runtime > 0 and row.runtime_stats.get("n_trials", 0) >= 1
        assert row.runtime_improvement > 0
        # the roofline estimate counts GELU's pointwise work: never a wrong zero intensity
        assert row.profiler_data["flops"] == numel
        assert row.profiler_data["arithmetic_intensity"] == pytest.approx(1 / 8)
        assert "arithmetic intensity 0.00" not in row.prompt
    with store.session() as s:
        run = s.scalars(select(Run)).one()
    assert run.status == "completed" and run.finished_at is not None


def test_cli_runs_says_the_best_the_run_said(gelu_run):
    """One "best" everywhere: the correct candidate with the highest score, never the
    reference, whose 1.00x `openkernel runs` used to print for every job."""
    tmp, events = gelu_run
    finished = events[-1]
    r = _cli("runs", "--db", str(tmp / "k.sqlite3"))  # piped: tab-separated, whole names
    assert r.returncode == 0, r.stderr
    header, *lines = r.stdout.splitlines()
    assert header.split("\t") == ["task", "job", "state", "candidates", "best", "hardware",
                                  "last activity"]
    task, job, state, candidates, best, hardware, _ = next(
        line.split("\t") for line in lines if line.split("\t")[1] == "e2e")
    best_label = next(e.label for e in events if isinstance(e, ev.CandidateEvaluated)
                      and e.program.id == finished.best_program_id)
    assert (task, state, candidates) == ("gelu", "completed", "4")
    assert best == f"{speedup_text(finished.best_speedup)} ({best_label})" and "1.00x" not in best
    assert hardware.startswith("CPU")
    row = next(j for j in Store(tmp / "k.sqlite3").list_jobs() if j["job_name"] == "e2e")
    assert row["best_id"] == finished.best_program_id and row["candidates"] == 4


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
        tmp, "job_name=e2e", "max_iters=3", "branches_per_iteration=2", *FAST)))
    assert events[0].resumed_candidates == 4  # the reference is not a candidate
    resumed = [e.message for e in events if isinstance(e, ev.LogEmitted) and "Resuming" in e.message]
    assert resumed and "4 candidates stored" in resumed[0]
    labels = [e.label for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(labels) == ["i2-b0", "i2-b1"], _trouble(events)
    assert (events[-1].candidates, events[-1].new_candidates) == (6, 2)  # the job's, this run's
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


def test_every_set_option_says_what_it_takes():
    """Issue 58: `bench --help` had no text for --set (nor had run and eval)."""
    from openkernel.cli import _parser

    parser = _parser()
    commands = parser._subparsers._group_actions[0].choices
    for name in ("run", "eval", "bench"):
        text = " ".join(commands[name].format_help().split())
        assert "--set KEY=VALUE a config key, dotted for nested ones, e.g. max_iters=3" in text, name


def test_cli_bad_input_is_one_message(tmp_path, examples_dir):
    r = _cli("run", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such task" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == "" and r.stderr.startswith("error: ")  # no blank line before it
    r = _cli("run", str(examples_dir / "gelu"), "--set", "max_iterz=1")
    assert r.returncode == 2 and "unknown key 'max_iterz'" in r.stderr and "Traceback" not in r.stderr
    r = _cli("eval", str(examples_dir / "gelu"), str(tmp_path / "missing.py"))
    assert r.returncode == 2 and "no such candidate" in r.stderr
    r = _cli("show", "abc", "--db", str(tmp_path / "none.sqlite3"))
    assert r.returncode == 2 and "no such database" in r.stderr


def test_cli_show_prints_every_field(gelu_run):
    tmp, events = gelu_run
    kid = next(e.program.id for e in events if isinstance(e, ev.CandidateEvaluated)
               and e.program.kernel_exec_result.correctness)
    r = _cli("show", kid, "--db", str(tmp / "k.sqlite3"))
    assert r.returncode == 0 and kid in r.stdout and "ModelNew" in r.stdout
    row = Store(tmp / "k.sqlite3").get_kernel(kid)
    for name in ("prompt:", "answer:", "metadata:", "features:", "profiler_data:", "runtime_stats:",
                 "generation_log:", "reference_code:", "inspiration_ids:", "tokens_used:"):
        assert f"\n{name}" in "\n" + r.stdout, name
    assert row.prompt.splitlines()[0] in r.stdout and '"tile"' in r.stdout
    assert '"integrity_checks"' in r.stdout  # the metadata column, not SQLAlchemy's MetaData
    data = json.loads(_cli("show", kid, "--db", str(tmp / "k.sqlite3"), "--json").stdout)
    assert data["id"] == kid and data["metadata"]["integrity_checks"] and data["prompt"] == row.prompt
    r = _cli("show", kid, "--db", str(tmp / "k.sqlite3"), "--field", "code")
    assert r.stdout.rstrip("\n") == row.code.rstrip("\n")
    r = _cli("show", kid, "--db", str(tmp / "k.sqlite3"), "--field", "nope")
    assert r.returncode == 2 and "no field 'nope'" in r.stderr and "Traceback" not in r.stderr


def test_cli_run_words(tmp_path, examples_dir):
    """One candidate is "1 candidate"; the generator line says what it is, once. `runs` never
    cuts the job's long name."""
    name = "a-long-job-name-that-a-table-would-cut-" + "x" * 40
    args = ["run", str(examples_dir / "gelu"), "--set", f"job_name={name}", "--set", "max_iters=1",
            "--set", "branches_per_iteration=1",
            *sum((["--set", o] for o in _overrides(tmp_path, *FAST)), [])]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    assert "completed: 1 candidate," in r.stdout and "offline templates" in r.stdout
    assert "offline (offline)" not in r.stdout
    r = _cli("runs", "--db", str(tmp_path / "k.sqlite3"))
    assert r.returncode == 0 and f"\t{name}\t" in r.stdout
    # the same in a narrow terminal: folded over lines, never cut with an ellipsis
    from rich.console import Console

    import openkernel.cli as cli

    narrow = Console(width=60, force_terminal=True, record=True)
    old, cli.console = cli.console, narrow
    try:
        assert cli.main(["runs", "--db", str(tmp_path / "k.sqlite3")]) == 0
    finally:
        cli.console = old
    cells = [line.split("│")[2].strip() for line in narrow.export_text().splitlines()
             if line.startswith("│")]
    assert "".join(cells) == name  # folded over lines, never cut with an ellipsis
    args[args.index("max_iters=1")] = "max_iters=2"
    r = _cli(*args)  # resumed: the job's count, and this run's
    assert "completed: 2 candidates (1 in this run)," in r.stdout, r.stdout  # "judged": the tally's word


def test_cli_task_that_fails_to_load_says_so_once(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return x.relu()\n\ndef get_inputs():\n    raise ValueError('no inputs here')\n\n"
                   "def get_init_inputs():\n    return []\n")
    r = _cli("run", str(bad), *sum((["--set", o] for o in _overrides(tmp_path)), []))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    out = r.stdout + r.stderr
    assert out.count("no inputs here") == 1, out


def _eval(capsys, *args) -> tuple[int, str]:
    """`openkernel eval ...` in this process (the candidate still runs in its worker): no
    interpreter start and hardware worker of a CLI process of its own. Returns (exit, stdout)."""
    from openkernel.cli import main

    code = main(["eval", *args])
    return code, capsys.readouterr().out


def test_cli_eval_points_at_the_users_file_and_line(tmp_path, examples_dir, capsys):
    """A build error's log names the user's file and line, not the scratch copy, nor
    openkernel's or importlib's frames."""
    cand = tmp_path / "my_kernel.py"
    cand.write_text("import torch\n\n\ndef helper(x:\n    return x\n")
    code, out = _eval(capsys, str(examples_dir / "gelu"), str(cand), "--set",
                      f"paths.scratch_dir={tmp_path / 's'}")
    assert code == 0, out
    assert "compile_error" in out and f'File "{cand}", line 4' in out, out
    for noise in ("importlib", "/openkernel/", "candidate.py"):
        assert noise not in out, noise
    cand.write_text("import torch\n\n\ndef oops():\n    raise RuntimeError('broken at import')\n\n\noops()\n")
    code, out = _eval(capsys, str(examples_dir / "gelu"), str(cand), "--set",
                      f"paths.scratch_dir={tmp_path / 's'}")
    assert f'File "{cand}", line 8' in out and f'File "{cand}", line 5, in oops' in out
    assert "RuntimeError: broken at import" in out
    for noise in ("importlib", "/openkernel/", "candidate.py"):
        assert noise not in out, noise


def test_cli_eval_json(tmp_path, gelu_run, examples_dir, capsys):
    tmp, events = gelu_run
    program = next(e.program for e in events if isinstance(e, ev.CandidateEvaluated)
                   and e.program.kernel_exec_result.correctness)
    cand = tmp_path / "cand.py"
    cand.write_text(program.code)
    code, out = _eval(capsys, str(examples_dir / "gelu"), str(cand), "--json",
                      "--set", f"paths.scratch_dir={tmp_path / 's'}")
    assert code == 0, out
    data = json.loads(out)
    assert data["status"] in ("faster", "correct") and data["correctness"] is True
    assert data["runtime_stats"]["n_trials"] >= 1
    # the roofline estimate the search adds, labelled an estimate, on this path too
    assert data["profiler_data"]["estimate"] is True
    assert data["profiler_data"]["arithmetic_intensity"] == pytest.approx(1 / 8)


@pytest.mark.slow
def test_kill_9_keeps_candidates_and_resumes(tmp_path, examples_dir):
    db = tmp_path / "k.sqlite3"
    args = ["run", str(examples_dir / "gelu"), "--set", "job_name=killed", "--set", "max_iters=2",
            "--set", "branches_per_iteration=2", "--set", f"paths.kernels_db_path={db}",
            "--set", f"paths.scratch_dir={tmp_path / 'scratch'}", "--set", "eval_config.max_workers=1",
            # one combination and one seed per candidate (four of the CPU's 90, so none runs out)
            *sum((["--set", o] for o in FAST), [])]
    proc = subprocess.Popen([sys.executable, "-m", "openkernel.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    count = 0
    while time.time() < deadline:
        time.sleep(1)
        if db.exists():
            count = len(Store(db).job_kernels("gelu", "killed"))
            if count >= 2:  # program 0 + 1 judged candidate; 3 left, one worker: ~30 s of work
                break
    state = _cli("runs", "--db", str(db)).stdout
    assert "\tkilled\trunning\t" in state  # alive: its heartbeat and pid say so
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert count >= 2
    # Its engine is gone: the job reads interrupted at once, not "running" forever.
    assert "\tkilled\tinterrupted\t" in _cli("runs", "--db", str(db)).stdout
    from kernelcode.dashboard.queries import list_jobs
    from openkernel.store import open_readonly

    assert list_jobs(open_readonly(db))[0][0]["state"] == "interrupted"  # the dashboard's too
    stored = {r.id for r in Store(db).job_kernels("gelu", "killed")}
    assert len(stored) >= count
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    assert f"completed: 4 candidates ({4 - (len(stored) - 1)} in this run)" in r.stdout
    rows = Store(db).job_kernels("gelu", "killed")
    assert stored <= {r.id for r in rows}
    labels = sorted(r.label for r in rows if not r.is_program0)
    assert labels == sorted({f"i{i}-b{b}" for i in range(2) for b in range(2)})
    # Resumed and finished: the job is completed, and the killed run is stored as interrupted.
    assert "\tkilled\tcompleted\t4\t" in _cli("runs", "--db", str(db)).stdout
    with Store(db).session() as s:
        runs = list(s.scalars(select(Run).order_by(Run.id)))
    assert [r.status for r in runs] == ["interrupted", "completed"]
    assert runs[0].finished_at is not None and runs[0].engine_pid == proc.pid


def test_start_from_best_and_from_a_file(gelu_run, examples_dir):
    tmp, _ = gelu_run
    best = max((r for r in Store(tmp / "k.sqlite3").job_kernels("gelu", "e2e")
                if r.correctness and not r.is_program0), key=lambda r: r.score)
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=seeded", "max_iters=1", "branches_per_iteration=1", "start_from_best=true", *FAST)))
    assert events[-1].reason == "completed"
    rows = Store(tmp / "k.sqlite3").job_kernels("gelu", "seeded")
    start = [r for r in rows if r.label == "start"]
    assert len(start) == 1 and start[0].origin == "best" and start[0].code == best.code
    assert start[0].correctness
    kernel = tmp / "start.py"
    kernel.write_text(best.code)
    list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp, "job_name=from-file", "max_iters=1", "branches_per_iteration=1",
        f"kernels_iter_0_path={kernel}", *FAST)))
    rows = Store(tmp / "k.sqlite3").job_kernels("gelu", "from-file")
    assert [r.origin for r in rows if r.label == "start"] == ["file"]


def test_flops_are_counted_or_said_unknown(tmp_path, examples_dir):
    """The probe counts pointwise and reduction work (torch's FLOP counter sees only matmuls),
    and a task with no arithmetic gets no intensity rather than a wrong 0.00 FLOP/byte."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from types import SimpleNamespace

    from openkernel.generators.prompt import _probe_summary
    from openkernel.search.critic import roofline_estimate
    from openkernel.task import load_task

    copy = tmp_path / "copy.py"
    copy.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x.t().contiguous()\n\ndef get_inputs():\n    return [torch.randn(64, 32)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")}})
    probes = {}
    for name, path in (("gelu", examples_dir / "gelu"), ("softmax", examples_dir / "softmax"),
                       ("copy", copy)):
        evaluator = Evaluator(load_task(path), config)
        try:
            probes[name] = evaluator.probe()
        finally:
            evaluator.close()
        assert probes[name].ok, probes[name].error
    gelu, softmax, copied = probes["gelu"], probes["softmax"], probes["copy"]
    assert gelu.flops == 64 * 1024  # one per element of the pointwise GELU
    numel = 1
    for n in softmax.input_shapes[0]:
        numel *= n
    assert softmax.flops == 5 * numel  # max, subtract, exp, sum, divide
    assert copied.flops == 0.0
    hw = gelu.hardware
    assert roofline_estimate(1.0, gelu, hw)["arithmetic_intensity"] == pytest.approx(0.125)
    unknown = roofline_estimate(1.0, copied, hw)
    assert "arithmetic_intensity" not in unknown and "flops" not in unknown and unknown["bytes"] > 0
    facts = _probe_summary(SimpleNamespace(probe=copied))
    assert "FLOPs not counted" in facts and "intensity 0.00" not in facts


def test_an_exhausted_sweep_ends_the_job_with_the_critics_word_and_its_traces(
        tmp_path, pointwise_task):
    """The offline generator's space runs out (fused_pointwise: 3 combinations on the CPU,
    judged by iteration 0's two candidates) before max_iters: the branches it had nothing for
    are withdrawn (no row, no "not judged"), the job ends there, completed, says why and at
    what count of the planned, the critic still has the last word, and the trace dataset holds
    each candidate as its winner's concrete code."""
    from openkernel.store.traces import read_dataset
    from openkernel.templating import is_template

    events = list(openkernel.optimize(pointwise_task, overrides=_overrides(
        tmp_path, "job_name=sweep", "max_iters=3", "branches_per_iteration=2",
        "traces.enabled=true", f"traces.dir={tmp_path / 'traces'}")))
    finished = events[-1]
    assert finished.reason == "completed" and finished.candidates == 2, finished
    assert finished.planned == 6 and "every combination" in finished.ended_early
    assert finished.tally.words() == "2 candidates"
    withdrawn = [e for e in events if isinstance(e, ev.CandidateWithdrawn)]
    assert sorted(e.label for e in withdrawn) == ["i1-b0", "i1-b1"]
    started = {e.label for e in events if isinstance(e, ev.CandidateStarted)}
    judged = {e.label for e in events if isinstance(e, ev.CandidateEvaluated)}
    assert started - judged == {"i1-b0", "i1-b1"} and judged == {"i0-b0", "i0-b1"}
    assert not any(isinstance(e, ev.CandidatePhaseChanged) and e.phase == "abandoned"
                   for e in events)
    ends = [i for i, e in enumerate(events)
            if isinstance(e, ev.LogEmitted) and "The search ends after iteration 0" in e.message]
    assert len(ends) == 1 and "every combination" in events[ends[0]].message
    assert "iteration 1 had nothing new to judge" in events[ends[0]].message
    finished_its = {e.iteration: e.judged for e in events if isinstance(e, ev.IterationFinished)}
    assert finished_its == {0: 2, 1: 0}  # the views show iteration 0, not an empty 1
    assert any(isinstance(e, ev.CriticDiagnosed) for e in events[ends[0]:])
    traced = read_dataset(tmp_path / "traces").to_pylist()
    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("relu_x2", "sweep")
            if not r.is_program0]
    assert sorted(t["kernel_id"] for t in traced) == sorted(r.id for r in rows)
    assert len(rows) == 2
    assert all(t["session_status"] == "completed" for t in traced)
    points = [tuple(sorted(c["params"].items())) for r in rows
              for c in (r.template_results or {}).get("combinations") or [
                  {"params": {k: v for k, v in r.meta["params"].items() if k != "template"}}]]
    assert len(points) == len(set(points)) == 3
    # branches propose in branch order, whichever thread runs first: i0-b0's sweep takes two of
    # the three (its start point and a neighbour), i0-b1 the last; the other way round i0-b1's
    # start sweeps all three and i0-b0 is left nothing
    swept = {r.label: len((r.template_results or {}).get("combinations") or [None]) for r in rows}
    assert swept == {"i0-b0": 2, "i0-b1": 1}, swept
    # one story (issue 58): the description names the kept point's knobs, and the sweep's
    # table holds the winner's full-checks figure, which is the kernel's speedup
    sweep = next(r for r in rows if r.label == "i0-b0")
    kept = {k: v for k, v in sweep.meta["params"].items() if k != "template"}
    head = sweep.description.split("; a sweep")[0].split("; the winner of")[0]
    for k, v in kept.items():
        if f"{k}=" in sweep.description:
            assert f"{k}={v}" in head, (kept, sweep.description)
    if sweep.correctness:
        judged = sweep.template_results["winner_judged"]
        assert judged["speedup"] == sweep.runtime_improvement
        assert f"judged {speedup_text(sweep.runtime_improvement)} in full" in sweep.eval_log
    assert not any(is_template(t["kernel_code"]) for t in traced if t["kernel_code"])
    # `openkernel run` ends its bar at what was done and says why (the run is stored: resume)
    r = _cli("run", str(pointwise_task), *sum((["--set", o] for o in _overrides(
        tmp_path, "job_name=sweep", "max_iters=3", "branches_per_iteration=2")), []))
    assert r.returncode == 0, r.stderr
    assert "ended at 2 of 6 planned: every combination" in r.stdout
    assert not r.stdout.startswith("\n")


def test_submit_judges_a_kernel_into_a_finished_job(gelu_run, examples_dir, tmp_path):
    """openkernel.submit (issue 58: it was in __all__ and in kernel-code's hint, and missing):
    the finished job takes the kernel as u1, judged and stored with its author and parent;
    no generator iteration runs; a parent from another job is one message."""
    import shutil
    import sqlite3

    from openkernel.errors import OpenKernelError

    src, _ = gelu_run
    with sqlite3.connect(src / "k.sqlite3") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(src / "k.sqlite3", tmp_path / "k.sqlite3")
    store = Store(tmp_path / "k.sqlite3")
    before = store.job_kernels("gelu", "e2e")
    parent = next(r for r in before if r.correctness and not r.is_program0)
    code = (examples_dir.parent / "tests" / "candidates" / "good_gelu.py").read_text()
    program = openkernel.submit(examples_dir / "gelu", code, job="e2e", parent=parent.id,
                                author="agent:test", description="mine",
                                overrides=_overrides(tmp_path, *FAST))
    assert program.label == "u1" and program.kernel_exec_result.correctness
    after = store.job_kernels("gelu", "e2e")
    new = [r for r in after if r.id not in {b.id for b in before}]
    assert [(r.label, r.author, r.parent_id, r.origin) for r in new] == [
        ("u1", "agent:test", parent.id, "agent")]
    with pytest.raises(OpenKernelError, match="no kernel .* in job other"):
        openkernel.submit(examples_dir / "gelu", code, job="other", parent=parent.id,
                          overrides=_overrides(tmp_path, *FAST))
    names = {}
    exec("from openkernel import *", names)  # everything __all__ names exists
    assert callable(names["submit"]) and callable(names["optimize"])


def test_a_pause_counts_what_runs_and_parks_what_waits_for_a_worker(tmp_path, examples_dir):
    """Issue 58: three candidates, two workers: paused while two are judged and the third
    waits for a worker, the run says 2 in flight (not 3), and once PAUSED the third's row reads
    "paused", not "queued"; resumed, all three are judged."""
    from openkernel.search.control import RunControl

    control = RunControl()
    phases: dict[str, str] = {}
    paused_counts, judged = [], []
    for e in openkernel.optimize(examples_dir / "gelu", control=control, overrides=_overrides(
            tmp_path, "max_iters=1", "branches_per_iteration=3", "eval_config.max_workers=2",
            *FAST)):
        if isinstance(e, ev.CandidatePhaseChanged):
            phases[e.label] = e.phase
            working = [k for k, p in phases.items() if p not in ("generating", "queued")]
            waiting = [k for k, p in phases.items() if p == "queued"]
            if not control.paused and not paused_counts and len(working) == 2 and waiting:
                control.pause()
        elif isinstance(e, ev.RunPaused):
            paused_counts.append(e.in_flight)
            if e.in_flight == 0:
                parked = dict(phases)
                control.resume()
        elif isinstance(e, ev.CandidateEvaluated):
            judged.append(e.label)
    assert paused_counts[0] == 2 and paused_counts[-1] == 0, paused_counts
    assert sorted(parked.values()).count("paused") == 1, parked
    assert "queued" not in parked.values(), parked
    assert len(judged) == 3
