"""Config, task loading and run resolution: bad input gets one clear message."""

import subprocess
import sys
import textwrap

import pytest

from openkernel.config import build_config, load_config
from openkernel.errors import ConfigError, TaskError
from openkernel.runner import resolve_run
from openkernel.task import load_task


def test_defaults_and_overrides(tmp_path):
    cfg = build_config({}, ["max_iters=3", "eval_config.build_timeout_s=7.5", "backend=cuda"])
    assert cfg.max_iters == 3 and cfg.eval_config.build_timeout_s == 7.5 and cfg.backend == "cuda"
    assert cfg.paths.kernels_db_path == "runs/kernels.sqlite3"
    assert cfg.inference == [] and not cfg.uses_llm


def test_unknown_keys_are_named():
    with pytest.raises(ConfigError) as err:
        build_config({"max_iter": 3, "eval_config": {"timeout": 1}})
    assert "unknown key 'max_iter'" in str(err.value)
    assert "unknown key 'eval_config.timeout'" in str(err.value)


def test_bad_values_and_overrides():
    with pytest.raises(ConfigError, match="backend"):
        build_config({}, ["backend=sycl"])
    with pytest.raises(ConfigError, match="expected key=value"):
        build_config({}, ["max_iters"])


def test_inference_ensemble_forms():
    cfg = build_config({"inference": ["openai/a", {"model": "openai/b", "weight": 2,
                                                    "api_base": "http://127.0.0.1:1/v1"}]})
    assert [m.model for m in cfg.inference] == ["openai/a", "openai/b"]
    assert cfg.inference[1].weight == 2


def test_every_shipped_yaml_loads(examples_dir):
    root = examples_dir.parent
    files = list((root / "configs").glob("*.yaml")) + list(examples_dir.rglob("config.yaml"))
    assert files
    for f in files:
        load_config(f)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")


def test_load_examples(examples_dir):
    for name in ("gelu", "softmax", "matmul_bias_relu"):
        task = load_task(examples_dir / name)
        assert task.name == name and "class Model" in task.reference_code
        assert task.user_instructions and "get_inputs" in task.hooks
    kb = load_task(examples_dir / "kernelbench" / "19_ReLU.py")
    assert kb.folder is None and kb.name == "19_ReLU"


def test_bad_tasks_name_file_and_problem(tmp_path):
    with pytest.raises(TaskError, match="no such task"):
        load_task(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="needs reference.py"):
        load_task(tmp_path / "empty")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef get_inputs():\n    return []\n")
    with pytest.raises(TaskError, match=r"bad.py.*missing class Model"):
        load_task(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("class Model(:\n")
    with pytest.raises(TaskError, match="not valid Python"):
        load_task(broken)


def test_resolve_run_layers(tmp_path, examples_dir):
    task, cfg = resolve_run(examples_dir / "gelu", ["max_iters=2"])
    assert task.name == "gelu" and cfg.task_name == "gelu" and cfg.max_iters == 2
    run_cfg = tmp_path / "run.yaml"
    run_cfg.write_text(f"task: {examples_dir / 'softmax'}\nbranches_per_iteration: 2\n")
    task, cfg = resolve_run(run_cfg, [])
    assert task.name == "softmax" and cfg.branches_per_iteration == 2
    task, cfg = resolve_run(None, [])
    assert task.name == "gelu"  # the shipped default


def test_resolve_relative_task_in_config(tmp_path, examples_dir):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "reference.py").write_text(
        (examples_dir / "kernelbench" / "19_ReLU.py").read_text())
    (tmp_path / "cfg.yaml").write_text("task: t\n")
    task, _ = resolve_run(tmp_path / "cfg.yaml")
    assert task.reference_path == (tmp_path / "t" / "reference.py").resolve()


def test_engine_imports_without_ui():
    code = textwrap.dedent("""
        import sys
        import openkernel, openkernel.cli, openkernel.search.loop, openkernel.store
        import openkernel.evaluation.host.executor, openkernel.generators
        bad = [m for m in sys.modules if m.split('.')[0] in ('kernelcode', 'textual', 'dash', 'litellm')]
        assert not bad, bad
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_starting_kernel_is_named(examples_dir, tmp_path):
    with pytest.raises(ConfigError, match="kernels_iter_0_path: .*no such kernel file"):
        resolve_run(examples_dir / "gelu", [f"kernels_iter_0_path={tmp_path / 'nope.py'}"])
