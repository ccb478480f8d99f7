"""The environment and limits of a worker process, set by the engine before it starts.

Candidate code is untrusted. A worker process gets an environment without secrets
(:func:`worker_env`), resource limits and its own process group (:func:`limits_preexec`);
it then confines itself with Landlock (``worker/sandbox.py``) before it imports the candidate.
Output that leaves the worker goes through :func:`redact` with :func:`secret_values` as
defence in depth.
"""

from __future__ import annotations

import hashlib
import math
import os
import resource
import site
from collections.abc import Callable, Mapping
from pathlib import Path

from openkernel.evaluation.protocol import PKG_DIR, PROTECT_VAR, lead_session
from openkernel.evaluation.protocol import under as _under
from openkernel.redaction import is_secret as _is_secret
from openkernel.redaction import redact, secret_values  # noqa: F401 - the one redactor

# --- environment ---------------------------------------------------------------------------
_ALLOWED = {
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "LD_LIBRARY_PATH",
    "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "CC", "CXX",
    "CUDAHOSTCXX", "MAX_JOBS", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME", "PYTHONHASHSEED",
}
_ALLOWED_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "NVCC_", "CUBLAS_", "CUDNN_", "TORCH_", "TORCHINDUCTOR_",
    "PYTORCH_", "TRITON_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "OPENKERNEL_",
)
# Secrets by name or value shape (``openkernel.redaction``) are dropped on top of the
# allow-list, so TORCH_HUB_TOKEN or OPENKERNEL_API_KEY go too.
# Each worker's own folders, inside its scratch (whatever the engine's say)
_SCRATCH_DIRS = {
    "HOME": "home", "TMPDIR": "tmp", "TEMP": "tmp", "TMP": "tmp", "XDG_CACHE_HOME": "cache",
    "TRITON_CACHE_DIR": "cache/triton", "TORCH_EXTENSIONS_DIR": "cache/torch_extensions",
    "TORCHINDUCTOR_CACHE_DIR": "cache/inductor", "CUDA_CACHE_PATH": "cache/cuda",
}
_DROPPED = ("TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR")  # default under HOME


def inherited(base_env: Mapping[str, str]) -> dict[str, str]:
    """The engine's variables a worker gets as they are: allow-listed, not secret, and none
    of those set for each worker (its scratch folders)."""
    return {k: v for k, v in base_env.items()
            if (k in _ALLOWED or k.startswith(_ALLOWED_PREFIXES)) and not _is_secret(k, v)
            and k not in _SCRATCH_DIRS and k not in _DROPPED}


def digest(base_env: Mapping[str, str]) -> str:
    """What of the engine's environment and working folder a worker's environment depends on
    (:func:`worker_env`), digested: workers started under the same digest are interchangeable.
    A variable no worker sees does not count: torch sets TORCHINDUCTOR_CACHE_DIR in the
    engine's environment when the engine first imports it (the offline generator reading a
    probe's Inductor capture), and the spares started before are as good as any."""
    seen = sorted(inherited(base_env).items()) + [
        (k, base_env.get(k, "")) for k in ("PYTHONPATH", PROTECT_VAR)] + [("cwd", os.getcwd())]
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]


