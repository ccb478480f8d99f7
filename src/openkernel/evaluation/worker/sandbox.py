"""Landlock confinement of a worker, applied by the worker itself before it imports a candidate.

The engine starts the worker with a clean environment and limits (``host/environment.py``);
here the worker locks itself in. Landlock is driven through raw syscalls (ctypes) rather than
the PyPI ``landlock`` package: that package knows file-system rights only (no TCP rules, no
signal / abstract-socket scoping) and is not installed on the H200 machine. Landlock restricts
the calling thread only (until ABI 8's TSYNC): threads that exist before :func:`confine` stay
unconfined, so the worker's environment pins OpenBLAS to one thread (numpy starts its pool at
import) and confine reports any leftover.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import site
import sys
import sysconfig
from pathlib import Path

from openkernel.evaluation.protocol import PKG_DIR as _PKG_DIR
from openkernel.evaluation.protocol import PROTECT_VAR
from openkernel.evaluation.protocol import under as _under

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
    # A child subreaper: a process the candidate starts stays this worker's descendant even when
    # its parent leaves (a double fork), so integrity.has_children sees it.
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
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
