"""The memory plan (issue 12): made from a probe's footprint; comparisons in blocks agree with
whole-tensor ones; fingerprints see any change; a real probe measures a task's footprint."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
import torch

from openkernel.config import build_config
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.host.memplan import BUDGET_FACTOR, describe, plan_memory, retry_plan
from openkernel.evaluation.worker.correctness import (
    Fingerprints,
    blocks,
    compare_tensor,
    relative_error,
    tolerances_for,
)
from openkernel.records import Footprint, Hardware
from openkernel.task import load_task

GIB = 2**30
H200 = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=1,
                gpu_archs=("sm_90",), gpu_memory_bytes=141 * GIB)
CPU = Hardware(label="CPU", device="cpu", gpu_arch="cpu")


# -- the plan ---------------------------------------------------------------------------------
def test_plan_for_a_softmax_of_six_gib():
    """KernelBench level1/23_Softmax: 6 GiB in, 6 GiB out, nothing else."""
    fp = Footprint(input_bytes=6 * GIB, output_bytes=6 * GIB, peak_bytes=12 * GIB, measured=True)
    plan = plan_memory(fp, H200, max_workers_per_gpu=8)
    assert plan.footprint_bytes == 12 * GIB
    assert plan.budget_bytes == int(BUDGET_FACTOR * 12 * GIB) < 3 * 12 * GIB
    assert plan.precision_set == "main"  # inputs + a float64 run: 30 GiB, within 32.4
    # one at its peak (32 GiB), the others holding 12 GiB of task data and two contexts each
    assert 5 <= plan.workers_per_gpu <= 8
    assert plan.memory_fraction < 0.9  # a worker may not take the others' share
    assert plan.poison_bytes == 6 * GIB and not plan.keep_pristine
    assert "footprint 12 GiB" in describe(plan)


def test_a_sweeps_first_calls_side_by_side_stay_within_the_plan():
    """KernelBench level3/4 LeNet-5 (229 MB; a forward holds ~170 MB of activations): eight
    first calls at once took a worker to 6.6x its footprint; the plan lets two run together.
    A level-2 GEMM's first calls (32 MB of output each, 335 MB footprint) keep all eight."""
    from openkernel.evaluation.worker.sweep import side_by_side

    mb = 2**20
    lenet = plan_memory(Footprint(input_bytes=16 * mb, output_bytes=mb, param_bytes=mb,
                                  peak_bytes=229 * mb, measured=True), H200)
    assert lenet.first_calls_bytes == int((BUDGET_FACTOR - 1) * 229 * mb)
    assert side_by_side(8, 170 * mb, lenet.first_calls_bytes) == 2
    gemm = plan_memory(Footprint(input_bytes=32 * mb, output_bytes=32 * mb, param_bytes=256 * mb,
                                 peak_bytes=335 * mb, measured=True), H200)
    assert side_by_side(8, 32 * mb, gemm.first_calls_bytes) == 8
    assert side_by_side(8, 10 * GIB, gemm.first_calls_bytes) == 1  # never none
    assert side_by_side(8, 0, gemm.first_calls_bytes) == 8  # nothing measured: no bound
    assert side_by_side(8, 170 * mb, plan_memory(None, H200).first_calls_bytes) == 8


ONE_KERNEL = """
import triton
import triton.language as tl

@triton.jit
def scale(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)
"""
TWO_KERNELS = ONE_KERNEL + """
@triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def add(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)
"""


