"""The MAP-Elites archive spreads (issue 25, points 1 and 6): feature cells vary within every
kernel family the offline generator writes and for hand-written code, and the default job
(configs/default.yaml on examples/gelu) proposes distinct candidates in every iteration over
several cells. The generator and the archive are the real ones; nothing is evaluated here (the
engine's own runs are in test_engine_e2e.py), so the verdicts the archive needs to pick parents
are stand-ins, said so where they are made."""

from __future__ import annotations

import random
import textwrap

import pytest
import torch

from openkernel.config import load_config
from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.base import ProposalRequest, param_key
from openkernel.generators.offline import OfflineGenerator
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.search.archive import Archive
from openkernel.search.features import cell_of, kernel_features
from openkernel.search.occupancy import grid, occupancy
from openkernel.task import load_task
from test_generators_offline import _probe as _recorded

CPU = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu", interpreter=True)


def recorded_probe(model, inputs) -> TaskProbe:
    class _Ref:  # _recorded builds the model from a reference module
        Model = staticmethod(lambda: model)

    return _recorded(_Ref, inputs)


def _probe(model, inputs, traced: bool) -> TaskProbe:
    probe = recorded_probe(model, inputs)  # the aten ops the reference ran, on the CPU
    probe.trace = trace_forward(model, inputs) if traced else None
    return probe


def _family_cells(task, probe, backend="triton", n=12) -> tuple[str, set]:
    """The template's name and the cells its candidates can land in: start points and
    mutations from them, every point of their sweeps (the winner of a sweep is stored)."""
    gen = OfflineGenerator()
    rng = random.Random(0)
    cells, parents, name = set(), [], ""
    for i in range(n):
        parent = parents[i % len(parents)] if i >= 4 and parents else None
        p = gen.propose(ProposalRequest(task=task, probe=probe, backend=backend,
                                        iteration=int(i >= 4), branch=i % 4, parent=parent,
                                        best=None, rng=rng))
        if p.failed == "exhausted" and i:  # a small space (the CPU's choices) is spent
            break
        assert p.code and not p.failed, p.log
        cells.add(cell_of(kernel_features(p.code, p.params)))
        cells |= {cell_of(kernel_features(v.code, {**v.params, "template": p.params["template"]}))
                  for v in p.variants}
        name = p.params["template"]
        prog = Program(id=f"p{i}", code=p.code, metadata={"params": p.params})
        parents.append(prog)
    return name, cells


@pytest.mark.parametrize("example", ["gelu", "softmax", "matmul_bias_relu"])
def test_matched_templates_spread_over_cells(example, examples_dir):
    task = load_task(examples_dir / example)
    ns: dict = {}
    exec(compile(task.reference_code, str(task.reference_path), "exec"), ns)
    inputs = {"gelu": [torch.randn(64, 1024)], "softmax": [torch.randn(16, 512)],
              "matmul_bias_relu": [torch.randn(64, 128), torch.randn(128, 96),
                                   torch.randn(96)]}[example]
    model = ns["Model"](*ns["get_init_inputs"]())
    # gelu: the hand-written elementwise family; the others the compiler's, from the trace
    name, cells = _family_cells(task, _probe(model, inputs, traced=example != "gelu"))
    assert len(cells) >= 3, (name, cells)
    assert all(c[0] in ("template", "library") and c[2] >= 0 and c[3] > 0 for c in cells), cells
    if example == "matmul_bias_relu":  # the GEMM in Triton, or cuBLAS with Triton around it
        assert {c[0] for c in cells} == {"template", "library"}, cells


TRACED = {
    "fused_pointwise": ("return torch.relu(x * 2.0) - x.sigmoid()", "torch.randn(37, 100)"),
    "fused_reduction": ("return torch.relu(x).sum(-1) / x.shape[-1]", "torch.randn(13, 777)"),
    "fused_matmul": ("return torch.relu(x @ self.w)", "torch.randn(40, 48)"),
}


@pytest.mark.parametrize("family", sorted(TRACED))
def test_traced_templates_spread_over_cells(family, tmp_path):
    forward, inputs = TRACED[family]
    init = "self.w = nn.Parameter(torch.randn(48, 40))" if "self.w" in forward else "pass"
    path = tmp_path / f"{family}.py"
    path.write_text(textwrap.dedent(f"""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init}

            def forward(self, x):
                {forward}


        def get_inputs():
            return [{inputs}]


        def get_init_inputs():
            return []
        """))
    task = load_task(path)
    ns: dict = {}
    exec(compile(task.reference_code, str(path), "exec"), ns)
    torch.manual_seed(0)
    probe = _probe(ns["Model"](), ns["get_inputs"](), traced=True)
    name, cells = _family_cells(task, probe, n=10)
    assert name == family
    assert len(cells) >= 2, cells


