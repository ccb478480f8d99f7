"""The seed's "what to do with what you see" table, computed for a job."""

from __future__ import annotations

from kernelcode.dashboard.health import branches_from_config, job_health


def _rows(statuses, branches=4, profiled=False, estimate=False):
    out = []
    for i, s in enumerate(statuses):
        correct = s in ("faster", "correct")
        prof = {"dram_throughput_pct": 50, **({"estimate": True} if estimate else {})} if profiled and correct else {}
        out.append({"id": f"k{i}", "status": s, "iteration": i // branches, "branch": i % branches,
                    "is_program0": False, "correctness": correct, "profiler_data": prof,
                    "runtime_improvement": 1.5 if s == "faster" else 0.9 if s == "correct" else -1.0})
    return out


def _states(rows, bpi=None):
    return {c.symptom: c.state for c in job_health(rows, bpi)}


def test_all_red():
    states = _states(_rows(["compile_error"] * 7 + ["build_timeout"]))
    assert states["All red"] == "warn"
    assert states["Compiles, never correct"] == "n/a"
    assert _states(_rows(["compile_error", "incorrect"]))["All red"] == "ok"


def test_compiles_never_correct():
    states = _states(_rows(["incorrect", "test_timeout", "compile_error", "incorrect"]))
    assert states["Compiles, never correct"] == "warn" and states["All red"] == "ok"


def test_correct_but_no_speedup():
    checks = job_health(_rows(["correct", "correct", "incorrect"]))
    row = next(c for c in checks if c.symptom == "Correct but no speedup")
    assert row.state == "warn" and "0 of 2" in row.evidence
    assert row.where == "Runtime stats, benchmark shapes"
    assert _states(_rows(["correct", "faster"]))["Correct but no speedup"] == "ok"


def test_no_speedup_on_the_cpu_blames_the_interpreter(sample):
    """Issue 58: a CPU job's slow candidates were put down to the shape; what slows them is
    Triton's interpreter. The rows of a real CPU run (the sample database's offline job)."""
    import sample_db

    from kernelcode.dashboard.source import DataSource

    rows = DataSource(sample["path"]).job(sample_db.TASK, sample_db.OFFLINE_JOB).rows
    assert all("interpreter" in r["hardware"].lower() for r in rows if not r["is_program0"])
    row = next(c for c in job_health(rows) if c.symptom == "Correct but no speedup")
    assert "Triton's interpreter" in row.cause and "shape" not in row.where


def test_no_profiler_data_and_estimates_only():
    assert _states(_rows(["faster", "correct"]))["No profiler data"] == "warn"
    assert _states(_rows(["faster", "correct"], profiled=True))["No profiler data"] == "ok"
    checks = job_health(_rows(["faster"], profiled=True, estimate=True))
    row = next(c for c in checks if c.symptom == "No profiler data")
    assert row.state == "warn" and "estimates only" in row.evidence and "eval_config.profile" in row.where


def test_one_lineage_from_shape_or_config():
    assert _states(_rows(["faster"] * 5, branches=1))["One lineage, no branches"] == "warn"
    assert _states(_rows(["faster"] * 8, branches=4))["One lineage, no branches"] == "ok"
    assert _states(_rows(["faster"], branches=1), bpi=1)["One lineage, no branches"] == "warn"
    assert _states(_rows(["faster"], branches=1))["One lineage, no branches"] == "n/a"
    assert branches_from_config({"search": {"x": 1}, "branches_per_iteration": 3}) == 3
    assert branches_from_config({"a": {"branches_per_iteration": 2}}) == 2
    assert branches_from_config(None) is None


def test_program0_does_not_count_and_empty_job():
    rows = _rows(["compile_error", "compile_error"])
    rows.append({"id": "p0", "status": "correct", "iteration": 0, "branch": 9, "is_program0": True,
                 "correctness": True, "profiler_data": {}, "runtime_improvement": 1.0})
    assert _states(rows)["All red"] == "warn"
    assert set(_states([]).values()) == {"n/a"}
