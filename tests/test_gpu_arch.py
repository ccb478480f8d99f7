"""gpu_arch with several targets: the config, per-GPU architectures, which GPU judges and which
times a candidate, and the CPU's nvcc check compiling for every target (no GPU needed)."""

from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from openkernel import records as hwmod
from openkernel.config import build_config
from openkernel.errors import ConfigError
from openkernel.evaluation.host.devices import DevicePool, NoDeviceLeft
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.process import WorkerRun
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import Program, Status, new_program_id
from openkernel.search.loop import Search
from openkernel.search.records import kernel_fields, program_from_row
from openkernel.store import Store
from openkernel.targets import gencode_flags, plan_targets, torch_arch_list
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NVCC = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")


# -- config ---------------------------------------------------------------------------------
def test_gpu_arch_takes_one_target_or_several():
    assert build_config({"gpu_arch": "sm_90"}).gpu_arch == "sm_90"
    assert build_config({"gpu_arch": "sm_90"}).gpu_archs == ["sm_90"]
    config = build_config({"gpu_arch": ["sm_90", "SM_80", "sm_90", "sm_90a"]})
    assert config.gpu_archs == ["sm_90", "sm_80", "sm_90a"]  # normalised, repeats dropped
    assert build_config({}).gpu_archs == [] and build_config({"gpu_arch": []}).gpu_arch is None
    assert build_config({}, ["gpu_arch=[sm_90, sm_80]"]).gpu_archs == ["sm_90", "sm_80"]
    # the seed's comma form, in YAML and on the command line
    assert build_config({"gpu_arch": "sm_90,sm_80"}).gpu_archs == ["sm_90", "sm_80"]
    assert build_config({}, ["gpu_arch=sm_90, SM_80"]).gpu_archs == ["sm_90", "sm_80"]


@pytest.mark.parametrize("value, bad", [("sm90", "'sm90'"), (["sm_90", "hopper"], "'hopper'"),
                                        (["sm_90", 80], "80"), (7, "7"),
                                        ("sm_90,hopper", "'hopper'")])
def test_a_bad_architecture_is_named_in_one_message(value, bad):
    with pytest.raises(ConfigError) as err:
        build_config({"gpu_arch": value})
    message = str(err.value)
    assert "'gpu_arch'" in message and bad in message and "sm_90" in message
    assert "Value error" not in message and message.count("\n") == 0


# -- hardware record ------------------------------------------------------------------------
def test_hardware_json_round_trip_keeps_each_gpus_arch():
    hw = Hardware(label="NVIDIA H100 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=3,
                  gpu_archs=("sm_90", "sm_80", "sm_80"), peak_bandwidth_gbs=3350.0,
                  peak_tflops={"float16": 990.0})
    assert hwmod.hardware_from_json(json.loads(json.dumps(hwmod.hardware_to_json(hw)))) == hw


def test_hardware_json_stored_before_gpu_archs_still_loads():
    old = {"label": "NVIDIA H200 (sm_90)", "device": "cuda", "gpu_arch": "sm_90", "num_gpus": 2,
           "interpreter": False, "peak_bandwidth_gbs": 4800.0, "peak_tflops": {}}
    assert hwmod.hardware_from_json(old).gpu_archs == ("sm_90", "sm_90")
    cpu = {"label": hwmod.CPU_LABEL, "device": "cpu", "gpu_arch": "cpu", "num_gpus": 0,
           "interpreter": True, "peak_bandwidth_gbs": None, "peak_tflops": {}, "future": 1}
    assert hwmod.hardware_from_json(cpu).gpu_archs == ()  # and a key this version lacks is ignored


# -- which GPU judges, which times ----------------------------------------------------------
def test_plan_targets_primary_others_missing():
    plan = plan_targets(["sm_80", "sm_90", "sm_86"], ["sm_90", "sm_80", "sm_90"])
    assert (plan.primary, plan.others, plan.missing) == ("sm_80", ("sm_90",), ("sm_86",))
    assert plan.compile == ("sm_80", "sm_90", "sm_86")
    # Nothing configured: the first GPU's arch, nothing else timed, the default build.
    assert plan_targets([], ["sm_80", "sm_90"]) == plan_targets([], ["sm_80"])
    assert plan_targets([], ["sm_80", "sm_90"]).primary == "sm_80"
    assert plan_targets([], ["sm_80"]).compile == ()
    # An H200 asked for [sm_90, sm_80]: judged on sm_90, sm_80 compiled for only.
    plan = plan_targets(["sm_90", "sm_80"], ["sm_90"] * 8)
    assert (plan.primary, plan.others, plan.missing) == ("sm_90", (), ("sm_80",))
    # sm_90a code runs on a GPU that reports sm_90.
    assert plan_targets(["sm_90a", "sm_80"], ["sm_80", "sm_90"]).others == ("sm_80",)
    # No configured arch present: judged (and filed) where it really ran, built for both.
    plan = plan_targets(["sm_86"], ["sm_90"])
    assert (plan.primary, plan.missing, plan.compile) == ("sm_90", ("sm_86",), ("sm_90", "sm_86"))
    # The CPU: nothing runs; the first target names the results, as a single string did.
    assert plan_targets(["sm_90", "sm_80"], []).primary == "sm_90"
    assert plan_targets([], [], "cpu").primary == "cpu"


