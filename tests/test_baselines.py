"""Issue 22: every wait has a wall, and the reference's timings are paid once.

Real workers on the CPU, real sleeps, no mocked clock: a reference whose eager call is slow and
a torch.compile that never ends both stop at their walls (``eval_config.baseline_timeout_s``)
with the reason stored; a second job (an ``openkernel bench``) reuses what the first stored,
and ``eval_config.fresh_baselines`` (``--fresh-baselines``) times them again;
``--problem-timeout`` ends a problem whose candidates hang, blames none of them, and the suite
goes on to the next problem, which completes. (On the CPU no baseline is made unless asked
for: these tasks ask with ``eval_config.baselines``; the max-autotune wall is the same code,
timed on the H200.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from openkernel import cli
from openkernel.config import build_config
from openkernel.errors import ConfigError
from openkernel.evaluation.host.baselines import covers, environment_key, walls
from openkernel.records import baseline_kind

KIND = baseline_kind(False)  # the suites' default: TF32 off
from openkernel.evaluation.host.executor import Evaluator
from openkernel.events import LogEmitted, RunFinished
from openkernel.search.loop import LATE_MARGIN_S, Search
from openkernel.runner import resolve_run
from openkernel.schemas import Status
from openkernel.store import Store
from openkernel.store.tables import Kernel

REFERENCE = '''
import time
from pathlib import Path

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
{body}
        return x * 2


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''
# torch.compile traces forward with is_compiling() true: this sleep is the compile's alone
NEVER_COMPILES = "        if torch.compiler.is_compiling():\n            time.sleep(600)\n"
SLOW = "        time.sleep(60)\n"  # every call, eager included
# A worker judging a candidate (its scratch's label is i<N>-b<M>) hangs in the reference.
HANGS_IN_CANDIDATES = '        if Path("label").read_text().startswith("i"):\n            time.sleep(600)\n'
WALLS = "eval_config:\n  baselines: [eager, compile]\n  baseline_timeout_s: {eager: 3, compile: 3}\n"


def _measure(path: Path, store: Store, *overrides: str) -> Evaluator:
    """A job's evaluator on the task (its config.yaml read), its baselines made or found."""
    task, config = resolve_run(path, list(overrides))
    ev = Evaluator(task, config, store, bench_budget_s=0.1)
    ev.baselines()
    return ev


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """One job's evaluators time two references: a slow one (eager past its wall) and one
    whose compile never ends (compile past its wall); both are stored."""
    root = tmp_path_factory.mktemp("baselines")
    (root / "level1" / "2_never").mkdir(parents=True)
    (root / "level1" / "1_stuck.py").write_text(REFERENCE.format(body=HANGS_IN_CANDIDATES))
    (root / "level1" / "2_never" / "reference.py").write_text(REFERENCE.format(body=NEVER_COMPILES))
    (root / "level1" / "2_never" / "config.yaml").write_text(WALLS)
    (root / "slow").mkdir()
    (root / "slow" / "reference.py").write_text(REFERENCE.format(body=SLOW))
    (root / "slow" / "config.yaml").write_text(WALLS)
    store = Store(root / "kernels.sqlite3")
    scratch = f"paths.scratch_dir={root / 'scratch'}"
    out = {"root": root, "store": store, "scratch": scratch}
    for name, path in (("slow", root / "slow"), ("never", root / "level1" / "2_never")):
        ev = _measure(path, store, scratch)
        out[name] = (ev.baselines(), ev.baseline_error, ev.costs, ev)
    yield out
    store.close()


def test_a_slow_eager_call_stops_at_its_wall_and_nothing_else_is_timed(stored):
    record, error, costs, ev = stored["slow"]
    assert not error and record is not None
    assert record["timed_out"]["eager"]["limit_s"] == 3
    assert 3 <= record["timed_out"]["eager"]["elapsed_s"] < 60  # stopped at the wall
    assert "eval_config.baseline_timeout_s.eager" in record["eager_error"]
    assert "eager" not in record and "compile" not in record  # no median from a killed worker
    assert record["compile_error"].startswith("not timed")
    assert costs["baselines_stored"] is False and costs["baselines_s"] >= 3
    row = stored["store"].reference_timing(ev.task.digest, ev.hardware.label, KIND,
                                           environment_key(ev.hardware))
    assert row is not None and row.runtime_stats == record


