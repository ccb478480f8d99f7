"""The evaluation pipeline: timed phases take turns on a device, spare workers, build caches.

No GPU here: the turns are exercised with a DevicePool around real CPU workers, which ask for
their turn exactly as they do on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
import textwrap
import threading
import time
from pathlib import Path

import pytest

from openkernel.config import build_config
from openkernel.evaluation.host import environment
from openkernel.evaluation.host.devices import DevicePool
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.process import drive
from openkernel.evaluation.worker import sandbox
from openkernel.schemas import Status
from openkernel.task import load_task

CANDIDATES = Path(__file__).parent / "candidates"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _evaluator(tmp_path, **ec) -> Evaluator:
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")},
                           "eval_config": {"correctness_seeds": 1, **ec}})
    return Evaluator(load_task(EXAMPLES / "gelu"), config, bench_budget_s=0.1)


def _job(ev: Evaluator):
    hw = ev.hardware
    return ev._task_job(hw.device, "evaluate", backend="triton", correctness_seeds=1,
                        gpu_arch="cpu", build_timeout_s=60, gpu_memory_fraction=0.9,
                        **ev._bench_params(hw))


def test_least_loaded_placement_and_exclusive_turns():
    pool = DevicePool([0, 1], per_device=2)
    assert [pool.acquire(), pool.acquire(), pool.acquire()] == [0, 1, 0]
    pool.release(0)
    pool.release(0)
    assert pool.acquire() == 0  # GPU 0 now carries less than GPU 1
    inside, overlap = [], []

    def timed(i):
        with pool.turn(1):
            inside.append(i)
            if len(inside) > 1:
                overlap.append(i)
            time.sleep(0.05)
            inside.remove(i)

    threads = [threading.Thread(target=timed, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap
    busy = pool.busy()
    assert busy[1]["turns"] == 4 and busy[1]["busy_s"] >= 0.2
    assert busy[0] == {"busy_s": 0.0, "turns": 0, "intervals": [], "timed": []}
    assert len(busy[1]["timed"]) == 4


def test_checks_share_a_device_and_timing_holds_it_alone():
    """Up to check_slots workers check at once; a timed turn has nothing beside it, and once
    one waits for it no new check starts (timing is not starved by a stream of checks)."""
    pool = DevicePool([0], per_device=4, check_slots=2)
    log, lock = [], threading.Lock()
    inside = {"check": 0, "time": 0}
    peak = {"check": 0}

    def hold(kind, seconds, i):
        with (pool.checks(0) if kind == "check" else pool.turn(0)):
            with lock:
                inside[kind] += 1
                peak["check"] = max(peak["check"], inside["check"])
                log.append((kind, i, dict(inside)))
            time.sleep(seconds)
            with lock:
                inside[kind] -= 1

    threads = [threading.Thread(target=hold, args=("check", 0.3, i)) for i in range(3)]
    threads.append(threading.Thread(target=hold, args=("time", 0.1, 9)))
    threads += [threading.Thread(target=hold, args=("check", 0.1, 10 + i)) for i in range(2)]
    for t in threads[:3]:
        t.start()
    time.sleep(0.05)  # two checks in, one waiting for a slot
    threads[3].start()
    time.sleep(0.05)  # the timer waits: the later checks must queue behind it
    for t in threads[4:]:
        t.start()
    for t in threads:
        t.join()
    assert peak["check"] == 2
    for kind, i, now in log:
        if kind == "time":
            assert now == {"check": 0, "time": 1}, log
        else:
            assert now["time"] == 0, log
    order = [i for _, i, _ in log]
    assert order.index(9) < order.index(10) and order.index(9) < order.index(11), log
    busy = pool.busy()[0]
    assert busy["turns"] == 6
    # overlaps counted once: the 3 long checks two at a time, then the turn, then the rest
    assert 0.7 <= busy["busy_s"] < 0.3 * 3 + 0.1 + 0.2, busy
    # the timed turn is told apart from the checks, and nothing else was held beside it
    assert len(busy["timed"]) == 1, busy
    (t0, t1), = busy["timed"]
    assert all(z <= t0 or a >= t1 for a, z in busy["intervals"] if (a, z) != (t0, t1)), busy


def test_overlapping_checks_of_real_workers_never_meet_a_timed_turn(tmp_path):
    """Two real workers with overlap_checks: their tests run in the device's shared hold at
    the same time, each asks for the turn before timing, and no timing overlaps anything."""
    ev = _evaluator(tmp_path)
    pool = DevicePool([0], per_device=2, check_slots=2)
    spans, lock = [], threading.Lock()
    # Both checks wait, inside the shared hold, until the other is in it too: they overlap
    # whatever the load (a worker slow to start cannot leave its check after the other's), and
    # a pool that let only one in would break the barrier.
    both = threading.Barrier(2, timeout=180)

    def recorded(kind, factory):
        import contextlib

        @contextlib.contextmanager
        def cm():
            with factory():
                if kind == "check":
                    both.wait()
                start = time.monotonic()
                try:
                    yield
                finally:
                    with lock:
                        spans.append((kind, start, time.monotonic()))
        return cm

    runs = {}

    def judge(name):
        worker = ev._spawn("cpu", None)
        (worker.scratch / "candidate.py").write_text((CANDIDATES / "good_gelu.py").read_text())
        job = replace(_job(ev), code_path=str(worker.scratch / "candidate.py"),
                      scratch=str(worker.scratch), overlap_checks=True, correctness_seeds=3)
        runs[name] = drive(worker, job, build_timeout_s=120, test_timeout_s=120,
                           turn=recorded("time", lambda: pool.turn(0)),
                           checks=recorded("check", lambda: pool.checks(0)))

    threads = [threading.Thread(target=judge, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run in runs.values():
        assert run.payload and run.payload["correctness"], run.log_tail
        assert run.payload["cand_stats"]["n_trials"] > 0  # timed, after its checks
    checks = [s for s in spans if s[0] == "check"]
    timed = [s for s in spans if s[0] == "time"]
    assert len(checks) == 2 and len(timed) == 2, spans
    (_, a0, a1), (_, b0, b1) = checks
    assert max(a0, b0) < min(a1, b1), spans  # the two candidates' checks overlapped
    for _, t0, t1 in timed:
        others = [s for s in spans if s[1:] != (t0, t1)]
        assert all(e <= t0 + 1e-3 or s >= t1 - 1e-3 for _, s, e in others), spans


def test_a_sweeps_winner_checks_outside_the_timed_turn(tmp_path):
    """A sweep screens and times its combinations in one timed turn; its winner's checks then
    give the turn back and share the GPU as any candidate's do, and its timing takes the turn
    again: only timing holds the GPU alone."""
    ev = _evaluator(tmp_path)
    pool = DevicePool([0], per_device=2, check_slots=2)
    spans = []

    def recorded(kind, factory):
        import contextlib

        @contextlib.contextmanager
        def cm():
            with factory():
                start = time.monotonic()
                try:
                    yield
                finally:
                    spans.append((kind, start, time.monotonic()))
        return cm

    worker = ev._spawn("cpu", None)
    paths = []
    for i in range(2):
        path = worker.scratch / f"variant_{i}.py"
        path.write_text((CANDIDATES / "good_gelu.py").read_text())
        paths.append(str(path))
    job = replace(_job(ev), mode="sweep", variant_paths=paths, winner_seeds=1,
                  scratch=str(worker.scratch), overlap_checks=True)
    run = drive(worker, job, build_timeout_s=120, test_timeout_s=120,
                turn=recorded("time", lambda: pool.turn(0)),
                checks=recorded("check", lambda: pool.checks(0)))
    winner = (run.payload or {}).get("winner")
    assert winner and winner["payload"]["correctness"], run.log_tail
    assert winner["payload"]["cand_stats"]["n_trials"] > 0
    assert [kind for kind, _, _ in spans] == ["time", "check", "time"], spans
    (_, _, screen_end), (_, check0, check1), (_, time0, _) = spans
    assert screen_end <= check0 + 1e-3 and check1 <= time0 + 1e-3, spans


def test_waiting_for_the_turn_counts_against_no_timeout(tmp_path):
    """A worker that built waits for its turn longer than the build timeout and is judged."""
    ev = _evaluator(tmp_path)
    pool = DevicePool([0])
    release = threading.Event()

    def hold():
        with pool.turn(0):
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    worker = ev._spawn("cpu", None)
    (worker.scratch / "candidate.py").write_text((CANDIDATES / "good_gelu.py").read_text())
    job = replace(_job(ev), code_path=str(worker.scratch / "candidate.py"),
                  scratch=str(worker.scratch))
    threading.Timer(25, release.set).start()  # past the 20 s build timeout below
    try:
        run = drive(worker, job, build_timeout_s=20, test_timeout_s=60, turn=lambda: pool.turn(0))
    finally:
        release.set()
        holder.join()
    assert run.timed_out is None, run.log_tail
    assert run.payload and run.payload["correctness"], run.log_tail
    phases = run.phase_seconds()
    assert phases["queued"] > 3, phases  # it waited for the holder
    assert pool.busy()[0]["turns"] == 2  # the holder's turn, then the worker's


def test_spare_worker_takes_the_next_candidate_and_outlives_its_run_for_the_next(tmp_path):
    # started anew, not forked (test_zygote.py): a spare's head start is its imports
    ev = _evaluator(tmp_path, prestart_workers=True, keep_spares_s=30, fork_workers=False)
    good = (CANDIDATES / "good_gelu.py").read_text()
    first = ev.evaluate(good, "triton", "first")
    assert first.get_status() in (Status.FASTER, Status.CORRECT), first.eval_log
    assert first.metadata["prestarted"] is False  # nothing was waiting yet
    assert first.metadata["worker"]["preload_s"] > 0
    (spare,) = ev.spares()[("cpu", None, None)]
    time.sleep(8)  # let it finish its imports: the job should find it idle
    second = ev.evaluate(good.replace("good", "good "), "triton", "second")
    assert second.correctness, second.eval_log
    assert second.metadata["prestarted"] is True
    assert second.metadata["worker"]["idle_s"] > 0, second.metadata["worker"]
    assert second.metadata["phase_s"]["setup"] < first.metadata["phase_s"]["setup"]
    assert spare.proc.poll() is not None  # the spare did the job and exited
    (successor,) = ev.spares()[("cpu", None, None)]
    assert successor.alive()
    ev.close()
    # The next evaluator of this process (a bench's next problem) starts on it
    time.sleep(1)
    assert successor.alive()
    nxt = _evaluator(tmp_path, prestart_workers=True, keep_spares_s=0, fork_workers=False)
    third = nxt.evaluate(good.replace("good", "good  "), "triton", "third")
    assert third.correctness and third.metadata["prestarted"] is True, third.eval_log
    assert successor.proc.poll() is not None  # it did the job
    (last,) = nxt.spares()[("cpu", None, None)]
    nxt.close()  # keep_spares_s 0: stopped with the run, its scratch gone
    assert last.proc.poll() is not None and not last.scratch.exists()


def test_spares_nobody_takes_stop_after_keep_spares_s(tmp_path):
    ev = _evaluator(tmp_path, prestart_workers=True, keep_spares_s=2)
    ev._take("cpu", None)  # starts the pool's spare (nothing waited yet)
    (spare,) = ev.spares()[("cpu", None, None)]
    ev.close()
    assert spare.alive()  # kept for the next run
    deadline = time.monotonic() + 30
    while spare.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spare.proc.poll() is not None and not spare.scratch.exists()


def test_workers_under_a_profiler_are_spares_of_their_own(tmp_path):
    """Profile jobs take spares started under the profiler, never an evaluation spare.

    ncu is not on this machine: a stand-in that runs the command after ncu's own options
    shows the wrapper in the process tree, which is what the keying is about.
    """
    fake = _stand_in_ncu(tmp_path, 'echo "wrapped by fake ncu"; exec "$@"')
    ev = _evaluator(tmp_path, prestart_workers=True, keep_spares_s=0)
    job = _job(ev)
    good = (CANDIDATES / "good_gelu.py").read_text()
    first = ev._run(job, "cpu", None, label="p1", code=good, profiler=str(fake))
    assert first.payload and first.payload["correctness"], first.log_tail
    assert first.prestarted is False and "wrapped by fake ncu" in first.full_log
    assert set(ev.spares()) == {("cpu", None, str(fake))}  # no evaluation spare was started
    time.sleep(8)
    second = ev._run(job, "cpu", None, label="p2", code=good, profiler=str(fake))
    assert second.prestarted is True and "wrapped by fake ncu" in second.full_log
    assert second.phase_seconds()["setup"] < first.phase_seconds()["setup"]
    (spare,) = ev.spares()[("cpu", None, str(fake))]
    ev.close()
    assert ev.spares() == {} and spare.proc.poll() is not None


def test_a_profile_turn_ends_with_its_result_not_with_the_profiler(tmp_path):
    """Nsight Compute writes its report after the profiled process exits: CPU work that must
    not hold the GPU's turn. A stand-in profiler that lingers 4 s after its child shows it."""
    fake = _stand_in_ncu(tmp_path, '"$@"; code=$?; sleep 4; exit $code')
    ev = _evaluator(tmp_path)
    pool = DevicePool([0])
    runs, ended = {}, {}
    for release in (False, True):
        worker = ev._spawn("cpu", None, profiler=str(fake))
        (worker.scratch / "candidate.py").write_text((CANDIDATES / "good_gelu.py").read_text())
        job = replace(_job(ev), code_path=str(worker.scratch / "candidate.py"),
                      scratch=str(worker.scratch))
        runs[release] = drive(worker, job, build_timeout_s=120, test_timeout_s=120,
                              turn=lambda: pool.turn(0), release_on_result=release)
        ended[release] = time.monotonic()
        assert runs[release].payload and runs[release].payload["correctness"], runs[release].log_tail
    held, released = pool.busy()[0]["intervals"]
    # Both runs lasted past the lingering profiler; only the first held the turn through it.
    # Measured from each turn's end to its run's end (how long the candidate's own work took
    # varies with the machine's load; the profiler's 4 s linger does not).
    assert runs[True].wall_s > 4 and runs[False].wall_s > 4
    assert ended[False] - held[1] < 3 and ended[True] - released[1] > 3.5, (held, released, ended)


