"""A forward replayed as a CUDA graph, and torch.compile's CUDA-graph mode as a baseline (issue 23,
"for launch-bound problems").

On the CPU: the tunable ``CUDA_GRAPH`` is offered where a call's work is small beside its
launches and pinned to 0 under the interpreter; a graph-capable module (compiler and Inductor
seed) runs its kernels eagerly there and matches the reference; the evaluator's launch counter
guards the graph methods it wraps; the ``cudagraphs`` baseline's config, and the bench summary's
ratio over it. On the H200 (``gpu``): a replaying candidate judged by the real evaluator with
held-out sizes, what a replay does (new signatures, outputs kept, weights followed, launches and
ops counted), each capture's own cuBLAS workspace, and the reduce-overhead baseline timed.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from openkernel.bench.summary import ProblemResult, replays_graph, summarize
from openkernel.config import build_config
from openkernel.evaluation.host.baselines import wanted
from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.compiler.families import FusedMatmul, plan_for
from openkernel.generators.compiler.modelnew import render
from openkernel.generators.compiler.replay import LAUNCH_BYTES, offered
from openkernel.records import Hardware, TaskProbe

PARAMS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "TILE": 4096,
          "MAX_FUSED": 4096, "LOOP_BLOCK": 1024, "BLOCK": 1024, "num_warps": 4, "num_stages": 2}
SEEDS = Path(__file__).parent / "data" / "inductor"
TASK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 48)

    def forward(self, x):
        return torch.softmax(F.gelu(self.fc(x)), dim=1)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
'''


class GeluSoftmax(nn.Module):  # the task above, in this process
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 48)

    def forward(self, x):
        return torch.softmax(F.gelu(self.fc(x)), dim=1)


def _load(code: str, path: Path):
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _probe(trace, nbytes: float, device: str = "cuda") -> TaskProbe:
    hw = Hardware(label="H200" if device == "cuda" else "CPU (Triton interpreter)",
                  device=device, gpu_arch="sm_90" if device == "cuda" else "cpu",
                  interpreter=device != "cuda")
    return TaskProbe(ok=True, trace=trace, hardware=hw, bytes_moved=nbytes, flops=1e6)


@pytest.fixture
def counter():
    """A launch counter made in this process (as a worker makes one), its class-level wrappers
    undone afterwards so later tests run the launchers as they were."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from openkernel.evaluation.worker import integrity as ig
    from openkernel.nvrtc import RawKernel

    targets = [(JITFunction, "run"), (InterpretedFunction, "run"), (RawKernel, "launch")] + [
        (torch.cuda.CUDAGraph, m) for m in ("capture_begin", "capture_end", "replay")]
    before = {(owner, name): owner.__dict__.get(name) for owner, name in targets}
    made = ig.LaunchCounter()
    assert set(made.wrapped) <= set(before)  # every launcher it wraps is put back below
    yield made
    for (owner, name), kept in before.items():
        if kept is None:  # (it was inherited)
            delattr(owner, name)
        else:
            setattr(owner, name, kept)


def test_cuda_graph_is_offered_where_launches_matter_and_pinned_under_the_interpreter():
    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(32, 64)])
    # the budget grows with the plan's launches: 40 MiB is too much work for one, not for two
    assert offered(_probe(trace, 40 << 20), 2) and not offered(_probe(trace, 40 << 20), 1)
    assert not offered(_probe(trace, 0), 2)  # unknown work: not offered
    assert not offered(TaskProbe(ok=True, bytes_moved=1024, flops=5e9), 2)  # FLOPs count too
    big = FusedMatmul().match(None, _probe(trace, 64 * LAUNCH_BYTES), "triton")
    assert "CUDA_GRAPH" not in [t.name for t in big.family.tunables]

    match = FusedMatmul().match(None, _probe(trace, 32 * 64 * 4 + 32 * 48 * 4), "triton")
    family = match.family
    assert "CUDA_GRAPH" in [t.name for t in family.tunables]
    assert all("CUDA_GRAPH" in used for used in family.used.values())
    # On a GPU each plan is replayed in its first start and launched kernel by kernel later;
    # a neighbour flips it, and the two forwards are different code.
    starts = [family.start(random.Random(0), False, k, "triton") for k in range(4)]
    graphs = [s["CUDA_GRAPH"] for s in starts]
    assert graphs[:2] == [1, 1] and 0 in graphs
    graph = starts[0]
    flipped = next(p for p in family.neighbours(graph, False, "triton") if p["CUDA_GRAPH"] == 0)
    code, plain = family.render(match, graph, "triton"), family.render(match, flipped, "triton")
    assert "_replayed(self, self._kernels, inputs)" in code and "torch.cuda.CUDAGraph()" in code
    # an instance's graphs share one pool, captured in turn after the warm-up's memory went back
    assert "pool=pools[device]" in code and "with _CAPTURING:" in code
    assert code.index("torch.cuda.empty_cache()") < code.index("with torch.cuda.graph(")
    assert "_replayed" not in plain and "CUDA_GRAPH" not in plain and "CUDA_GRAPH" not in code
    assert replays_graph(code) and not replays_graph(plain)
    assert family.describe(match, graph).endswith("; replayed as a CUDA graph")
    assert "CUDA graph" not in family.describe(match, flipped)
    # Under the interpreter there is no graph to replay: pinned to 0, no point written twice.
    space = family.space(True, "triton")
    assert {p["CUDA_GRAPH"] for p in space} == {0} and len(space) == len(big.family.space(
        True, "triton"))  # (no point more than without it)
    assert family.clean(graph, True, "triton")["CUDA_GRAPH"] == 0


