"""The Ray executor on a real local Ray cluster (CPU, logical GPUs): an offline search end to
end, and a node killed mid-run whose candidate is re-queued, none lost or stored twice.

One cluster for the module: a head and a second worker node, each a set of real processes
(GCS, raylet, workers) with one logical GPU. The node-kill test runs last and kills the worker
node; teardown stops every Ray process it started.
"""

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("RAY_DISABLE_IMPORT_WARNING", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402 - the dev extra installs it: CI must run these, never skip them
from ray.cluster_utils import Cluster  # noqa: E402

import openkernel  # noqa: E402
from openkernel import events as ev  # noqa: E402
from openkernel.config import build_config  # noqa: E402
from openkernel.errors import ConfigError  # noqa: E402
from openkernel.evaluation.host.devices import NoDeviceLeft  # noqa: E402
from openkernel.evaluation.host.ray_executor import RayEvaluator, _Actor  # noqa: E402
from openkernel.evaluation.host.ray_node import (  # noqa: E402
    ActorInfo,
    GpuActor,
    JudgeReply,
    JudgeRequest,
)
from openkernel.generators.base import Proposal  # noqa: E402
from openkernel.records import MemoryPlan, TaskProbe  # noqa: E402
from openkernel.schemas import EvalResult  # noqa: E402
from openkernel.search.loop import Search  # noqa: E402
from openkernel.store import Store  # noqa: E402
from openkernel.task import load_task  # noqa: E402

# Small on two shared cores: little object store, no dashboard, node death seen in ~2 s.
CANDIDATES = Path(__file__).parent / "candidates"
_NODE = {"num_cpus": 2, "num_gpus": 1, "object_store_memory": 80 << 20}
_HEAD = {**_NODE, "include_dashboard": False,
         "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                            "health_check_initial_delay_ms": 0}}


_WITHOUT_RAY = """
import sys
sys.modules["ray"] = None  # as if Ray were not installed: `import ray` raises ImportError
import openkernel.search.loop, openkernel.cli  # the engine imports as today
from openkernel.config import build_config
assert build_config({}).executor == "local"
sys.exit(openkernel.cli.main(sys.argv[1:]))
"""


def test_without_ray_the_engine_imports_and_the_cli_names_the_extra(tmp_path, examples_dir):
    """No traceback, exit 2, one message naming what to install; nothing opened or written."""
    db = tmp_path / "k.sqlite3"
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_RAY, "run", str(examples_dir / "gelu"), "--set",
         "executor=ray", "--set", f"paths.kernels_db_path={db}"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'openkernel[ray]'" in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr + proc.stdout


def test_the_engine_does_not_import_ray_unless_asked():
    code = ("import sys, openkernel, openkernel.search.loop, openkernel.cli; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_executor_keys_are_checked():
    assert build_config({"executor": "ray", "ray": {"address": "auto"}}).ray.address == "auto"
    with pytest.raises(ConfigError, match="'executor': Input should be 'local' or 'ray'"):
        build_config({"executor": "dask"})
    with pytest.raises(ConfigError, match="unknown key 'ray.adress'"):
        build_config({"ray": {"adress": "auto"}})


# -- re-queue and de-duplication, against a fake Ray (no cluster) ---------------------------
class _Lost(Exception):
    """Stands for ray.exceptions.RayActorError."""


class _FakeRay:
    class exceptions:
        RayActorError = _Lost

    def get(self, ref, timeout=None):
        return ref

    def wait(self, refs, timeout=None):  # a judge stream's next item is always there
        return refs, []

    def kill(self, handle):
        handle.killed = True


class _Handle:
    """An actor handle whose judge stream is ``script(request)``; counts the calls."""

    def __init__(self, script):
        self.script, self.calls, self.killed = script, 0, False
        self.judge = self

    def options(self, **_):
        return self

    def remote(self, request):
        self.calls += 1
        return self.script(request)


def _reply(request, node):
    return JudgeReply(request.key, result=EvalResult(compiled=True, correctness=True), node=node)


def _dies(request):
    yield "setup"
    raise _Lost("the actor died unexpectedly before finishing this task")


def _judges(request):
    yield "setup"
    yield "build"
    yield _reply(request, "b")


def _fake_evaluator(monkeypatch, tmp_path, examples_dir, *scripts):
    monkeypatch.setattr("openkernel.evaluation.host.ray_executor.import_ray", _FakeRay)
    config = build_config({"executor": "ray", "paths": {"scratch_dir": str(tmp_path)}})
    ev_ = RayEvaluator(load_task(examples_dir / "gelu"), config)
    info = ActorInfo(probe=TaskProbe(ok=True), targets=None, plan=MemoryPlan(), pch={},
                     max_workers=1, node="")
    for i, script in enumerate(scripts):
        ev_._actors.append(_Actor(i, _Handle(script), replace(info, node="ab"[i])))
    return ev_


def test_a_lost_actor_s_candidate_is_requeued_on_another(monkeypatch, tmp_path, examples_dir):
    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, _dies, _judges)
    first, second = [a.handle for a in evaluator._actors]
    phases: list[str] = []
    result = evaluator.evaluate("code", "triton", label="i0-b0", on_phase=phases.append)
    assert result.correctness and phases == ["setup", "setup", "build"]
    assert result.metadata["requeued"] == [
        "lost with node a (_Lost); re-queued on another GPU actor"]
    assert first.killed and not second.killed  # it cannot go on judging what moved on
    assert [a.info.node for a in evaluator._actors] == ["b"]
    assert any("lost" in note for note in evaluator.notes)
    # Asked again for the same candidate (label and code): its one verdict, judged nowhere.
    assert evaluator.evaluate("code", "triton", label="i0-b0") is result
    assert (first.calls, second.calls) == (1, 1)


def test_a_verdict_arriving_twice_is_kept_once(monkeypatch, tmp_path, examples_dir):
    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, _judges)
    request = JudgeRequest("i0-b0:abc", "evaluate", "code", "triton", "i0-b0")
    one, two = _reply(request, "a"), _reply(request, "b")
    assert evaluator._settle(one, []) is one
    assert evaluator._settle(two, []) is one and evaluator.duplicates == 1


def test_every_actor_lost_ends_with_no_device_left(monkeypatch, tmp_path, examples_dir):
    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, _dies, _dies)
    with pytest.raises(NoDeviceLeft, match="every GPU actor is lost"):
        evaluator.evaluate("code", "triton", label="i0-b0")


