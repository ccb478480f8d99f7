"""The one-pass comparison kernel (worker/compare_kernel.py, ``eval_config.fused_comparison``):
compiled for real with NVRTC and kept per machine here; on the H200 its verdicts and counts
equal the PyTorch passes' on crafted and random outputs, and a judged candidate uses it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from openkernel.evaluation.worker import correctness
from openkernel.evaluation.worker.compare_kernel import NAMES, self_check_values

ROOT = Path(__file__).resolve().parents[1]
TOL = {"atol": 1e-2, "rtol": 1e-2, "max_rel_error": 1e-3}


def test_the_kernel_compiles_with_nvrtc_and_its_cubin_is_kept_for_the_machine(tmp_path, monkeypatch):
    pytest.importorskip("cuda.core")
    from openkernel.evaluation.worker import compare_kernel
    from openkernel.nvrtc.kernel import _cuda_core

    data = compare_kernel.cubin("sm_90", str(tmp_path / "cache"))
    kept = list((tmp_path / "cache").glob("compare-sm_90-*.cubin"))
    assert len(kept) == 1 and kept[0].read_bytes() == data and len(data) > 1000
    for name in NAMES.values():  # extern "C": the names as written
        assert name.encode() in data
    cc = _cuda_core()

    def no_compiling(*_args, **_kwargs):
        raise AssertionError("compiled again: the machine's cubin was not read")

    monkeypatch.setattr(cc, "Program", no_compiling)
    assert compare_kernel.cubin("sm_90", str(tmp_path / "cache")) == data


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_self_check_meets_ties_infinities_and_nan(dtype):
    """What the kernel is checked against before use must be able to tell: elements on both
    sides of the bound, infinity mismatches (and a match), a NaN."""
    out, ref = self_check_values(dtype, "cpu", finite=True)
    (n_nan, n_inf, out_sq, den, num, bad), peak = correctness._sums(out, ref, TOL, 1 << 12, True)
    assert n_nan == 0 and n_inf == 0 and 100 < bad < out.numel() // 2
    assert all(math.isfinite(v) for v in (out_sq, den, num, peak))
    out, ref = self_check_values(dtype, "cpu", finite=False)
    (n_nan, n_inf, *_), _ = correctness._sums(out, ref, TOL, 1 << 12, True)
    assert n_nan == 1 and n_inf == 2


def test_a_disagreement_is_named_and_a_reordered_sum_is_not_one():
    want = ([0.0, 0.0, 2.0, 3.0, 1e-4, 5.0], 0.5)
    assert correctness._disagreement(([0.0, 0.0, 2.0 * (1 + 1e-13), 3.0, 1e-4, 5.0], 0.5),
                                     want, finite=True) == ""
    assert "outside 4.0 against 5.0" in correctness._disagreement(
        ([0.0, 0.0, 2.0, 3.0, 1e-4, 4.0], 0.5), want, finite=True)
    assert "largest difference" in correctness._disagreement(([0.0, 0.0, 2.0, 3.0, 1e-4, 5.0], 0.4),
                                                             want, finite=True)
    assert correctness._disagreement(None, want, finite=True) == "no figures"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU side (a GPU makes the kernel)")
def test_without_a_gpu_the_pytorch_passes_compare_and_say_why():
    steps: list[str] = []
    assert correctness.prepare("cpu", None, steps.append).startswith(
        "PyTorch passes (no one-pass kernel: ")
    assert correctness._kernel is None
    # the steps it got through are named (the worker times each): not the kernel's loading
    assert steps == ["importing cuda.core", "the self-check's figures"]


def test_the_self_checks_figures_are_made_once_on_the_cpu():
    """The four sets' values and masked-pass figures, equal to the pass run afresh on freshly
    made values, made once a worker."""
    sets = correctness.self_check_sets()
    assert set(sets) == {(d, f) for d in (torch.float32, torch.float64) for f in (True, False)}
    for (dtype, finite), (out, ref, want) in sets.items():
        fresh_out, fresh_ref = self_check_values(dtype, "cpu", finite)
        assert torch.equal(out.nan_to_num(), fresh_out.nan_to_num()) and torch.equal(ref, fresh_ref)
        assert correctness._sums(out, ref, correctness.SELF_CHECK_TOL, 1 << 12, True)[0][5] == want[0][5]
        assert want[0][1] == (0 if finite else 2)  # the infinities in different places
    assert correctness.self_check_sets() is sets


def test_the_self_checks_figures_are_made_on_one_cpu_thread(monkeypatch):
    """A bench's workers share the cores: the sets' small operations run on one thread (each a
    parallel region waiting for every thread otherwise), and torch's setting is put back."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = []
    real = correctness._sums

    def sums(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(correctness, "_sums", sums)
    monkeypatch.setattr(correctness, "_self_check", {})
    try:
        correctness.self_check_sets()
        assert seen == [1, 1, 1, 1] and torch.get_num_threads() == 2
        seen.clear()
        correctness._self_check.clear()
        correctness.self_check_sets(threads=None)  # as they are (benchmarks/compare_prepare.py)
        assert seen == [2, 2, 2, 2]
    finally:
        torch.set_num_threads(before)


def test_a_kernel_made_before_the_job_is_the_jobs(monkeypatch, tmp_path):
    """``correctness.ahead`` (a GPU worker's preload, where the executor named the machine's
    cache: the run compares with the kernel) imports cuda.core, makes the sets and makes and
    checks the kernel; the job's ``prepare`` takes its answer as it is, saying so."""
    import sys

    monkeypatch.setattr(correctness, "_prepared", {})
    monkeypatch.setattr(correctness, "_self_check", {})
    monkeypatch.delitem(sys.modules, "cuda.core", raising=False)
    made = []
    real = correctness.prepare

    def prepare(device, cache_dir, step=None):
        made.append((device, cache_dir))
        return real(device, cache_dir, step)

    monkeypatch.setattr(correctness, "prepare", prepare)
    said = correctness.ahead(str(tmp_path))
    assert made == [("cuda", str(tmp_path))]
    assert "cuda.core" in sys.modules and len(correctness._self_check) == 4
    answer = said.rsplit(", made in ", 1)[0]
    assert answer == correctness._prepared["cuda"]
    # here no GPU: the answer names why the PyTorch passes compare (on the H200: the kernel)
    assert answer == "one-pass kernel" if torch.cuda.is_available() else answer.startswith(
        "PyTorch passes (no one-pass kernel: ")
    steps: list[str] = []
    assert real("cuda", str(tmp_path / "elsewhere"), steps.append) == answer
    assert steps == ["made before the job"] and len(made) == 1


def _cases(device: str):
    g = torch.Generator(device="cpu").manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        for n in (1, 255, 257, 1 << 20, (1 << 24) + 3):
            ref = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
            yield f"{dtype} n={n} equal", ref.clone(), ref
            noisy = ref + (torch.randn(n, generator=g, dtype=torch.float64) * 1e-3).to(dtype)
            yield f"{dtype} n={n} close", noisy, ref
            far = ref + (torch.randn(n, generator=g, dtype=torch.float64) * 0.3).to(dtype)
            yield f"{dtype} n={n} far", far, ref
        yield f"{dtype} zeros", torch.zeros(1000, dtype=dtype), torch.randn(1000, generator=g).to(dtype) * 1e-3
        for finite in (True, False):
            out, ref = self_check_values(dtype, "cpu", finite)
            yield f"{dtype} crafted finite={finite}", out, ref
        ref = torch.randn(64, 33, generator=g).to(dtype)
        yield f"{dtype} 2-d", ref + 1e-4, ref
        nan_ref = torch.randn(500, generator=g).to(dtype)
        nan_ref[7] = float("nan")
        yield f"{dtype} NaN in the reference", nan_ref.clone(), nan_ref


@pytest.mark.gpu
def test_on_the_gpu_the_kernel_gives_the_pytorch_passes_verdicts_and_figures(tmp_path):
    assert correctness.prepare("cuda", str(tmp_path)) == "one-pass kernel"
    # the self-check's figures, made on the CPU, are the GPU passes' (sums in another order)
    for (dtype, finite), (out, ref, want) in correctness.self_check_sets().items():
        out, ref = out.cuda(), ref.cuda()
        on_gpu = correctness._sums(out, ref, correctness.SELF_CHECK_TOL, 1 << 12, True)
        assert correctness._disagreement(on_gpu, want, finite) == "", (dtype, finite)
    kernel = correctness._kernel
    try:
        for name, out, ref in _cases("cuda"):
            out, ref = out.cuda(), ref.cuda()
            correctness._kernel = kernel
            fused = correctness.compare_tensor(out, ref, TOL, "output 0")
            correctness._kernel = None
            plain = correctness.compare_tensor(out, ref, TOL, "output 0")
            assert fused[:2] == plain[:2], (name, fused, plain)
            for key in ("rel_error", "out_norm", "ref_norm"):
                a, b = fused[2].get(key), plain[2].get(key)
                assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) \
                    or (math.isnan(a) and math.isnan(b)), (name, key, a, b)
            if plain[2]:
                assert fused[2]["max_abs_error"] == plain[2]["max_abs_error"], name
        # a strided view and a float16 output: the PyTorch passes answer
        correctness._kernel = kernel
        t = torch.randn(64, 64, device="cuda")
        assert not kernel.fits(t.t(), t.t()) and correctness._one_pass(t.t(), t.t(), TOL) is None
        h = t.half()
        assert correctness._one_pass(h, h, TOL) is None
    finally:
        correctness._kernel = None


@pytest.mark.gpu
def test_on_the_gpu_a_candidate_is_judged_with_the_kernel(tmp_path):
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.task import load_task

    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch"),
                                     "build_cache_dir": str(tmp_path / "builds")},
                           "eval_config": {"fused_comparison": True}})
    ev = Evaluator(load_task(ROOT / "examples" / "gelu"), config, bench_budget_s=0.1)
    try:
        good = ev.evaluate((ROOT / "tests" / "candidates" / "good_gelu.py").read_text(), "triton", "good")
        wrong = ev.evaluate((ROOT / "tests" / "candidates" / "wrong.py").read_text(), "triton", "wrong")
    finally:
        ev.close()
    assert good.correctness and good.metadata["comparison"] == "one-pass kernel", good.eval_log
    assert not wrong.correctness and wrong.metadata["comparison"] == "one-pass kernel", wrong.eval_log
    for judged in (good, wrong):  # each worker made the kernel before its job: the job took it
        assert judged.metadata["worker"]["compare_kernel"].startswith("one-pass kernel, made in ")
        assert "one-pass kernel: made before the job" in judged.metadata["memory"]["spent_s"]
        assert judged.metadata["worker"]["warm"].endswith(" s")  # its own kernels launched too
