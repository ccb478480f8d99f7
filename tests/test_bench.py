"""`openkernel bench` (issue 12): a suite over a folder of small KernelBench-format problems
written here, end to end on the CPU: the table, fast_p, the JSON, and resuming by name."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from openkernel.bench.problems import discover
from openkernel.bench.summary import ProblemResult, summarize
from openkernel.errors import OpenKernelError

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
{init}
    def forward(self, x):
        return {expr}

batch_size = 8
dim = {dim}

def get_inputs():
    return [torch.randn({shape})]

def get_init_inputs():
    return [{init_args}]
'''


def _problem(folder: Path, name: str, expr: str, dim: int = 1024, shape: str = "batch_size, dim",
             init: str = "", init_args: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(PROBLEM.format(expr=expr, dim=dim, shape=shape,
                                                      init=init or "    pass", init_args=init_args))


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kb")
    level = root / "level1"
    _problem(level, "19_ReLU", "torch.relu(x)")
    _problem(level, "23_Softmax", "torch.softmax(x, dim=1)", dim=512)
    _problem(level, "89_sort", "torch.sort(x, dim=1).values")
    (level / "README.py").write_text("this is not a problem\n")
    return root


def _bench(cwd: Path, *args: str, combinations: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "openkernel.cli", "bench", *args,
                           "--set", "max_iters=1", "--set", "branches_per_iteration=2",
                           "--set", "search.seed=1",
                           # one combination, one seed: a candidate is one worker, not a sweep
                           "--set", f"prompt.max_template_combinations={combinations}",
                           "--set", "eval_config.correctness_seeds=1"],
                          cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_bench_runs_a_suite_and_resumes_it(suite_dir, tmp_path):
    out = tmp_path / "suite.json"
    first = _bench(tmp_path, str(suite_dir / "level1"), "--name", "kb-test", "--json", str(out))
    assert first.returncode == 0, first.stdout + first.stderr
    # every problem in the table, none of their names cut, the bad file named once
    for name in ("level1/19_ReLU", "level1/23_Softmax", "level1/89_sort"):
        assert name in first.stdout
    assert "README.py" in first.stderr and "skipped" in first.stderr
    assert "no kernel" in first.stdout  # why the sort has no candidate
    data = json.loads(out.read_text())
    rows = {p["name"]: p for p in data["problems"]}
    assert [p["name"] for p in data["problems"]] == ["level1/19_ReLU", "level1/23_Softmax",
                                                      "level1/89_sort"]  # KernelBench order
    assert rows["level1/19_ReLU"]["status"] == "completed" and rows["level1/19_ReLU"]["correct"]
    assert rows["level1/19_ReLU"]["candidates"] == 2 and rows["level1/19_ReLU"]["speedup"] > 0
    assert rows["level1/89_sort"]["status"] == "failed" and not rows["level1/89_sort"]["correct"]
    assert "no kernel" in rows["level1/89_sort"]["error"]
    assert all(p["evaluator_faults"] == 0 for p in data["problems"])
    assert set(data["fast_p"]) == {"0", "1", "1.5", "2"}
    assert data["fast_p"]["0"] == pytest.approx(2 / 3)
    speedups = [rows[n]["speedup"] for n in ("level1/19_ReLU", "level1/23_Softmax")]
    assert data["geomean_eager"] == pytest.approx(math.sqrt(speedups[0] * speedups[1]))
    assert data["fast_p"]["1"] == sum(s > 1 for s in speedups) / 3
    assert data["n_correct"] == 2 and data["geomean_compile"] is None  # no torch.compile on the CPU
    # every candidate here is plain (one kernel): the own time's split says so
    assert data["candidate_s_median_plain"] == data["candidate_s_median"] > 0
    assert data["candidate_s_median_sweep"] is None and data["sweep_combinations_median"] is None
    assert "(plain candidates " in first.stdout and "sweeps" not in first.stdout
    # every worker was forked: nothing said about workers started anew
    assert data["started_anew"] == 0 and data["fork_error"] == "" and "started anew" not in first.stdout
    assert "fast_0 0.67" in first.stdout
    # the reference is timed beside each candidate on the CPU too: its eager time is shown; and
    # each problem's progress line gives the time its table row gives
    assert rows["level1/19_ReLU"]["eager_ms"] > 0 and rows["level1/89_sort"]["eager_ms"] is None
    for name, row in rows.items():
        line = next(ln for ln in first.stdout.splitlines() if ln.strip().startswith(name + " "))
        assert f"{row['time_s']:6.1f} s" in line, (line, row["time_s"])
    # every table says what fp32 GEMMs ran in; no problem here is a lone library call
    assert "fp32 GEMMs in full fp32" in first.stdout and data["precision"].startswith("fp32 GEMMs in full")
    assert data["library_bound"] == [] and all(p["library_bound"] == "" for p in data["problems"])
    # the best kernel and what its GEMMs and convolutions multiply in (a ReLU has none)
    assert rows["level1/19_ReLU"]["best_kernel"] and rows["level1/19_ReLU"]["best_precision"] == []

    # With the three baselines stored (as a GPU run stores them), the table gives the best
    # kernel's speedup over max-autotune from the same rounds' times, and its geomean.
    from openkernel.bench.summary import suite_summary
    from sqlalchemy import select

    from openkernel.store import Store
    from openkernel.store.tables import SuiteProblem

    store = Store(tmp_path / "runs" / "kernels.sqlite3")
    from openkernel.store.tables import Run

    with store.engine.connect() as conn:  # the bench asks for the strongest baseline
        configs = conn.execute(select(Run.config)).scalars().all()
    assert configs and all(c["eval_config"]["max_autotune_baseline"] and
                           c["eval_config"]["cudagraphs_baseline"] for c in configs)
    relu = rows["level1/19_ReLU"]
    with store.engine.connect() as conn:
        digest = conn.execute(select(SuiteProblem.task_digest).where(
            SuiteProblem.task_name == "level1/19_ReLU")).scalar_one()
    store.put_reference_timing(digest, relu["hardware"], "compile", 1.0, {
        "eager": {"median": 2.0}, "compile": {"median": 1.0}, "autotune": {"median": 0.5},
        "cudagraphs": {"median": 0.25}})
    summary = suite_summary(store.engine, "kb-test")
    row = {p.name: p for p in summary.problems}["level1/19_ReLU"]
    assert row.autotune_ms == 0.5 and row.over_autotune == pytest.approx(relu["speedup"] / 4)
    assert summary.n_autotune == 1 and summary.geomean_autotune == pytest.approx(relu["speedup"] / 4)
    assert row.cudagraphs_ms == 0.25 and row.over_cudagraphs == pytest.approx(relu["speedup"] / 8)
    assert summary.n_cudagraphs == 1 and not row.cuda_graph  # (the CPU's kernels launch)

    # Resume by name with one more problem: the completed two are skipped, the new one runs.
    _problem(suite_dir / "level1", "20_LeakyReLU", "torch.nn.functional.leaky_relu(x, 0.01)")
    # (its candidates sweep two combinations each: the own time's split counts them apart)
    again = _bench(tmp_path, str(suite_dir / "level1"), "--name", "kb-test", "--json", str(out),
                   combinations=2)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = {line.split()[0]: line for line in again.stdout.splitlines()
             if line.strip().startswith("level1/") and "judged" in line}
    assert "skipped" in lines["level1/19_ReLU"] and "skipped" in lines["level1/23_Softmax"]
    assert "completed" in lines["level1/20_LeakyReLU"]
    assert "over cudagraphs" in again.stdout and "cudagraphs ms" in again.stdout
    assert "skipped" in lines["level1/89_sort"]  # refused before: not again unless --retry-failed
    data = json.loads(out.read_text())
    assert [p["name"] for p in data["problems"]][:3] == ["level1/19_ReLU", "level1/20_LeakyReLU",
                                                         "level1/23_Softmax"]
    assert {p["name"]: p for p in data["problems"]}["level1/19_ReLU"]["candidates"] == 2
    leaky = {p["name"]: p for p in data["problems"]}["level1/20_LeakyReLU"]
    assert leaky["candidate_combinations"] == [2, 2], leaky
    assert data["sweep_combinations_median"] == 2 and data["candidate_s_median_sweep"] > 0
    assert data["candidate_s_median_plain"] > 0
    assert "sweeps " in again.stdout and "2 combinations each (median)" in again.stdout


def test_summary_figures_follow_kernelbench():
    rows = [ProblemResult("a", correct=True, speedup=0.5, over_compile=0.25),
            ProblemResult("b", correct=True, speedup=1.2, over_compile=0.9),
            ProblemResult("c", correct=True, speedup=3.0),
            ProblemResult("d", correct=False), ProblemResult("e", status="failed")]
    rows[1].started_anew, rows[1].fork_error = 2, "the fork server has ended: why"
    rows[3].started_anew, rows[3].fork_error = 1, "another"
    s = summarize("x", rows)
    assert s.started_anew == 3 and s.fork_error == "the fork server has ended: why"
    assert s.fast_p == {"0": 0.6, "1": 0.4, "1.5": 0.2, "2": 0.2}
    assert s.geomean_eager == pytest.approx((0.5 * 1.2 * 3.0) ** (1 / 3))
    assert s.geomean_compile == pytest.approx(math.sqrt(0.25 * 0.9)) and s.n_compile == 2
    assert summarize("empty", []).fast_p["0"] == 0.0


def test_the_depth_curve_carries_a_finished_job_and_counts_the_risers():
    """Issue 57: after each iteration, the geomean of the best kernels so far; a job that ended
    earlier keeps its best; a problem rises when its last best is 2% over its first."""
    from openkernel.bench.summary import depth_text, problem_depth

    rows = [ProblemResult("a", correct=True, speedup=2.0, depth=[1.0, 1.5, 2.0],
                          depth_compile=[0.5, 0.75, 1.0]),
            ProblemResult("b", correct=True, speedup=1.0, depth=[1.0, 1.01], depth_compile=[]),
            ProblemResult("c", correct=True, speedup=3.0, depth=[None, 3.0, 3.0]),
            ProblemResult("d", correct=False, depth=[None, None, None])]
    s = summarize("x", rows)
    assert [d["n"] for d in s.depth] == [2, 3, 3]
    assert s.depth[2]["geomean_eager"] == pytest.approx((2.0 * 1.01 * 3.0) ** (1 / 3))
    assert s.depth[0]["geomean_compile"] == 0.5 and s.depth[2]["n_compile"] == 1
    assert (s.n_rising, s.n_depth) == (1, 2)  # a rose 2x; b 1% (noise); c had no iteration 0
    assert s.to_json()["depth"] == s.depth
    assert depth_text(s) == ("after iteration 0 0.500x, 2 1.00x over torch.compile (geomean); "
                             "rising on 1 of 2")
    assert problem_depth(rows[0]) == "0.500x→1.00x (i2)" and problem_depth(rows[3]) == "-"
    assert depth_text(summarize("one", [ProblemResult("a", depth=[1.0])])) == ""


def test_the_tie_rule_against_torch_compile():
    """A kernel 1.5x eager where torch.compile is 1.48x eager: 1.014x compile, a tie when its
    interval over eager (scaled by compile's ratio) holds 1.0, faster when the interval is
    tight; without an interval the ratio alone decides."""
    from openkernel.bench.summary import against_compile

    over = 1.5 / 1.48
    assert against_compile(over, 1.5, {"speedup_ci": [1.45, 1.55]}) == "tie"
    assert against_compile(over, 1.5, {"speedup_ci": [1.495, 1.505]}) == "faster"
    assert against_compile(0.9, 1.2, {"speedup_ci": [1.19, 1.21]}) == "slower"
    assert against_compile(0.99, 1.2, {"speedup_ci": [1.19, 1.22]}) == "tie"
    assert against_compile(0.99, 1.2, {}) == "slower" and against_compile(1.01, 1.2, None) == "faster"
    assert against_compile(None, 1.2, {}) == "" and against_compile(1.1, None, {}) == ""
    rows = [ProblemResult("a", correct=True, speedup=1.5, over_compile=over, vs_compile="tie"),
            ProblemResult("b", correct=True, speedup=2.0, over_compile=1.3, vs_compile="faster"),
            ProblemResult("c", correct=True, speedup=0.5, over_compile=0.4, vs_compile="slower"),
            ProblemResult("d", correct=True, speedup=3.0)]  # no torch.compile timing: not counted
    s = summarize("x", rows)
    assert (s.n_compile, s.n_compile_faster, s.n_compile_tie) == (3, 1, 1)
    assert s.to_json()["n_compile_tie"] == 1


def test_library_bound_problems_are_listed_apart_and_tf32_is_labelled():
    rows = [ProblemResult("gemm", status="completed", correct=True, speedup=0.5, over_compile=0.5,
                          library_bound="mm", allow_tf32=True),
            ProblemResult("conv", status="completed", correct=True, speedup=0.8, over_compile=0.8,
                          library_bound="convolution", allow_tf32=True),
            ProblemResult("gemm_gelu", status="completed", correct=True, speedup=1.5,
                          over_compile=1.1, allow_tf32=True)]
    s = summarize("x", rows)
    assert s.library_bound == ["gemm", "conv"]
    assert s.geomean_compile_library_bound == pytest.approx(math.sqrt(0.5 * 0.8))
    assert s.geomean_compile == pytest.approx((0.5 * 0.8 * 1.1) ** (1 / 3))  # counted, too
    assert "TF32" in s.precision and "allow_tf32" in s.precision
    rows[0].allow_tf32 = False
    assert "some problems only" in summarize("x", rows).precision


def test_discover_finds_problems_and_names_what_is_wrong(tmp_path):
    with pytest.raises(OpenKernelError, match="no such file or folder"):
        discover([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(OpenKernelError, match="no KernelBench-format problem"):
        discover([tmp_path / "empty"])
    _problem(tmp_path / "a" / "level2", "1_x", "torch.relu(x)")
    _problem(tmp_path / "b" / "level2", "1_x", "torch.relu(x)")
    with pytest.raises(OpenKernelError, match="two problems are named 'level2/1_x'"):
        discover([tmp_path / "a", tmp_path / "b"])
    task = tmp_path / "task"
    task.mkdir()
    (task / "reference.py").write_text(PROBLEM.format(expr="x * 2", dim=4, shape="4",
                                                      init="    pass", init_args=""))
    problems, skipped = discover([task, tmp_path / "a" / "level2" / "1_x.py"])
    assert [p.name for p in problems] == ["task", "level2/1_x"] and not skipped


def test_bench_with_a_bad_path_is_one_message(tmp_path):
    proc = _bench(tmp_path, str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bench_with_an_unknown_key_is_one_message(tmp_path, suite_dir):
    proc = subprocess.run([sys.executable, "-m", "openkernel.cli", "bench",
                           str(suite_dir / "level1" / "19_ReLU.py"), "--set", "max_itres=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown key 'max_itres'" in proc.stderr
    assert "Traceback" not in proc.stderr




def test_reference_is_timed_under_max_autotune_beside_eager_and_default(tmp_path):
    """The reference job compiles the reference in three torch.compile modes (default,
    max-autotune, reduce-overhead: CUDA graphs; a real worker; on the CPU Inductor makes C++ and
    reduce-overhead skips its graphs, on a GPU Triton: the mode handling is the same). Eager and
    the default mode come first, in the same interleaved rounds: a verdict waits only for them.
    Max-autotune (it holds the GPU while it benchmarks its choices) and reduce-overhead come
    later, in rounds of their own beside an eager run (``eager_late``); all of it is stored, and
    another job reads both stages from the store."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.baselines import environment_key
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.records import baseline_kind
    from openkernel.store import Store
    from openkernel.task import load_task

    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"baselines": ["eager", "compile", "autotune",
                                                         "cudagraphs"],
                                           "baseline_timeout_s": 400}})
    store = Store(tmp_path / "k.sqlite3")
    task = load_task(Path(__file__).parents[1] / "examples" / "gelu")
    ev = Evaluator(task, config, store, bench_budget_s=0.2)
    first = ev.baselines(late=False)  # what a candidate's verdict waits for
    assert set(first) >= {"eager", "compile"} and "autotune" not in first
    assert ev.late_baselines_pending() and "late_baselines_s" not in ev.costs
    stats = ev.baselines()
    assert not ev.late_baselines_pending() and ev.costs["late_baselines_s"] > 0
    assert ev.costs["fixed_s"] == ev.costs["baselines_s"]  # the late stage is not fixed cost
    assert stats is not None and not stats["timed_out"], (ev.baseline_error, stats)
    assert stats.get("autotune_mode") == "max-autotune-no-cudagraphs", stats.get("autotune_error")
    assert stats.get("cudagraphs_mode") == "reduce-overhead", stats.get("cudagraphs_error")
    for kind in ("eager", "compile", "autotune", "cudagraphs", "eager_late"):
        assert stats[kind]["median"] > 0 and stats[kind]["n_trials"] >= 3, stats[kind]
    # interleaved: each kind was timed in every round of its stage
    assert stats["eager"] == first["eager"]
    assert stats["eager"]["n_trials"] == stats["compile"]["n_trials"]
    assert stats["eager_late"]["n_trials"] == stats["autotune"]["n_trials"] == \
        stats["cudagraphs"]["n_trials"]
    assert store.reference_timing(task.digest, ev.hardware.label, baseline_kind(False),
                                  environment_key(ev.hardware)).runtime_stats == stats
    again = Evaluator(task, config, store, bench_budget_s=0.2)  # another job: no worker
    assert again.baselines() == stats
    assert again.costs["baselines_stored"] and again.costs["late_baselines_s"] == 0.0
    store.close()


