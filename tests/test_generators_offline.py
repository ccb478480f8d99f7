"""Offline generator: every template is a real kernel, correct on ragged shapes.

Candidates are our own templates, so the tests import them in-process and run them under the
Triton interpreter on the CPU (and on a GPU where one exists) against torch.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from openkernel.config import Config
from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators import make_generator
from openkernel.generators.base import ProposalRequest
from openkernel.generators.offline import OfflineGenerator, skill_matches
from openkernel.generators.offline import FAMILIES
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.task import load_task

CPU = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu", interpreter=True)
# One device per machine: the GPU where there is one, else the interpreter. Not both in one
# process: on the H200 (triton 3.6) compiled kernels failed to build after interpreted runs
# in the same process ("ir.value has no attribute dtype"), the interpreter's patching of
# triton.language leaks. The engine never mixes them: candidates run in worker processes.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device(monkeypatch) -> str:
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when @triton.jit runs
    return DEVICE


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _task_and_inputs(path: Path, device: str, tmp_path: Path):
    """(task, reference module, list of input sets): the task's own CPU/GPU inputs."""
    task = load_task(path)
    ref = _load(task.reference_path, f"ref_{task.name}_{abs(hash(str(tmp_path)))}")
    sets = None
    if task.hooks_path is not None:
        hooks = _load(task.hooks_path, f"hooks_{task.name}_{abs(hash(str(tmp_path)))}")
        sets = [hooks.get_inputs(device)] + list(getattr(hooks, "get_extra_inputs",
                                                         lambda d: [])(device))
    if sets is None:
        sets = [[t.to(device) for t in ref.get_inputs()]]
    return task, ref, sets


def _probe(ref, inputs, init=()) -> TaskProbe:
    hardware = CPU if inputs[0].device.type == "cpu" else None
    model = ref.Model(*init)
    with torch.no_grad(), _Ops() as rec:
        out = model(*inputs)
    return TaskProbe(ok=True, aten_ops=list(dict.fromkeys(rec.ops)),
                     input_shapes=[list(t.shape) for t in inputs],
                     input_dtypes=[str(t.dtype) for t in inputs],
                     output_shapes=[list(out.shape)], output_dtypes=[str(out.dtype)],
                     hardware=hardware, trace=trace_forward(model, inputs))


def _run_candidate(code: str, tmp_path: Path, name: str, init, sets, ref) -> None:
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    module = _load(path, name)
    torch.manual_seed(0)
    expected_model = ref.Model(*init)
    candidate = module.ModelNew(*init)
    for inputs in sets:
        expected = expected_model(*inputs)
        got = candidate(*inputs)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        tol = 1e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-4
        torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


