"""Precompiled torch headers for CUDA C++ candidates (GCC only; worker side).

Every ``load_inline`` build compiles a ``main.cpp`` that includes <torch/extension.h> for
its Python bindings: ~18 CPU seconds of header parsing per candidate, the same for all of them
(measured: 18.7 s user of a 23 s build here; the candidate's own .cu builds beside it). A
``mode: pch`` worker compiles that header once per torch install, compiler and flag set, with
the flags ``load_inline`` itself would use, into ``<root>/<key>/torch/extension.h.gch``.
Candidate workers put that folder first on ``CPATH`` (read-only to them): GCC looks for a
``.gch`` in each include directory before the header itself, and ignores one built with other
flags (a one-line header beside it then forwards to torch's), so the worst case is the old
build time, never a failed build.

The same is done for ``torch/csrc/utils/pybind.h``: pybind11 with torch's type casters, all a
bindings file needs. A main.cpp that starts with it instead (``binding.py``, and the offline
generator's extension form) compiles in 4.3-7.8 s instead of 14-16 s with the precompiled
<torch/extension.h> (2-core development machine): GCC's time there goes to instantiating the
templates of torch's whole C++ frontend, which a precompiled header does not save.

torch's own ``use_pch`` writes into the torch install (not ours to touch) and deletes the file
again for every build without it, so it is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

HEADERS = ("torch/extension.h", "torch/csrc/utils/pybind.h")


class _Stop(Exception):
    """Raised in place of the ninja build: only the build file was wanted."""


def compile_flags(with_cuda: bool = True) -> tuple[str, list[str]]:
    """(compiler, flags) with which ``load_inline`` compiles its ``main.cpp``, minus the
    extension's name (the one flag that differs between candidates; no header uses it)."""
    from torch.utils import cpp_extension as ce

    def stop(*_args, **_kwargs):
        raise _Stop

    with tempfile.TemporaryDirectory(prefix="ok-pch-") as tmp, \
            _patched(ce, "_run_ninja_build", stop):
        try:
            ce.load_inline(name="openkernel_pch_flags", cpp_sources="",
                           cuda_sources="" if with_cuda else None, build_directory=tmp)
        except _Stop:
            pass
        text = Path(tmp, "build.ninja").read_text()
    values = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line
                  and not line.startswith(" "))
    flags = [f for f in shlex.split(values["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return values.get("cxx", "c++"), flags


@contextlib.contextmanager
def _patched(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def build(root: Path, with_cuda: bool = True) -> dict:
    """Make sure the precompiled header exists under ``root``; returns where, or why not."""
    import torch

    t0 = time.monotonic()
    compiler, flags = compile_flags(with_cuda)
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    if "Free Software Foundation" not in version:  # clang and others: different PCH rules
        return {"pch_dir": None, "why": f"{compiler} is not GCC"}
    key = hashlib.sha256("\n".join([torch.__version__, version, *flags, *HEADERS]).encode()
                         ).hexdigest()[:20]
    folder = root / key
    targets = [folder / (header + ".gch") for header in HEADERS]
    if all(t.is_file() and t.with_suffix("").is_file() for t in targets):
        return {"pch_dir": str(folder), "built": False, "seconds": round(time.monotonic() - t0, 2)}
    include = Path(torch.__file__).parent / "include"
    # Side by side (one GCC each): the first problem's probe waits for the slower one only
    runs = []
    for header, target in zip(HEADERS, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        runs.append((header, target, partial, subprocess.Popen(
            [compiler, "-x", "c++-header", str(include / header), "-o", str(partial), *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    failed = ""
    for header, target, partial, proc in runs:
        try:
            _, err = proc.communicate(timeout=max(600 - (time.monotonic() - t0), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            err = "timed out after 600 s"
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            failed = failed or f"compiling {header} failed: {err[-500:]}"
            continue
        # GCC takes the header's folder to be this one: a second #include (a candidate's own,
        # after load_inline's) or a build whose flags do not fit the .gch opens this file; it
        # forwards to torch's header, which #pragma once then skips when the .gch has it.
        target.with_suffix("").write_text(f"#pragma once\n#include_next <{header}>\n")
        os.replace(partial, target)  # whole or absent: a build never reads a half-written file
    if failed:
        return {"pch_dir": None, "why": failed}
    return {"pch_dir": str(folder), "built": True, "seconds": round(time.monotonic() - t0, 2)}


def use(pch_dir: str | None) -> None:
    """Put the precompiled header's folder first on CPATH for this worker's builds."""
    if pch_dir:
        rest = os.environ.get("CPATH")
        os.environ["CPATH"] = pch_dir + (os.pathsep + rest if rest else "")