def test_an_inductor_seed_offers_cuda_graph_too():
    from openkernel.generators.seeds.family import InductorSeed

    spec = importlib.util.spec_from_file_location("seed_lgs_cpu", SEEDS / "linear_gelu_softmax.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    model = ref.Model(*ref.get_init_inputs()).eval()
    captured = json.loads((SEEDS / "linear_gelu_softmax.json").read_text())
    probe = _probe(trace_forward(model, ref.get_inputs()), 1 << 20)
    probe.inductor = [captured]
    match = InductorSeed().match(None, probe, "triton")
    family = match.family
    assert family.tunables[-1].name == "CUDA_GRAPH"
    assert [s["CUDA_GRAPH"] for s in family.starts][:2] == [1, 0]
    point = family.clean(family.starts[0], False, "triton")
    assert replays_graph(family.render(match, point, "triton"))
    assert family.describe(match, point).endswith("; replayed as a CUDA graph")
    assert family.clean(point, True, "triton")["CUDA_GRAPH"] == 0  # the interpreter's
    probe.bytes_moved = 1 << 34  # too much work for its launches: not offered
    assert "CUDA_GRAPH" not in [t.name for t in InductorSeed().match(None, probe, "triton")
                                .family.tunables]


def test_a_graph_capable_module_runs_its_kernels_eagerly_under_the_interpreter(interpreter,
                                                                              tmp_path):
    """The compiler's module and an Inductor seed, each with CUDA_GRAPH=1: on the CPU the
    forward is the plain launches, correct on the traced and held-out batches, weights followed."""
    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    plan = plan_for(None, trace_forward(model, [torch.randn(32, 64)]))
    module = _load(render(plan, {**PARAMS, "CUDA_GRAPH": 1}), tmp_path / "graphed.py")
    assert "on a GPU replayed as a CUDA graph" in module.__doc__
    candidate = module.ModelNew()
    candidate.load_state_dict(model.state_dict(), strict=False)
    for batch in (32, 7, 1):
        x = torch.randn(batch, 64)
        torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        model.fc.weight.mul_(-0.5)
    candidate.load_state_dict(model.state_dict(), strict=False)
    x = torch.randn(5, 64)
    torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
    assert "_cuda_graphs" not in candidate.__dict__  # never captured: eager
    # Another combination's module (a sweep imports one each) captures on the same stream, in
    # turn with this one: each capture clears the process's cuBLAS workspaces around it.
    other = _load(render(plan, {**PARAMS, "CUDA_GRAPH": 1, "BLOCK": 256}), tmp_path / "other.py")
    assert other is not module and other._CAPTURING is module._CAPTURING
    assert other._CAPTURE_STREAMS is module._CAPTURE_STREAMS

    from openkernel.generators.seeds.render import render as render_seed
    from openkernel.generators.seeds.rewrite import parse

    spec = importlib.util.spec_from_file_location("seed_rmsnorm_ref", SEEDS / "rmsnorm.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    reference = ref.Model(*ref.get_init_inputs()).eval()
    inputs = ref.get_inputs()
    code = render_seed(parse(json.loads((SEEDS / "rmsnorm.json").read_text())),
                       {"K0": 0, "CUDA_GRAPH": 1}, trace_forward(reference, inputs))
    assert "def _kernels(self, *inputs):" in code and replays_graph(code)
    seed = _load(code, tmp_path / "graphed_seed.py").ModelNew()
    seed.load_state_dict(reference.state_dict())
    torch.testing.assert_close(seed(*inputs), reference(*inputs), atol=1e-4, rtol=1e-4)


def test_the_launch_counter_guards_the_graph_methods_it_wraps(counter):
    """A candidate that replaced CUDAGraph.replay (to hide what a replay runs) is caught."""
    from openkernel.evaluation.worker import integrity as ig

    guard = ig.Guard(extra=list(counter.wrapped))
    assert {(torch.cuda.CUDAGraph, m) for m in ("capture_begin", "capture_end", "replay")} <= \
        set(counter.wrapped)
    kept = torch.cuda.CUDAGraph.__dict__["replay"]
    try:
        torch.cuda.CUDAGraph.replay = lambda self: None
        assert "CUDAGraph.replay" in guard.changed()
    finally:
        torch.cuda.CUDAGraph.replay = kept
    assert guard.changed() == []


def test_the_cudagraphs_baseline_is_a_config_key_and_a_bench_ratio():
    ec = build_config({}).eval_config
    assert ec.cudagraphs_baseline is False and ec.baseline_timeout_s.cudagraphs == 60
    gpu = Hardware(label="H200", device="cuda", gpu_arch="sm_90")
    cpu = Hardware(label="CPU", device="cpu", gpu_arch="cpu", interpreter=True)
    assert wanted(ec, gpu) == ["eager", "compile"]
    on = build_config({}, ["eval_config.cudagraphs_baseline=true",
                           "eval_config.baseline_timeout_s=7"]).eval_config
    assert wanted(on, gpu) == ["eager", "compile", "cudagraphs"] and wanted(on, cpu) == []
    assert on.baseline_timeout_s.cudagraphs == 7
    listed = build_config({}, ["eval_config.baselines=[cudagraphs, eager]"]).eval_config
    assert listed.baselines == ["eager", "cudagraphs"]  # (in the order they are made)
    rows = [ProblemResult("a", correct=True, speedup=2.0, over_cudagraphs=1.5, cuda_graph=True),
            ProblemResult("b", correct=True, speedup=3.0, over_cudagraphs=0.6),
            ProblemResult("c", correct=True, speedup=1.0)]
    summary = summarize("s", rows)
    assert summary.n_cudagraphs == 2 and summary.geomean_cudagraphs == pytest.approx(0.9 ** 0.5)
    assert summary.n_cuda_graph == 1 and summary.to_json()["n_cuda_graph"] == 1


# --- on the H200 --------------------------------------------------------------------------------
@pytest.mark.gpu
def test_a_replaying_candidate_is_judged_correct_by_the_evaluator(tmp_path):
    """The first start of the family on the GPU replays a CUDA graph; the real evaluator judges
    it: every seed, the inputs rewritten in place, held-out sizes (a graph each), every
    integrity check (its Triton launches counted at each replay)."""
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.task import load_task

    (tmp_path / "task.py").write_text(TASK)
    task = load_task(tmp_path / "task.py")
    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")}})
    ev = Evaluator(task, config)
    try:
        probe = ev.probe()
        assert probe.ok and torch.cuda.is_available(), probe.error
        match = FusedMatmul().match(task, probe, "triton")
        family = match.family
        params = family.start(random.Random(0), False, 0, "triton")
        assert params["CUDA_GRAPH"] == 1, params
        code = family.render(match, params, "triton")
        result = ev.evaluate(code, "triton", "graphed")
        plain = ev.evaluate(family.render(match, {**params, "CUDA_GRAPH": 0}, "triton"),
                            "triton", "launched")
    finally:
        ev.close()
    assert result.correctness, result.eval_log
    assert result.metadata.get("heldout_ok") and not result.metadata.get("integrity_violation")
    assert plain.correctness, plain.eval_log
    print("replayed", result.runtime, "ms; launched", plain.runtime, "ms")


@pytest.mark.gpu
def test_a_replay_keeps_earlier_outputs_follows_weights_and_counts_its_launches(tmp_path,
                                                                                counter):
    from openkernel.evaluation.worker import integrity as ig
    from openkernel.aten_ops import compute_ops

    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(32, 64)])
    model = model.cuda()
    stream = torch.cuda.current_stream().cuda_stream
    for library in (False, True):
        plan = plan_for(None, trace, library=library)
        module = _load(render(plan, {**PARAMS, "CUDA_GRAPH": 1}), tmp_path / f"g{library}.py")
        candidate = module.ModelNew().cuda()
        candidate.load_state_dict(model.state_dict(), strict=False)
        with torch.no_grad():
            x = torch.randn(32, 64, device="cuda")
            first = candidate(x)
            torch.testing.assert_close(first, model(x), atol=1e-4, rtol=1e-4)
            kept = first.clone()
            before = counter.count
            recorder = ig.OpRecorder()
            with recorder:
                second = candidate(torch.randn(32, 64, device="cuda"))  # a replay
            torch.cuda.synchronize()
            assert counter.count - before == len(plan.triton) and counter.streams == {stream}
            if library:  # the graph's library call is PyTorch compute to torch_compute
                assert "addmm" in compute_ops(recorder.ops), recorder.ops
            assert torch.equal(first, kept) and not torch.equal(first, second)
            for batch in (7, 1, 32):  # held-out sizes: a graph each, the LRU kept
                y = torch.randn(batch, 64, device="cuda")
                torch.testing.assert_close(candidate(y), model(y), atol=1e-4, rtol=1e-4)
            assert len(candidate._cuda_graphs) == 3
            # the graphs share one pool: replays in any order leave each other nothing stale
            for batch in (1, 32, 7, 7, 1, 32):
                y = torch.randn(batch, 64, device="cuda")
                torch.testing.assert_close(candidate(y), model(y), atol=1e-4, rtol=1e-4)
            model.fc.weight.mul_(-0.5)  # load_state_dict copies in place: the graph sees it
            candidate.load_state_dict(model.state_dict(), strict=False)
            torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
            model.fc.weight.mul_(-2.0)
            candidate.load_state_dict(model.state_dict(), strict=False)
        counter.streams.clear()