def test_a_sweeps_first_calls_all_start_at_once_where_none_shares_a_kernel_and_all_fit(tmp_path):
    """No first call alone (one compilation's time of every sweep) where each combination has
    one Triton kernel (nothing to find in the cache after another's) and the smaller set's
    calls, at four times the reference's there, fit the plan's share many times over."""
    from openkernel.evaluation.worker.sweep import all_at_once, triton_kernels
    from openkernel.evaluation.worker.task_runtime import load_module

    pytest.importorskip("triton")
    one = []
    for k in range(3):
        (tmp_path / f"one{k}.py").write_text(ONE_KERNEL.replace("* 2", f"* {k + 2}"))
        one.append(load_module(str(tmp_path / f"one{k}.py"), f"sweep_one_{k}"))
    (tmp_path / "two.py").write_text(TWO_KERNELS)
    two = load_module(str(tmp_path / "two.py"), "sweep_two")
    (tmp_path / "imports.py").write_text("from sweep_one_0 import scale\n")
    import sys

    sys.modules["sweep_one_0"] = one[0]
    try:
        borrowed = load_module(str(tmp_path / "imports.py"), "sweep_borrowed")
    finally:
        sys.modules.pop("sweep_one_0")
    assert [triton_kernels(m) for m in (*one, two, borrowed)] == [1, 1, 1, 2, 0]
    mb = 2**20
    # level1/45-like: 16 GiB in, a smaller set whose call holds 1 GiB beyond the weights
    big = plan_memory(Footprint(input_bytes=16 * GIB, output_bytes=GIB // 8,
                                peak_bytes=16 * GIB + GIB // 8, small_set={"sizes": {"b": 3}},
                                small_peak_bytes=GIB), H200)
    assert big.small_call_bytes == GIB
    assert all_at_once(one, 6, big, reduced=True)
    assert not all_at_once([*one, two], 6, big, reduced=True)  # a kernel may be shared
    assert not all_at_once(one, 6, big, reduced=False)  # the main set: measured first
    # a level-2 GEMM (256 MiB of weights): its smaller set's call is small beside the share
    gemm = plan_memory(Footprint(input_bytes=256 * mb, output_bytes=32 * mb, param_bytes=256 * mb,
                                 peak_bytes=560 * mb, small_set={"sizes": {"batch_size": 64}},
                                 small_peak_bytes=256 * mb + 16 * mb, measured=True), H200)
    assert gemm.small_call_bytes == 16 * mb and all_at_once(one, 6, gemm, reduced=True)
    assert not all_at_once(one, 16, gemm, reduced=True)  # 16 x 64 MiB floor: past 1.5 x 560 MiB
    no_small = plan_memory(Footprint(input_bytes=16 * mb, output_bytes=mb, param_bytes=mb,
                                     peak_bytes=229 * mb, measured=True), H200)
    assert no_small.small_call_bytes == 0 and not all_at_once(one, 6, no_small, reduced=True)


