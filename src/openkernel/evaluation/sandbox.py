"""Confinement of candidate workers: environment, resource limits, Landlock.

Candidate code is untrusted. A worker process gets an environment without secrets
(:func:`worker_env`), resource limits and its own process group (:func:`limits_preexec`), and
confines itself with Landlock before it imports the candidate (:func:`confine`). Output that
leaves the worker goes through :func:`redact` with :func:`secret_values` as defence in depth.

Landlock is driven through raw syscalls (ctypes) rather than the PyPI ``landlock`` package:
that package knows file-system rights only (no TCP rules, no signal / abstract-socket scoping)
and is not installed on the H200 machine. Landlock restricts the calling thread only (until
ABI 8's TSYNC): threads that exist before :func:`confine` stay unconfined, so worker_env pins
OpenBLAS to one thread (numpy starts its pool at import) and confine reports any leftover.
"""

from __future__ import annotations

import ctypes
import math
import os
import pwd
import re
import resource
import site
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

PROTECT_VAR = "OPENKERNEL_SANDBOX_PROTECT"  # os.pathsep list of paths confine must never expose
_PKG_DIR = Path(__file__).resolve().parents[1]  # the openkernel package

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
# Applied on top of the allow-list, so TORCH_HUB_TOKEN or OPENKERNEL_API_KEY go too.
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE"
    r"|DSN|CONNECTION_STRING|DATABASE_URL|(^|_)PAT($|_)",
    re.IGNORECASE,
)
_SECRET_PREFIXES = (
    "AWS_", "GCP_", "GOOGLE_", "GCLOUD_", "CLOUDSDK_", "AZURE_", "OPENAI_", "ANTHROPIC_",
    "LITELLM_", "HF_", "HUGGING", "COHERE_", "MISTRAL_", "GROQ_", "TOGETHER", "DEEPSEEK_",
    "GEMINI_", "OPENROUTER_", "FIREWORKS_", "REPLICATE_", "VERTEX", "WANDB_", "GITHUB_",
    "GH_", "GITLAB_", "NPM_", "PYPI_", "TWINE_", "SSH_", "GPG_", "GNUPG", "VAULT_", "KUBE",
    "DOCKER_", "SLACK_", "SENTRY_", "DATABRICKS_", "MLFLOW_", "COMET_", "NEPTUNE_",
)
# Credential-shaped values, whatever the variable is called.
_SECRET_VALUE = re.compile(
    r"^(sk-|sk_|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abp]-|hf_|AKIA|ASIA|AIza)|://[^/@\s]+:[^/@\s]+@"
)


def _is_secret(name: str, value: str) -> bool:
    upper = name.upper()
    return bool(
        _SECRET_NAME.search(upper) or upper.startswith(_SECRET_PREFIXES)
        or _SECRET_VALUE.search(value)
    )


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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
    env = {
        k: v for k, v in base_env.items()
        if (k in _ALLOWED or k.startswith(_ALLOWED_PREFIXES)) and not _is_secret(k, v)
    }
    dirs = {
        "HOME": "home", "TMPDIR": "tmp", "TEMP": "tmp", "TMP": "tmp", "XDG_CACHE_HOME": "cache",
        "TRITON_CACHE_DIR": "cache/triton", "TORCH_EXTENSIONS_DIR": "cache/torch_extensions",
        "TORCHINDUCTOR_CACHE_DIR": "cache/inductor", "CUDA_CACHE_PATH": "cache/cuda",
    }
    for var, sub in dirs.items():
        (scratch / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(scratch / sub)
    for var in ("TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR"):
        env.pop(var, None)  # default under HOME, i.e. inside scratch
    env.setdefault("PATH", os.defpath)
    env["OPENBLAS_NUM_THREADS"] = "1"  # numpy's pool would start before confine(): unconfined
    # A load_inline build is two translation units: ninja needs no more, and the pool of
    # workers building side by side already fills the cores.
    env.setdefault("MAX_JOBS", "2")
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
    entries = [str(_PKG_DIR.parent)]
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


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Returns the values worker_env drops as secrets, longest first, for :func:`redact`."""
    values = {v for k, v in env.items() if len(v) >= 6 and _is_secret(k, v)}
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replaces every occurrence of each secret of 6 characters or more with ``[REDACTED]``."""
    for secret in sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True):
        text = text.replace(secret, "[REDACTED]")
    return text


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

    def apply() -> None:
        os.setsid()
        for which, value in plan:
            resource.setrlimit(which, value)

    return apply