def test_the_llm_kernels_suite_loads_and_its_references_run_on_the_cpu():
    """benchmarks/llm_kernels: ten task folders, each reference runs on its CPU inputs and on
    its held-out shapes (the suite's GPU run is the H200 benchmark)."""
    import importlib.util

    root = Path(__file__).parents[1] / "benchmarks" / "llm_kernels"
    problems, skipped = discover([root])
    assert len(problems) == 10 and not skipped, skipped
    for problem in problems:
        mods = {}
        for part in ("reference", "task"):
            spec = importlib.util.spec_from_file_location(f"{problem.name}_{part}",
                                                          problem.path / f"{part}.py")
            mods[part] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[part])
        model = mods["reference"].Model(*mods["reference"].get_init_inputs())
        for inputs in [mods["task"].get_inputs("cpu"), *mods["task"].get_extra_inputs("cpu")]:
            out = model(*inputs)
            assert torch.isfinite(out).all(), problem.name


def test_a_bench_of_no_iterations_stores_each_problems_probe_and_baselines(suite_dir, tmp_path):
    """max_iters=0: each problem is probed and its baselines made and stored (on a GPU: the
    reference timings a later search reuses), no candidate is asked for; the problem ends
    completed with its fixed cost in the table, and a resumed suite skips it."""
    out = tmp_path / "b0.json"
    args = [sys.executable, "-m", "openkernel.cli", "bench", str(suite_dir / "level1"),
            "--name", "kb-zero", "--json", str(out), "--set", "max_iters=0"]
    first = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    rows = {p["name"]: p for p in json.loads(out.read_text())["problems"]}
    assert {"level1/19_ReLU", "level1/23_Softmax", "level1/89_sort"} <= set(rows)
    for row in rows.values():
        assert row["status"] == "completed" and row["candidates"] == 0, row
        assert row["fixed_s"] is not None and row["fixed_s"] > 0, row
    again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count(" skipped ") >= 3, again.stdout
    bad = subprocess.run(args[:-1] + ["max_iters=-1"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "max_iters" in bad.stderr and "Traceback" not in bad.stderr


def test_a_kernel_faster_than_the_hardware_allows_is_flagged_and_never_the_winner(tmp_path):
    """Too good to be true (issue 56): a reference that sleeps makes an honest kernel look far
    faster than the Triton interpreter can be. It is judged again on fresh inputs, flagged the
    second time too, and the table says so instead of calling it the problem's best."""
    level = tmp_path / "kb" / "level1"
    _problem(level, "1_SleepyReLU", "__import__('time').sleep(0.25) or torch.relu(x)", dim=64)
    out = tmp_path / "suite.json"
    run = _bench(tmp_path, str(level), "--name", "kb-flag", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    row = json.loads(out.read_text())["problems"][0]
    assert row["flagged"] >= 1 and not row["correct"] and row["speedup"] is None, row
    assert "flagged for review, never the winner" in row["flagged_note"]
    assert "over the reference on the CPU" in row["flagged_note"]
    assert "flagged for review" in run.stdout

    from openkernel.store.db import Store

    store = Store(f"sqlite:///{tmp_path / 'runs' / 'kernels.sqlite3'}")
    kernels = [k for k in store.job_kernels("level1/1_SleepyReLU", "kb-flag") if not k.is_program0]
    flagged = [k for k in kernels if k.status == "flagged"]
    assert flagged and store.best_kernel("level1/1_SleepyReLU") is None
    k = flagged[0]
    assert k.meta["judged_again"]["first_speedup"] > 25 and not k.correctness
    assert "Judged twice" in k.eval_log and "FLAGGED FOR REVIEW" in k.eval_log
