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


def submit(task, code: str, *, job_name: str, author: str = "user", parent_id: str | None = None,
           description: str = "", backend: str | None = None, config=None, overrides=(),
           store=None):
    """Judge one kernel written outside the generator into a job that is not running: the job
    resumes for it alone (no new iterations, no critic), and it is stored as ``u<N>`` with its
    author and parent. A live job takes one through ``RunControl.submit`` instead.

    Args:
        task, config, overrides, store: as for :func:`optimize` (the job's own task).
        code: the whole kernel module (a ``ModelNew``).
        job_name: the job it joins (a new one if none is stored under this name).
        author: ``user`` or ``agent:<name>``.
        parent_id: the job's kernel it was derived from.

    Returns:
        The judged ``Program``.

    Raises:
        OpenKernelError: bad input (code that does not parse, an unknown parent, a task or
            config that does not load); nothing is stored then.
    """
    from openkernel.config import Config
    from openkernel.search.control import RunControl
    from openkernel.search.external import Submission

    control = RunControl(iterate=False)
    pending = control.submit(Submission(code=code, author=author, parent_id=parent_id,
                                        description=description, backend=backend))
    if isinstance(config, Config):
        config = config.model_copy(update={"job_name": job_name})
    else:
        overrides = [*overrides, f"job_name={job_name}"]
    for _ in optimize(task, config, overrides=overrides, control=control, store=store):
        pass
    return pending.result()


def __getattr__(name: str):
    if name == "RunControl":
        from openkernel.search.control import RunControl

        return RunControl
    raise AttributeError(name)