def test_a_compile_that_never_ends_stops_at_its_wall_and_eager_is_still_timed(stored):
    record, error, _, ev = stored["never"]
    assert not error and record["timed_out"]["compile"]["limit_s"] == 3
    assert 3 <= record["timed_out"]["compile"]["elapsed_s"] < 600
    assert record["eager"]["median"] > 0 and record["eager"]["n_trials"] >= 3
    assert "compile" not in record and "eval_config.baseline_timeout_s.compile" in record["compile_error"]
    assert record["baselines"] == ["eager", "compile"]
    # a wall 1.5 times the one it ran into, or longer, is tried again; a shorter one is not
    asked = ["eager", "compile"]
    assert covers(record, walls(ev.ec, asked))
    a_bit = build_config({}, ["eval_config.baseline_timeout_s.compile=4"]).eval_config
    assert covers(record, walls(a_bit, asked))
    longer = build_config({}, ["eval_config.baseline_timeout_s.compile=4.5"]).eval_config
    assert not covers(record, walls(longer, asked))


def test_fresh_baselines_times_the_reference_again(stored):
    store, path = stored["store"], stored["root"] / "slow"
    again = _measure(path, store, stored["scratch"])  # another job: from the store, no worker
    assert again.costs == {"probe_s": None, "baselines_s": 0.0, "baselines_stored": True,
                           "fixed_s": 0.0}
    first = store.reference_timing(again.task.digest, again.hardware.label, KIND,
                                   environment_key(again.hardware)).created_at
    fresh = _measure(path, store, stored["scratch"], *cli.parse(
        ["run", str(path), "--fresh-baselines"]).overrides)
    assert fresh.costs["baselines_stored"] is False and fresh.costs["baselines_s"] >= 3
    assert fresh.baselines()["timed_out"]["eager"]["limit_s"] == 3
    assert store.reference_timing(fresh.task.digest, fresh.hardware.label, KIND,
                                  environment_key(fresh.hardware)).created_at > first


@pytest.mark.slow
def test_problem_timeout_ends_a_hung_problem_and_the_next_completes(stored):
    """One bench: 1_stuck hangs in its candidate's worker (its probe does not) and ends at
    --problem-timeout; 2_never completes, with the baselines the first job stored. (The wall is
    the same for both: 2_never, a probe and one candidate, must end within it; ~15-30 s on two
    free cores, so 60 s leaves room, but a machine loaded many times over can still run past.)"""
    root = stored["root"]
    out = root / "suite.json"
    args = [sys.executable, "-m", "openkernel.cli", "bench", str(root / "level1"), "--name", "walls",
            "--problem-timeout", "60", "--json", str(out), "--set", "max_iters=1",
            "--set", "branches_per_iteration=1", "--set", "prompt.max_template_combinations=1",
            "--set", f"paths.kernels_db_path={root / 'kernels.sqlite3'}", "--set", stored["scratch"]]
    proc = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {p["name"]: p for p in data["problems"]}
    stuck, never = rows["level1/1_stuck"], rows["level1/2_never"]
    assert stuck["status"] == "timed_out" and "--problem-timeout 60" in stuck["error"]
    assert never["status"] == "completed" and never["candidates"] == 1
    assert data["n_timed_out"] == 1 and "1 problem(s) timed out" in proc.stdout
    # the candidate cut short is nobody's fault: no verdict stored for it
    with stored["store"].engine.connect() as conn:
        kept = conn.execute(select(Kernel.status).where(Kernel.task_name == "level1/1_stuck",
                                                        Kernel.is_program0.is_(False))).all()
    assert kept == []
    # the second job found 2_never's baselines stored, the compile's wall among them
    assert never["baselines_stored"] is True and never["fixed_s"] == never["probe_s"] > 0
    steps = never["probe_steps_s"]  # the probe split: the worker's start, then each step
    assert {"start", "load", "forward", "footprint", "trace", "timing"} <= set(steps)
    assert abs(sum(steps.values()) - never["probe_s"]) < 0.05 * never["probe_s"] + 0.05
    assert never["baseline_timeouts"]["compile"] >= 3 and "compile timed out" in never["baseline_note"]
    assert "compile timed out" in proc.stdout and never["eager_ms"] > 0
    assert data["fixed_s_median"] is not None and never["candidate_times_s"]


HANGING_TEMPLATE = '''
import time
import torch.nn as nn

TEMPLATE_PARAMS = {"WAIT": [600, 700]}
WAIT = 600


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(WAIT)  # every combination hangs in its first call
        return x * 2
'''