def test_plan_moves_the_float64_check_to_the_small_set_when_the_main_one_does_not_fit():
    """level1/45_Average_Pooling_2D: 16 GiB in, 0.13 GiB out."""
    big = dict(input_bytes=16 * GIB, output_bytes=GIB // 8, peak_bytes=16 * GIB + GIB // 8)
    with_small = plan_memory(Footprint(**big, small_set={"sizes": {"batch_size": 3}},
                                       small_peak_bytes=4 * GIB), H200)
    assert with_small.precision_set == "small"
    assert "over the plan's" in with_small.precision_why
    without = plan_memory(Footprint(**big), H200)
    assert without.precision_set == "skip" and "no smaller input set" in without.precision_why
    assert with_small.workers_per_gpu >= 2


def test_plan_keeps_a_pristine_copy_for_a_reference_that_writes_its_inputs():
    fp = Footprint(input_bytes=GIB, output_bytes=GIB, peak_bytes=2 * GIB, mutates_inputs=True)
    assert plan_memory(fp, H200).keep_pristine


def test_overlapping_checks_fit_the_memory_they_are_given():
    """checks_per_gpu workers at their checks' peak beside the others waiting, within the GPU."""
    usable = int(141 * GIB * 0.9)
    for fp in (Footprint(input_bytes=6 * GIB, output_bytes=6 * GIB, peak_bytes=12 * GIB),
               Footprint(input_bytes=GIB // 4, output_bytes=GIB // 4, peak_bytes=GIB // 2),
               Footprint(input_bytes=30 * GIB, output_bytes=10 * GIB, peak_bytes=45 * GIB)):
        plan = plan_memory(fp, H200, max_workers_per_gpu=8)
        w, c = plan.workers_per_gpu, plan.checks_per_gpu
        assert 1 <= c <= w
        ctx = 2 * (640 << 20)
        waiting = plan.footprint_bytes + fp.param_bytes + ctx
        assert c == 1 or c * (plan.budget_bytes + ctx) + (w - c) * waiting <= usable, (fp, plan)
    small = plan_memory(Footprint(input_bytes=GIB // 4, output_bytes=GIB // 4,
                                  peak_bytes=GIB // 2), H200, max_workers_per_gpu=8)
    six = plan_memory(Footprint(input_bytes=6 * GIB, output_bytes=6 * GIB, peak_bytes=12 * GIB),
                      H200, max_workers_per_gpu=8)
    assert small.checks_per_gpu == small.workers_per_gpu == 8  # small problems: all at once
    assert six.checks_per_gpu < six.workers_per_gpu  # 32 GiB checks: a few at a time
    assert plan_memory(None, CPU).checks_per_gpu >= 1


def test_a_huge_problem_gets_one_worker_per_gpu():
    fp = Footprint(input_bytes=30 * GIB, output_bytes=10 * GIB, peak_bytes=45 * GIB)
    plan = plan_memory(fp, H200, max_workers_per_gpu=8)
    assert plan.workers_per_gpu == 1 and plan.memory_fraction == 0.9


def test_retry_plan_is_smaller_and_exclusive():
    fp = Footprint(input_bytes=6 * GIB, output_bytes=6 * GIB, peak_bytes=12 * GIB,
                   small_set={"sizes": {"batch_size": 500}}, small_peak_bytes=GIB)
    first = plan_memory(fp, H200)
    retry = retry_plan(first, fp, H200)
    assert retry.level == 1 and retry.exclusive and retry.workers_per_gpu == 1
    assert retry.chunk_elements < first.chunk_elements
    assert retry.precision_set == "small"


def test_plan_for_a_level2_gemm_runs_the_float64_check_on_the_host():
    """KernelBench level 2 GEMMs (1024 x 8192 in, 8192 x 8192 weights): the float64 run on the
    device would hold the candidate's weights, the inputs and a float64 copy of everything the
    reference touches, ~2.8x the footprint, over the plan's 2.5x: with the reference's few FLOPs
    it runs on the host instead, and the device then holds only the seeds' float32 data."""
    mib = 1 << 20
    weights, x, y = 256 * mib + 32 * 1024, 32 * mib, 32 * mib
    fp = Footprint(param_bytes=weights, input_bytes=x, output_bytes=y,
                   peak_bytes=weights + x + 2 * y, measured=True)
    flops = 2 * 1024 * 8192 * 8192
    plan = plan_memory(fp, H200, flops=flops)
    device_run = weights + x + 2 * fp.peak_bytes  # the candidate's weights + inputs + float64 run
    assert 2.5 * fp.peak_bytes < device_run < 3 * fp.peak_bytes
    assert plan.precision_set == "main" and plan.precision_on_host
    assert "it runs on the host (1.4e+11 FLOPs)" in plan.precision_why
    # The task's float64 answer, made once without a candidate: ~2x the footprint and the
    # float32 inputs fit the device, and every worker may be at its checks at once.
    assert 2 * fp.peak_bytes + x <= 2.5 * fp.peak_bytes
    assert plan.checks_per_gpu >= plan.workers_per_gpu and plan.answer_on_device
    assert "float64 check on the main set (run on the host; the task's answer, made once, on " \
        "the device)" in describe(plan)
    # The seeds' checks: both models' weights, the inputs, two outputs and the poisoned block.
    seeds = 2 * weights + x + 3 * y
    assert seeds <= plan.budget_bytes
    # Unknown FLOPs (or too many for the host): no smaller set exists, so the check is skipped.
    assert plan_memory(fp, H200).precision_set == "skip"
    assert plan_memory(fp, H200, flops=1e13).precision_set == "skip"
    # A retry keeps the host run (it takes nothing of the device).
    assert retry_plan(plan, fp, H200, flops=flops).precision_on_host
    # Small weights: the device run fits, as before.
    small = plan_memory(Footprint(param_bytes=mib, input_bytes=x, output_bytes=y,
                                  peak_bytes=mib + x + 2 * y), H200, flops=flops)
    assert small.precision_set == "main" and not small.precision_on_host
    assert not small.answer_on_device  # (each check's own run is on the device already)
    # Inputs over half the footprint: the answer's float32 inputs beside its float64 run pass
    # 2.5x, so it is made on the host as the checks' runs are.
    heavy = Footprint(param_bytes=200 * mib, input_bytes=300 * mib, output_bytes=10 * mib,
                      peak_bytes=510 * mib)
    plan = plan_memory(heavy, H200, flops=flops)
    assert plan.precision_on_host and not plan.answer_on_device
    # On the CPU there is no device to make it on.
    assert not plan_memory(fp, CPU, flops=flops).answer_on_device


def test_float64_reference_swaps_the_weights_and_restores_them_bit_for_bit():
    from openkernel.evaluation.worker.integrity import float64_reference

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32).eval())
    model[1].running_mean.normal_()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(8, 64)
    expected = __import__("copy").deepcopy(model).double()(x.double())
    for host in (False, True):
        out = float64_reference(model, [x], host=host)
        assert out[0].dtype == torch.float64 and torch.equal(out[0], expected)
        after = model.state_dict()
        assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())
    assert x.dtype == torch.float32  # the inputs were upcast copies

    class NoDouble(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def forward(self, t):
            if self.w.dtype != torch.float32:
                raise TypeError("float32 only")
            return t * self.w

    odd = NoDouble()
    assert float64_reference(odd, [torch.ones(4)]) is None
    assert odd.w.dtype == torch.float32 and torch.equal(odd.w, torch.ones(4))


def test_cpu_plan_has_no_device_budget():
    plan = plan_memory(Footprint(input_bytes=1 << 20, output_bytes=1 << 20, peak_bytes=2 << 20), CPU,
                       max_workers_per_gpu=2)
    assert plan.budget_bytes == 0 and plan.precision_set == "main"
    line = describe(plan)  # the log's line: no GPU, so no per-GPU sharing to speak of
    assert "GPU" not in line and "overlapping" not in line and "memory limit" in line


# -- comparisons in blocks --------------------------------------------------------------------
def test_blocks_cover_every_element_once():
    for shape in [(), (0,), (5,), (3, 4), (2, 3, 5), (1, 1000), (7, 1, 3)]:
        t = torch.arange(math.prod(shape) or 0, dtype=torch.float64).reshape(shape)
        seen = torch.zeros_like(t)
        for idx in blocks(tuple(shape), chunk=4):
            assert t[idx].numel() <= 4 or t[idx].dim() == 0
            seen[idx] += 1
        assert bool((seen == 1).all())


def _cases():
    torch.manual_seed(0)
    ref = torch.randn(37, 53)
    near = ref + 1e-4 * torch.randn_like(ref)
    far = ref.clone()
    far[3, 7] += 1.0
    small = ref * 1e-5
    with_inf = ref.clone()
    with_inf[0, 0] = float("inf")
    inf_out = with_inf.clone()
    nan_out = ref.clone()
    nan_out[5, 5] = float("nan")
    flipped = with_inf.clone()
    flipped[0, 0] = -float("inf")
    return [("near", near, ref), ("far", far, ref), ("zeros vs small", torch.zeros_like(small), small),
            ("inf matched", inf_out, with_inf), ("nan", nan_out, ref),
            ("inf of the other sign", flipped, with_inf), ("inf for a number", with_inf, ref),
            ("a number for inf", ref, with_inf),
            ("non-contiguous", near.t().contiguous().t(), ref),
            ("transposed views", near.t(), ref.t()), ("half", near.half(), ref.half())]


@pytest.mark.parametrize("name,out,ref", _cases(), ids=[c[0] for c in _cases()])
def test_chunked_comparison_agrees_with_whole_tensor(name, out, ref):
    tol = tolerances_for(ref.dtype)
    whole = compare_tensor(out, ref, tol, "output 0", chunk=1 << 30)
    for chunk in (1, 7, 53, 100):
        part = compare_tensor(out, ref, tol, "output 0", chunk=chunk)
        assert part[0] == whole[0] and part[1] == whole[1]
        for key, value in whole[2].items():
            assert part[2][key] == pytest.approx(value, rel=1e-9, abs=1e-300)


def test_the_unmasked_pass_is_the_masked_one_where_every_element_is_finite():
    """Comparisons first run without looking for NaN or infinities (issue 22: about half the
    passes a block); on finite outputs that gives exactly the masked pass's figures, and where
    an element is not finite its sums of squares are not either, so the masked pass decides."""
    from openkernel.evaluation.worker.correctness import _relative_sums, _sums

    for name, out, ref in _cases():
        tol = tolerances_for(ref.dtype)
        fast, masked = _sums(out, ref, tol, 7, masked=False), _sums(out, ref, tol, 7, masked=True)
        if torch.isfinite(out).all() and torch.isfinite(ref).all():
            assert fast == masked, name
            assert _relative_sums(out, ref, 7, None, False) == \
                _relative_sums(out, ref, 7, None, True), name
        else:
            assert not (math.isfinite(fast[0][2]) and math.isfinite(fast[0][3])), name
            assert not all(map(math.isfinite, _relative_sums(out, ref, 7, None, False))), name


def test_relative_error_matches_the_definition():
    torch.manual_seed(1)
    ref = torch.randn(64, 129, dtype=torch.float64)
    out = ref + 1e-3 * torch.randn_like(ref)
    direct = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
    for chunk in (1, 10, 1 << 30):
        assert relative_error(out, ref, chunk) == pytest.approx(direct, rel=1e-10)
    assert relative_error(torch.zeros(3), torch.zeros(3)) == 0.0
    assert relative_error(torch.tensor([float("nan")]), torch.ones(1)) == math.inf
    rounded = relative_error(ref, ref, 33, through=lambda b: b.to(torch.float16))
    assert 1e-5 < rounded < 1e-3  # the rounding error of float16


def test_chunked_comparison_names_what_failed():
    cases = {name: compare_tensor(out, ref, tolerances_for(ref.dtype), "output 0", chunk=7)
             for name, out, ref in _cases()}
    assert [name for name, (ok, _, _) in cases.items() if ok] == [
        "near", "inf matched", "non-contiguous", "transposed views", "half"]
    assert cases["nan"][1] == "output 0: 1 NaN value(s) in the output (NaN never passes)"
    for name in ("inf of the other sign", "inf for a number", "a number for inf"):
        assert cases[name][1] == "output 0: infinities differ from the reference", name
    assert "1/1961 elements outside" in cases["far"][1]
    assert "relative error" in cases["zeros vs small"][1]


def test_fingerprints_are_the_sums_they_claim_modulo_2_64():
    fps = Fingerprints("cpu", chunk=1 << 20, seed=3)
    t = torch.randint(-(2**31), 2**31 - 1, ((1 << 20) + 5,), dtype=torch.int32)
    words = t.tolist()
    weights = fps.weights.tolist()
    plain = sum(words) % 2**64
    weighted = sum(w * weights[i % fps.WORDS] for i, w in enumerate(words)) % 2**64
    assert fps.of(t) == (4 * t.numel(), plain, weighted)


def test_fingerprints_see_any_change_and_nothing_else():
    fps = Fingerprints("cpu", chunk=1 << 20, seed=7)
    t = torch.randn(3, (1 << 20) + 11)  # more than one block, with a tail
    before = fps.of(t)
    assert fps.of(t) == before and fps.of(t.clone()) == before
    for flat_index in (0, 5, (1 << 20) + 3, t.numel() - 1):
        u = t.clone()
        u.view(-1)[flat_index] += 1e-7
        assert fps.of(u) != before
    view = t[:, :10]  # a view: the fingerprint is of the whole storage under it
    assert fps.of(view) == before
    odd = torch.arange(7, dtype=torch.uint8)  # not a whole number of 4-byte words
    assert fps.of(odd) != fps.of(odd + 1)


# -- a real probe -----------------------------------------------------------------------------
def _task(tmp_path, body: str):
    path = tmp_path / "problem.py"
    path.write_text(textwrap.dedent(body))
    return load_task(path)


def _probe(tmp_path, task):
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"memory_limit_gb": 8}})
    ev = Evaluator(task, config)
    try:
        return ev.probe(), ev.plan
    finally:
        ev.close()


