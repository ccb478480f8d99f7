"""The task inside a worker: the reference model, its inputs, held-out shapes.

Inputs come from the task's ``get_inputs(device)`` hook when the folder has one, else from the
KernelBench ``get_inputs()`` (moved to the device, since those are usually built on the CPU).
Held-out input sets come from ``get_extra_inputs(device)``; without that hook they are derived
automatically by shrinking the reference module's integer globals that ``get_inputs`` reads
(``batch_size``, ``dim``, ...) to awkward, non-power-of-two sizes, kept only if the reference
still runs on them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

INIT_SEED = 42  # reference and candidate are built after the same seed


def load_module(path: str | Path, name: str) -> ModuleType:
    """Import a Python file as module ``name`` (registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value


def tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def _awkward(n: int) -> int:
    """A nearby size that is neither the benchmark size nor a power of two."""
    return max(1, n - max(1, n // 8) - 1)


class TaskRuntime:
    """Loads the reference (and hooks) and hands out models and inputs on one device."""

    def __init__(self, reference_path: str, hooks_path: str | None, device: str):
        self.device = device
        self.reference_path = reference_path
        self.hooks_path = hooks_path
        self.ref = load_module(reference_path, "openkernel_reference")
        self.hooks = load_module(hooks_path, "openkernel_task_hooks") if hooks_path else None
        for attr in ("Model", "get_init_inputs"):
            if attr == "get_init_inputs" and not hasattr(self.ref, attr):
                continue
            if not hasattr(self.ref, attr):
                raise AttributeError(f"{reference_path}: defines no {attr}")

    def hook(self, name: str) -> Any:
        return getattr(self.hooks, name, None) if self.hooks is not None else None

    def init_inputs(self) -> list:
        fn = getattr(self.ref, "get_init_inputs", None)
        return list(fn()) if fn else []

    def make_model(self, cls: type) -> torch.nn.Module:
        """Build ``cls(*get_init_inputs())`` after the shared seed, on the device, in eval mode."""
        torch.manual_seed(INIT_SEED)
        model = cls(*self.init_inputs())
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device).eval()
        return model

    def inputs(self, seed: int) -> list:
        """Fresh inputs for ``seed`` on the device."""
        torch.manual_seed(seed)
        hook = self.hook("get_inputs")
        values = hook(self.device) if hook else self.ref.get_inputs()
        return list(to_device(list(values), self.device))

    def extra_inputs(self, seed: int, ref_model: torch.nn.Module) -> tuple[list[list], str]:
        """Held-out input sets and where they came from ("task hook", "derived" or why none)."""
        torch.manual_seed(seed)
        hook = self.hook("get_extra_inputs")
        if hook:
            return [list(to_device(list(s), self.device)) for s in hook(self.device)], "task hook"
        if self.hook("get_inputs"):
            return [], "none (the task's get_inputs hook has no get_extra_inputs)"
        return self._derived(seed, ref_model)

    def _derived(self, seed: int, ref_model: torch.nn.Module) -> tuple[list[list], str]:
        fn = getattr(self.ref, "get_inputs", None)
        names = [n for n in getattr(getattr(fn, "__code__", None), "co_names", ())
                 if type(getattr(self.ref, n, None)) is int and getattr(self.ref, n) > 1]
        if not names:
            return [], "none (get_inputs reads no integer sizes to vary)"
        saved = {n: getattr(self.ref, n) for n in names}
        try:
            for n in names:
                setattr(self.ref, n, _awkward(saved[n]))
            torch.manual_seed(seed)
            inputs = list(to_device(list(fn()), self.device))
            with torch.no_grad():
                ref_model(*clone(inputs))
        except Exception as err:  # the reference itself rejects other sizes: nothing to hold out
            return [], f"none (the reference does not run on other sizes: {type(err).__name__})"
        finally:
            for n, v in saved.items():
                setattr(self.ref, n, v)
        sizes = ", ".join(f"{n}={_awkward(v)}" for n, v in saved.items())
        return [inputs], f"derived ({sizes})"


def load_state(ref_model: torch.nn.Module, cand_model: torch.nn.Module) -> bool:
    """Copy the reference's weights when both state_dicts have the same keys and shapes."""
    if not isinstance(cand_model, torch.nn.Module):
        return False
    ref_sd, cand_sd = ref_model.state_dict(), cand_model.state_dict()
    if ref_sd and ref_sd.keys() == cand_sd.keys() and all(
            ref_sd[k].shape == cand_sd[k].shape for k in ref_sd):
        cand_model.load_state_dict(ref_sd)
        return True
    return False
