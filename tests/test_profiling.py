"""ncu CSV parsing, bottleneck classification and roofline estimates, without a GPU."""

import pytest

from openkernel.evaluation.host.ncu import (
    METRICS,
    classify,
    format_profile,
    ncu_command,
    parse_ncu_csv,
    summarize,
)
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.search.critic import diagnose, roofline_estimate

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(i, kernel, metric, unit, value):
    return (f'"{i}","1","python3","h","{kernel}","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


SAMPLE = "\n".join([
    "==PROF== Connected to process 1",
    HEADER,
    _row(0, "gelu_kernel", "gpu__time_duration.sum", "usecond", "120.5"),
    _row(0, "gelu_kernel", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "88.1"),
    _row(0, "gelu_kernel", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "20.0"),
    _row(0, "gelu_kernel", "lts__t_sector_hit_rate.pct", "%", "45"),
    _row(0, "gelu_kernel", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "78"),
    _row(0, "gelu_kernel", "launch__registers_per_thread", "register/thread", "32"),
    _row(0, "gelu_kernel", "dram__bytes.sum", "Mbyte", "1,073.74"),
    _row(1, "other", "gpu__time_duration.sum", "nsecond", "2,000"),
    _row(1, "other", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "10"),
    _row(1, "other", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "5"),
    "==PROF== Disconnected",
])


def test_parse_and_summarize():
    launches = parse_ncu_csv(SAMPLE)
    assert len(launches) == 2
    assert launches[0]["duration_us"] == 120.5 and launches[1]["duration_us"] == 2.0
    assert launches[0]["dram_bytes"] == 1073.74e6
    data = summarize(launches, flops=0.0, bytes_moved=2 * 2**24 * 4, peak_bandwidth_gbs=4000)
    assert data["kernels"] == 2 and data["bottleneck"] == "memory_bound"
    assert 85 < data["dram_throughput_pct"] < 88.1
    assert data["registers_per_thread"] == 32 and data["headroom"] > 1
    text = format_profile(data)
    assert "Nsight Compute" in text and "memory_bound" in text


def test_parse_garbage_is_empty():
    assert parse_ncu_csv("==ERROR== something failed") == []
    assert summarize([]) == {}


def test_classify():
    assert classify(85, 20) == "memory_bound"
    assert classify(30, 90) == "compute_bound"
    assert classify(30, 40) == "latency_bound"


def test_ncu_command_profiles_only_the_candidate_range():
    cmd = ncu_command("/usr/bin/ncu", ["python3", "-m", "x"])
    assert cmd[:3] == ["/usr/bin/ncu", "--clock-control", "none"]
    assert "--nvtx-include" in cmd and set(cmd[cmd.index("--metrics") + 1].split(",")) == set(METRICS)


def test_roofline_estimate_and_critic():
    probe = TaskProbe(ok=True, flops=0.0, bytes_moved=2 * 8192 * 8192 * 4, output_dtypes=["torch.float32"])
    hw = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=1,
                  peak_bandwidth_gbs=4000.0, peak_tflops={"float32": 50.0})
    est = roofline_estimate(0.2, probe, hw)
    assert est["estimate"] and est["bottleneck"] == "memory_bound"
    assert abs(est["achieved_gbs"] - 2684.35) < 1 and est["headroom"] > 1
    best = Program(id="p", code="", metadata={"label": "i1-b0"})
    best.add_eval_results(EvalResult(compiled=True, correctness=True, runtime=0.2,
                                     runtime_improvement=1.4, perf_score=4))
    text = diagnose(best, probe, hw)
    assert "i1-b0" in text and "Memory bound (estimate)" in text and "Headroom" in text
    cpu = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu", interpreter=True)
    assert "interpreter" in diagnose(best, probe, cpu)
    assert "No correct kernel" in diagnose(None, probe, hw)