# --- Landlock ------------------------------------------------------------------------------
_EXEC, _WRITE, _READ, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_CHAR, _MAKE_BLOCK, _REFER, _TRUNCATE, _IOCTL_DEV = 1 << 6, 1 << 11, 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = _EXEC | _WRITE | _READ | _TRUNCATE | _IOCTL_DEV  # the only ones a file rule takes
_RO = _EXEC | _READ | _READ_DIR
_SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys"]
_DEV_FILES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
# Credential stores under the real home: never exposed, even when Python lives in $HOME.
_HOME_SECRETS = [".ssh", ".aws", ".azure", ".config", ".gnupg", ".docker", ".kube", ".netrc",
                 ".git-credentials", ".cache", ".pypirc", ".local/share"]
# CUDA under Landlock, measured on the H200 (torch 2.11+cu130): these nodes, /dev/shm and
# /proc as in _confine suffice. A read-only /proc fails (error 304) even with all of /dev:
# the driver opens a file in its own /proc/PID for writing with O_TRUNC.
_GPU_DEV = ["/dev/nvidia*", "/dev/nvidia-caps", "/dev/char"]
_PROC_RIGHTS = _READ | _READ_DIR
_DEV_RIGHTS = _READ | _WRITE | _READ_DIR | _TRUNCATE | _IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: u64 + s32
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _sys(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


def _carve(path: Path, protected: list[Path]) -> list[Path]:
    """Returns ``path`` minus every protected path below it, as a list of rule roots.

    Landlock only grants, never subtracts: to expose /opt but not /opt/engine, grant each
    sibling on the way down instead.
    """
    inside = [p for p in protected if _under(p, path)]
    if not inside:
        return [path]
    if path in inside or not path.is_dir():
        return []
    roots = []
    for entry in sorted(path.iterdir()):
        target = entry.resolve()
        if entry.is_symlink():  # a link may lead back above a protected path
            if not any(_under(p, target) or _under(target, p) for p in protected):
                roots.append(target)
            continue
        roots += _carve(target, inside)
    return roots


def _drop_capabilities() -> str:
    """Drops every capability (matters when the engine runs as root: CAP_MKNOD, CAP_NET_RAW,
    CAP_DAC_OVERRIDE, CAP_SYS_ADMIN ...). uid 0 keeps owning root's files: Landlock guards those."""
    with open("/proc/self/status") as status:
        eff = next((ln.split()[1] for ln in status if ln.startswith("CapEff")), "0")
    if int(eff, 16) == 0:
        return ""
    _prctl(47, 4)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        _prctl(24, cap)  # PR_CAPBSET_DROP (fails quietly past the last capability)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        return f"capabilities kept ({os.strerror(ctypes.get_errno())})"
    return "capabilities dropped"


def _python_paths() -> list[Path]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(_PKG_DIR)}
    paths.update(p for p in sysconfig.get_paths().values() if p)
    paths.update(site.getsitepackages())
    # sys.path may hold "" or the engine's cwd; _carve drops anything above a protected path.
    paths.update(p for p in sys.path if p and os.path.isabs(p) and p != str(_PKG_DIR.parent))
    return [Path(p) for p in paths]


def confine(scratch: Path, read_only: list[Path], gpu: bool, writable: list[Path] = ()) -> str:
    """Confines this process (its calling thread and every thread or child it starts later).

    Call it after torch/triton are imported and before the candidate is, from the main thread.
    Read and execute: system directories, Python and its packages, the openkernel package,
    ``read_only``. Read and write: ``scratch``, /dev/null & co, /dev/shm (and the NVIDIA device
    nodes with ``gpu``). /proc: this process and the non-process entries only, so no other
    process's cmdline; Landlock's ptrace rule also denies the engine's /proc/PID/environ, cwd
    and mem. No TCP bind/connect (ABI 4); no signals or abstract sockets out of the sandbox
    (ABI 6). The engine's cwd and the paths in $OPENKERNEL_SANDBOX_PROTECT are never exposed.

    Args:
        scratch: The worker's scratch directory (the only writable tree).
        read_only: Extra paths to read, e.g. the task folder.
        gpu: Whether CUDA must work (NVIDIA device nodes read/write with ioctl).
        writable: Further read-write trees: the candidate's own build-cache folder (keyed by
            its code, so no other candidate's builds are reachable).

    Returns:
        One line: ``"landlock ABI N: ..."`` when confined, ``"unconfined: REASON"`` when not.
    """
    try:
        return _confine(Path(scratch).resolve(), [Path(p) for p in read_only], gpu,
                        [Path(p).resolve() for p in writable])
    except Exception as exc:  # an unsupported kernel must not crash the worker
        return f"unconfined: {type(exc).__name__}: {exc}"


