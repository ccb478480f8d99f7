"""Tasks: a KernelBench-format reference file, or a task folder around one.

A KernelBench file defines ``Model`` (an ``nn.Module``), ``get_inputs()`` and
``get_init_inputs()``. A task folder holds ``reference.py`` in that format and, optionally,
``USER_INSTRUCTIONS.md`` (passed verbatim into prompts), ``task.py`` (hooks, below) and
``config.yaml`` (run defaults).

Hooks ``task.py`` may define, all optional:
    get_inputs(device: str) -> list          inputs for this device ("cpu" or "cuda")
    get_extra_inputs(device: str) -> list[list]   held-out input sets (other shapes)
    get_tolerances(dtype) -> dict             {"atol":..., "rtol":..., "max_rel_error":...}

The engine only reads these files as text (to validate them with ``ast``); the code runs in
worker processes, never here.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from openkernel import syntax
from openkernel.errors import TaskError

REFERENCE_NAMES = ("reference.py", "model.py")
HOOK_NAMES = {"get_inputs", "get_extra_inputs", "get_tolerances"}


@dataclass(frozen=True)
class Task:
    name: str
    reference_path: Path
    reference_code: str
    folder: Path | None = None
    user_instructions: str = ""
    hooks_path: Path | None = None
    hooks_code: str = ""
    config_path: Path | None = None
    hooks: frozenset[str] = field(default_factory=frozenset)

    @property
    def digest(self) -> str:
        """Identity of the task's code, for caches (reference timings, probes)."""
        h = hashlib.sha256(self.reference_code.encode())
        h.update(b"\0" + self.hooks_code.encode())
        return h.hexdigest()[:16]


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def _parse(path: Path, code: str) -> ast.Module:
    try:
        return syntax.parse(code, filename=str(path))
    except SyntaxError as err:
        raise TaskError(f"{path}: not valid Python (line {err.lineno}: {err.msg})") from None


def _check_reference(path: Path, code: str, hooks: set[str]) -> None:
    names = _top_level_names(_parse(path, code))
    missing = []
    if not isinstance(names.get("Model"), ast.ClassDef):
        missing.append("class Model (the reference nn.Module)")
    if "get_inputs" not in names and "get_inputs" not in hooks:
        missing.append("get_inputs()")
    if missing:
        raise TaskError(
            f"{path}: not a KernelBench-format reference: missing " + " and ".join(missing)
        )


def load_task(path: str | Path, name: str | None = None) -> Task:
    """Load and validate a task file or folder; raises TaskError naming what is wrong."""
    path = Path(path).expanduser()
    if not path.exists():
        raise TaskError(f"{path}: no such task file or folder")
    folder = None
    hooks_path = config_path = None
    user_instructions = hooks_code = ""
    hooks: set[str] = set()
    if path.is_dir():
        folder = path.resolve()
        reference_path = next((folder / n for n in REFERENCE_NAMES if (folder / n).is_file()), None)
        if reference_path is None:
            raise TaskError(
                f"{path}: a task folder needs reference.py (a KernelBench-format Model, "
                "get_inputs, get_init_inputs)"
            )
        if (folder / "USER_INSTRUCTIONS.md").is_file():
            user_instructions = (folder / "USER_INSTRUCTIONS.md").read_text(encoding="utf-8")
        if (folder / "task.py").is_file():
            hooks_path = folder / "task.py"
            hooks_code = hooks_path.read_text(encoding="utf-8")
            defined = _top_level_names(_parse(hooks_path, hooks_code))
            hooks = {h for h in HOOK_NAMES if isinstance(defined.get(h), ast.FunctionDef)}
            if not hooks:
                raise TaskError(
                    f"{hooks_path}: defines none of the hooks {', '.join(sorted(HOOK_NAMES))}"
                )
        if (folder / "config.yaml").is_file():
            config_path = folder / "config.yaml"
        default_name = folder.name
    else:
        if path.suffix != ".py":
            raise TaskError(f"{path}: a task is a .py file in KernelBench format or a folder")
        reference_path = path.resolve()
        default_name = path.stem
    code = reference_path.read_text(encoding="utf-8")
    _check_reference(reference_path, code, hooks)
    return Task(
        name=name or default_name,
        reference_path=reference_path,
        reference_code=code,
        folder=folder,
        user_instructions=user_instructions,
        hooks_path=hooks_path,
        hooks_code=hooks_code,
        config_path=config_path,
        hooks=frozenset(hooks),
    )