def test_probe_measures_the_footprint_and_finds_a_small_set(tmp_path):
    task = _task(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=1)

        batch_size = 2048
        dim = 16384

        def get_inputs():
            return [torch.rand(batch_size, dim)]

        def get_init_inputs():
            return []
    """)
    probe, plan = _probe(tmp_path, task)
    assert probe.ok, probe.error
    fp = probe.memory
    assert fp.input_bytes == 2048 * 16384 * 4 == fp.output_bytes
    assert not fp.mutates_inputs and not fp.measured  # the CPU: estimated
    assert fp.peak_bytes == fp.input_bytes + fp.output_bytes
    sizes = fp.small_set["sizes"]
    assert set(sizes) <= {"batch_size", "dim"} and sizes
    shrunk = math.prod(sizes.get(n, v) for n, v in (("batch_size", 2048), ("dim", 16384)))
    assert 4 * shrunk <= 2048 * 16384  # at most a quarter of the inputs
    # as divisible as the full sizes: what Triton compiled for one serves the other
    assert all((v - {"batch_size": 2048, "dim": 16384}[n]) % 64 == 0 for n, v in sizes.items())
    assert plan.footprint_bytes == fp.peak_bytes
    assert "footprint" in probe.log


def test_a_small_input_with_large_data_gets_a_small_set_and_large_weights_do_not(tmp_path):
    """Data besides the weights past SMALL_DATA_FROM (here a 4 MB input whose output is 320 MB)
    gets a smaller set too, so a sweep's first calls fit side by side on it; weights that large
    do not (a smaller batch would change the GEMM's rows)."""
    from openkernel.evaluation.worker.probe import SMALL_DATA_FROM, SMALL_SET_FROM

    task = _task(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x.repeat(1, 80)

        batch_size = 1024
        dim = 1024

        def get_inputs():
            return [torch.rand(batch_size, dim)]

        def get_init_inputs():
            return []
    """)
    probe, _ = _probe(tmp_path, task)
    fp = probe.memory
    assert fp.input_bytes < SMALL_SET_FROM and fp.output_bytes > SMALL_DATA_FROM
    sizes = fp.small_set["sizes"]
    shrunk = math.prod(sizes.get(n, v) for n, v in (("batch_size", 1024), ("dim", 1024)))
    assert 4 * shrunk <= 1024 * 1024
    (tmp_path / "w").mkdir()
    weights = _task(tmp_path / "w", """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8192, 9000)

            def forward(self, x):
                return self.fc(x)

        batch_size = 16

        def get_inputs():
            return [torch.rand(batch_size, 8192)]

        def get_init_inputs():
            return []
    """)
    probe, _ = _probe(tmp_path / "w", weights)
    assert probe.memory.param_bytes > SMALL_DATA_FROM and probe.memory.small_set == {}


def test_probe_sees_a_reference_that_writes_its_inputs(tmp_path):
    task = _task(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x.relu_()

        def get_inputs():
            return [torch.randn(64, 64)]

        def get_init_inputs():
            return []
    """)
    probe, plan = _probe(tmp_path, task)
    assert probe.ok and probe.memory.mutates_inputs and plan.keep_pristine


