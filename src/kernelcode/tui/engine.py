"""Where events come from: a real ``openkernel.optimize`` run, or an injected sequence.

The engine is imported lazily, inside the worker thread, so the app starts drawing at once and
a missing or broken engine shows up as a message in the app rather than an import error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Union

from openkernel.search.control import RunControl

# What tests and the benchmark may inject: events, or a function of the RunControl that
# yields them (to play a scripted run that honours pause and stop).
EventSource = Union[Iterable[object], Callable[[RunControl], Iterable[object]]]


def engine_events(task_or_config: str | Path | None, overrides: Sequence[str],
                  control: RunControl) -> Iterable[object]:
    """Resolve the task and config, then yield the engine's events (runs in the worker).

    Raises:
        OpenKernelError: the task or config is bad (shown in the app as a message).
    """
    import openkernel
    from kernelcode.tui.state import RunResolved
    from openkernel.runner import resolve_run

    task, config = resolve_run(task_or_config, list(overrides))
    yield RunResolved(config.task_name or task.name, task.reference_code)
    yield from openkernel.optimize(task, config, control=control)


def source_events(source: EventSource, control: RunControl) -> Iterable[object]:
    """The events of an injected source (a callable gets the app's RunControl)."""
    return source(control) if callable(source) else source