@pytest.mark.gpu
def test_ncu_profile_of_a_real_candidate(tmp_path, examples_dir):
    """On the H200: a correct Triton GELU is profiled by Nsight Compute, reference included."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.evaluation.host.ncu import find_ncu
    from openkernel.task import load_task

    if find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    code = (examples_dir.parent / "tests" / "candidates" / "good_gelu.py").read_text()
    cfg = build_config({"eval_config": {"profile_original_model": True},
                        "paths": {"scratch_dir": str(tmp_path)}})
    ev = Evaluator(load_task(examples_dir / "gelu"), cfg)
    assert ev.probe().ok
    result = ev.evaluate(code, "triton", label="gelu")
    assert result.correctness, result.eval_log
    data = result.profiler_data
    assert data.get("source") == "ncu" and "error" not in data, data
    assert data["bottleneck"] == "memory_bound" and data["dram_throughput_pct"] > 50
    assert data["reference"]["duration_us"] > 0
    assert "Nsight Compute" in result.eval_log


def test_ceilings_cache_round_trip(tmp_path):
    from openkernel.evaluation.host import ceilings

    path = tmp_path / "ceilings.json"
    assert ceilings.load_all(path) == {}
    entry = {"version": ceilings.CACHE_VERSION, "device": "NVIDIA H200",
             "peak_bandwidth_gbs": 4100.0, "peak_tflops": {"float16": 700.0}}
    ceilings.save(entry, path)
    ceilings.save({**entry, "device": "old", "version": -1}, path)
    assert ceilings.load_all(path) == {"NVIDIA H200": entry}  # stale versions are ignored


# -- the memory workload tables (eval_config.profile_memory) -------------------------------------
# A FORMAT SAMPLE, not a measurement: the layout `ncu --csv --page raw` prints (its documented
# raw page: a header row of the launch's columns then one column per metric, a row of units,
# then a row per kernel launch), with made-up numbers for two launches of a GELU kernel. The
# real thing comes from the H200 (benchmarks/h200_session.sh memory-heatmap).
RAW_HEADER = ['"ID"', '"Process ID"', '"Process Name"', '"Host Name"', '"Kernel Name"',
              '"Context"', '"Stream"', '"Block Size"', '"Grid Size"', '"Device"', '"CC"']
RAW_METRICS = [  # metric, unit, launch 0, launch 1
    ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "262,144", "131,072"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "1,048,576", "524,288"),
    ("l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct", "%", "0", "30"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "1,048,576", "524,288"),
    ("smsp__sass_inst_executed_op_global_st.sum", "inst", "262,144", "131,072"),
    ("lts__t_sectors_srcunit_tex_op_read.sum", "sector", "1,048,576", "524,288"),
    ("lts__t_sector_op_read_hit_rate.pct", "%", "12.5", "12.5"),
    ("dram__bytes_read.sum", "Mbyte", "33.55", "16.78"),
    ("dram__bytes_write.sum", "Mbyte", "33.55", "16.78"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "20", "20"),  # not a table's
]


def _raw_sample() -> str:
    def line(cells):
        return ",".join(c if c.startswith('"') else f'"{c}"' for c in cells)

    launch = ["1", "python3", "h", "_act_kernel", "1", "7", "(128, 1, 1)", "(4096, 1, 1)", "0",
              "9.0"]
    return "\n".join([
        "==PROF== Connected to process 1",
        line(RAW_HEADER + [m for m, *_ in RAW_METRICS]),
        line([""] * len(RAW_HEADER) + [u for _, u, *_ in RAW_METRICS]),
        line(["0", *launch] + [a for *_, a, _ in RAW_METRICS]),
        line(["1", *launch] + [b for *_, b in RAW_METRICS]),
        "==PROF== Disconnected from process 1",
    ])


def test_memory_tables_from_the_raw_page():
    from openkernel.evaluation.host.ncu_memory import (
        SECTION, MemoryProfile, memory_tables, parse_raw_csv,
    )
    from openkernel.evaluation.host.ncu import wrapper

    launches = parse_raw_csv(_raw_sample())
    assert len(launches) == 2 and "sm__throughput.avg.pct_of_peak_sustained_elapsed" not in launches[0]
    tables = memory_tables(launches)
    cells = {(c["unit"], c["kind"]): c for c in tables["cells"]}
    assert tables["kernels"] == 2 and set(cells) == {
        ("L1/TEX", "global load"), ("L1/TEX", "global store"), ("L2", "read"), ("DRAM", "read"),
        ("DRAM", "write")}
    load = cells[("L1/TEX", "global load")]
    assert load["requests"] == 393216 and load["sectors"] == 1572864
    assert load["bytes"] == 1572864 * 32  # sectors of 32 bytes
    assert load["hit_rate_pct"] == pytest.approx(10.0)  # weighted by each launch's sectors
    assert cells[("L1/TEX", "global store")]["instructions"] == 393216
    assert cells[("DRAM", "read")]["bytes"] == pytest.approx(50.33e6)  # Mbyte scaled to bytes
    assert cells[("L2", "read")]["hit_rate_pct"] == pytest.approx(12.5)
    assert memory_tables(parse_raw_csv("==ERROR== no kernels were profiled")) == {}
    cmd = wrapper(MemoryProfile("/usr/bin/ncu"))(["python3", "-m", "w"])
    assert cmd[:3] == ["/usr/bin/ncu", "--clock-control", "none"] and cmd[-3:] == ["python3", "-m", "w"]
    assert cmd[cmd.index("--section") + 1] == SECTION and cmd[cmd.index("--page") + 1] == "raw"
    assert wrapper("/usr/bin/ncu")(["python3"])[:3] == ncu_command("/usr/bin/ncu", ["python3"])[:3]


@pytest.mark.gpu
def test_memory_tables_of_a_real_kernel(tmp_path, examples_dir):
    """On a GPU with ncu: a correct GELU candidate's memory tables, stored in its profile."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.evaluation.host.ncu import find_ncu
    from openkernel.task import load_task

    if find_ncu() is None:
        pytest.skip("needs Nsight Compute (ncu)")
    config = build_config({"paths": {"scratch_dir": str(tmp_path)},
                           "eval_config": {"profile_memory": True}})
    ev = Evaluator(load_task(examples_dir / "gelu"), config, None)
    try:
        assert ev.probe().ok
        code = (examples_dir.parent / "tests" / "candidates" / "good_gelu.py").read_text()
        result = ev.evaluate(code, "triton", "mem")
    finally:
        ev.close()
    tables = result.profiler_data["memory_tables"]
    cells = {(c["unit"], c["kind"]): c for c in tables.get("cells", [])}
    assert cells, tables
    assert cells[("DRAM", "read")]["bytes"] > 0 and cells[("L1/TEX", "global load")]["sectors"] > 0


