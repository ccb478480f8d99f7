"""What the engine and a worker process say to each other: the one place both sides share.

The engine side (``host/``) starts a worker (``python -m openkernel.evaluation.worker --fd N``),
writes one :class:`Job` as a JSON line on its stdin and reads the worker's messages from the
inherited pipe ``N``. The worker side (``worker/``) is the confined process that imports
candidate code; nothing under ``host/`` imports it, and it imports nothing from ``host/``
(import-linter checks both, see pyproject.toml).

Messages from the worker, one JSON line each, all tagged with the job's random ``nonce``
(lines without it are not the worker's and are ignored):

* ``{"phase": NAME}`` when a phase starts (``PHASES``);
* ``{"compiling": true | false}`` around a kernel compilation (Triton JIT, nvcc) that happens
  after the build phase, e.g. at a first call or for a new shape: that time counts as build;
* ``{"wait": true}`` before the timed phase; the worker then blocks until the engine writes
  ``go`` on its stdin (its turn on the GPU);
* ``{"result": {...}}`` last: the mode's report (:class:`Report` for ``evaluate``).

Timeouts follow the phases: ``setup``, ``build`` and compilations count against
``build_timeout_s``; ``warmup`` (the first call, once compiled), ``test`` and ``benchmark``
against ``test_timeout_s``; ``queued`` (waiting for the turn) against neither. The
``reference`` mode's ``BASELINE_PHASES`` (each baseline's first call or compilation) have
walls of their own (``eval_config.baseline_timeout_s``).
"""

from __future__ import annotations

import json
import os
import resource
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

MODES = ("hardware", "probe", "evaluate", "sweep", "reference", "profile", "pch", "float64")
PHASES = ("setup", "build", "warmup", "queued", "test", "benchmark")
BUILD_PHASES = ("setup", "build")  # plus compilations inside later phases
BASELINE_PHASES = ("eager", "compile", "autotune", "cudagraphs")  # reference mode: a wall each
GO = "go"

NVTX_RANGE = "openkernel_candidate"  # the profiled region of a profile run
PROTECT_VAR = "OPENKERNEL_SANDBOX_PROTECT"  # os.pathsep list of paths confine must never expose
# Where a GPU worker makes the one-pass comparison kernel before its job (worker/correctness.py
# ahead()): the machine's cache of its cubin, set by the executor when the run compares with it
COMPARE_CACHE_VAR = "OPENKERNEL_COMPARE_CACHE"
FLOAT64_FORMAT = 1  # the format of a task's float64 answer file (worker/float64.py)
CEILINGS_VERSION = 1  # the format of a measured ceilings entry (worker/hardware.py, host/ceilings.py)
PKG_DIR = Path(__file__).resolve().parents[1]  # the openkernel package


def compare_cache(launchers_dir: str | Path) -> Path:
    """The machine's cache of the one-pass comparison kernel: beside Triton's host modules."""
    return Path(launchers_dir).parent / "compare-kernel"


def float64_failed(answer: str | Path) -> Path:
    """The marker the engine leaves beside a task's float64 answer it could not make: checks
    waiting for the answer stop waiting (worker/float64.py, host/float64.py)."""
    return Path(f"{answer}.failed")


def lead_session(limits: list[tuple[int, int, int]]) -> None:
    """In a new worker process, before anything else of it runs: its own session and process
    group (the engine kills the group), then its resource limits as (RLIMIT_..., soft, hard),
    computed by the engine (``host/environment.limits``). Started workers run it as their
    ``preexec_fn``, forked ones in the fork server's child (``worker/zygote.py``)."""
    os.setsid()
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))


def under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass
class Job:
    """One job for one worker. Fields a mode does not use keep their defaults."""

    mode: str
    device: str = "cpu"
    scratch: str = ""
    # the task
    reference_path: str = ""
    hooks_path: str | None = None
    read_only: list[str] = field(default_factory=list)
    # building
    backend: str = "triton"
    code_path: str | None = None
    variant_paths: list[str] = field(default_factory=list)  # sweep: one module per combination
    build_threads: int = 4  # sweep: CUDA C++ variants built side by side
    # sweep: the winner's full checks and timing here, with this many seeds (0: not here)
    winner_seeds: int = 0
    build_cache: str | None = None
    cuda_targets: list[str] = field(default_factory=list)
    gpu_arch: str = ""
    pch_dir: str | None = None
    build_timeout_s: float = 180.0
    # checking and timing
    correctness_seeds: int = 3
    gpu_memory_fraction: float = 0.9
    bench_budget_s: float = 1.0
    min_trials: int = 3
    max_trials: int = 50
    adaptive_trials: bool = True  # stop timing once the comparison is decided (worker/stopping.py)
    overlap_checks: bool = False  # tests share the GPU with other checks; only timing is alone
    fused_comparison: bool = True  # outputs compared by one kernel (worker/compare_kernel.py)
    incumbent_speedup: float = 0.0  # the best kernel's speedup so far (0: none), for stopping
    check_timed_calls: bool = True  # each timed round on fresh inputs, its outputs compared
    seed_base: int = 0  # correctness seeds are seed_base + 1..N (a re-judgement: fresh ones)
    plan: dict = field(default_factory=dict)  # a MemoryPlan as JSON (records.MemoryPlan)
    # the task's float64 answer of the main set (worker/float64.py): written there by a
    # float64 job, read (when present and made from the same inputs) by a candidate's checks
    float64_path: str | None = None
    float64_wait_s: float = 0.0  # how long a check waits for that answer while it is being made
    baselines: list[str] = field(default_factory=list)  # reference: which BASELINE_PHASES to time
    allow_tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32 in every mode (config)
    # other modes
    target: str = "candidate"  # profile: "candidate" or "reference"
    known_ceilings: dict = field(default_factory=dict)  # hardware
    inductor: dict | None = None  # probe: Inductor's captures kept in the store (host/captures.py)
    pch_root: str = ""  # pch
    # Triton's host-side modules built once per machine (worker/launchers.py): a GPU job with
    # a build folder copies this folder into its Triton cache; a ``launchers`` job builds there
    launchers_dir: str | None = None
    launchers: list = field(default_factory=list)  # launchers: the signatures to build

    def to_line(self, nonce: str) -> str:
        return json.dumps({**asdict(self), "nonce": nonce})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Job":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:  # both sides ship together: a stray key is a bug, not a version skew
            raise ValueError(f"unknown job keys: {', '.join(sorted(unknown))}")
        return cls(**data)


def encode(nonce: str, **message: Any) -> bytes:
    """One message line from the worker."""
    return (json.dumps({"nonce": nonce, **message}, default=str) + "\n").encode()


def decode(line: bytes, nonce: str) -> dict | None:
    """The message in ``line``, or None when it is not one of the worker's."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or msg.get("nonce") != nonce:
        return None
    return msg