def test_a_sweep_stops_at_its_own_wall(stored):
    task, config = resolve_run(stored["root"] / "level1" / "2_never",
                               [stored["scratch"], "eval_config.sweep_timeout_s=5"])
    ev = Evaluator(task, config, None, bench_budget_s=0.1)
    result, winner = ev.evaluate_template(HANGING_TEMPLATE, "triton", "t")
    assert winner is None and result.get_status() in (Status.TEST_TIMEOUT, Status.BUILD_TIMEOUT)
    assert "eval_config.sweep_timeout_s = 5" in result.eval_log
    assert 5 <= result.template_results["sweep_s"] < 600


def _late_task(root: Path, late_wall: float) -> Path:
    """A task whose every compile hangs, asking for a late baseline (reduce-overhead) too."""
    task = root / "late"
    task.mkdir()
    (task / "reference.py").write_text(REFERENCE.format(body=NEVER_COMPILES))
    (task / "config.yaml").write_text(
        "eval_config:\n  baselines: [eager, compile, cudagraphs]\n"
        f"  baseline_timeout_s: {{eager: 10, compile: 3, cudagraphs: {late_wall:g}}}\n")
    return task


def test_late_baselines_fit_in_the_time_a_problem_has_left(tmp_path):
    """A suite's problem gives its late stage only what is left of its wall: a reduce-overhead
    compile that never ends stops at its share of it (recorded as timed out, the share named),
    not at its own 60 s wall; the first stage's record stands."""
    t, config = resolve_run(_late_task(tmp_path, 60), [f"paths.scratch_dir={tmp_path / 'scratch'}"])
    ev = Evaluator(t, config, None, bench_budget_s=0.1)
    first = dict(ev.baselines(late=False))
    assert first["timed_out"]["compile"]["limit_s"] == 3 and first["eager"]["median"] > 0
    assert ev.late_baselines_pending() == ["cudagraphs"]
    started = time.monotonic()
    record = ev.baselines(within_s=4)
    assert time.monotonic() - started < 45  # 4 s and a worker's start and stop, not 60 s
    assert record["timed_out"]["cudagraphs"]["limit_s"] == 4
    assert 4 <= record["timed_out"]["cudagraphs"]["elapsed_s"] < 60
    assert "its share of the 4 s left before the problem's wall" in record["cudagraphs_error"]
    assert record["timed_out"]["compile"] == first["timed_out"]["compile"]
    assert record["eager"] == first["eager"] and not ev.late_baselines_pending()


def test_a_search_with_a_deadline_times_its_late_baselines_within_it(tmp_path):
    """The suite sets a problem's deadline on its search: the late stage then gets what is left
    (less a margin for ending the workers), so the job ends inside its wall, completed."""
    t, config = resolve_run(_late_task(tmp_path, 120), [f"paths.scratch_dir={tmp_path / 'scratch'}", "max_iters=1",
                                   "branches_per_iteration=1", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}"])
    search = Search(t, config)
    started = time.monotonic()
    search.deadline = started + 50
    events = list(search.run())
    assert time.monotonic() - started < 50 + 10  # (a loaded machine's slack past the margin)
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "completed", events[-1]
    logged = [e.message for e in events if isinstance(e, LogEmitted)]
    assert any("reduce-overhead now that the candidates are judged, within the" in m for m in logged)
    record = search.evaluator.baselines()
    limit = record["timed_out"]["cudagraphs"]["limit_s"]
    assert limit <= 50 - LATE_MARGIN_S and "left before the problem's wall" in record["cudagraphs_error"]


def test_bad_walls_are_one_message_naming_the_key(tmp_path):
    for override, key in (("eval_config.baseline_timeout_s.compile=0", "baseline_timeout_s.compile"),
                          ("eval_config.baseline_timeout_s=-5", "baseline_timeout_s"),
                          ("eval_config.sweep_timeout_s=0", "sweep_timeout_s"),
                          ("eval_config.baselines=[compile]", "baselines")):
        with pytest.raises(ConfigError, match=f"eval_config.{key}'"):
            build_config({}, [override])
    assert build_config({}, ["eval_config.baseline_timeout_s=7"]).eval_config.baseline_timeout_s.autotune == 7
    task = tmp_path / "t.py"
    task.write_text(REFERENCE.format(body=""))
    assert cli.main(["bench", str(task), "--problem-timeout", "0"]) == 2
