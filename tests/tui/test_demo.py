"""The scripted demo (snapshots, the README screenshot, the throughput benchmark) holds only
what the engine writes: its records are checked against a real offline run on the CPU and,
for the GPU-only profile, against Nsight Compute's summary as the engine builds it."""

from __future__ import annotations

import pytest

import openkernel
from kernelcode.tui.demo import CPU, demo_events
from openkernel import events as ev
from openkernel.evaluation.host import ncu


@pytest.fixture(scope="module")
def real_events(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("demo-check")
    return list(openkernel.optimize(examples_dir / "gelu", overrides=[
        "max_iters=1", "branches_per_iteration=2", "job_name=demo-check", "search.seed=2",
        f"paths.kernels_db_path={tmp / 'k.sqlite3'}", f"paths.scratch_dir={tmp / 'scratch'}"]))


def _judged(events):
    return [e.program for e in events if isinstance(e, ev.CandidateEvaluated)]


def test_demo_records_have_the_shapes_the_engine_writes(real_events):
    real = [p for p in _judged(real_events) if p.kernel_exec_result.correctness]
    assert real, "the real run judged nothing correct"
    stats = real[0].kernel_exec_result.runtime_stats
    params = set().union(*(p.metadata["params"] for p in _judged(real_events)))
    meta = set().union(*(p.kernel_exec_result.metadata for p in _judged(real_events)))
    for program in _judged(demo_events()):
        result = program.kernel_exec_result
        if result.correctness:
            assert set(result.runtime_stats) == set(stats)
            assert set(result.runtime_stats["reference"]) == set(stats["reference"])
        assert set(program.metadata["params"]) <= params
        # timeouts are written by the evaluator only when they happen (test_evaluation_faults)
        assert set(result.metadata) <= meta | {"timeout"}


def test_demo_profiles_are_the_engines(real_events):
    """GPU: Nsight Compute's summary with every metric the engine asks ncu for; CPU: the
    estimate a real CPU run stores."""
    launch = {"kernel": "gelu_kernel", "duration_us": 10.0, **{k: 1.0 for k in ncu.METRICS.values()}}
    keys = set(ncu.summarize([launch], flops=1e6, bytes_moved=1e6, peak_bandwidth_gbs=4000.0,
                             peak_tflops=60.0))
    profiles = [p.kernel_exec_result.profiler_data for p in _judged(demo_events())
                if p.kernel_exec_result.profiler_data]
    assert profiles and all(set(data) <= keys for data in profiles)
    real = next(p.kernel_exec_result.profiler_data for p in _judged(real_events)
                if p.kernel_exec_result.correctness)
    cpu = [p.kernel_exec_result.profiler_data for p in _judged(demo_events(hardware=CPU))
           if p.kernel_exec_result.profiler_data]
    assert cpu and all(set(data) == set(real) for data in cpu)


def test_demo_events_are_the_engines_kinds_in_its_order(real_events):
    kinds = {type(e) for e in real_events} | {ev.BestImproved}
    assert {type(e) for e in demo_events()} <= kinds
    real = [e.phase for e in real_events if isinstance(e, ev.CandidatePhaseChanged)
            and e.label == "i0-b0"]
    demo = [e.phase for e in demo_events(hardware="CPU (Triton interpreter)")
            if isinstance(e, ev.CandidatePhaseChanged) and e.label == "i0-b0"]
    assert demo == real  # a correct candidate on the CPU