def test_a_node_asked_again_returns_its_kept_verdict():
    class Judging:
        notes, incumbent_speedup, calls = [], 0.0, 0

        def evaluate(self, code, backend, label, on_phase, source_name):
            self.calls += 1
            on_phase("build")
            return EvalResult(compiled=True)

    actor = GpuActor.__new__(GpuActor)
    actor.node, actor.evaluator = "host/abc", Judging()
    actor._done, actor._done_lock = {}, threading.Lock()
    request = JudgeRequest("i0-b0:abc", "evaluate", "code", "triton", "i0-b0")
    first = list(actor.judge(request))
    assert first[0] == "build" and isinstance(first[-1], JudgeReply)
    assert first[-1].result.metadata["ray_node"] == "host/abc"
    again = list(actor.judge(request))
    assert again == [first[-1]] and actor.evaluator.calls == 1


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=_HEAD)
    worker = c.add_node(**_NODE)
    c.wait_for_nodes()
    try:
        yield c, worker
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _overrides(tmp_path, address, *extra, db=None):
    return [f"paths.kernels_db_path={db or tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}", "search.seed=1", "executor=ray",
            f"ray.address={address}", "ray.start_timeout_s=120", *extra]


def test_offline_search_through_ray_into_postgresql(cluster, postgres, tmp_path, examples_dir):
    """The whole path past one machine: candidates judged on two Ray nodes, results in a real
    PostgreSQL server (the node-kill test below writes to SQLite)."""
    c, _ = cluster
    url = postgres.new_database("ray_e2e")
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp_path, c.address, "job_name=ray-e2e", "max_iters=1", "branches_per_iteration=2",
        db=url)))
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "completed", finished
    evaluated = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(e.label for e in evaluated) == ["i0-b0", "i0-b1"]
    assert any(e.program.kernel_exec_result.correctness for e in evaluated)
    # Both GPU actors were started and the candidates were judged on the nodes, not here.
    said = " ".join(e.message for e in events if isinstance(e, ev.LogEmitted))
    assert "2 GPU actor(s) on 2 node(s)" in said
    nodes = {e.program.kernel_exec_result.metadata["ray_node"] for e in evaluated}
    assert len(nodes) == 2  # the least-loaded actor takes each: one candidate per node
    # The phases travelled back from the nodes.
    phases: dict[str, list[str]] = {}
    for e in events:
        if isinstance(e, ev.CandidatePhaseChanged):
            phases.setdefault(e.label, []).append(e.phase)
    for e in evaluated:
        seen = [p for p in phases[e.label] if p != "sweeping"]
        assert seen[:3] == ["generating", "queued", "building"], seen
        if e.program.kernel_exec_result.correctness:
            assert seen[-2:] == ["testing", "timing"], seen
    store = Store(url)
    try:
        rows = store.job_kernels("gelu", "ray-e2e")
        assert sorted(r.label for r in rows if not r.is_program0) == ["i0-b0", "i0-b1"]
    finally:
        store.close()
    assert not ray.is_initialized()  # the run joined the cluster itself and left it after