def test_leaders_are_the_first_the_fastest_and_those_near_it():
    """eval_config.profile_scope "leaders": a kernel is profiled when it is the first judged,
    the fastest so far, or within 5% of it; one further behind is not, and says how far."""
    from openkernel.evaluation.host.profiling import LEAD_MARGIN, Leaders

    leaders = Leaders()
    assert leaders.behind(2.0) is None  # the first
    assert leaders.behind(2.0 * (1 + LEAD_MARGIN)) is None  # near the fastest
    assert leaders.behind(3.0) == pytest.approx(1.5)  # far behind: not profiled
    assert leaders.behind(1.0) is None  # a new fastest
    assert leaders.behind(2.0) == pytest.approx(2.0)  # measured against the new one
    assert leaders.behind(-1.0) is None  # untimed: profiled, nothing to compare


def test_profile_scope_is_checked():
    from openkernel.config import build_config
    from openkernel.errors import ConfigError

    assert build_config({}).eval_config.profile_scope == "leaders"
    assert build_config({"eval_config": {"profile_scope": "every"}}).eval_config.profile_scope \
        == "every"
    with pytest.raises(ConfigError, match="profile_scope"):
        build_config({"eval_config": {"profile_scope": "some"}})


@pytest.mark.gpu
def test_a_kernel_far_behind_the_leader_is_not_profiled(tmp_path, examples_dir):
    """On the H200 (profile_scope "leaders", the default): the GELU is profiled; the same
    kernel launched eight times a call, correct and far slower, gets the roofline estimate and
    a log line saying why; with "every" it is profiled too."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.evaluation.host.ncu import find_ncu
    from openkernel.task import load_task

    if find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    code = (examples_dir.parent / "tests" / "candidates" / "good_gelu.py").read_text()
    slow = code.replace("    gelu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)",
                        "    for _ in range(8):\n"
                        "        gelu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)")
    assert slow != code
    for scope in ("leaders", "every"):
        cfg = build_config({"eval_config": {"profile_scope": scope},
                            "paths": {"scratch_dir": str(tmp_path / scope)}})
        ev = Evaluator(load_task(examples_dir / "gelu"), cfg)
        try:
            assert ev.probe().ok
            fast = ev.evaluate(code, "triton", label="fast")
            behind = ev.evaluate(slow, "triton", label="slow")
        finally:
            ev.close()
        assert fast.correctness and behind.correctness, behind.eval_log
        assert fast.profiler_data.get("source") == "ncu", fast.profiler_data
        if scope == "leaders":
            assert behind.profiler_data.get("estimate") is True, behind.profiler_data
            assert "Not profiled:" in behind.eval_log and "profile_scope: leaders" in \
                behind.eval_log
        else:
            assert behind.profiler_data.get("source") == "ncu", behind.profiler_data