@pytest.mark.gpu
def test_a_fresh_instance_captures_after_the_first_was_freed(tmp_path):
    """A sweep judges its winner on a fresh instance of its module once the screened one is
    gone. With one pool per module, that capture met PyTorch's assertion (a pool whose graphs
    are all gone while the capture stream's cuBLAS workspace lives in it: level3/4 on the H200);
    each instance has its own pool now."""
    import gc

    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(32, 64)])
    model = model.cuda()
    plan = plan_for(None, trace, library=True)  # addmm in the graph: a cuBLAS workspace
    module = _load(render(plan, {**PARAMS, "CUDA_GRAPH": 1}), tmp_path / "fresh.py")
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            candidate = module.ModelNew().cuda()
            candidate.load_state_dict(model.state_dict(), strict=False)
            for _ in range(2):  # the capture, then a replay
                torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)
            assert len(candidate._cuda_graphs) == 1
            del candidate
            gc.collect()
            torch.cuda.empty_cache()


def _private_pools() -> set:
    """The ids of the CUDA-graph pools that hold GPU memory now (the caching allocator's)."""
    return {tuple(s["segment_pool_id"]) for s in torch.cuda.memory_snapshot()
            if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)}


@pytest.mark.gpu
def test_each_capture_owns_its_cublas_workspace(tmp_path):
    """Graphs of two combinations' modules, both with a cuBLAS call, captured on the process's
    one capture stream. PyTorch keeps a cuBLAS workspace per stream and hands it to the next
    capture there: the second graph would replay into the first's workspace, in the first
    instance's pool. Once that instance is gone its pool must go back to the GPU whole, and the
    second must still replay right into memory others now hold (pytorch/pytorch#193402)."""
    import gc

    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(32, 64)])
    model = model.cuda()
    plan = plan_for(None, trace, library=True)  # addmm in the graph: a cuBLAS workspace
    x = torch.randn(32, 64, device="cuda")
    before = _private_pools()
    with torch.no_grad():
        made = []
        for k, block in enumerate((32, 64)):
            module = _load(render(plan, {**PARAMS, "BLOCK_M": block, "CUDA_GRAPH": 1}),
                           tmp_path / f"owns{k}.py")
            candidate = module.ModelNew().cuda()
            candidate.load_state_dict(model.state_dict(), strict=False)
            torch.testing.assert_close(candidate(x), model(x), atol=1e-4, rtol=1e-4)  # capture
            made.append(candidate)
        second = made.pop()
        del made, candidate  # the first instance: its graph and pool go
        gc.collect()
        torch.cuda.empty_cache()
        # the freed memory taken by others (as a sweep's next inputs would), then replays
        held = [torch.full((8 << 20,), 7.0, device="cuda") for _ in range(8)]
        for _ in range(3):
            y = torch.randn(32, 64, device="cuda")
            torch.testing.assert_close(second(y), model(y), atol=1e-4, rtol=1e-4)
        torch.cuda.synchronize()
        assert all(bool((h == 7.0).all()) for h in held)
        del held, second
        gc.collect()
        torch.cuda.empty_cache()
    assert _private_pools() <= before  # no pool kept by a workspace outliving its graphs