def worker_env(
    base_env: Mapping[str, str], scratch: Path, device: str, gpu_index: int | None
) -> dict[str, str]:
    """Builds the environment of a worker process from an allow-list.

    Args:
        base_env: The engine's environment (usually ``os.environ``).
        scratch: The worker's scratch directory; HOME, TMPDIR and every cache go inside it,
            so a candidate cannot poison the caches of the next one.
        device: ``"cpu"`` (Triton interpreter, no GPU visible) or ``"cuda"``.
        gpu_index: Index among the GPUs the engine sees, or None.

    Returns:
        The environment: allow-listed variables minus anything secret-looking, plus the
        scratch locations, PYTHONPATH and the variables below.
    """
    scratch = Path(scratch).resolve()
    env = inherited(base_env)
    for var, sub in _SCRATCH_DIRS.items():
        (scratch / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(scratch / sub)
    env.setdefault("PATH", os.defpath)
    env["OPENBLAS_NUM_THREADS"] = "1"  # numpy's pool would start before confine(): unconfined
    # A load_inline build is two translation units: ninja needs no more, and the pool of
    # workers building side by side already fills the cores.
    env.setdefault("MAX_JOBS", "2")
    # Expandable segments: freed blocks of gigabyte tensors are reused for other sizes instead
    # of fragmenting, so what a worker reserves stays near what it allocates (the memory plan).
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        if gpu_index is None:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU worker has no business with the GPUs
    else:
        env.pop("TRITON_INTERPRET", None)
    if gpu_index is not None:
        # The index counts the GPUs the engine sees: map it through the engine's own list.
        seen = [d for d in base_env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = seen[gpu_index] if gpu_index < len(seen) else str(gpu_index)
    # PYTHONPATH: where openkernel lives plus the engine's absolute entries, never its cwd
    # (relative entries and "" mean the cwd) nor a folder above it.
    cwd = Path.cwd().resolve()
    entries = [str(PKG_DIR.parent)]
    # HOME moves into scratch, so the engine's user site-packages must be named explicitly.
    user_site = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    for entry in base_env.get("PYTHONPATH", "").split(os.pathsep) + user_site:
        path = Path(entry).resolve() if entry and os.path.isabs(entry) else None
        if path and path.exists() and not _under(cwd, path) and str(path) not in entries:
            entries.append(str(path))
    env["PYTHONPATH"] = os.pathsep.join(entries)
    protect = [str(cwd)] + [p for p in base_env.get(PROTECT_VAR, "").split(os.pathsep) if p]
    env[PROTECT_VAR] = os.pathsep.join(dict.fromkeys(protect))
    return env


# --- resource limits -----------------------------------------------------------------------
def limits_preexec(cpu_s: float, mem_bytes: int | None) -> Callable[[], None]:
    """Returns a ``preexec_fn`` that starts a session and sets resource limits.

    The limits are computed here, in the parent, so the forked child only makes syscalls.

    Args:
        cpu_s: CPU seconds (all threads together); SIGXCPU then, SIGKILL 2 s later.
        mem_bytes: Address-space cap (RLIMIT_AS), or None: on a GPU the CUDA driver reserves
            far more virtual memory than it uses, so memory is capped elsewhere there.

    Returns:
        A callable for ``subprocess.Popen(preexec_fn=...)``. The child leads a new session and
        process group, so ``os.killpg(proc.pid, SIGKILL)`` ends it and all its children.
    """
    plan = limits(cpu_s, mem_bytes)
    return lambda: lead_session(plan)


def limits(cpu_s: float, mem_bytes: int | None) -> list[tuple[int, int, int]]:
    """The resource limits of a worker, as (RLIMIT_..., soft, hard): see :func:`limits_preexec`
    (a forked worker, ``host/zygote.py``, is sent them)."""
    def capped(which: int, soft: int, hard: int | None = None) -> tuple[int, int]:
        limit = resource.getrlimit(which)[1]  # an unprivileged child cannot raise it
        hard = soft if hard is None else hard
        if limit != resource.RLIM_INFINITY:
            soft, hard = min(soft, limit), min(hard, limit)
        return soft, hard

    cpu = max(1, math.ceil(cpu_s))
    plan = [
        (resource.RLIMIT_CORE, (0, 0)),  # no core files full of tensors in scratch
        (resource.RLIMIT_CPU, capped(resource.RLIMIT_CPU, cpu, cpu + 2)),
        (resource.RLIMIT_NOFILE, capped(resource.RLIMIT_NOFILE, 4096)),
        # Counts every thread of the user (and is not enforced for root): fork bombs only.
        (resource.RLIMIT_NPROC, capped(resource.RLIMIT_NPROC, 8192)),
    ]
    if mem_bytes:
        plan.append((resource.RLIMIT_AS, capped(resource.RLIMIT_AS, int(mem_bytes))))
    return [(which, soft, hard) for which, (soft, hard) in plan]