@pytest.mark.gpu
def test_gpu_a_large_problem_stays_within_three_footprints(tmp_path):
    """2 GiB in, 2 GiB out: the worker's peak (without the fixed L2 flush buffer) is at most 3x
    the reference's own footprint, and the plan ran the float64 check."""
    task = _task(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.sigmoid(x)

        batch_size = 4096
        dim = 131072

        def get_inputs():
            return [torch.rand(batch_size, dim)]

        def get_init_inputs():
            return []
    """)
    code = (Path(__file__).parent / "candidates" / "good_relu.py").read_text().replace(
        "tl.maximum(x, 0.0)", "1.0 / (1.0 + tl.exp(-x))")
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"profile": False}})
    ev = Evaluator(task, config, bench_budget_s=0.2)
    try:
        probe = ev.probe()
        assert probe.ok and probe.memory.measured, probe.error
        assert probe.memory.input_bytes == 2 * GIB
        result = ev.evaluate(code, "triton", "sigmoid")
    finally:
        ev.close()
    assert result.correctness, result.eval_log
    memory = result.metadata["memory"]
    assert memory["peak_over_footprint"] <= 3.0, memory
    assert "precision check against float64" in result.eval_log


@pytest.mark.gpu
def test_gpu_a_level2_gemm_stays_within_three_footprints(tmp_path):
    """A level-2 GEMM (8192 x 8192 weights, 1024 rows): the worker's peak is at most 3x the
    reference's footprint, with the float64 check run (on the host, by the plan: the check's
    own run, not the task's answer made once, which would be on the GPU)."""
    from openkernel.generators.base import ProposalRequest
    from openkernel.generators.offline import OfflineGenerator

    task = _task(tmp_path, """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, in_features, out_features):
                super().__init__()
                self.gemm = nn.Linear(in_features, out_features)

            def forward(self, x):
                return torch.relu(self.gemm(x))

        batch_size = 1024
        in_features = 8192
        out_features = 8192

        def get_inputs():
            return [torch.rand(batch_size, in_features)]

        def get_init_inputs():
            return [in_features, out_features]
    """)
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"profile": False, "float64_once": False}})
    ev = Evaluator(task, config, bench_budget_s=0.2)
    try:
        probe = ev.probe()
        assert probe.ok and probe.memory.measured, probe.error
        assert ev.plan.precision_on_host, describe(ev.plan)
        proposal = OfflineGenerator().propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=0, branch=0, parent=None,
            best=None))
        result = ev.evaluate(proposal.code, "triton", "gemm")
    finally:
        ev.close()
    assert result.correctness, result.eval_log
    memory = result.metadata["memory"]
    assert memory["peak_over_footprint"] <= 3.0, memory
    assert "(the float64 run on the host): passed" in result.eval_log


