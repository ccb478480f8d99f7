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


SHRINK = (1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 64, 1 / 256, 1 / 1024)  # a smaller set's factors
ALIKE = 64  # a smaller set's sizes keep the full ones' remainder modulo this


def _alike(n: int, factor: float) -> int | None:
    """The largest size at most ``n * factor`` (at least 2) that leaves ``n``'s remainder
    modulo ``ALIKE``, or None if none is below ``n``.

    Triton compiles a kernel for its integer arguments' divisibility by 16 (and a 1 as a
    constant): shapes, products and sums of such sizes, and their quotients by a stride of up
    to 4, are then as divisible as at full size, so what a sweep compiled on the smaller set
    serves its finalists at full size (on the H200 an awkward size compiled the three
    finalists of a convolution sweep again: 0.6-2.6 s of its benchmark phase, kb22-s27)."""
    step = -(-(n - max(2, int(n * factor))) // ALIKE)  # steps of ALIKE down to the target
    size = n - step * ALIKE
    return size if 2 <= size < n else None


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
        """``cls(*get_init_inputs())`` after the shared seed, in eval mode, its weights drawn on
        the device itself: drawn on the CPU and copied, KernelBench's 4 GiB of weights
        (level2/56) took 9-12 s in every worker on the H200's host, and a sweep makes one model
        per combination. The reference and the candidates are drawn alike, so a candidate whose
        own weights are not copied in (other names) draws what the reference drew. A
        constructor that cannot run there (a CPU-only step) is built on the CPU."""
        torch.manual_seed(INIT_SEED)
        model = None
        if self.device != "cpu":
            try:
                with torch.device(self.device):
                    model = cls(*self.init_inputs())
            except Exception:
                torch.manual_seed(INIT_SEED)
        if model is None:
            model = cls(*self.init_inputs())
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device).eval()
        return model

    def reference_model(self) -> torch.nn.Module:
        return self.make_model(self.ref.Model)

    def _generate(self, fn, *args) -> list:
        """Call an input function with the device as the default for new tensors: KernelBench's
        ``get_inputs`` builds its tensors with plain ``torch.rand``, which then draws them on
        the GPU (seconds saved per input set of gigabytes) instead of on the CPU and copying."""
        with torch.device(self.device):
            values = fn(*args)
        return list(to_device(list(values), self.device))

    def inputs(self, seed: int) -> list:
        """Fresh inputs for ``seed`` on the device."""
        torch.manual_seed(seed)
        hook = self.hook("get_inputs")
        if hook:
            return list(to_device(list(hook(self.device)), self.device))
        return self._generate(self.ref.get_inputs)

    def extra_inputs(self, seed: int, ref_model: torch.nn.Module) -> tuple[list[list], str]:
        """Held-out input sets and where they came from ("task hook", "derived" or why none)."""
        torch.manual_seed(seed)
        hook = self.hook("get_extra_inputs")
        if hook:
            return [list(to_device(list(s), self.device)) for s in hook(self.device)], "task hook"
        if self.hook("get_inputs"):
            return [], "none (the task's get_inputs hook has no get_extra_inputs)"
        return self._derived(seed, ref_model)

    def small_inputs(self, seed: int, small_set: dict,
                     ref_model: torch.nn.Module) -> tuple[list, str] | None:
        """The probe's smaller input set (``Footprint.small_set``) and its label, or None."""
        if "sizes" in small_set:
            sizes = small_set["sizes"]
            return self.sized_inputs(seed, sizes), "a smaller input set (" + ", ".join(
                f"{n}={v}" for n, v in sizes.items()) + ")"
        if "extra" in small_set:
            sets, _ = self.extra_inputs(20_000, ref_model)
            return sets[small_set["extra"]], f"held-out input set {small_set['extra']}"
        return None

    # -- inputs of other sizes (KernelBench files: the integer globals get_inputs reads) ----
    def _read_by(self, fn: str) -> tuple[str, ...]:
        """The global names the reference's function ``fn`` reads."""
        return getattr(getattr(getattr(self.ref, fn, None), "__code__", None), "co_names", ())

    def size_names(self) -> list[str]:
        return [n for n in dict.fromkeys(self._read_by("get_inputs"))
                if type(getattr(self.ref, n, None)) is int and getattr(self.ref, n) > 1]

    def sized_inputs(self, seed: int, sizes: dict[str, int], device: str | None = None) -> list:
        """Inputs for ``seed`` with some size globals replaced (``device="meta"``: shapes only)."""
        saved = {n: getattr(self.ref, n) for n in sizes}
        try:
            for n, v in sizes.items():
                setattr(self.ref, n, v)
            torch.manual_seed(seed)
            if device == "meta":
                with torch.device("meta"):
                    return list(self.ref.get_inputs())
            return self._generate(self.ref.get_inputs)
        finally:
            for n, v in saved.items():
                setattr(self.ref, n, v)

    def size_options(self, scale, names: list[str] | None = None) -> list[dict[str, int]]:
        """Ways to resize: every size global (of ``names``) at once, then each one alone (a
        global that also sizes the model, such as a channel count, makes the first fail where
        the second works); one that ``scale`` gives None for is left as it is."""
        names = self.size_names() if names is None else names
        full = {n: v for n in names if (v := scale(getattr(self.ref, n))) is not None}
        options = [full] + [{n: v} for n, v in full.items()] if len(full) > 1 else [full]
        return [o for o in options if o]

    def _runs(self, ref_model: torch.nn.Module, inputs: list) -> bool:
        with torch.no_grad():
            ref_model(*clone(inputs))
        return True

    def _derived(self, seed: int, ref_model: torch.nn.Module) -> tuple[list[list], str]:
        options = self.size_options(_awkward)
        if not options:
            return [], "none (get_inputs reads no integer sizes to vary)"
        why = ""
        for sizes in options:
            try:
                inputs = self.sized_inputs(seed, sizes)
                self._runs(ref_model, inputs)
            except Exception as err:  # the reference rejects these sizes: try the next way
                why = type(err).__name__
                continue
            return [inputs], "derived (" + ", ".join(f"{n}={v}" for n, v in sizes.items()) + ")"
        return [], f"none (the reference does not run on other sizes: {why})"

    def small_sizes(self, ref_model: torch.nn.Module, target_bytes: int) -> dict[str, int] | None:
        """Size globals that make an input set of at most ``target_bytes`` which the reference
        accepts (for the float64 check where the full set does not fit), or None.

        Shapes alike the full ones modulo ``ALIKE`` are preferred (``_alike``: the kernels a
        sweep compiled on the smaller set then serve its finalists at full size): first the
        globals and factor that awkward sizes would shrink (the first to fit), with alike sizes;
        else alike sizes of globals the model is not built from (not read by
        ``get_init_inputs``: level3/50's sequence length, its mask's size, shrunk in place of
        its batch of 16 failed kernels that are right on the problem's own shapes, kb22-s27-b
        on the H200); else the awkward sizes."""
        awkward = None
        for factor in SHRINK:
            for sizes in self.size_options(lambda n, f=factor: _awkward(max(2, int(n * f)))):
                if self._fits(sizes, ref_model, target_bytes):
                    awkward = (factor, sizes)
                    break
            if awkward:
                break
        if awkward:
            factor, sizes = awkward
            alike = {n: _alike(getattr(self.ref, n), factor) for n in sizes}
            if None not in alike.values() and self._fits(alike, ref_model, target_bytes):
                return alike
        free = [n for n in self.size_names() if n not in self._read_by("get_init_inputs")]
        for factor in SHRINK:
            for sizes in self.size_options(lambda n, f=factor: _alike(n, f), free):
                if self._fits(sizes, ref_model, target_bytes):
                    return sizes
        return awkward[1] if awkward else None

    def _fits(self, sizes: dict[str, int], ref_model: torch.nn.Module, target_bytes: int) -> bool:
        """Whether the inputs of ``sizes`` take at most ``target_bytes`` and the reference runs."""
        try:
            shapes = self.sized_inputs(0, sizes, device="meta")
            nbytes = sum(t.numel() * t.element_size() for t in tensors_in(shapes))
        except Exception:
            nbytes = None  # not meta-friendly: judge by a real run below
        if nbytes is not None and nbytes > target_bytes:
            return False
        try:
            inputs = self.sized_inputs(0, sizes)
            if nbytes is None and sum(t.numel() * t.element_size()
                                      for t in tensors_in(inputs)) > target_bytes:
                return False
            self._runs(ref_model, inputs)
        except Exception:
            return False
        return True


