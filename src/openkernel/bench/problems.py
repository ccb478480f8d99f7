"""The problems of a suite: KernelBench-format files and task folders under the paths given."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from openkernel.errors import OpenKernelError, TaskError
from openkernel.task import REFERENCE_NAMES, load_task

_LEVEL = re.compile(r"level\d+", re.IGNORECASE)
_NUMBER = re.compile(r"^(\d+)")


@dataclass(frozen=True)
class Problem:
    name: str  # the task_name its job is filed under, e.g. "level1/23_Softmax"
    path: Path  # a KernelBench-format file or a task folder


def _name(path: Path) -> str:
    """``level1/23_Softmax`` inside a level folder (KernelBench numbers repeat across levels),
    else the file's stem or the folder's name."""
    stem = path.stem if path.is_file() else path.name
    return f"{path.parent.name}/{stem}" if _LEVEL.fullmatch(path.parent.name) else stem


def _order(path: Path) -> tuple:
    """KernelBench order: by problem number, then by name (2_ before 10_)."""
    m = _NUMBER.match(path.name)
    return (int(m[1]) if m else 1 << 30, path.name)


def _is_task_folder(path: Path) -> bool:
    return path.is_dir() and any((path / n).is_file() for n in REFERENCE_NAMES)


def _walk(folder: Path, found: list[Path], skipped: list[str]) -> None:
    for entry in sorted(folder.iterdir(), key=_order):
        if entry.name.startswith((".", "_")):
            continue
        if _is_task_folder(entry):
            found.append(entry)
        elif entry.is_dir():
            _walk(entry, found, skipped)
        elif entry.suffix == ".py":
            found.append(entry)


def discover(paths: list[str | Path]) -> tuple[list[Problem], list[str]]:
    """The problems under ``paths`` in order, and a line for each file skipped (not a
    KernelBench-format reference). Raises OpenKernelError for a missing path, a path with no
    problem at all, or two problems of the same name."""
    candidates: list[Path] = []
    skipped: list[str] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise OpenKernelError(f"{path}: no such file or folder")
        if path.is_file() or _is_task_folder(path):
            candidates.append(path)
        else:
            before = len(candidates)
            _walk(path, candidates, skipped)
            if len(candidates) == before:
                raise OpenKernelError(f"{path}: no KernelBench-format problem (.py file or task "
                                      "folder) in this folder")
    problems: list[Problem] = []
    seen: dict[str, Path] = {}
    for path in candidates:
        try:
            load_task(path)
        except TaskError as err:
            skipped.append(str(err))
            continue
        name = _name(path.resolve())
        if name in seen:
            raise OpenKernelError(f"two problems are named {name!r}: {seen[name]} and {path}; "
                                  "bench them in separate suites")
        seen[name] = path
        problems.append(Problem(name, path.resolve()))
    if not problems:
        raise OpenKernelError("no KernelBench-format problem found in " + ", ".join(map(str, paths))
                              + (f" ({skipped[0]})" if skipped else ""))
    return problems, skipped
