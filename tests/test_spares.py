"""Spare workers across evaluators (a bench's problems one after another, spares.py): the next
evaluator's first jobs find workers started ahead, their imports done (the records say so)."""

from __future__ import annotations

import time
from pathlib import Path

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.process import WorkerProcess
from openkernel.task import load_task

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "tests" / "candidates" / "good_gelu.py").read_text()


def _evaluator(tmp_path: Path, **ec) -> Evaluator:
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")},
                           "eval_config": {"correctness_seeds": 1, "prestart_workers": True,
                                           **ec}})
    return Evaluator(load_task(ROOT / "examples" / "gelu"), config, bench_budget_s=0.1)


def _until_waiting(worker: WorkerProcess, limit_s: float = 120.0) -> None:
    """Until the spare has done its imports and blocks reading its job (no CPU for a second)."""
    stat = Path(f"/proc/{worker.proc.pid}/stat")
    last, deadline = None, time.monotonic() + limit_s
    while time.monotonic() < deadline and worker.alive():
        ticks = sum(int(x) for x in stat.read_text().rsplit(")", 1)[1].split()[11:13])
        if ticks == last:
            return
        last = ticks
        time.sleep(1.0)


def test_the_next_evaluator_takes_the_spare_after_the_engine_imported_torch(tmp_path, monkeypatch):
    """Between two problems the engine's own environment changed: the offline generator reads
    a probe's Inductor capture with torch._inductor, whose import sets TORCHINDUCTOR_CACHE_DIR
    in os.environ (H200, kb-s19: the first problem of each process with Triton kernels in its
    capture had all four candidates wait 8-11 s for a worker's imports). A worker never
    inherits that variable (each gets its own scratch's), so the spare started before serves."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    first = _evaluator(tmp_path, keep_spares_s=60)
    assert first.evaluate(GOOD, "triton", "first").correctness
    (spare,) = first.spares()[("cpu", None, None)]
    first.close()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "engine-inductor"))  # as torch does
    _until_waiting(spare)
    nxt = _evaluator(tmp_path, keep_spares_s=0)
    try:
        result = nxt.evaluate(GOOD.replace("good", "good "), "triton", "next")
        assert result.correctness, result.eval_log
        # its worker is the spare, started ahead and done with its imports when the job came
        assert result.metadata["prestarted"] is True, result.metadata
        assert result.metadata["worker"]["idle_s"] > 0, result.metadata["worker"]
        assert spare.proc.poll() is not None
    finally:
        nxt.close()


def test_the_worker_key_ignores_what_workers_do_not_inherit(tmp_path, monkeypatch):
    ev = _evaluator(tmp_path, keep_spares_s=0)
    try:
        key = ev._spare_key("cpu", None, None)
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "x"))  # set per worker
        monkeypatch.setenv("OPENAI_API_KEY", "sk-not-inherited")  # a secret: never inherited
        monkeypatch.setenv("SOME_TOOL_SETTING", "1")  # not on the allow-list
        assert ev._spare_key("cpu", None, None) == key
        monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")  # inherited: a different worker
        assert ev._spare_key("cpu", None, None) != key
    finally:
        ev.close()


class _Idle:
    """A spare that waits forever (the pool's sizes are what is tested, not a worker)."""

    def __init__(self, scratch: Path):
        self.scratch = scratch

    def alive(self) -> bool:
        return True

    def kill(self) -> None:
        pass


def test_a_run_done_with_its_candidates_leaves_the_next_run_its_spares(tmp_path, monkeypatch):
    """A large footprint plans 2 workers a GPU, so 4 spares wait while its candidates run;
    once they are done, the pool grows to the 8 that a next run's probe, baselines and first
    candidates take (kb-s19: level1/76, 28 GiB, then level2/1), as far as the GPU has room
    beside the one worker left."""
    from openkernel.evaluation.host.memplan import plan_memory, spares_beside_one
    from openkernel.evaluation.host.spares import SPARES
    from openkernel.records import Footprint, Hardware

    hw = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=1,
                  gpu_archs=("sm_90",), gpu_memory_bytes=150_754_820_096)
    monkeypatch.setattr(Evaluator, "hardware", property(lambda self: hw))
    monkeypatch.setattr(Evaluator, "_spawn", lambda self, *a, **k: _Idle(tmp_path / "none"))
    for footprint, before, after in ((28 << 30, 4, 8), (54 << 30, 2, 2)):
        ev = _evaluator(tmp_path, max_workers=8, keep_spares_s=0, profile=False)
        try:
            ev._warm_spares()  # probe(): before its plan, as many as a fresh run takes
            key = ev._spare_key("cuda", 0, None)
            assert len(SPARES.waiting(key)) == 8
            ev.plan = plan_memory(Footprint(peak_bytes=footprint), hw, max_workers_per_gpu=8)
            ev._acquire_pool().per_device = ev.plan.workers_per_gpu  # as probe() sets it
            for _ in range(6):  # the probe, the baselines, four candidates
                assert ev._take("cuda", 0) is not None
            assert len(SPARES.waiting(key)) == before == 2 * ev.plan.workers_per_gpu
            ev.candidates_done()
            assert len(SPARES.waiting(key)) == after
            assert after <= max(before, spares_beside_one(ev.plan, hw))  # the plan's room
        finally:
            ev.close()


def test_the_search_says_when_its_candidates_are_done(tmp_path, monkeypatch):
    """After its last verdict, before the late baselines (whose seconds give the next run's
    spares their head start)."""
    from openkernel.events import CandidateEvaluated
    from openkernel.runner import resolve_run
    from openkernel.search.loop import Search

    order = []
    monkeypatch.setattr(Evaluator, "candidates_done", lambda self: order.append("done"))
    late = Search._late_baselines

    def recorded(self):
        order.append("late baselines")
        yield from late(self)

    monkeypatch.setattr(Search, "_late_baselines", recorded)
    task, config = resolve_run(ROOT / "examples" / "gelu", [
        "max_iters=1", "branches_per_iteration=1", "prompt.max_template_combinations=1",
        "eval_config.correctness_seeds=1", f"paths.scratch_dir={tmp_path / 'scratch'}",
        f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}"])
    for event in Search(task, config).run():
        if isinstance(event, CandidateEvaluated):
            order.append("verdict")
    assert order == ["verdict", "done", "late baselines"]