EXAMPLES = ["gelu", "softmax", "matmul_bias_relu", "kernelbench/19_ReLU.py"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_examples_candidates_are_correct(example, device, examples_dir, tmp_path):
    task, ref, sets = _task_and_inputs(examples_dir / example, device, tmp_path)
    probe = _probe(ref, sets[0])
    gen = OfflineGenerator()
    assert gen.supports(task, probe, "triton") is None
    rng = random.Random(7)
    parent = None
    # Iteration 0's curated starts, then a lineage of mutations: several param settings each.
    for i in range(4):
        request = ProposalRequest(task=task, probe=probe, backend="triton", iteration=i // 2,
                                  branch=i % 2, parent=parent, best=None, rng=rng,
                                  hardware_label=probe.hardware.label if probe.hardware else "")
        proposal = gen.propose(request)
        assert proposal.origin == "offline" and proposal.model.startswith("offline:")
        assert proposal.params["template"] == proposal.model.split(":", 1)[1]
        assert "```python" in proposal.answer and proposal.code in proposal.answer
        _run_candidate(proposal.code, tmp_path, f"cand_{task.name}_{device}_{i}", (), sets, ref)
        parent = Program(id=f"p{i}", code=proposal.code, iteration_found=i // 2,
                         metadata={"params": proposal.params, "branch": i % 2})


ACTIVATION_REFS = {
    "leaky_init": ("""
        def __init__(self, negative_slope: float = 0.01):
            super().__init__()
            self.negative_slope = negative_slope
        def forward(self, x):
            return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)
    """, (0.2,)),
    "hardtanh": ("""
        def forward(self, x):
            return F.hardtanh(x, min_val=-0.5, max_val=0.75)
    """, ()),
    "relu6_module": ("""
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU6()
        def forward(self, x):
            return self.act(x)
    """, ()),
    "gelu_tanh": ("""
        def forward(self, x):
            return F.gelu(x, approximate="tanh")
    """, ()),
    "softplus": ("""
        def forward(self, x):
            return F.softplus(x, beta=2.0, threshold=10.0)
    """, ()),
    "elu": ("""
        def __init__(self, alpha: float = 1.0):
            super().__init__()
            self.alpha = alpha
        def forward(self, x):
            return F.elu(x, alpha=self.alpha)
    """, (0.7,)),
    "selu": ("def forward(self, x):\n    return torch.selu(x)", ()),
    "mish": ("def forward(self, x):\n    return F.mish(x)", ()),
    "silu": ("def forward(self, x):\n    return F.silu(x)", ()),
    "tanh": ("def forward(self, x):\n    return torch.tanh(x)", ()),
    "sigmoid": ("def forward(self, x):\n    return torch.sigmoid(x)", ()),
    "hardswish": ("def forward(self, x):\n    return F.hardswish(x)", ()),
    "hardsigmoid": ("def forward(self, x):\n    return F.hardsigmoid(x)", ()),
    "log_softmax": ("def forward(self, x):\n    return torch.log_softmax(x, dim=1)", ()),
    "bf16_gelu": ("def forward(self, x):\n    return F.gelu(x)", ()),
}


def _write_reference(tmp_path: Path, name: str, body: str) -> Path:
    body = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    dtype = "torch.bfloat16" if name.startswith("bf16") else "torch.float32"
    code = (f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
            f"class Model(nn.Module):\n{body}\n\n\n"
            f"def get_inputs():\n    return [torch.randn(37, 1000, dtype={dtype}) * 4]\n\n\n"
            "def get_init_inputs():\n    return []\n")
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    return path


@pytest.mark.parametrize("name", sorted(ACTIVATION_REFS))
def test_activation_variants_match_torch(name, device, tmp_path):
    body, init = ACTIVATION_REFS[name]
    path = _write_reference(tmp_path, name, body)
    task, ref, sets = _task_and_inputs(path, device, tmp_path)
    sets.append([torch.randn(5, 7, dtype=sets[0][0].dtype, device=device)])  # a tail smaller than any block
    probe = _probe(ref, sets[0], init)
    gen = OfflineGenerator()
    assert gen.supports(task, probe, "triton") is None
    proposal = gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                           branch=3, parent=None, best=None,
                                           rng=random.Random(1)))
    _run_candidate(proposal.code, tmp_path, f"act_{name}", init, sets, ref)


def test_supports_refuses_unknown_ops_plainly(examples_dir):
    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.convolution.default", "aten.relu.default"],
                      input_shapes=[[1, 3, 8, 8]], input_dtypes=["torch.float32"])
    gen = OfflineGenerator()
    reason = gen.supports(task, probe, "triton")
    assert reason.startswith("The offline generator has no kernel family for this task")
    assert "aten.convolution.default" in reason and "`inference`" in reason
    proposal = gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                           branch=0, parent=None, best=None))
    assert proposal.code == "" and proposal.log == reason


def test_cuda_backend_elementwise_only(examples_dir, tmp_path):
    gelu = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"])
    gen = OfflineGenerator()
    assert gen.supports(gelu, probe, "cuda") is None
    proposal = gen.propose(ProposalRequest(task=gelu, probe=probe, backend="cuda", iteration=0,
                                           branch=0, parent=None, best=None))
    assert proposal.params["BUILD"] == "nvrtc"  # the first starts: NVRTC, then the extension
    assert "RawKernel(" in proposal.code and "load_inline" not in proposal.code
    extension = gen.propose(ProposalRequest(task=gelu, probe=probe, backend="cuda", iteration=0,
                                            branch=4, parent=None, best=None))
    assert "load_inline" in extension.code and "no_implicit_headers=True" in extension.code
    for p in (proposal, extension):
        assert "erff" in p.code
        compile(p.code, "cand.py", "exec")
    softmax = load_task(examples_dir / "softmax")
    sprobe = TaskProbe(ok=True, aten_ops=["aten._softmax.default"], input_shapes=[[64, 512]],
                       input_dtypes=["torch.float32"], trace=trace_forward(
                           torch.nn.Softmax(dim=-1), [torch.randn(64, 512)]))
    assert "Triton only" in gen.supports(softmax, sprobe, "cuda")