def test_without_prestart_no_spare_is_kept(tmp_path):
    ev = _evaluator(tmp_path)  # the CPU default: spares would only compete for the cores
    ev.evaluate((CANDIDATES / "good_gelu.py").read_text(), "triton", "one")
    assert ev.spares() == {}


def test_worker_points_its_caches_at_the_build_cache(tmp_path, monkeypatch):
    import torch

    from openkernel.evaluation.protocol import Job
    from openkernel.evaluation.worker import main as worker

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "elsewhere")
    monkeypatch.setenv("TRITON_CACHE_DIR", "elsewhere")
    worker._use_build_cache(Job(mode="evaluate", build_cache=str(tmp_path)))
    root = tmp_path / f"torch-{torch.__version__}"
    assert (root / "torch_extensions").is_dir() and (root / "triton").is_dir()
    assert os.environ["TORCH_EXTENSIONS_DIR"] == str(root / "torch_extensions")
    assert os.environ["TRITON_CACHE_DIR"] == str(root / "triton")


CHILD = textwrap.dedent('''
    import json, os, sys
    from openkernel.evaluation.worker.sandbox import confine
    scratch, own, other = sys.argv[1:4]
    os.chdir(scratch)
    out = {"confined": confine(scratch, [], False, writable=[own])}
    for name, path in (("own", own), ("other", other)):
        try:
            open(os.path.join(path, "build.so"), "w").write("x")
            out[name] = "ok"
        except PermissionError:
            out[name] = "PermissionError"
    print(json.dumps(out))
''')