def load_state(ref_model: torch.nn.Module, cand_model: torch.nn.Module) -> bool:
    """Copy the reference's weights when both state_dicts have the same keys and shapes."""
    if not _same_state(ref_model, cand_model):
        return False
    cand_model.load_state_dict(ref_model.state_dict())
    return True


def share_state(source: torch.nn.Module, model: torch.nn.Module) -> bool:
    """Point ``model``'s parameters and buffers at ``source``'s tensors instead of copies of
    them (same names, shapes, dtypes and devices; else False and nothing changes): a sweep's
    combinations hold one copy of the weights between them (worker/sweep.py)."""
    if not _same_state(source, model, exact=True):
        return False
    own, theirs = model.state_dict(keep_vars=True), source.state_dict(keep_vars=True)
    for name, tensor in own.items():
        tensor.data = theirs[name].data  # the same Parameter object: the module keeps it
    return True


def state_bytes(model: torch.nn.Module) -> int:
    """What ``model``'s parameters and buffers take."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _same_state(a, b, exact: bool = False) -> bool:
    if not isinstance(a, torch.nn.Module) or not isinstance(b, torch.nn.Module):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    return bool(sa) and sa.keys() == sb.keys() and all(
        sa[k].shape == sb[k].shape and (not exact or (sa[k].dtype == sb[k].dtype
                                                      and sa[k].device == sb[k].device))
        for k in sa)
