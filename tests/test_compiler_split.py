"""Split reductions (compiler/kernels/split.py): few long rows, each shared by several programs.

BatchNorm's training form reduces (N, C, H, W) over dims (0, 2, 3): C rows of N*H*W columns,
too few programs for a GPU. Each case traces a small model, renders the candidate with tiny
launch parameters (LOOP_BLOCK 16, SPLIT 16: a row of ~100 columns is cut into 3-4 parts, the
last one ragged) and checks it against torch on the traced and a held-out shape, float64
where precision is the point. Direct rendering under the interpreter, no evaluator workers.
"""

from __future__ import annotations

import copy

import pytest
import torch

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedReduction, plan_for
from openkernel.generators.compiler.modelnew import render
from openkernel.records import TaskProbe
from openkernel.task import load_task

import rendered  # tests/rendered.py

PARAMS = {"BLOCK": 1024, "TILE": 4096, "MAX_FUSED": 1024, "LOOP_BLOCK": 16, "BLOCK_B": 16,
          "BLOCK_R": 8, "SPLIT": 16, "num_warps": 4, "num_stages": 2}


@pytest.fixture()
def _interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the interpreter's check (test_compiled_for_the_gpu runs the same on the GPU)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


class Forward(torch.nn.Module):
    def __init__(self, fn, inner: torch.nn.Module | None = None):
        super().__init__()
        self.fn, self.inner = fn, inner

    def forward(self, x):
        return self.fn(self, x)


def _candidate(tmp_path, model, example, name, params=PARAMS):
    """(the candidate's module, its ModelNew with the model's weights, the plan)."""
    plan = plan_for(None, trace_forward(model, [example]))
    assert not isinstance(plan, str), plan
    module = rendered.load(render(plan, params), tmp_path, name)
    candidate = module.ModelNew()
    candidate.load_state_dict(model.state_dict(), strict=False)
    return module, candidate, plan


def _bn(cls, channels):
    norm = cls(channels)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
        norm.running_mean.normal_()
        norm.running_var.uniform_(0.5, 2.0)
    return norm


def _gn():
    norm = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return norm


def _vector_sum_mean(m, x):
    return x.sum(), x.mean() * 2.0


# name -> (model, traced shape, held-out shape); rows are few and ~100 columns long
CASES = {
    "batch_norm_2d": (lambda: Forward(lambda m, x: m.inner(x) * 2.0, _bn(torch.nn.BatchNorm2d, 4)),
                      (3, 4, 6, 7), (2, 4, 5, 9)),
    "batch_norm_1d": (lambda: Forward(lambda m, x: m.inner(x), _bn(torch.nn.BatchNorm1d, 3)),
                      (5, 3, 23), (4, 3, 37)),
    "batch_norm_3d": (lambda: Forward(lambda m, x: m.inner(x), _bn(torch.nn.BatchNorm3d, 2)),
                      (2, 2, 3, 4, 5), (3, 2, 2, 5, 4)),
    "group_norm": (lambda: Forward(lambda m, x: m.inner(x), _gn()), (2, 4, 5, 9), (3, 4, 6, 7)),
    "vector_sum_mean": (lambda: Forward(_vector_sum_mean), (203,), (131,)),
    "frobenius_norm": (lambda: Forward(lambda m, x: x / torch.norm(x, p="fro")), (5, 41),
                       (3, 57)),
    "mean_var_dims_023": (lambda: Forward(lambda m, x: (x.mean(dim=(0, 2, 3)),
                                                        x.var(dim=(0, 2, 3)))), (3, 5, 6, 7),
                          (2, 5, 4, 11)),
    "max_of_long_rows": (lambda: Forward(lambda m, x: x.amax(dim=1) + x.amin(dim=1)), (3, 150),
                         (2, 99)),
    "max_of_long_columns": (lambda: Forward(lambda m, x: x.amax(dim=0)), (150, 3), (99, 5)),
}


@pytest.mark.usefixtures("_interpreter")
@pytest.mark.parametrize("name", list(CASES))
def test_few_long_rows_are_split(name, tmp_path):
    """Rows of mean 1000 and spread 0.5: the parts' Welford triples combine (Chan) to the
    batch statistics (a sum of squares combined as E[x^2] - E[x]^2 is off by tens of percent)."""
    _check(name, tmp_path, "cpu")