def _has_landlock() -> bool:
    try:
        return sandbox._sys(444, None, sandbox.ctypes.c_size_t(0), sandbox.ctypes.c_uint32(1)) > 0
    except OSError:
        return False


@pytest.mark.skipif(not _has_landlock(), reason="this kernel has no Landlock")
def test_a_candidate_writes_its_own_build_cache_only(tmp_path, monkeypatch):
    engine, scratch = tmp_path / "engine", tmp_path / "scratch"
    own, other = tmp_path / "cache" / "aaaa", tmp_path / "cache" / "bbbb"
    for d in (engine, scratch, own, other):
        d.mkdir(parents=True)
    monkeypatch.chdir(engine)
    env = environment.worker_env(dict(os.environ), scratch, "cpu", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(scratch), str(own), str(other)],
                          cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["confined"].startswith("unconfined"):
        pytest.skip(out["confined"])
    assert out["own"] == "ok" and out["other"] == "PermissionError", out
    assert str(own) in out["confined"]


def _stand_in_ncu(tmp_path: Path, then: str) -> Path:
    """An executable taking ncu's arguments: skips its options (up to ``--target-processes
    all``), then runs the shell line ``then`` with the worker command as "$@"."""
    fake = tmp_path / "ncu"
    fake.write_text(f'#!/bin/sh\nwhile [ "$1" != "all" ]; do shift; done; shift\n{then}\n')
    fake.chmod(0o755)
    return fake


