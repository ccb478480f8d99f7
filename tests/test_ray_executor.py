"""The Ray executor on a real local Ray cluster (CPU, logical GPUs): an offline search end to
end with each correct candidate timed on both (logical) architectures; a search submitted as
a Ray job; and a node killed mid-run whose candidate is re-queued, none lost or stored twice,
then a node joining and an actor's process killed, each replaced and used.

One cluster for the module: a head (with the dashboard's job server) and a second worker node,
each a set of real processes (GCS, raylet, workers) with one logical GPU, labelled as an sm_90
and an sm_80. The node-kill test runs last and kills the worker node; teardown stops every Ray
process it started.
"""

import json
import os
import queue
import shutil
import signal
import socket
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
from openkernel.evaluation.host.ray_executor import RayEvaluator  # noqa: E402
from openkernel.evaluation.host.ray_fleet import Member  # noqa: E402
from openkernel.evaluation.host.ray_node import (  # noqa: E402
    ARCH_LABEL,
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

# Small on two shared cores: little object store, node death seen in ~2 s. The head runs the
# dashboard for its job server (`ray job submit`); the nodes' logical GPUs are labelled.
CANDIDATES = Path(__file__).parent / "candidates"
_NODE = {"num_cpus": 2, "num_gpus": 1, "object_store_memory": 80 << 20}
_SM80, _SM90 = ({**_NODE, "labels": {ARCH_LABEL: arch}} for arch in ("sm_80", "sm_90"))
_HEAD = {**_SM90, "include_dashboard": True,
         "dashboard_port": 0,
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


def test_inside_a_ray_job_the_engine_joins_without_the_job_s_working_dir(monkeypatch):
    """The actors inherit what the engine joins with: the job's env vars, never its working_dir
    (each node would unpack it again, removing the folder under the engine and the actors)."""
    from openkernel.evaluation.host import ray_executor

    var = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # what `ray job submit` sets for its entrypoint
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_1.zip", "env_vars": {"A": "a"}},
           "metadata": {"job_submission_id": "raysubmit_1"}}
    monkeypatch.setenv(var, json.dumps(job))
    ray_executor._leave_job_working_dir()
    assert json.loads(os.environ[var]) == {"runtime_env": {"env_vars": {"A": "a"}},
                                           "metadata": {"job_submission_id": "raysubmit_1"}}
    monkeypatch.delenv(var)
    ray_executor._leave_job_working_dir()  # not a job: nothing set
    assert var not in os.environ


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
        ev_.fleet.live.append(Member(i, _Handle(script), replace(info, node="ab"[i])))
    return ev_


def test_a_lost_actor_s_candidate_is_requeued_on_another(monkeypatch, tmp_path, examples_dir):
    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, _dies, _judges)
    first, second = [a.handle for a in evaluator.fleet.live]
    phases: list[str] = []
    result = evaluator.evaluate("code", "triton", label="i0-b0", on_phase=phases.append)
    assert result.correctness and phases == ["setup", "setup", "build"]
    assert result.metadata["requeued"] == [
        "lost with node a (_Lost); re-queued on another GPU actor"]
    assert first.killed and not second.killed  # it cannot go on judging what moved on
    assert [a.info.node for a in evaluator.fleet.live] == ["b"]
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