def _check(name: str, tmp_path, device: str) -> None:
    build, shape, held_out = CASES[name]
    torch.manual_seed(0)
    model = build().train()
    module, candidate, plan = _candidate(tmp_path, model, torch.randn(shape), name)
    assert [k.splits for k in plan.kernels] == [True], [k.split for k in plan.kernels]
    module._k0_reduction_partial = partial = rendered.Launches(module._k0_reduction_partial)
    candidate.to(device)
    for size in (shape, held_out):
        x = torch.randn(size) * 0.5 + 1000.0
        expected = copy.deepcopy(model).double()(x.double())
        got = candidate(x.to(device))
        got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.cpu(), e.float(), atol=5e-3, rtol=1e-4)
    assert partial.count == 2


@pytest.mark.usefixtures("_interpreter")
def test_many_rows_and_inference_batch_norm_are_not_split(tmp_path):
    """The split is chosen at call time: rows enough for SPLIT programs keep one program a row
    (same kernel, another shape); BatchNorm's inference form has no reduction at all."""
    torch.manual_seed(0)
    model = Forward(lambda m, x: x.amax(dim=1))
    module, candidate, _ = _candidate(tmp_path, model, torch.randn(3, 150), "rows")
    module._k0_reduction_partial = partial = rendered.Launches(module._k0_reduction_partial)
    x = torch.randn(40, 150)  # 40 rows >= SPLIT 16
    torch.testing.assert_close(candidate(x), x.amax(dim=1))
    assert partial.count == 0
    assert module._split(3, 150, 16) == (5, 32) and module._split(40, 150, 16) == (1, 150)
    assert module._split(3, 40, 16) == (1, 40)  # parts of fewer than two steps: not split
    bn = Forward(lambda m, x: m.inner(x), _bn(torch.nn.BatchNorm2d, 4)).eval()
    _, candidate, plan = _candidate(tmp_path, bn, torch.randn(3, 4, 6, 7), "bn_eval")
    assert [k.kind for k in plan.kernels] == ["pointwise"]
    x = torch.randn(2, 4, 5, 9)
    torch.testing.assert_close(candidate(x), bn(x), atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("_interpreter")
def test_statistics_of_normalised_rows_keep_whole_rows(tmp_path):
    """Two training BatchNorms, a ReLU between: the second's statistics need the first's
    (whose variance is folded out of its level, leaving that level empty); one kernel, rows
    not split, the reason given (the plan failed with an IndexError)."""
    torch.manual_seed(0)
    model = Forward(lambda m, x: m.inner[1](torch.relu(m.inner[0](x))),
                    torch.nn.Sequential(_bn(torch.nn.BatchNorm2d, 4), _bn(torch.nn.BatchNorm2d, 4)))
    _, candidate, plan = _candidate(tmp_path, copy.deepcopy(model).train(),
                                    torch.randn(3, 4, 6, 7), "two_bn")
    assert [k.kind for k in plan.kernels] == ["reduction"] and not plan.kernels[0].splits
    assert "needs another reduction's result first" in plan.kernels[0].split.why
    for size in ((3, 4, 6, 7), (2, 4, 5, 9)):
        x = torch.randn(size)
        torch.testing.assert_close(candidate(x), copy.deepcopy(model).train()(x), atol=1e-4,
                                   rtol=1e-4)


def test_what_keeps_whole_rows_says_why_and_split_is_tuned_where_it_applies(tmp_path):
    """argmax and softmax's dependent sum keep whole rows (the description says why); SPLIT is
    a free tunable only where a plan splits, and each candidate's description says its form."""
    path = tmp_path / "ref.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\ndef get_inputs():\n    return [torch.randn(2, 3)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    task = load_task(path)
    labels, free = {}, {}
    for name, fn in (("argmax", lambda m, x: torch.argmax(x, dim=1)),
                     ("softmax", lambda m, x: torch.softmax(x, dim=1)),
                     ("sum", lambda m, x: x.sum(dim=1))):
        probe = TaskProbe(ok=True, trace=trace_forward(Forward(fn), [torch.randn(3, 2000)]))
        match = FusedReduction().match(task, probe, "triton")
        points = match.family.space(True, "triton")
        free[name] = len({p.get("SPLIT") for p in points}) > 1
        labels[name] = {match.family.describe(match, p) for p in points}
    assert free == {"argmax": False, "softmax": False, "sum": True}
    assert all("rows never split: argmax keeps whole rows" in t for t in labels["argmax"])
    assert all("needs another reduction's result first" in t for t in labels["softmax"])
    assert {t.split("; ")[-1] for t in labels["sum"]} == {
        "rows never split (SPLIT 0)", "rows split over about 16 programs where the grid has fewer",
        "rows split over about 64 programs where the grid has fewer"}


@pytest.mark.gpu
def test_compiled_for_the_gpu(tmp_path):
    """The split kernels compiled by Triton for the GPU (a loop from a program's own offset,
    tl.reduce of the parts' Welford triples)."""
    for name in CASES:
        _check(name, tmp_path, "cuda")