def test_params_flow_mutation_and_recombination(examples_dir):
    from openkernel.generators.base import param_key

    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"], hardware=CPU)
    gen = make_generator(Config())
    assert isinstance(gen, OfflineGenerator) and gen.models == ["offline"]
    starts = [gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                          branch=b, parent=None, best=None,
                                          rng=random.Random(b))) for b in range(3)]
    assert len({tuple(sorted(p.params.items())) for p in starts}) == 3  # branches differ
    assert all("curated start point" in p.description for p in starts)
    parent = Program(id="par", code=starts[0].code, iteration_found=0,
                     metadata={"params": starts[0].params, "branch": 0})
    parent.add_eval_results(EvalResult(compiled=True, correctness=True, runtime=1.0,
                                       runtime_improvement=1.2, perf_score=4))
    mate = Program(id="mate", code=starts[1].code, metadata={"params": starts[1].params})
    seen = set()
    for i in range(12):
        # A fresh generator each time (as many jobs would): the no-repeat rule across one job
        # is the next test's.
        child = make_generator(Config()).propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=1, branch=i, parent=parent,
            best=parent, inspirations=[mate], rng=random.Random(100 + i),
            judged=frozenset(param_key("elementwise", p.params) for p in starts)))
        tunables = {k: v for k, v in child.params.items() if k != "template"}
        assert child.params != starts[0].params
        assert set(tunables) == {"BLOCK", "UNROLL", "PERSISTENT", "EVICT", "num_warps",
                                 "num_stages"}
        assert child.description.startswith("gelu elementwise, BLOCK=")
        assert "from parent" in child.description
        assert "Parent: i0-b0 (par), status faster" in child.prompt
        seen.add(child.description.split("(")[-1])
    assert any("recombined" in s for s in seen) and any("recombined" not in s for s in seen)


def test_sweeps_cover_the_space_without_repeats_then_say_so(examples_dir):
    """Each offline candidate is a sweep of the point and untried neighbours; a job never gets
    a combination twice while untried ones remain, then is told the space is exhausted."""
    from openkernel.generators.base import param_key

    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"], hardware=CPU)
    gen = make_generator(Config())
    start = gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                        branch=0, parent=None, best=None, rng=random.Random(0)))
    template = start.params["template"]
    space = {tuple(sorted(p.items())) for p in
             __import__("openkernel.generators.offline", fromlist=["FAMILIES"]).FAMILIES[0]
             .space(True, "triton")}
    assert len(space) == 90  # CPU choices of the elementwise template: 5 x 3 x 3 x 2 x 1 x 1
    judged = {param_key(template, v.params)[1] for v in start.variants}
    assert 2 <= len(start.variants) <= 3 and "a sweep of" in start.description
    assert start.code == start.variants[0].code  # the proposal's code is the sweep's point
    parent = Program(id="par", code=start.code, iteration_found=0,
                     metadata={"params": start.params, "branch": 0})
    parent.add_eval_results(EvalResult(compiled=True, correctness=True, runtime=1.0,
                                       runtime_improvement=1.2, perf_score=4))
    for i in range(100):
        fresh = make_generator(Config())  # what the job judged comes from the request alone
        child = fresh.propose(ProposalRequest(
            task=task, probe=probe, backend="triton", iteration=1, branch=i, parent=parent,
            best=parent, rng=random.Random(i),
            judged=frozenset((template, k) for k in judged)))
        if not child.code:
            break
        points = [param_key(template, v.params)[1] for v in child.variants] or [
            param_key(template, child.params)[1]]
        assert not set(points) & judged, "a combination was proposed twice"
        judged |= set(points)
    assert judged == space  # every combination judged once before the end
    assert child.failed == "exhausted" and "every combination" in child.log


