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


def submit(task, code: str, *, job: str, config=None, overrides=(), parent: str | None = None,
           author: str = "user", description: str = "", backend: str | None = None, store=None):
    """Judge one kernel into a job, finished or not, and store it as the job's ``u<N>``.

    The job is resumed for that kernel alone (no iteration of the generator runs): it is judged
    by the same pipeline as the search's own candidates, stored with its author and parent,
    drawn in the job's graph, and can be a parent of the job's later candidates. A job this
    process is running takes kernels through its ``RunControl.submit`` instead; the MCP
    server's ``submit`` does that for the jobs it runs.

    Args:
        task: as :func:`optimize` (the job's task).
        code: the whole kernel module (``class ModelNew``).
        job: the job's name (``job_name``); a name no job has yet starts one with this kernel.
        config, overrides, store: as :func:`optimize` (``max_iters`` is set to 0).
        parent: the id of the job's kernel it was derived from.
        author: ``user`` or ``agent:<name>``.
        description: one line: what it tries.
        backend: ``triton`` or ``cuda`` (default: the job's).

    Returns:
        The stored ``Program`` with its verdict. Raises ``OpenKernelError`` for bad input (code
        that does not parse, a parent not in the job) or a run that could not start.
    """
    from openkernel.errors import OpenKernelError
    from openkernel.events import RunFinished
    from openkernel.search.control import RunControl
    from openkernel.search.external import Submission

    control = RunControl()
    pending = control.submit(Submission(code=code, author=author, parent_id=parent,
                                        description=description, backend=backend))
    finished = None
    for event in optimize(task, config, overrides=[*overrides, f"job_name={job}", "max_iters=0"],
                          control=control, store=store):
        if isinstance(event, RunFinished):
            finished = event
    if not pending.outcome.done():
        why = finished.error if finished is not None and finished.error else "the run ended"
        raise OpenKernelError(f"{why}: the kernel was not judged")
    return pending.result()


def __getattr__(name: str):
    if name == "RunControl":
        from openkernel.search.control import RunControl

        return RunControl
    raise AttributeError(name)