def test_a_correct_candidate_is_judged_again_on_each_other_architecture(monkeypatch, tmp_path,
                                                                         examples_dir):
    """Routing by architecture, as the real cluster test below does it on two nodes: the
    verdict on the primary's actor, then one more judging on the other's, kept in by_arch."""
    def timed(node, runtime):
        def script(request):
            yield "build"
            yield JudgeReply(request.key, result=EvalResult(
                compiled=True, correctness=True, runtime=runtime, runtime_improvement=2 / runtime),
                node=node)
        return script

    evaluator = _fake_evaluator(monkeypatch, tmp_path, examples_dir, timed("b", 2.0),
                                timed("a", 1.0))
    evaluator.config.gpu_arch = ["sm_90", "sm_80"]
    sm80, sm90 = evaluator.fleet.live
    sm80.info, sm90.info = replace(sm80.info, arch="sm_80"), replace(sm90.info, arch="sm_90")
    assert evaluator._plan_targets(evaluator.fleet.live) == ["sm_80", "sm_90"]
    assert evaluator.targets.primary == "sm_90" and evaluator.max_workers == 1
    phases: list[str] = []
    result = evaluator.evaluate("code", "triton", label="i0-b0", on_phase=phases.append)
    assert phases == ["build"]  # the second judging is not the candidate's own phases
    assert result.runtime == 1.0  # the verdict is the primary's
    by_arch = result.metadata["by_arch"]
    assert by_arch["sm_90"]["runtime"] == 1.0 and by_arch["sm_90"]["ray_node"] == "a"
    assert by_arch["sm_80"]["runtime"] == 2.0 and by_arch["sm_80"]["ray_node"] == "b"
    assert "On sm_80 (node b): correct, but no faster than the reference, 2.0000 ms" \
        in result.eval_log
    assert (sm90.handle.calls, sm80.handle.calls) == (1, 1)
    evaluator.evaluate("code", "triton", label="i0-b0")  # asked again: judged nowhere
    assert (sm90.handle.calls, sm80.handle.calls) == (1, 1)


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