@pytest.mark.gpu
def test_first_calls_side_by_side_capture_in_turn(tmp_path):
    """A sweep's first calls run in threads: graphed combinations (each its own module and
    pool, one capture stream) capture in turn, each correct, and later replays of any stay so."""
    from concurrent.futures import ThreadPoolExecutor

    torch.manual_seed(0)
    model = GeluSoftmax().eval()
    trace = trace_forward(model, [torch.randn(32, 64)])
    model = model.cuda()
    plan = plan_for(None, trace)
    candidates = []
    for k, block in enumerate((32, 64, 32, 64)):
        module = _load(render(plan, {**PARAMS, "BLOCK_M": block, "CUDA_GRAPH": 1}),
                       tmp_path / f"side{k}.py")
        candidate = module.ModelNew().cuda()
        candidate.load_state_dict(model.state_dict(), strict=False)
        candidates.append(candidate)
    xs = [torch.randn(32 + k, 64, device="cuda") for k in range(4)]
    with torch.no_grad():
        with ThreadPoolExecutor(max_workers=4) as pool:
            outs = list(pool.map(lambda k: candidates[k](xs[k]), range(4)))
        torch.cuda.synchronize()
        for k in range(4):
            torch.testing.assert_close(outs[k], model(xs[k]), atol=1e-4, rtol=1e-4)
            assert len(candidates[k]._cuda_graphs) == 1
        for k in (3, 0, 2, 1, 0):
            x = torch.randn(32 + k, 64, device="cuda")
            torch.testing.assert_close(candidates[k](x), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_an_inductor_seed_replays_as_a_cuda_graph(tmp_path):
    from openkernel.evaluation.worker.inductor import capture
    from openkernel.generators.seeds.render import render as render_seed
    from openkernel.generators.seeds.rewrite import parse

    spec = importlib.util.spec_from_file_location("seed_lgs_ref", SEEDS / "linear_gelu_softmax.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    model = ref.Model(*ref.get_init_inputs()).eval().cuda()
    inputs = [t.cuda() for t in ref.get_inputs()]
    code = render_seed(parse(capture(model, inputs)), {"CUDA_GRAPH": 1},
                       trace_forward(model, inputs))
    seed = _load(code, tmp_path / "seed_graph.py").ModelNew().cuda()
    seed.load_state_dict(model.state_dict())
    with torch.no_grad():
        for _ in range(3):  # capture, then replays on new values
            fresh = [torch.randn_like(t) for t in inputs]
            torch.testing.assert_close(seed(*fresh), model(*fresh), atol=1e-4, rtol=1e-4)
    assert len(seed._cuda_graphs) == 1


@pytest.mark.gpu
def test_the_reference_is_timed_under_reduce_overhead(tmp_path):
    """torch.compile's CUDA-graph mode timed in the late stage, in the same rounds as an eager
    run beside it (``eager_late``: the late stage's ratios are to that eager)."""
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.task import load_task

    config = build_config({"paths": {"scratch_dir": str(tmp_path / "scratch")},
                           "eval_config": {"cudagraphs_baseline": True}})
    ev = Evaluator(load_task(Path(__file__).parents[1] / "examples" / "gelu"), config,
                   bench_budget_s=0.5)
    try:
        stats = ev.baselines()
    finally:
        ev.close()
    assert stats is not None and not stats["timed_out"], (ev.baseline_error, stats)
    assert stats.get("cudagraphs_mode") == "reduce-overhead", stats.get("cudagraphs_error")
    for kind in ("eager", "compile", "cudagraphs"):
        assert stats[kind]["median"] > 0 and stats[kind]["n_trials"] >= 3, stats[kind]
    assert stats["eager_late"]["n_trials"] == stats["cudagraphs"]["n_trials"]
    print({k: stats[k]["median"] for k in ("eager", "compile", "cudagraphs")})
