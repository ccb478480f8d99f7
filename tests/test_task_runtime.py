"""The task as a worker loads it: the reference model, built where it runs."""

from __future__ import annotations


def test_the_reference_draws_its_weights_on_the_device(tmp_path):
    """Every worker builds the reference; its weights are drawn on the device itself (drawn on
    the CPU and copied, 4 GiB of them took 9-12 s a worker on the H200's host). A constructor
    that cannot run there is built on the CPU and moved, as before. (The meta device stands in
    for the GPU here: nothing is allocated.)"""
    from openkernel.evaluation.worker.task_runtime import TaskRuntime

    body = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
            "    built_on = []\n\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(4096, 4096)\n"
            "        Model.built_on.append(torch.empty(0).device.type)\n{extra}"
            "    def forward(self, x):\n        return self.fc(x)\n\n\n"
            "def get_inputs():\n    return [torch.randn(2, 4096)]\n\n\n"
            "def get_init_inputs():\n    return []\n")
    for name, extra, where in (("plain", "", ["meta"]),
                               ("numpy", "        torch.zeros(2).numpy()\n", ["meta", "cpu"])):
        path = tmp_path / f"{name}.py"
        path.write_text(body.format(extra=extra))
        rt = TaskRuntime(str(path), None, "meta")
        model = rt.reference_model()
        assert rt.ref.Model.built_on == where, name
        assert model.fc.weight.device.type == "meta" and not model.training