# A correct candidate that takes a while to build (it sleeps at import), so that the node can
# be killed while it holds it.
_SLOW = "import time\ntime.sleep(8)  # {label}: long enough to be caught mid-build\n"


class _SlowGenerator:
    name, models = "slow", []

    def supports(self, task, probe, backend):
        return None

    def propose(self, request):
        label = f"i{request.iteration}-b{request.branch}"
        code = _SLOW.format(label=label) + (CANDIDATES / "good_gelu.py").read_text()
        return Proposal(code=code, prompt="", answer="", model="",
                        origin="offline", description=f"slow gelu {label}")


def test_a_node_killed_mid_run_requeues_its_candidate(cluster, tmp_path, examples_dir):
    c, worker = cluster
    config = build_config({}, _overrides(tmp_path, c.address, "job_name=ray-kill", "max_iters=1",
                                         "branches_per_iteration=2", "task_name=gelu",
                                         "eval_config.correctness_seeds=1"))
    store = Store(config.paths.kernels_db_path)
    search = Search(load_task(examples_dir / "gelu"), config, store=store,
                    generator=_SlowGenerator())
    out: queue.Queue = queue.Queue()

    def consume():
        try:
            for event in search.run():
                out.put(event)
        finally:
            out.put(None)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    events, building, killed = [], set(), None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        event = out.get(timeout=deadline - time.monotonic())
        if event is None:
            break
        events.append(event)
        if isinstance(event, ev.CandidatePhaseChanged) and event.phase == "building":
            building.add(event.label)
        if killed is None and len(building) == 2:
            # Each node holds one candidate, mid-build: kill the worker node now.
            assert not any(isinstance(e, ev.CandidateEvaluated) for e in events)
            c.remove_node(worker, allow_graceful=False)
            killed = time.monotonic()
    thread.join(timeout=30)
    store.close()
    assert killed is not None, [type(e).__name__ for e in events]
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "completed", finished
    evaluated = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(e.label for e in evaluated) == ["i0-b0", "i0-b1"]  # none lost, none twice
    requeued = [e for e in evaluated if e.program.kernel_exec_result.metadata.get("requeued")]
    assert len(requeued) == 1, [e.program.kernel_exec_result.metadata for e in evaluated]
    assert "re-queued" in requeued[0].program.kernel_exec_result.metadata["requeued"][0]
    assert all(e.program.kernel_exec_result.correctness for e in evaluated), [
        e.program.kernel_exec_result.eval_log for e in evaluated]
    said = " ".join(e.message for e in events if isinstance(e, ev.LogEmitted))
    assert "lost" in said  # the loss is told in the event stream
    store = Store(tmp_path / "k.sqlite3")
    try:
        rows = [r for r in store.job_kernels("gelu", "ray-kill") if not r.is_program0]
        assert sorted(r.label for r in rows) == ["i0-b0", "i0-b1"]  # each stored exactly once
    finally:
        store.close()


def test_the_reference_timings_come_from_a_node_into_the_engine_s_store(monkeypatch, tmp_path,
                                                                       examples_dir):
    """The bench table under Ray: the first actor's eager/torch.compile/max-autotune timings
    are kept in the engine's store under that node's hardware, asked for once."""
    from openkernel.evaluation.host.baselines import environment_key
    from openkernel.records import Hardware

    stats = {"eager": {"median": 2.0}, "compile": {"median": 1.0}, "autotune": {"median": 0.8}}

    class Timings:
        asked = 0

        def remote(self):
            Timings.asked += 1
            return stats, ""

    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, _judges)
    evaluator._actors[0].handle.baselines = Timings()
    hw = Hardware(label="NVIDIA H200", device="cuda", gpu_arch="sm_90",
                  software={"torch": "2.11.0+cu130"})
    evaluator._probe = TaskProbe(ok=True, hardware=hw)
    store = Store(tmp_path / "k.sqlite3")
    evaluator.store = store
    try:
        assert evaluator.baselines() == stats and evaluator.baselines() == stats
        assert Timings.asked == 1
        kept = store.reference_timing(evaluator.task.digest, "NVIDIA H200", "compile",
                                      environment_key(hw))
        assert kept.runtime == 1.0 and kept.runtime_stats["autotune"]["median"] == 0.8
    finally:
        store.close()