def test_skill_matches(examples_dir, tmp_path):
    task = load_task(examples_dir / "matmul_bias_relu")
    _, ref, sets = _task_and_inputs(examples_dir / "matmul_bias_relu", "cpu", tmp_path)
    probe = _probe(ref, sets[0])
    rows = skill_matches(probe, "triton", task)
    assert [r["template"] for r in rows] == ["fused_matmul"]
    assert rows[0]["usable"] and "GROUP_M" in rows[0]["tunables"]
    assert skill_matches(probe, "cuda", task)[0]["usable"] is False
    gelu = TaskProbe(ok=True, aten_ops=["aten.gelu.default"])
    assert [r["template"] for r in skill_matches(gelu, "triton")] == ["elementwise"]
    # on the CPU the choices the interpreter's runs try, not the GPU's (issue 58)
    family = next(t for t in FAMILIES if t.name == "elementwise")
    block = next(t for t in family.tunables_for("triton") if t.name == "BLOCK")
    assert block.cpu_choices and block.cpu_choices != block.choices
    on_cpu = skill_matches(gelu, "triton", interpreter=True)[0]["tunables"]["BLOCK"]["choices"]
    assert on_cpu == list(block.cpu_choices)
    assert skill_matches(gelu, "triton")[0]["tunables"]["BLOCK"]["choices"] == list(block.choices)
    assert skill_matches(TaskProbe(ok=True, aten_ops=["aten.convolution.default"]), "triton") == []
    assert {t.name for t in FAMILIES} == {"elementwise", "fused_pointwise", "fused_reduction",
                                          "fused_matmul"}


@pytest.mark.gpu
@pytest.mark.parametrize("branch", [0, 4], ids=["nvrtc", "extension"])
def test_cuda_elementwise_template_runs(tmp_path, branch):
    """An NVRTC build (under a second) and a load_inline build (seconds): a
    constructor-argument scalar, three dtypes."""
    body, init = ACTIVATION_REFS["leaky_init"]
    path = _write_reference(tmp_path, "leaky_cuda", body)
    task, ref, sets = _task_and_inputs(path, "cuda", tmp_path)
    probe = _probe(ref, sets[0], init)
    gen = OfflineGenerator()
    assert gen.supports(task, probe, "cuda") is None
    proposal = gen.propose(ProposalRequest(task=task, probe=probe, backend="cuda", iteration=0,
                                           branch=branch, parent=None, best=None))
    x = sets[0][0]
    sets = [[x], [x.half()], [x.bfloat16()], [torch.randn(5, 7, device="cuda")],
            [torch.randn(1 << 20, device="cuda")]]
    _run_candidate(proposal.code, tmp_path, "cuda_leaky", init, sets, ref)


@pytest.mark.slow
def test_cuda_template_passes_the_cpu_compile_check(examples_dir, tmp_path):
    """The offline CUDA candidate compiles here in both forms: the extension's .cu with nvcc
    (CPU torch: headers shimmed), the NVRTC form with NVRTC, its launch description checked."""
    from openkernel.config import build_config
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.schemas import Status

    gelu = load_task(examples_dir / "gelu")
    ev = Evaluator(gelu, build_config({"paths": {"scratch_dir": str(tmp_path)}, "backend": "cuda"}))
    probe = ev.probe()
    for branch in (0, 4):  # NVRTC, then the extension
        proposal = OfflineGenerator().propose(ProposalRequest(
            task=gelu, probe=probe, backend="cuda", iteration=0, branch=branch, parent=None,
            best=None))
        if branch == 4:
            cuda_part = proposal.code.split("_CUDA_SRC = ")[1].split("_CPP_SRC = ")[0]
            assert "__global__" in cuda_part and "<ATen" not in cuda_part and "<torch" not in cuda_part
        result = ev.evaluate(proposal.code, "cuda", f"cuda-template-{branch}")
        if torch.cuda.is_available():
            assert result.correctness, result.eval_log
            continue
        assert result.get_status() == Status.NOT_RUN and result.compiled, result.eval_log
        assert "compiled" in result.eval_log
        if branch == 0:
            assert "NVRTC: act_kernel<float> compiled for sm_90" in result.eval_log
            assert "forward made 1 kernel launch(es)" in result.eval_log


