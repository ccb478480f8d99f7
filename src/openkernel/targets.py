"""Which GPU architectures a run targets, and which of them it can measure here.

``gpu_arch`` may name several targets (``[sm_90, sm_80]``). A candidate is judged (built,
tested, timed, profiled, filed) on one architecture, the *primary*: the first configured one
that has a GPU here. When it is correct, it is timed again on one GPU of each *other*
configured architecture present, and every configured target is compiled for, so a CUDA C++
build error for a GPU this machine lacks is still caught. Pure functions: no torch, no CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_ARCH = re.compile(r"sm_(\d+)(\d)(a?)")


@dataclass(frozen=True)
class TargetPlan:
    primary: str  # judged and filed under this label ("cpu" without a GPU and no target)
    others: tuple[str, ...] = ()  # configured, present: timed after a correct verdict
    missing: tuple[str, ...] = ()  # configured, no GPU of it here: compiled for, never run
    compile: tuple[str, ...] = ()  # CUDA C++ is built for these; () leaves the default


def same_arch(target: str, gpu: str) -> bool:
    """Whether a GPU reporting ``gpu`` (sm_90) runs code built for ``target`` (sm_90, sm_90a)."""
    return target.removesuffix("a") == gpu.removesuffix("a")


def plan_targets(configured: Sequence[str], present: Sequence[str],
                 fallback: str = "cpu") -> TargetPlan:
    """Split the configured targets by what the visible GPUs are.

    Args:
        configured: ``Config.gpu_archs`` (may be empty: use what is here).
        present: The architecture of each visible GPU, by index (empty on the CPU).
        fallback: The label when there is neither a target nor a GPU (the CPU's).

    With targets but none present on a GPU machine, the candidate is still judged on the
    first GPU, and filed under that GPU's architecture: the timing is that GPU's, whatever
    was asked for. On the CPU nothing runs, so the first target names the results.
    """
    configured = list(dict.fromkeys(configured))
    here = [t for t in configured if any(same_arch(t, gpu) for gpu in present)]
    missing = tuple(t for t in configured if t not in here)
    primary = (here or list(present[:1]) or configured or [fallback])[0]
    compile_for = tuple(dict.fromkeys([primary, *configured])) if configured else ()
    return TargetPlan(primary, tuple(here[1:]), missing, compile_for)


def torch_arch_list(archs: Sequence[str]) -> str:
    """TORCH_CUDA_ARCH_LIST for cpp_extension, e.g. [sm_90a, sm_80] -> "8.0;9.0a+PTX".

    Like torch's own default, the newest target also carries PTX, so a GPU newer than every
    target can still JIT the kernel.
    """
    versions = []
    for arch in archs:
        m = _ARCH.fullmatch(arch)
        if m:
            versions.append((int(m[1]), int(m[2]), f"{m[1]}.{m[2]}{m[3]}"))
    if not versions:
        return ""
    versions = sorted(set(versions))
    return ";".join(v for *_, v in versions) + "+PTX"


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """One nvcc ``-gencode`` per target: SASS for exactly that architecture."""
    flags = []
    for arch in dict.fromkeys(archs):
        num = arch.removeprefix("sm_")
        flags += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
    return flags
