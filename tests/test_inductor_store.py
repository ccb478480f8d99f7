"""Inductor's captures made once per task, hardware and software (evaluation/host/captures.py).

The CPU makes no capture (no GPU): tests/test_inductor_signatures.py stores genuine ones made
for the stand-in H200 under this machine's key and its real probes are handed them. Here,
without a worker beyond the hardware's: what a probe would be handed for the same task, a task
whose code changed (none), and a run with ``--fresh-baselines`` (none). On the H200 the probe
that made them stores them and the next job's probe reuses them (the GPU test at the end).
"""

from __future__ import annotations

import pytest

from openkernel import cli
from openkernel.evaluation.host import captures
from openkernel.evaluation.host.baselines import environment_key
from openkernel.evaluation.host.executor import Evaluator
from openkernel.evaluation.worker.inductor import CAPTURES_FORMAT
from openkernel.runner import resolve_run
from openkernel.store import Store

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {factor}


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''


def _probe(path, store: Store, *overrides: str):
    task, config = resolve_run(path, [*overrides])
    ev = Evaluator(task, config, store, bench_budget_s=0.1)
    try:
        return ev.probe(), ev
    finally:
        ev.close()


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> dict:
    """A task with captures stored under this machine's key."""
    root = tmp_path_factory.mktemp("captures")
    (root / "double").mkdir()
    (root / "double" / "reference.py").write_text(REFERENCE.format(factor=2))
    store = Store(root / "kernels.sqlite3")
    scratch = f"paths.scratch_dir={root / 'scratch'}"
    task, config = resolve_run(root / "double", [scratch])
    ev = Evaluator(task, config, store)
    hw = ev.hardware
    ev.close()
    record = {"format": CAPTURES_FORMAT, "captures": [{"code": "def call(args): ..."}],
              "warnings": []}
    store.put_inductor_captures(task.digest, hw.label, environment_key(hw), False, record)
    yield {"root": root, "store": store, "scratch": scratch, "record": record}
    store.close()


def _stored(path, store: Store, *overrides: str) -> dict | None:
    """What a probe of the task at ``path`` would be handed (no worker runs)."""
    task, config = resolve_run(path, [*overrides])
    ev = Evaluator(task, config, store)
    try:
        return captures.stored(ev, ev.hardware)
    finally:
        ev.close()


def test_a_changed_task_does_not_reuse_them(kept):
    other = kept["root"] / "triple"
    other.mkdir()
    (other / "reference.py").write_text(REFERENCE.format(factor=3))
    assert _stored(kept["root"] / "double", kept["store"], kept["scratch"]) == kept["record"]
    assert _stored(other, kept["store"], kept["scratch"]) is None


def test_fresh_baselines_makes_them_again(kept):
    path = kept["root"] / "double"
    fresh = cli.parse(["run", str(path), "--fresh-baselines"]).overrides
    assert _stored(path, kept["store"], kept["scratch"], *fresh) is None


def _captures_key(ev) -> tuple:
    """What a probe's captures (and trace) are stored under, TF32 off."""
    return (ev.task.digest, ev.hardware.label, environment_key(ev.hardware), False)


@pytest.mark.gpu
def test_on_the_gpu_a_probe_stores_its_captures_and_the_next_reuses_them(examples_dir, tmp_path):
    """On the H200: the first probe of the softmax example captures (seconds) and stores what
    it made; a second job's probe is handed them and its inductor step is near zero."""
    store = Store(tmp_path / "kernels.sqlite3")
    scratch = f"paths.scratch_dir={tmp_path / 'scratch'}"
    try:
        first, ev = _probe(examples_dir / "softmax", store, scratch)
        key = _captures_key(ev)
        record = store.inductor_captures(*key)
        assert first.inductor and record["captures"] == first.inductor
        second, _ = _probe(examples_dir / "softmax", store, scratch)
        assert second.inductor == first.inductor
        assert second.steps_s["inductor"] < 0.5 < first.steps_s["inductor"], (
            first.steps_s, second.steps_s)
    finally:
        store.close()


def test_a_probe_keeps_its_trace_and_the_next_job_reuses_it(tmp_path):
    """The trace is kept with the captures, on the CPU too (no capture there): a second job's
    probe is handed it and traces nothing; a record another trace.py made, or one from before
    traces were kept, is traced again and stored again, its captures kept."""
    from openkernel.evaluation.worker import trace

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "reference.py").write_text(REFERENCE.format(factor=2).replace(
        "return x * 2", "return torch.softmax(x * 2, dim=-1) + x"))
    store = Store(tmp_path / "kernels.sqlite3")
    scratch = f"paths.scratch_dir={tmp_path / 'scratch'}"
    try:
        first, ev = _probe(tmp_path / "t", store, scratch)
        key = _captures_key(ev)
        record = store.inductor_captures(*key)
        assert first.ok and first.trace is not None and first.trace.ops, first.warnings
        assert record["trace"]["version"] == trace.VERSION and "from the store" not in first.log
        second, _ = _probe(tmp_path / "t", store, scratch)
        assert second.trace == first.trace and "the trace from the store" in second.log
        assert "Inductor" not in second.log  # the CPU captured nothing
        fresh = cli.parse(["run", str(tmp_path / "t"), "--fresh-baselines"]).overrides
        third, _ = _probe(tmp_path / "t", store, scratch, *fresh)
        assert third.trace == first.trace and "from the store" not in third.log

        older = {"format": CAPTURES_FORMAT, "captures": [{"code": "def call(args): ..."}],
                 "warnings": [], "trace": {**record["trace"], "version": "another"}}
        store.put_inductor_captures(*key, older)
        again, _ = _probe(tmp_path / "t", store, scratch)
        assert again.trace == first.trace and "the trace" not in again.log
        assert "Inductor's code from the store" in again.log
        kept = store.inductor_captures(*key)
        assert kept["trace"]["version"] == trace.VERSION
        assert kept["captures"] == older["captures"]
    finally:
        store.close()
