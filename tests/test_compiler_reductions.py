"""The compiler's long-row norms (Welford) and middle-dim reductions, run under the interpreter.

Each case traces a small model, plans it, renders the candidate module with launch parameters
that force the path under test, and runs its ``ModelNew`` against torch (float64 where
precision is the point). Direct rendering, no evaluator workers: a few seconds in all.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedReduction, plan_for
from openkernel.generators.compiler.modelnew import render
from openkernel.records import TaskProbe
from openkernel.task import load_task

import rendered  # tests/rendered.py

# MAX_FUSED at its smallest value: rows longer than 1024 take the looped kernels; small middle
# tiles, so R and B below are not multiples of them.
PARAMS = {"BLOCK": 1024, "TILE": 4096, "MAX_FUSED": 1024, "LOOP_BLOCK": 128, "BLOCK_B": 16,
          "BLOCK_R": 8, "num_warps": 4, "num_stages": 2}


@pytest.fixture()
def _interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the interpreter's check (test_compiled_for_the_gpu runs the same on the GPU)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


class Forward(torch.nn.Module):
    """A model around a function of its input, with an optional submodule (a norm)."""

    def __init__(self, fn, inner: torch.nn.Module | None = None):
        super().__init__()
        self.fn, self.inner = fn, inner

    def forward(self, x):
        return self.fn(self, x)


def _candidate(tmp_path, model: torch.nn.Module, example: torch.Tensor, name: str):
    """(the candidate's ModelNew with the model's weights, its source)."""
    plan = plan_for(None, trace_forward(model, [example]))
    assert not isinstance(plan, str), plan
    source = render(plan, PARAMS)
    candidate = rendered.load(source, tmp_path, name).ModelNew()
    candidate.load_state_dict(model.state_dict(), strict=False)
    return candidate, source


def _function(source: str, name: str) -> str:
    match = re.search(rf"^def {name}\(.*?(?=^\S)", source, re.S | re.M)
    assert match, f"no {name} in\n{source}"
    return match.group(0)


def _norm(cls, *args):
    norm = cls(*args)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return norm


# name -> (model, traced shape, held-out shape, loops of the looped kernel: statistics + outputs)
NORMS = {
    "layer_norm": (lambda: Forward(lambda m, x: m.inner(x), _norm(torch.nn.LayerNorm, 1100)),
                   (3, 1100), (2, 1100), 2),
    "group_norm": (lambda: Forward(lambda m, x: m.inner(x) * 2.0, _norm(torch.nn.GroupNorm, 2, 4)),
                   (2, 4, 10, 60), (1, 4, 7, 90), 2),
    "std": (lambda: Forward(lambda m, x: torch.std(x, dim=-1) + x.mean(dim=-1)),
            (3, 1100), (2, 1500), 1),
}


@pytest.mark.usefixtures("_interpreter")
@pytest.mark.parametrize("name", list(NORMS))
def test_looped_norms_read_a_row_twice_and_keep_a_small_variance(name, tmp_path):
    """Rows of mean 1000 and spread 0.5: E[x^2] - E[x]^2 in fp32 is off by tens of percent
    there (LayerNorm's output by ~0.9); Welford's statistics keep it to float rounding."""
    _check_norm(name, tmp_path, "cpu")


def _check_norm(name: str, tmp_path, device: str) -> None:
    build, shape, held_out, loops = NORMS[name]
    torch.manual_seed(0)
    model = build().eval()
    candidate, source = _candidate(tmp_path, model, torch.randn(shape), name)
    looped = _function(source, "_k0_reduction_looped")
    assert looped.count("for start in range") == loops, looped
    assert "tl.reduce(" in looped and "def _welford_combine(" in source
    candidate.to(device)
    for size in (shape, held_out):
        x = torch.randn(size) * 0.5 + 1000.0
        expected = copy.deepcopy(model).double()(x.double()).float()
        torch.testing.assert_close(candidate(x.to(device)).cpu(), expected, atol=5e-3, rtol=1e-4)


def _mid_sum_mean_max_argmax(m, x):
    return x.sum(dim=1), x.mean(dim=1), torch.max(x, dim=1).values, torch.argmax(x, dim=1)


# name -> (function, traced shape, held-out shape): R and B off the tiles (BLOCK_R 8, BLOCK_B 16)
MIDDLE = {
    "dim1_of_3d": (_mid_sum_mean_max_argmax, (3, 37, 23), (2, 45, 17)),
    "dim1_of_4d": (lambda m, x: (x.amin(dim=1), torch.argmin(x, dim=1)), (2, 19, 5, 7),
                   (3, 9, 4, 3)),
    "dims12_keepdim": (lambda m, x: x.sum(dim=(1, 2), keepdim=True) * 0.5, (2, 5, 7, 20),
                       (1, 3, 11, 9)),
    "dim0_softmax": (lambda m, x: torch.softmax(x * 1.5, dim=0), (33, 21), (40, 5)),
}


@pytest.mark.usefixtures("_interpreter")
@pytest.mark.parametrize("name", list(MIDDLE))
def test_middle_dim_reductions_are_retiled(name, tmp_path):
    """A reduction over dims followed by kept ones is one [BLOCK_C, ROWS] tile kernel, coalesced
    along the kept dims after them, reduced over axis 0; correct on ragged edges."""
    _check_middle(name, tmp_path, "cpu")


def _check_middle(name: str, tmp_path, device: str) -> None:
    fn, shape, held_out = MIDDLE[name]
    torch.manual_seed(0)
    model = Forward(fn)
    candidate, source = _candidate(tmp_path, model, torch.randn(shape), name)
    assert "_middle[" in source and "_fused" not in source and "_looped" not in source, source
    middle = _function(source, "_k0_reduction_middle")
    assert "[:, None]" in middle and "axis=0" in middle
    # one offset over the contiguous inner index, whatever the rank
    assert re.search(r"= outer \* .* \+ col \* .* \+ inner\n", middle), middle
    for size in (shape, held_out):
        x = torch.randn(size)
        got, expected = candidate(x.to(device)), model(x)
        got = tuple(g.cpu() for g in got) if isinstance(got, tuple) else got.cpu()
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_compiled_for_the_gpu(tmp_path):
    """The same Welford and middle-tile kernels compiled by Triton for the GPU (tl.reduce over
    a tuple with keep_dims has run only under the interpreter before)."""
    for name in NORMS:
        _check_norm(name, tmp_path, "cuda")
    for name in MIDDLE:
        _check_middle(name, tmp_path, "cuda")


def test_middle_tile_tunables_are_free_only_where_a_plan_has_a_middle_reduction(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\ndef get_inputs():\n    return [torch.randn(2, 3)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    task = load_task(path)
    free = {}
    for name, fn, shape in (("middle", _mid_sum_mean_max_argmax, (3, 37, 23)),
                            ("rows", lambda m, x: torch.softmax(x, dim=-1), (3, 37))):
        probe = TaskProbe(ok=True, trace=trace_forward(Forward(fn), [torch.randn(shape)]))
        match = FusedReduction().match(task, probe, "triton")
        family = match.family
        points = family.space(True, "triton")
        free[name] = {t for t in ("BLOCK_B", "BLOCK_R", "TILE")
                      if len({p.get(t) for p in points}) > 1}
        assert len({tuple(sorted(p.items())) for p in points}) == len(points)
    assert free == {"middle": {"BLOCK_B", "BLOCK_R"}, "rows": {"TILE"}}