def _descendants() -> set[int]:
    """The processes this one started, and theirs (Ray's node processes among them)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    mine = {os.getpid()}
    while more := {pid for pid, ppid in parents.items() if ppid in mine} - mine:
        mine |= more
    return mine - {os.getpid()}


def _add_node(c: Cluster, **args):
    """``Cluster.add_node``, tried three times: Ray gives a new node a fixed 30 s to register
    with the GCS, which a loaded two-core machine can miss. The processes of a failed try are
    stopped. (Only while nothing else of this process starts processes: before a run.)"""
    for attempt in range(3):
        before = _descendants()
        try:
            return c.add_node(**args)
        except Exception:  # noqa: BLE001 - "The current node timed out during startup"
            for pid in _descendants() - before:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if attempt == 2:
                raise


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    _add_node(c, **_HEAD)
    worker = _add_node(c, **_SM80)
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


@pytest.mark.slow
def test_offline_search_through_ray_into_postgresql(cluster, postgres, tmp_path, examples_dir):
    """The whole path past one machine: candidates judged on the sm_90 node and each correct
    one timed again on the sm_80 node, results in a real PostgreSQL server (the node-kill test
    below writes to SQLite)."""
    c, worker = cluster
    url = postgres.new_database("ray_e2e")
    events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
        tmp_path, c.address, "job_name=ray-e2e", "max_iters=1", "branches_per_iteration=2",
        "gpu_arch=[sm_90, sm_80]", db=url)))
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "completed", finished
    evaluated = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert sorted(e.label for e in evaluated) == ["i0-b0", "i0-b1"]
    correct = [e for e in evaluated if e.program.kernel_exec_result.correctness]
    assert correct
    # Both GPU actors were started and the candidates were judged on the nodes, not here.
    said = " ".join(e.message for e in events if isinstance(e, ev.LogEmitted))
    assert "2 GPU actor(s) on 2 node(s)" in said and "architectures sm_80, sm_90" in said
    # Judged on the primary's (sm_90) node, the head; each correct one timed on sm_80 too.
    head = c.head_node.node_id[:12]
    nodes = {e.program.kernel_exec_result.metadata["ray_node"] for e in evaluated}
    assert len(nodes) == 1 and nodes.pop().endswith(head)
    for e in correct:
        result = e.program.kernel_exec_result
        by_arch = result.metadata["by_arch"]
        assert set(by_arch) == {"sm_90", "sm_80"}
        assert by_arch["sm_80"]["ray_node"].endswith(worker.node_id[:12])
        assert by_arch["sm_80"]["status"] in ("correct", "faster")
        assert by_arch["sm_80"]["runtime"] > 0 and by_arch["sm_90"]["runtime"] == result.runtime
        assert f"On sm_80 (node {by_arch['sm_80']['ray_node']}): correct" in result.eval_log
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
        assert {r.gpu_arch for r in rows} == {"sm_90"}
        assert all(set(r.meta["by_arch"]) == {"sm_90", "sm_80"} for r in rows if r.correctness
                   and not r.is_program0)
    finally:
        store.close()
    assert not ray.is_initialized()  # the run joined the cluster itself and left it after


@pytest.mark.slow
def test_a_search_submitted_as_a_ray_job_lands_in_postgresql(cluster, postgres, tmp_path,
                                                             examples_dir, capsys):
    """From a laptop: `ray job submit` with the working directory (task and config) and the
    database URL; the job's engine judges on the cluster's actors; this side reads the job."""
    from openkernel import cli

    c, _ = cluster
    url = postgres.new_database("ray_job")
    work = tmp_path / "work"
    shutil.copytree(examples_dir / "gelu", work / "gelu")
    (work / "search.yaml").write_text("task: gelu\nexecutor: ray\njob_name: from-laptop\n"
                                      "max_iters: 1\nbranches_per_iteration: 1\n"
                                      "ray:\n  gpus: 1\nsearch:\n  seed: 1\n")
    dashboard = f"http://{c.head_node.address_info['webui_url']}"
    ray_cli = Path(sys.executable).with_name("ray")
    done = subprocess.run(
        [str(ray_cli), "job", "submit", "--address", dashboard, "--working-dir", str(work),
         "--", sys.executable, "-m", "openkernel.cli", "run", "search.yaml", "--set",
         f"paths.kernels_db_path={url}"],
        capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 GPU actor(s) on 1 node(s)" in done.stdout and "completed: 1 candidate" in done.stdout
    assert cli.main(["runs", "--db", url]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if "from-laptop" in ln]
    assert line.split("\t")[:4] == ["gelu", "from-laptop", "completed", "1"]
    from kernelcode.dashboard.source import DataSource

    job = DataSource(url).job("gelu", "from-laptop")  # as the laptop's dashboard reads it
    assert job.state == "completed" and len(job.rows) == 2  # the reference and the candidate


def test_a_cluster_address_that_does_not_answer_is_one_message(tmp_path, examples_dir, capsys):
    from openkernel import cli

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "k.sqlite3"
    code = cli.main(["run", str(examples_dir / "gelu"), *sum((["--set", o] for o in _overrides(
        tmp_path, f"127.0.0.1:{port}", "job_name=nowhere")), [])])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"ray.address='127.0.0.1:{port}': nothing answers at 127.0.0.1:{port}" in \
        " ".join(err.split())
    assert not ray.is_initialized()
    store = Store(db)
    assert store.job_runs("gelu", "nowhere") == []  # no run started, nothing half-written
    store.close()


# A correct candidate that takes a while to build (it sleeps at import), so that its node can
# be killed while it holds it.
_SLOW = "import time\ntime.sleep(8)  # {label}: long enough to be caught mid-build\n"


class _Scripted:
    """Slow candidates in iteration 0, quick ones in iteration 1. There, once two actors judge
    again: branch 0 runs the test's ``kill`` first; branch 1 waits until the killed actor is
    found lost and a new one judges in its place."""

    name, models = "scripted", []

    def __init__(self, kill):
        self.evaluator, self.kill, self.killed = None, kill, threading.Event()

    def supports(self, task, probe, backend):
        return None

    def propose(self, request):
        label = f"i{request.iteration}-b{request.branch}"
        fleet = self.evaluator.fleet
        if request.iteration:
            self._wait(lambda: len(fleet.live) == 2)
            if request.branch == 0:
                self.kill()
                self.killed.set()
            else:
                self._wait(self.killed.is_set)
                self._wait(lambda: len(fleet.live) == 2 and
                           all(m.info.pid != self.kill.pid for m in fleet.live))
        slow = _SLOW.format(label=label) if request.iteration == 0 else f"# {label}\n"
        return Proposal(code=slow + (CANDIDATES / "good_gelu.py").read_text(), prompt="",
                        answer="", model="", origin="offline", description=f"gelu {label}")

    @staticmethod
    def _wait(ready, limit_s: float = 240) -> None:
        deadline = time.monotonic() + limit_s
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.5)


def test_a_node_killed_mid_run_requeues_its_candidate_and_lost_actors_are_replaced(
        cluster, tmp_path, examples_dir):
    """Iteration 0: the worker node is killed while each node holds a candidate, mid-build;
    its candidate is re-queued, and a new node joins: an actor starts there. In iteration 1,
    that actor's process is killed: the candidate sent to it is re-queued, the actor replaced
    on the same node, and the replacement judges the next one. None lost, none stored twice,
    every change in the log."""
    c, worker = cluster
    # Two nodes of one architecture (no gpu_arch: candidates go to the first actor's kind)
    c.remove_node(worker)
    worker = _add_node(c, **_SM90)
    config = build_config({}, _overrides(tmp_path, c.address, "job_name=ray-kill", "max_iters=2",
                                         "branches_per_iteration=2", "task_name=gelu",
                                         "eval_config.correctness_seeds=1"))
    store = Store(config.paths.kernels_db_path)
    joined = None

    def kill_the_joined_actor():  # its process, mid-run (the node stays)
        [actor] = [m for m in search.evaluator.fleet.live if m.info.node_id == joined.node_id]
        kill_the_joined_actor.pid = actor.info.pid
        os.kill(actor.info.pid, signal.SIGKILL)

    kill_the_joined_actor.pid = None
    generator = _Scripted(kill_the_joined_actor)
    search = Search(load_task(examples_dir / "gelu"), config, store=store, generator=generator)
    generator.evaluator = search.evaluator
    out: queue.Queue = queue.Queue()

    def consume():
        try:
            for event in search.run():
                out.put(event)
        finally:
            out.put(None)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    events, building = [], set()
    deadline = time.monotonic() + 520
    while True:
        try:
            event = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"the run did not end: {[_said(e) for e in events]}")
        if event is None:
            break
        events.append(event)
        if isinstance(event, ev.CandidatePhaseChanged) and event.phase == "building":
            building.add(event.label)
        if joined is None and {"i0-b0", "i0-b1"} <= building:
            # Each node holds one candidate, mid-build: kill the worker node, then add another.
            assert not any(isinstance(e, ev.CandidateEvaluated) for e in events)
            c.remove_node(worker, allow_graceful=False)
            joined = c.add_node(**_SM90)
    thread.join(timeout=30)
    store.close()
    assert kill_the_joined_actor.pid, [_said(e) for e in events]
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "completed", finished
    evaluated = {e.label: e.program.kernel_exec_result for e in events
                 if isinstance(e, ev.CandidateEvaluated)}
    assert sorted(evaluated) == ["i0-b0", "i0-b1", "i1-b0", "i1-b1"]
    assert all(r.correctness for r in evaluated.values()), [
        r.eval_log for r in evaluated.values()]
    requeued = sorted(label for label, r in evaluated.items() if r.metadata.get("requeued"))
    assert len(requeued) == 2 and requeued[0][:2] == "i0" and requeued[1] == "i1-b0", requeued
    # The joining node judged, with the actor that replaced the killed one.
    new = joined.node_id[:12]
    on_new = [label for label, r in evaluated.items() if r.metadata["ray_node"].endswith(new)]
    assert on_new == ["i1-b1"], on_new
    said = [e.message for e in events if isinstance(e, ev.LogEmitted)]
    lost = [m for m in said if " lost (" in m]
    started = [m for m in said if "GPU actor started on node" in m and new in m]
    assert len(lost) == 2 and len(started) == 2, said  # joined, then replaced
    store = Store(tmp_path / "k.sqlite3")
    try:
        rows = [r for r in store.job_kernels("gelu", "ray-kill") if not r.is_program0]
        assert sorted(r.label for r in rows) == sorted(evaluated)  # each stored exactly once
    finally:
        store.close()


def _said(event) -> str:
    """An event in a line, for a failure's message."""
    what = getattr(event, "label", "") or getattr(event, "message", "")
    return f"{type(event).__name__} {what} {getattr(event, 'phase', '')}".strip()


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
    evaluator.fleet.live[0].handle.baselines = Timings()
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
