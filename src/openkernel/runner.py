"""Turning a command line (task or config path + ``--set`` overrides) into a Task and a Config."""

from __future__ import annotations

from pathlib import Path

from openkernel.config import Config, apply_overrides, build_config, read_yaml
from openkernel.errors import ConfigError
from openkernel.task import Task, load_task

# The shipped default: an example a new user can run with no GPU and no API key.
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def overrides_from(data: dict) -> list[str]:
    """Config keys as ``--set`` strings (nested dicts as dotted keys; values as JSON, which is
    YAML, so lists of model entries survive the round trip)."""
    import json

    def flatten(d: dict, prefix: str = ""):
        for key, value in d.items():
            if isinstance(value, dict):
                yield from flatten(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}={json.dumps(value)}"

    return list(flatten(data))


def resolve_run(task_or_config: str | Path | None = None,
                overrides: list[str] | tuple[str, ...] = (),
                said_as: str = "--set") -> tuple[Task, Config]:
    """Resolve what to run. Config layers, lowest first: the task folder's config.yaml, the run
    config file, then ``--set`` overrides. A relative ``task`` in a config file is read from the
    config file's folder. ``said_as``: what a bad override's message calls where it came from
    (MCP's tools take a ``config`` argument, not the command line's ``--set``)."""
    overrides = list(overrides)
    run_data: dict = {}
    config_dir = Path.cwd()
    source = said_as
    target = Path(task_or_config) if task_or_config else None
    if target is None and not any(o.split("=", 1)[0].strip() == "task" for o in overrides):
        if not DEFAULT_CONFIG.is_file():
            raise ConfigError("no task given and the default config is missing "
                              f"({DEFAULT_CONFIG}); pass a task file or folder")
        target = DEFAULT_CONFIG
    if target is not None and target.suffix in (".yaml", ".yml"):
        run_data = read_yaml(target)
        config_dir = target.resolve().parent
        source = str(target)
        task_ref = run_data.get("task")
        if task_ref is None and not any(o.startswith("task=") for o in overrides):
            raise ConfigError(f"{target}: no 'task' key: name a task file or folder")
    elif target is not None:
        run_data = {"task": str(target)}
    merged = apply_overrides(run_data, overrides)
    task_ref = merged.get("task")
    if not task_ref:
        raise ConfigError("no task: pass a task file or folder, or --set task=PATH")
    task_path = Path(str(task_ref)).expanduser()
    if not task_path.is_absolute() and "task" in run_data and source != said_as and \
            not any(o.startswith("task=") for o in overrides):
        task_path = config_dir / task_path
    task = load_task(task_path)
    base: dict = {}
    if task.config_path is not None:
        base = read_yaml(task.config_path)
        base.pop("task", None)
    layered = {**base, **{k: v for k, v in run_data.items()}}
    for key in ("eval_config", "paths", "search", "prompt", "critic", "budget", "traces"):
        if isinstance(base.get(key), dict) and isinstance(run_data.get(key), dict):
            layered[key] = {**base[key], **run_data[key]}
    layered["task"] = str(task_path)
    config = build_config(layered, [o for o in overrides if not o.startswith("task=")],
                          source=source)
    if config.task_name is None:
        config.task_name = task.name
    if config.kernels_iter_0_path:
        start = Path(config.kernels_iter_0_path).expanduser()
        if not start.is_absolute() and source != said_as and "kernels_iter_0_path" in run_data:
            start = config_dir / start
        if not start.is_file():
            raise ConfigError(f"kernels_iter_0_path: {start}: no such kernel file")
        config.kernels_iter_0_path = str(start)
    return task, config