def test_a_space_of_millions_is_walked_lazily(tmp_path):
    """A compiler family's space is the product of its tunables: millions of points for a
    convolution followed by a group norm (KernelBench level2/21). A proposal draws only the
    points it needs from it (listing them all took a minute per proposal on the H200's host),
    and once a point and its neighbours are judged the nearest untried point is two steps out."""
    import torch.nn as nn

    from openkernel.generators import offline
    from openkernel.generators.base import param_key

    class ConvGroupNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8)

        def forward(self, x):
            return self.norm(torch.sigmoid(self.conv(x) * 2.0))

    model = ConvGroupNorm().eval()
    path = tmp_path / "task.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(2, 3, 9, 9)]"
                    "\n\n\ndef get_init_inputs():\n    return []\n")  # names only: the trace is ours
    gpu = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", interpreter=False)
    probe = TaskProbe(ok=True, trace=trace_forward(model, [torch.randn(2, 3, 9, 9)]), hardware=gpu)
    task = load_task(path)
    gen = OfflineGenerator()
    match = gen._match(task, probe, "triton")
    family = match.family
    drawn = {"n": 0}
    points = family.points

    def counted(interp, backend):
        for point in points(interp, backend):
            drawn["n"] += 1
            yield point

    family.points = counted
    size = 1
    for t in family.tunables_for("triton"):
        size *= len(t.values(False))
    assert size > 10**5  # the product this test is about (each mode's free tunables: fewer)
    judged: set = set()
    for branch in range(4):
        p = gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                        branch=branch, parent=None, best=None,
                                        rng=random.Random(branch)))
        assert p.code and not p.failed
        judged |= {param_key("", v.params)[1] for v in p.variants}
    assert drawn["n"] < 100, drawn
    center = family.clean(family.start(random.Random(0), False, 0, "triton"), False, "triton")
    ring = {offline._key(q) for q in family.neighbours(center, False, "triton")}
    near = offline._nearest_untried(family, center, ring | {offline._key(center)}, False, "triton")
    assert near is not None and offline._key(near) not in ring
    assert any(offline._key(n) in ring for n in family.neighbours(near, False, "triton"))


def test_a_curated_start_judged_elsewhere_gives_way_to_another_curated_one(tmp_path):
    """A branch whose curated start another branch's sweep has judged already (a neighbour of
    that branch's own start) starts from the next curated point nobody has, not a random one:
    on the H200 a random start of level1/54 (3 input channels) drew the taps-outer form, 4x
    slower than any curated NCHW start."""
    import torch.nn as nn

    from openkernel.generators import offline

    path = tmp_path / "task.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(2, 3, 6, 6, 6)]"
                    "\n\n\ndef get_init_inputs():\n    return []\n")  # names only: the trace is ours
    gpu = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", interpreter=False)
    trace = trace_forward(nn.Conv3d(3, 8, 3).eval(), [torch.randn(2, 3, 6, 6, 6)])
    probe = TaskProbe(ok=True, trace=trace, hardware=gpu)
    task = load_task(path)
    gen = OfflineGenerator()
    family = gen._match(task, probe, "triton").family
    starts = [family.clean(dict(p), False, "triton") for p in family.starts]
    assert len(starts) == 4 and len({offline._key(p) for p in starts}) == 4
    judged = frozenset({(family.name, offline._key(starts[1]))})
    p = gen.propose(ProposalRequest(task=task, probe=probe, backend="triton", iteration=0,
                                    branch=1, parent=None, best=None, judged=judged,
                                    rng=random.Random(0)))
    got = {k: v for k, v in p.params.items() if k != "template"}
    assert got == starts[2], (got, starts)
    assert "this branch's own was judged" in p.reasoning and "random" not in p.description
    # every curated start judged: a random one, said so
    judged = frozenset((family.name, offline._key(q)) for q in starts)
    p = OfflineGenerator().propose(ProposalRequest(
        task=task, probe=probe, backend="triton", iteration=0, branch=1, parent=None, best=None,
        judged=judged, rng=random.Random(0)))
    assert "random start" in p.description
    assert {k: v for k, v in p.params.items() if k != "template"} not in starts
