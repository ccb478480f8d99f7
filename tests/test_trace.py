"""The probe's trace of the forward (evaluation/worker/trace.py): a symbolic graph of aten ops."""

from __future__ import annotations

import json
from dataclasses import asdict

import torch

from openkernel.evaluation.worker.trace import _batched_matmul, trace_forward
from openkernel.records import TaskProbe


def test_trace_is_a_symbolic_graph_that_survives_json():
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6)).eval()
    trace = trace_forward(model, [torch.randn(5, 3, 8)])
    assert trace.symbolic and trace.sizes == {"s0": [0, 0], "s1": [0, 1]}
    ops = [op.op for op in trace.ops]
    assert "aten.addmm.default" in ops and "aten.var_mean.correction" in ops
    assert "aten.native_layer_norm.default" in trace.top_ops  # decomposed, named where it was
    view = next(op for op in trace.ops if op.op == "aten.view.default")
    assert view.args == [{"t": "in0"}, [{"sym": "s0*s1"}, 8]]
    assert [s.name for s in trace.state] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    probe = TaskProbe(ok=True, trace=trace)
    again = TaskProbe.from_json(json.loads(json.dumps(asdict(probe))))
    assert again.trace == trace


def test_in_place_ops_and_constants_are_recorded_for_what_they_are():
    class Model(torch.nn.Module):
        def forward(self, x):
            y = x * torch.tensor([1.0, 2.0, 3.0])
            y.relu_()  # on an intermediate: the functional op
            x.add_(1)  # on the input: refused later, named here
            return y

    trace = trace_forward(Model(), [torch.randn(4, 3)])
    assert trace.constants == [{"values": [1.0, 2.0, 3.0], "shape": [3], "dtype": "torch.float32"}]
    notes = {op.op: op.note for op in trace.ops}
    assert notes["aten.relu_.default"] == ""
    assert notes["aten.add_.Tensor"] == "writes into the reference's input or state"


def test_data_dependent_forward_falls_back_to_fixed_sizes():
    class Model(torch.nn.Module):
        def forward(self, x):
            return x * float(x.abs().max())  # a value read back: no symbolic trace

    trace = trace_forward(Model(), [torch.randn(4, 3)])
    assert trace is not None and not trace.symbolic and "sizes are fixed" in trace.note
    assert trace.inputs[0].shape == [4, 3]


def test_batched_matmul_is_torchs_matmul_written_with_size_arithmetic():
    """The trace's own ``@`` for operands with batch dims (torch 2.11's matmul fixes every size
    of them): the same values as torch.matmul, broadcasting included; 1-D and 2-D are torch's."""
    g = torch.Generator().manual_seed(0)
    pairs = [((2, 3, 4, 5), (2, 3, 5, 6)), ((3, 4, 5), (5, 6)), ((4, 5), (2, 5, 6)),
             ((2, 1, 4, 5), (3, 5, 6)), ((3, 4, 5), (3, 5, 2))]
    for sa, sb in pairs:
        a, b = torch.randn(*sa, generator=g), torch.randn(*sb, generator=g)
        torch.testing.assert_close(_batched_matmul(a, b), torch.matmul(a, b))
    square = torch.randn(4, 4, generator=g)
    assert _batched_matmul(square, square) is None
    assert _batched_matmul(torch.randn(2, 4, 4, generator=g), torch.randn(4, generator=g)) is None


def test_attention_is_traced_with_its_batch_and_sequence_symbolic():
    """Causal attention as KernelBench level3/43 writes it: q @ k^T over (B, heads, T, hs), a
    mask sliced to T, att @ v. Its sizes stay expressions of B and T (on torch 2.11 the trace
    came out at fixed sizes, and the kernels written from it failed the held-out batch)."""

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = torch.nn.Linear(32, 96)
            self.register_buffer("bias", torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(32, dim=2)
            q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // 4) ** 0.5)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
            return (att @ v).transpose(1, 2).contiguous().view(B, T, C)

    trace = trace_forward(Attention(), [torch.randn(2, 16, 32)])
    assert trace.symbolic and trace.sizes == {"s0": [0, 0], "s1": [0, 1]}, trace.note
    bmms = [op for op in trace.ops if op.op == "aten.bmm.default"]
    assert len(bmms) == 2
    assert bmms[0].outputs[0].shape == ["4*s0", "s1", "s1"]


def test_a_forward_that_fixes_every_size_is_not_called_symbolic():
    class Model(torch.nn.Module):
        def forward(self, x):
            if tuple(x.shape) != (2, 3, 4):  # a guard on every size: none follows the input
                raise ValueError("fixed sizes")
            return x * 2

    trace = trace_forward(Model(), [torch.randn(2, 3, 4)])
    assert not trace.symbolic and trace.sizes == {}
    assert "sizes are fixed: the forward's guards fixed every input size" in trace.note
