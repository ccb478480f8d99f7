"""openkernel: evolutionary search for faster, verified GPU kernels.

    import openkernel
    for event in openkernel.optimize("examples/gelu", {"max_iters": 2}):
        print(event)

The engine never imports a UI (kernelcode, textual, dash).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

__version__ = "0.1.0"

__all__ = ["__version__", "optimize", "submit", "RunControl"]


def optimize(task, config=None, *, overrides=(), control=None, store=None) -> Iterator:
    """Search for a faster kernel for ``task``; yields ``openkernel.events`` as it goes.

    Args:
        task: a KernelBench-format file, a task folder, a run config YAML, or a loaded Task.
        config: a Config, a dict of config keys, a YAML path, or None for the defaults
            (the task folder's config.yaml applies first when present).
        overrides: ``key.sub=value`` strings, as ``--set`` on the command line.
        control: a RunControl to pause, resume, stop or steer the run from another thread.
        store: an open Store (default: config.paths.kernels_db_path).
    """
    from openkernel.config import Config, build_config, read_yaml
    from openkernel.runner import overrides_from, resolve_run
    from openkernel.search.control import RunControl
    from openkernel.search.loop import Search
    from openkernel.task import Task

    if isinstance(task, Task):
        if isinstance(config, Config):
            cfg = config
        else:
            data = read_yaml(config) if isinstance(config, (str, Path)) else dict(config or {})
            cfg = build_config(data, list(overrides))
        resolved = task
    else:
        extra = list(overrides)
        if isinstance(config, Config):
            data = config.model_dump(exclude_unset=True)
        elif isinstance(config, (str, Path)):
            data = read_yaml(config)
        else:
            data = dict(config or {})
        data.pop("task", None)
        resolved, cfg = resolve_run(task, overrides_from(data) + extra)
    yield from Search(resolved, cfg, control or RunControl(), store).run()


def __getattr__(name: str):
    if name == "RunControl":
        from openkernel.search.control import RunControl

        return RunControl
    raise AttributeError(name)