def test_hand_written_and_library_code_have_their_own_kinds():
    triton_hand = "k[grid](x, y, n, BLOCK_SIZE=1024, num_warps=4)"
    assert kernel_features(triton_hand) == {"kind": "hand", "launches": 1, "tile": 10, "warps": 4}
    two = "a_k[g](x, BLOCK=256)\nb_k[g](y, BLOCK=256)\n"
    assert kernel_features(two)["launches"] == 2
    library = "y = torch.mm(a, b)\nepilogue[grid](y, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)"
    f = kernel_features(library)
    assert f["kind"] == "library" and f["launches"] == 2 and f["tile"] == 12  # 64 x 64, not K
    cuda = "act_kernel<float><<<blocks, 256, 0, s>>>(x);\nact_kernel<__half><<<blocks, 256>>>(x);"
    assert kernel_features(cuda) == {"kind": "hand", "launches": 1, "tile": 8, "warps": 8}
    seed = "from torch._inductor.runtime import triton_heuristics\ntriton_poi_0.run(x, y)"
    assert kernel_features(seed)["kind"] == "inductor"
    # what the offline generator writes: a seed rewritten without Inductor, a library-backed plan
    rewritten = "aten = torch.ops.aten\nbuf0 = aten.mm(x, w)\ntriton_poi_0[grid](buf0, XBLOCK=64)"
    assert kernel_features(rewritten, {"template": "inductor_seed", "K0": 1})["kind"] == "inductor"
    backed = "BLOCK = 1024\nbuf0 = torch.ops.aten.addmm(b, x, w)\n_k1[grid](buf0, BLOCK=BLOCK)"
    f = kernel_features(backed, {"template": "fused_matmul", "LIBRARY": 1, "BLOCK_M": 64,
                                 "BLOCK_N": 64, "BLOCK": 1024})
    assert f["kind"] == "library" and f["launches"] == 2 and f["tile"] == 10  # BLOCK_M/N pinned
    assert kernel_features("") == {"kind": "", "launches": -1, "tile": -1, "warps": -1}


def test_default_job_runs_every_iteration_with_distinct_candidates_over_three_cells(examples_dir):
    """configs/default.yaml's plan (5 iterations x 4 branches) through the real generator and
    archive, as the loop drives them (parents sampled from the archive, every combination a
    candidate's sweep judged is excluded from the next proposals)."""
    config = load_config()  # the shipped default
    assert config.max_iters == 5 and config.branches_per_iteration == 4
    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"], hardware=CPU)
    gen, archive, rng = OfflineGenerator(), Archive(config.search.exploration_ratio), random.Random(1)
    ref = Program(id="ref", code=task.reference_code, is_program0=True,
                  metadata={"origin": "reference"})
    ref.add_eval_results(EvalResult(compiled=True, correctness=True, runtime_improvement=1.0))
    archive.add(ref)
    judged: set = set()
    codes, rows = set(), []
    for iteration in range(config.max_iters):
        plan = [(b, archive.sample_parent(rng)) for b in range(config.branches_per_iteration)]
        for branch, parent in plan:
            p = gen.propose(ProposalRequest(
                task=task, probe=probe, backend="triton", iteration=iteration, branch=branch,
                parent=None if parent is None or parent.is_program0 else parent, best=archive.best,
                rng=random.Random(rng.random()), judged=frozenset(judged),
                max_variants=config.prompt.max_template_combinations))
            assert p.code and not p.failed, f"i{iteration}-b{branch}: {p.log}"
            assert p.code not in codes, f"i{iteration}-b{branch} repeats a candidate"
            codes.add(p.code)
            judged |= {param_key("elementwise", v.params) for v in p.variants} | {
                param_key("elementwise", p.params)}
            prog = Program(id=f"i{iteration}b{branch}", code=p.code, iteration_found=iteration,
                           metadata={"params": p.params, "origin": "offline",
                                     "label": f"i{iteration}-b{branch}"})
            # A stand-in verdict (nothing is timed here): bigger tiles a little faster.
            speedup = 0.05 + 0.001 * sum(p.params["BLOCK"] * p.params["UNROLL"] for _ in [0]) / 1024
            prog.add_eval_results(EvalResult(compiled=True, correctness=True, perf_score=3,
                                             runtime=1.0, runtime_improvement=speedup))
            archive.add(prog)
            rows.append({"id": prog.id, "label": prog.metadata["label"], "is_program0": False,
                         "correctness": True, "score": prog.score,
                         "runtime_improvement": speedup, "features": prog.metadata["features"]})
    assert len(codes) == 20
    cells = occupancy(rows)
    assert len(cells) >= 3 and len(archive.elites) == len(cells)
    assert sum(c.tried for c in cells) == 20
    rows_, columns, at = grid(cells)
    assert rows_ == ["fused template · 1 kernel"] and len(columns) == len(cells)
    assert {at[(c.row, c.column)].elite_id for c in cells} == {e.id for e in archive.elites.values()}
