"""Triton's host-side modules built once per machine (worker/launchers.py, host/launchers.py).

On the CPU: the engine's check and keeping of reported signatures, a worker's copy of the
machine's folder into its own cache, the recorder's wrapping of a launcher constructor, and the
launchers job where there is no NVIDIA driver (it says why; workers build their own). On the
H200 (Triton 3.6 builds a launcher a signature): a candidate's launchers reported, built for
the machine, and copied into the next candidate's cache.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from openkernel.evaluation.host.launchers import LIMIT, Machine, valid
from openkernel.evaluation.worker import launchers


def test_signatures_are_checked_kept_and_read_again(tmp_path):
    assert valid(["*fp32", "*kbf16", "i32", "fp32", "constexpr", ["i64", "u1"]])
    for bad in ([], "i32", ["i32); system(\"x\""], ["I32"], ["*fp32", 3], [[["i32"]]],
                ["i32"] * 65, ["a" * 12]):
        assert not valid(bad), bad
    folder = tmp_path / "triton-host"
    machine = Machine(folder)
    assert machine.report([["*fp32", "*fp32", "i32", "constexpr"], ["nope!"]])
    assert not machine.report([["*fp32", "*fp32", "i32", "constexpr"]])  # nothing new
    assert not machine.report("not a list")
    assert json.loads((folder / "signatures.json").read_text()) == [
        ["*fp32", "*fp32", "i32", "constexpr"]]
    again = Machine(folder)  # a later run on the machine starts from them
    assert again.pending() == [["*fp32", "*fp32", "i32", "constexpr"]]
    again.done(again.pending())
    assert again.pending() == []
    types = ["*fp16", "*fp32", "*bf16", "i32", "i64", "fp32", "constexpr", "u1"]
    many = [[a, b, c] for a in types for b in types for c in types]  # 512
    again.report(many[:200])
    again.report(many[200:400])
    kept = Machine(folder).known
    assert len(kept) == LIMIT and kept[-1] == many[399]  # the latest kept


def test_a_worker_copies_the_machines_modules_into_its_own_cache(tmp_path):
    machine, own = tmp_path / "machine", tmp_path / "own"
    (machine / "abc").mkdir(parents=True)
    (machine / "abc" / "__triton_launcher.so").write_bytes(b"machine's")
    (machine / "tmp.pid_1_2").mkdir()  # a module being written: not copied
    (own / "def").mkdir(parents=True)
    (own / "def" / "cuda_utils.so").write_bytes(b"own")
    (machine / "def").mkdir()
    (machine / "def" / "cuda_utils.so").write_bytes(b"machine's")
    (machine / "signatures.json").write_text("[]")
    assert launchers.seed(machine, own) == 1
    copied = own / "abc" / "__triton_launcher.so"
    assert copied.read_bytes() == b"machine's" and not copied.is_symlink()
    copied.write_bytes(b"changed")  # the worker's copy, not the machine's file
    assert (machine / "abc" / "__triton_launcher.so").read_bytes() == b"machine's"
    assert (own / "def" / "cuda_utils.so").read_bytes() == b"own"  # its own entry kept
    assert not (own / "tmp.pid_1_2").exists() and not (own / "signatures.json").exists()
    assert launchers.seed(tmp_path / "absent", own) == 0


def test_the_recorder_keeps_each_launcher_signature_once(monkeypatch):
    """Triton 3.6's launcher class, as the H200 has it, stood in for (this machine's Triton
    has a generic launcher and no ``make_launcher``: there the recorder wraps nothing)."""
    made = []

    class CudaLauncher:
        def __init__(self, src, metadata):
            made.append(src)

    driver = SimpleNamespace(CudaLauncher=CudaLauncher, make_launcher=lambda *a: "")
    monkeypatch.setattr(launchers, "_driver", lambda: driver)
    recorder = launchers.Recorder().install()
    plain = SimpleNamespace(tensordesc_meta=None)
    src = SimpleNamespace(signature={"x": "*fp32", "n": "i32", "t": ("i64", "i64"),
                                     "B": "constexpr"})
    CudaLauncher(src, plain)
    CudaLauncher(src, plain)
    CudaLauncher(SimpleNamespace(signature={"d": "tensordesc<fp32[64]>"}),
                 SimpleNamespace(tensordesc_meta=[{}]))  # a TMA descriptor: not shared
    assert len(made) == 3  # Triton's own constructor still runs every time
    assert recorder.signatures == [["*fp32", "i32", ["i64", "i64"], "constexpr"]]
    assert valid(recorder.signatures[0])


def test_where_there_is_no_nvidia_driver_the_job_says_why(tmp_path):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a machine with an NVIDIA driver builds them (the GPU test)")
    result = launchers.build(tmp_path / "machine", [["*fp32", "i32"]])
    assert "built" not in result and result["error"], result


@pytest.mark.gpu
def test_on_the_gpu_launchers_are_built_for_the_machine_and_copied_to_the_next_worker(tmp_path):
    """On the H200: a Triton candidate's launcher signature reported and built in the machine's
    folder with Triton's driver utilities; the next candidate's own cache holds copies."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.schemas import Status
    from openkernel.task import load_task

    root = Path(__file__).resolve().parents[1]
    config = build_config({"eval_config": {"correctness_seeds": 1, "profile": False},
                           "paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")}})
    ev = Evaluator(load_task(root / "examples" / "gelu"), config)
    try:
        assert ev.probe().ok
        folder = ev.launchers.folder
        result = ev.evaluate((root / "tests" / "candidates" / "good_gelu.py").read_text(),
                             "triton", "first")
        assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
        deadline = time.monotonic() + 120
        while (ev.launchers.building or ev.launchers.pending()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not ev.launchers.broken, ev.launchers.broken
        assert list(folder.glob("*/cuda_utils*.so")), list(folder.iterdir())
        if launchers.generates_launchers():
            assert ev.launchers.known and list(folder.glob("*/__triton_launcher*.so"))
        # another candidate (another build folder): the machine's modules copied in
        code = (root / "tests" / "candidates" / "good_gelu.py").read_text() + "\n# another\n"
        result = ev.evaluate(code, "triton", "second")
        assert result.get_status() in (Status.CORRECT, Status.FASTER), result.eval_log
        caches = list(ev.build_cache_root.glob("*/torch-*/triton"))
        assert len(caches) == 2, caches
        newest = max(caches, key=lambda p: p.stat().st_mtime)
        assert list(newest.glob("*/cuda_utils*.so")), list(newest.iterdir())
    finally:
        ev.close()