def test_comparisons_leave_their_tensors_alone():
    torch.manual_seed(3)
    ref = torch.randn(40, 30, dtype=torch.float64)
    out = ref + 1e-3
    ref[0, 0], out[0, 0] = float("inf"), float("inf")
    ref_copy, out_copy = ref.clone(), out.clone()
    compare_tensor(out, ref, tolerances_for(ref.dtype), "output 0", chunk=64)
    relative_error(out, ref, 64)
    assert torch.equal(ref, ref_copy) and torch.equal(out, out_copy)


def test_a_smaller_size_keeps_the_full_sizes_divisibility_where_it_can():
    """The smaller set's sizes leave the full ones' remainder modulo 64, so products, sums and
    quotients by small strides of them are as divisible by 16 as at full size (Triton's
    specialization): the largest such size under the factor, never 1, never the size itself."""
    from openkernel.evaluation.worker.task_runtime import ALIKE, _alike

    for n, factor in ((256, 1 / 4), (16384, 1 / 2), (4096, 1 / 4), (393216, 1 / 4), (1000, 1 / 4)):
        m = _alike(n, factor)
        assert m is not None and 2 <= m <= n * factor and (n - m) % ALIKE == 0
        assert m + ALIKE > n * factor  # the largest one
        for stride in (2, 4):  # a convolution's or pooling's output size
            assert ((m - 3) // stride + 1) % 16 == ((n - 3) // stride + 1) % 16
    assert _alike(100, 1 / 4) is None and _alike(65, 1 / 2) is None and _alike(3, 1 / 2) is None
    assert _alike(100, 1 / 2) == 36


def test_the_smaller_set_never_shrinks_what_the_model_is_built_from(tmp_path):
    """Alike sizes are preferred, but a global that get_init_inputs reads (here the mask's
    length, which kernels traced at full length assume) is never shrunk for them: a batch of 16
    cannot shrink by 64, so it shrinks to an awkward size (2) where no other global can."""
    from openkernel.evaluation.worker.task_runtime import TaskRuntime

    path = tmp_path / "attention.py"
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, n_embd, max_seqlen):
                super().__init__()
                self.proj = nn.Linear(n_embd, n_embd)
                self.register_buffer("mask", torch.tril(torch.ones(max_seqlen, max_seqlen)))

            def forward(self, x):
                t = x.shape[1]
                return self.proj(x) * self.mask[:t, :t].sum(-1, keepdim=True)

        batch_size = 16
        max_seqlen = 256
        n_embd = 32

        def get_inputs():
            return [torch.rand(batch_size, max_seqlen, n_embd)]

        def get_init_inputs():
            return [n_embd, max_seqlen]
    """)
    path.write_text(source)
    rt = TaskRuntime(str(path), None, "cpu")
    model = rt.make_model(rt.ref.Model)
    assert rt.small_sizes(model, 16 * 256 * 32 * 4 // 4) == {"batch_size": 2}
    # where the batch can shrink by 64, its size is alike the full one
    rt.ref.batch_size = 256
    assert rt.small_sizes(model, 256 * 256 * 32 * 4 // 4) == {"batch_size": 64}
    # a length the model is not built from shrinks alike in place of a batch of 16
    path.write_text(source.replace("return [n_embd, max_seqlen]", "return [n_embd, 256]"))
    rt = TaskRuntime(str(path), None, "cpu")
    assert rt.small_sizes(model, 16 * 256 * 32 * 4 // 4) == {"max_seqlen": 64}
