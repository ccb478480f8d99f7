"""Kernels of the same code share one @triton.jit function (modelnew.shared_functions).

A deep network's identical layers plan identical kernels that differ only in their names and
their tensors': KernelBench's level3/3_DeepNarrowMLP made 16 ReLU (or 16 GEMM) functions,
each a Triton compile of its own (~0.25 s on the H200). The candidate writes such code once
and launches it at every site with that site's arguments. Each case traces a small model,
renders both the library-backed and the all-Triton plan, counts the kernel functions and the
launch sites, and runs the candidate under the interpreter against torch, on the traced and a
held-out batch; kernels of other code (other static widths, other ops) keep their own.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn

from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import plan_for
from openkernel.generators.compiler.modelnew import render, shared_functions

import rendered  # tests/rendered.py

PARAMS = {"BLOCK": 1024, "TILE": 4096, "MAX_FUSED": 1024, "LOOP_BLOCK": 16, "BLOCK_B": 16,
          "BLOCK_R": 8, "SPLIT": 16, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4,
          "num_warps": 4, "num_stages": 2}
PLANS = {"library": True, "triton": False}


def _mlp(widths: list[int], acts=None) -> nn.Sequential:
    layers = []
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Linear(a, b), (acts or {}).get(k, nn.ReLU)()]
    return nn.Sequential(*layers)


def _functions(code: str) -> list[str]:
    """The kernels' @triton.jit functions (helpers such as _welford_combine left out)."""
    return re.findall(r"^@triton\.jit\ndef (_k\w+)\(", code, re.M)


def _sites(code: str) -> list[str]:
    """The functions launched by the forward, one entry a launch site."""
    forward = code[code.index("class ModelNew"):]
    return re.findall(r"\b(_k\w+)\[[^\]\n]*\]\(", forward)


def _candidate(model: nn.Module, shape, library: bool, tmp_path, name: str):
    """(the plan, the candidate's code, its module, its ModelNew with the model's weights)."""
    plan = plan_for(None, trace_forward(copy.deepcopy(model), [torch.randn(shape)]),
                    library=library)
    assert not isinstance(plan, str), plan
    code = render(plan, PARAMS)
    module = rendered.load(code, tmp_path, name)
    candidate = module.ModelNew()
    candidate.load_state_dict(model.state_dict(), strict=False)
    return plan, code, module, candidate


def _matches(candidate, model, shapes) -> None:
    for shape in shapes:  # (traced, held out)
        x = torch.randn(shape)
        with torch.no_grad():
            expected = copy.deepcopy(model)(x)
        torch.testing.assert_close(candidate(x), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", PLANS)
def test_identical_layers_launch_one_function(kind, interpreter, tmp_path):
    """Six Linear+ReLU layers of 64x64: six ReLU kernels (library plan) or six GEMMs with the
    ReLU in their epilogue (all-Triton plan), one function launched six times a forward."""
    torch.manual_seed(0)
    model = _mlp([64] * 7).eval()
    plan, code, module, candidate = _candidate(model, (8, 64), PLANS[kind], tmp_path, kind)
    names = [k.name for k in plan.triton]
    assert len(names) == 6 and {k.kind for k in plan.triton} == \
        {"pointwise" if kind == "library" else "matmul"}
    assert _functions(code) == names[:1]
    assert _sites(code) == names[:1] * 6
    assert set(shared_functions(plan.triton).values()) == {names[0]}
    assert f"# Also launched for {', '.join(names[1:3])}" in code  # (which kernels it serves)
    spy = rendered.Launches(getattr(module, names[0]))
    setattr(module, names[0], spy)
    _matches(candidate, model, [(8, 64), (5, 64)])
    assert spy.count == 12


@pytest.mark.parametrize("kind", PLANS)
def test_kernels_of_other_code_keep_their_own(kind, interpreter, tmp_path):
    """64 -> 128 -> 64 -> 64, GELU, GELU, Tanh (a library plan folds a ReLU into its GEMM). A
    pointwise kernel takes its size at the launch (n_elements): the two GELUs over 128 and 64
    columns share one, the Tanh has its own. A GEMM's epilogue indexes C with its static width
    (rm * 128 vs rm * 64): three GEMMs, three functions."""
    torch.manual_seed(0)
    model = _mlp([64, 128, 64, 64], {0: nn.GELU, 1: nn.GELU, 2: nn.Tanh}).eval()
    plan, code, _, candidate = _candidate(model, (8, 64), PLANS[kind], tmp_path, f"other_{kind}")
    names = [k.name for k in plan.triton]
    fns = shared_functions(plan.triton)
    if kind == "library":
        gelu_128, gelu_64, tanh = names
        assert fns == {gelu_128: gelu_128, gelu_64: gelu_128, tanh: tanh}
        assert _functions(code) == [gelu_128, tanh]
        assert _sites(code) == [gelu_128, gelu_128, tanh]
    else:
        assert fns == {name: name for name in names} and len(names) == 3
        assert _functions(code) == _sites(code) == names
        assert "rm * 128 + rn" in code and "rm * 64 + rn" in code
        assert "Also launched" not in code
    _matches(candidate, model, [(8, 64), (5, 64)])


@pytest.mark.parametrize("kind", PLANS)
def test_a_resnet_block_shares_convolutions_and_batch_norms(kind, interpreter, tmp_path):
    """Conv-BatchNorm-ReLU twice (training BatchNorm: few long rows, split): the two BatchNorm
    kernels' four functions (fused, looped, partial, split) are written once, and in the
    all-Triton plan the two convolutions' implicit GEMM too."""
    torch.manual_seed(0)
    block = [nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
    model = nn.Sequential(*block, *copy.deepcopy(block)).train()
    plan, code, module, candidate = _candidate(model, (2, 4, 8, 8), PLANS[kind], tmp_path,
                                               f"resnet_{kind}")
    kinds = ["reduction"] * 2 if kind == "library" else ["conv", "reduction"] * 2
    assert [k.kind for k in plan.triton] == kinds
    firsts = plan.triton[:len(kinds) // 2]
    assert [fns for fns in shared_functions(plan.triton).values()] == [k.name for k in firsts] * 2
    variants = ["_fused", "_looped", "_partial", "_split"]
    assert _functions(code) == [k.name + ("" if k.kind == "conv" else v)
                                for k in firsts for v in (variants if k.kind != "conv" else [""])]
    assert len(_sites(code)) == 2 * len(_functions(code))
    assert "# The 4 functions below are also launched for" in code
    bn = firsts[-1].name
    spy = rendered.Launches(getattr(module, bn + "_partial"))
    setattr(module, bn + "_partial", spy)
    _matches(candidate, model, [(2, 4, 8, 8), (3, 4, 6, 5)])
    assert spy.count == 4  # (both BatchNorms split, on both shapes)
