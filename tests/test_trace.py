"""The probe's trace of the forward (evaluation/worker/trace.py): a symbolic graph of aten ops."""

from __future__ import annotations

import json
from dataclasses import asdict

import torch

from openkernel.evaluation.worker.trace import trace_forward
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