def _confine(scratch: Path, read_only: list[Path], gpu: bool, writable: list[Path]) -> str:
    try:
        abi = _sys(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # ..._VERSION
    except OSError as exc:
        return f"unconfined: no Landlock on this kernel ({exc.strerror})"
    handled = (1 << 13) - 1
    handled |= (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    handled |= _IOCTL_DEV if abi >= 5 else 0
    attr = _RulesetAttr(handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)  # TCP; scopes

    protected = [Path(p).resolve() for p in os.environ.get(PROTECT_VAR, "").split(os.pathsep) if p]
    if not _under(Path.cwd().resolve(), scratch):
        protected.append(Path.cwd().resolve())  # still in the engine's cwd: guard it too
    try:
        home = Path(pwd.getpwuid(os.getuid()).pw_dir)
        protected += [(home / name).resolve() for name in _HOME_SECRETS]
    except KeyError:
        pass  # a uid without a passwd entry (containers): no home to guard

    rules: list[tuple[Path, int]] = []
    for path in [Path(p) for p in _SYSTEM] + _python_paths() + read_only:
        rules += [(p, _RO) for p in _carve(path.resolve(), protected) if p.exists()]
    # Writable trees get no device-node rights: as root, mknod of the disk would read the db.
    tree = handled & ~(_MAKE_CHAR | _MAKE_BLOCK | _IOCTL_DEV)
    rules += [(p, tree) for root in [scratch, *writable] for p in _carve(root, protected)]
    rules.append((Path("/dev/shm"), tree))
    dev = [Path(p) for p in _DEV_FILES]
    if gpu:
        dev += [p for pattern in _GPU_DEV for p in Path("/").glob(pattern[1:])]
    rules += [(p, _DEV_RIGHTS) for p in dev]  # use the nodes, never add or remove any
    # /proc minus the other processes' folders: their cmdline and status are no business of
    # a candidate (environ, cwd and mem are also refused by Landlock's ptrace rule).
    proc = [p for p in Path("/proc").iterdir() if not p.name.isdigit() and not p.is_symlink()]
    rules += [(p, _PROC_RIGHTS) for p in proc]
    # Own folder: the CUDA driver opens a file there with O_WRONLY|O_TRUNC (see _GPU_DEV).
    rules.append((Path(f"/proc/{os.getpid()}"), _PROC_RIGHTS | _WRITE | _TRUNCATE))

    fd = _sys(444, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for path, rights in rules:
            try:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # vanished or unreadable: simply not granted
            try:
                if not os.path.isdir(f"/proc/self/fd/{target}"):
                    rights &= _FILE_RIGHTS
                beneath = _PathBeneath(rights & handled, target)
                _sys(445, ctypes.c_int(fd), ctypes.c_int(1), ctypes.byref(beneath),
                     ctypes.c_uint32(0))
            finally:
                os.close(target)
        caps = _drop_capabilities()
        if _prctl(38, 1) != 0:  # PR_SET_NO_NEW_PRIVS: required, and no setuid gains
            return f"unconfined: PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
        threads = len(os.listdir("/proc/self/task"))
        flags = 1 << 3 if abi >= 8 and threads > 1 else 0  # TSYNC: confine every thread
        try:
            _sys(446, ctypes.c_int(fd), ctypes.c_uint32(flags))
        except OSError:
            if not flags:
                raise
            flags = 0  # TSYNC refused: confine this thread at least, and say so below
            _sys(446, ctypes.c_int(fd), ctypes.c_uint32(0))
    finally:
        os.close(fd)
    parts = [
        f"landlock ABI {abi}: read-only system/python/task paths ({len(rules)} rules)",
        f"read-write {scratch} + /dev/shm" + "".join(f" + {w}" for w in writable)
        + (" + NVIDIA devices" if gpu else ""),
        "/proc: own pid + non-process entries", "TCP denied" if abi >= 4 else "TCP allowed (ABI<4)",
        "signals/abstract sockets scoped" if abi >= 6 else "signals not scoped (ABI<6)",
        "no_new_privs", caps,
        f"{threads - 1} earlier threads unconfined" if threads > 1 and not flags else "",
    ]
    return "; ".join(p for p in parts if p)