@pytest.mark.gpu
def test_gpu_pipeline_turns_spares_and_build_cache(tmp_path):
    """On the H200: concurrent candidates never share a timed turn, spares take jobs, and a
    CUDA C++ extension built for the verdict is loaded, not rebuilt, by its profiling run."""
    from concurrent.futures import ThreadPoolExecutor

    from openkernel.evaluation.host.ncu import find_ncu

    # (profile_scope "every": the CUDA candidate below is profiled however it compares)
    ev = _evaluator(tmp_path, build_timeout_s=300, profile_scope="every")
    assert ev.probe().ok
    good = (CANDIDATES / "good_gelu.py").read_text()
    codes = [good + f"\n# variant {i}\n" for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda ic: ev.evaluate(ic[1], "triton", f"t{ic[0]}"), enumerate(codes)))
    for r in results:
        assert r.correctness, r.eval_log
    busy = ev.gpu_busy()
    assert sum(b["turns"] for b in busy.values()) >= 4
    for b in busy.values():  # on each GPU a timed turn overlaps nothing (checks share)
        assert len(b["timed"]) >= 1, b
        for t0, t1 in b["timed"]:
            others = [(a, z) for a, z in b["intervals"] if (a, z) != (t0, t1)]
            assert all(z <= t0 + 1e-6 or a >= t1 - 1e-6 for a, z in others), (t0, t1, others)
    assert any(r.metadata["prestarted"] for r in results)
    if find_ncu() is not None:  # later profiles find workers already started under ncu
        assert any(r.profiler_data.get("profile_prestarted") for r in results), [
            r.profiler_data for r in results]
    code = (CANDIDATES / "cuda_ok.py").read_text()
    cuda = ev.evaluate(code, "cuda", "cuda_ok")
    assert cuda.get_status() in (Status.CORRECT, Status.FASTER), cuda.eval_log
    built = list(ev.build_cache(code, "cuda").rglob("*.so"))
    assert built, "the CUDA extension was not kept in the build cache"
    if find_ncu() is not None:
        profile_s = cuda.profiler_data.get("profile_s")
        assert profile_s is not None, cuda.profiler_data
        print("build phase", cuda.metadata["phase_s"], "profile", profile_s)
        assert profile_s < cuda.metadata["phase_s"]["build"], (profile_s, cuda.metadata["phase_s"])
    ev.close()


@pytest.mark.gpu
def test_gpu_overlapping_checks_judge_every_candidate(tmp_path):
    """On the H200 with eval_config.overlap_checks: candidates' checks share the GPU, and each
    is still judged correct and timed (timing stability is the benchmark's to show)."""
    from concurrent.futures import ThreadPoolExecutor

    ev = _evaluator(tmp_path, build_timeout_s=300, overlap_checks=True)
    assert ev.probe().ok and ev.plan.checks_per_gpu >= 1
    good = (CANDIDATES / "good_gelu.py").read_text()
    codes = [good + f"\n# variant {i}\n" for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda ic: ev.evaluate(ic[1], "triton", f"o{ic[0]}"),
                                enumerate(codes)))
    for r in results:
        assert r.correctness and r.runtime > 0, r.eval_log
    busy = ev.gpu_busy()
    assert sum(b["turns"] for b in busy.values()) >= 8  # a check hold and a turn each
    ev.close()