def test_build_flags_for_every_target():
    assert torch_arch_list(["sm_90", "sm_80"]) == "8.0;9.0+PTX"
    assert torch_arch_list(["sm_90a", "sm_100"]) == "9.0a;10.0+PTX"
    assert torch_arch_list([]) == ""
    assert gencode_flags(["sm_90a", "sm_80"]) == ["-gencode", "arch=compute_90a,code=sm_90a",
                                                  "-gencode", "arch=compute_80,code=sm_80"]


def test_device_pool_picks_among_one_archs_gpus():
    pool = DevicePool([0, 1, 2, 3])
    assert {pool.acquire(among=[1, 3]), pool.acquire(among=[1, 3])} == {1, 3}
    with pytest.raises(TimeoutError):
        pool.acquire(timeout=0.05, among=[1, 3])  # both busy: wait, never take GPU 0 or 2
    pool.quarantine(1, "GPU has fallen off the bus")
    pool.quarantine(3, "uncorrectable ECC error")
    with pytest.raises(NoDeviceLeft, match="GPU 1: GPU has fallen"):
        pool.acquire(among=[1, 3])
    assert pool.acquire() in (0, 2)  # the other arch's GPUs still serve


MIXED = Hardware(label="NVIDIA H100 (sm_90)", device="cuda", gpu_arch="sm_80", num_gpus=4,
                 gpu_archs=("sm_80", "sm_90", "sm_80", "sm_90"))


class FakeGpuEvaluator(Evaluator):
    """The real Evaluator on made-up hardware, its worker runs replaced by canned payloads
    (runtime 1 ms on sm_90 GPUs, 2 ms on sm_80 ones; the reference 2 ms)."""

    hw = MIXED
    correct = True

    @property
    def hardware(self) -> Hardware:
        return self.hw

    def _run(self, job, device, gpu_index, label="", code=None, wrap=None, build_cache=None,
             spare=True, on_phase=None, scale=1.0, walls=None, total_s=None) -> WorkerRun:
        with self._calls_lock:
            self.calls.append((job.mode, gpu_index, label, job.cuda_targets))
        run = WorkerRun()
        if job.mode == "reference":
            run.payload = {"eager": {"median": 2.0}, "compile": {"median": 1.0}}
            return run
        ms = 1.0 if self.hw.gpu_archs[gpu_index] == "sm_90" else 2.0
        stats = {"n_trials": 10, "cv": 0.01}
        run.payload = {"compiled": True, "ran": True, "correctness": self.correct, "log": [],
                       "cand_stats": {**stats, "median": ms}, "ref_stats": {**stats, "median": 2.0}}
        return run


def _fake(tmp_path, gpu_arch, **kw) -> FakeGpuEvaluator:
    config = build_config({"gpu_arch": gpu_arch, "backend": "cuda",
                           "paths": {"scratch_dir": str(tmp_path / "s"),
                                     "build_cache_dir": str(tmp_path / "b")},
                           "eval_config": {"profile": False}})
    ev = FakeGpuEvaluator(load_task(EXAMPLES / "gelu"), config)
    ev.calls, ev._calls_lock = [], threading.Lock()
    for k, v in kw.items():
        setattr(ev, k, v)
    return ev


def test_judged_on_the_primary_arch_then_timed_on_each_other(tmp_path):
    ev = _fake(tmp_path, ["sm_90", "sm_80", "sm_86"])
    result = ev.evaluate("code", "cuda", "i0-b0")
    evaluations = [c for c in ev.calls if c[0] == "evaluate"]
    assert [MIXED.gpu_archs[slot] for _, slot, _, _ in evaluations] == ["sm_90", "sm_80"]
    assert evaluations[1][2] == "i0-b0@sm_80"
    assert all(targets == ["sm_90", "sm_80", "sm_86"] for *_, targets in ev.calls)
    by_arch = result.metadata["by_arch"]
    assert set(by_arch) == {"sm_90", "sm_80"}  # sm_86: no such GPU, compiled for only
    assert by_arch["sm_90"] == {"status": "faster", "runtime": 1.0, "runtime_improvement": 2.0,
                                "gpu_slot": result.metadata["gpu_slot"]}
    assert by_arch["sm_80"]["status"] == "correct" and by_arch["sm_80"]["runtime"] == 2.0
    assert by_arch["sm_80"]["gpu_slot"] in (0, 2)
    # The verdict (and the torch.compile comparison) is the primary arch's.
    assert result.runtime == 1.0 and result.improve_over_compile == 1.0
    assert "On sm_80 (GPU slot" in result.eval_log and "1.00x the reference" in result.eval_log


def test_by_arch_is_stored_and_read_back_under_the_primary_arch(tmp_path):
    result = _fake(tmp_path, ["sm_90", "sm_80"]).evaluate("code", "cuda", "i0-b0")
    program = Program(id=new_program_id(), code="code", iteration_found=0,
                      metadata={"branch": 0, "label": "i0-b0", "backend": "cuda"})
    program.add_eval_results(result)
    store = Store(str(tmp_path / "k.sqlite3"))
    run = store.start_run(task_name="t", job_name="j", backend="cuda", gpu_arch="sm_90")
    store.add_kernel(**kernel_fields(program, run_id=run.id, task_name="t", job_name="j",
                                     hardware=MIXED.label, gpu_arch="sm_90", reference_code=""))
    row = store.best_kernel("t", "sm_90")
    assert row is not None and row.gpu_arch == "sm_90" and store.best_kernel("t", "sm_80") is None
    back = program_from_row(row).kernel_exec_result.metadata["by_arch"]
    assert back == json.loads(json.dumps(result.metadata["by_arch"]))
    assert set(back) == {"sm_90", "sm_80"}


def test_an_incorrect_candidate_is_not_timed_elsewhere(tmp_path):
    ev = _fake(tmp_path, ["sm_80", "sm_90"], correct=False)
    result = ev.evaluate("code", "cuda", "x")
    assert [MIXED.gpu_archs[slot] for mode, slot, *_ in ev.calls] == ["sm_80"]
    assert set(result.metadata["by_arch"]) == {"sm_80"}
    assert result.metadata["by_arch"]["sm_80"]["status"] == "incorrect"


def test_one_target_keeps_the_single_result(tmp_path):
    ev = _fake(tmp_path, "sm_80")
    result = ev.evaluate("code", "cuda", "x")
    assert "by_arch" not in result.metadata
    assert [MIXED.gpu_archs[slot] for mode, slot, *_ in ev.calls if mode == "evaluate"] == ["sm_80"]


class _Generator:
    name, models = "fake", []

    def supports(self, task, probe, backend):
        return None


def test_the_run_warns_once_about_targets_without_a_gpu(tmp_path, monkeypatch):
    class Fake(FakeGpuEvaluator):
        def probe(self):
            self._probe = TaskProbe(ok=True, hardware=self.hw)
            return self._probe

    def make(task, config, store):
        ev = Fake(task, config, store)
        ev.calls, ev._calls_lock = [], threading.Lock()
        return ev

    monkeypatch.setattr("openkernel.search.loop.Evaluator", make)
    config = build_config({"gpu_arch": ["sm_90", "sm_75", "sm_86"], "task_name": "t",
                           "paths": {"scratch_dir": str(tmp_path / "s"),
                                     "kernels_db_path": str(tmp_path / "k.sqlite3")}})
    search = Search(load_task(EXAMPLES / "gelu"), config, store=Store(config.paths.kernels_db_path),
                    generator=_Generator())
    events = search.run()
    before = []
    for event in events:
        if type(event).__name__ == "RunStarted":
            break
        before.append(event)
    events.close()
    warnings = [e.message for e in before if getattr(e, "level", "") == "warning"]
    assert len(warnings) == 1 and "sm_75, sm_86" in warnings[0] and "judged on sm_90" in warnings[0]
    assert search.gpu_arch == "sm_90"


# -- the CPU: every target compiled by nvcc -------------------------------------------------
def _read(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def cpu_cuda_results(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    tmp = tmp_path_factory.mktemp("arch")

    def evaluate(args):
        name, gpu_arch = args
        config = build_config({"paths": {"scratch_dir": str(tmp / name / "_".join(gpu_arch))},
                               "backend": "cuda", "gpu_arch": gpu_arch})
        evaluator = Evaluator(load_task(EXAMPLES / "gelu"), config)
        if evaluator.hardware.device != "cpu":
            pytest.skip("a GPU is present: CUDA candidates run for real")
        return (name, tuple(gpu_arch)), evaluator.evaluate(_read(name), "cuda", name)

    jobs = [("cuda_ok", ["sm_90", "sm_80"]), ("cuda_cluster_gelu", ["sm_90"]),
            ("cuda_cluster_gelu", ["sm_90", "sm_80"])]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(evaluate, jobs))


def test_cpu_check_compiles_for_every_target(cpu_cuda_results):
    ok = cpu_cuda_results[("cuda_ok", ("sm_90", "sm_80"))]
    assert ok.get_status() == Status.NOT_RUN and ok.compiled, ok.eval_log
    assert "nvcc -fatbin for sm_90, sm_80: compiled" in ok.eval_log
    assert "by_arch" not in ok.metadata  # nothing was run, so nothing per architecture


def test_an_error_only_one_target_rejects_is_caught(cpu_cuda_results):
    """Thread-block clusters compile for sm_90 alone, and fail once sm_80 is a target too."""
    hopper = cpu_cuda_results[("cuda_cluster_gelu", ("sm_90",))]
    assert hopper.get_status() == Status.NOT_RUN and hopper.compiled, hopper.eval_log
    both = cpu_cuda_results[("cuda_cluster_gelu", ("sm_90", "sm_80"))]
    assert both.get_status() == Status.COMPILE_ERROR, both.eval_log
    assert "the sm_80 build failed" in both.eval_log
    assert "__cluster_dims__ is not supported" in both.eval_log
    assert "#$" not in both.eval_log  # nvcc's step-by-step trace stays out of the log
