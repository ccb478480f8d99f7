"""One candidate's evaluation inside a worker: build, correctness + integrity, benchmark.

The order matters for integrity: on every seed the candidate runs *before* the reference, on
the very input tensors (checked unchanged afterwards by keyed fingerprints); the reference
then runs on them (on a pristine copy when the reference itself writes into its inputs);
reference outputs are poisoned with NaN once compared, so memory still holding a reference
answer is useless to a candidate. The functions the checks rely on are captured (Guard,
Timer, correctness' private references) before the candidate is imported.

Memory follows the engine's plan (``records.MemoryPlan``): one input set alive at a time,
reference outputs freed once compared, comparisons in blocks, the float64 precision check on
the set the plan names; the worker's peak is reported with the result.

Blame follows where a failure happened. Code of the candidate (import, ``ModelNew()``, its
forward) failing is the candidate's failure. The evaluator's own code failing (generating
inputs, running the reference, comparing, the float64 check) is an *evaluator fault*, reported
as such and never as the candidate's, unless the candidate caused it: a CUDA error surfacing
after its kernels ran, memory it keeps allocated between calls, a function it patched.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sysconfig
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from openkernel.aten_ops import compute_ops, torch_covers
from openkernel.evaluation.protocol import PKG_DIR, Job, compare_cache
from openkernel.evaluation.worker import benchmark as timed_rounds
from openkernel.evaluation.worker import correctness, float64
from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker import precision
from openkernel.evaluation.worker.caller import Caller
from openkernel.evaluation.worker.build import (
    CompileNotifier,
    check_cuda_sources,
    import_candidate,
    is_compile_error,
    set_cuda_targets,
)
from openkernel.evaluation.worker.correctness import (
    Fingerprints,
    compare_outputs,
    flatten_outputs,
    relative_error,
    tolerances_for,
)
from openkernel.evaluation.worker.task_runtime import (
    TaskRuntime,
    clone,
    load_state,
    tensors_in,
)
from openkernel.evaluation.worker import stopping
from openkernel.evaluation.worker.timing import FLUSH_BYTES, Timer, summarize
from openkernel.records import MemoryPlan

_PKG_PREFIX = str(PKG_DIR) + "/"
_LIBRARY_PREFIXES = tuple(sorted({str(Path(p)) + "/" for p in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"]) if p}))
_active_count = threading.active_count
_OOM_REQUEST = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def oom_request(err: BaseException) -> float:
    """The bytes an out-of-memory error says were asked for (inf: not said)."""
    m = _OOM_REQUEST.search(str(err))
    return float(m[1]) * _UNITS[m[2]] if m else float("inf")


class EvaluatorFault(Exception):
    """The evaluator's own code failed: not the candidate's fault."""

    def __init__(self, where: str, kind: str, error: str):
        super().__init__(f"{where}: {error}")
        self.where, self.kind, self.error = where, kind, error


class CandidateFault(Exception):
    """The evaluator's code failed because of what the candidate did (its failure)."""


def _tail(err: BaseException, limit: int = 6) -> str:
    """What its author can act on: each exception of the chain, innermost first, with the
    frames of the candidate's own code (none where it has none: a syntax error), and an
    outer exception that only repeats its cause left out (Triton's interpreter raises
    ``InterpreterError(repr(e)) from e``: the same message twice, and 40 lines of its frames)."""
    chain, seen, e = [], set(), err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    out, said = [], ""
    for e in reversed(chain):
        message = "".join(traceback.format_exception_only(type(e), e)).strip()
        inner = said.split(": ", 1)[-1]
        if said and inner and inner.strip("'\"") in message:
            continue
        stack = traceback.extract_tb(e.__traceback__)
        frames = [f for f in stack if not _library_frame(f.filename)]
        head = "Traceback (most recent call last):\n" if frames else ""
        listed = "".join(traceback.StackSummary.from_list(frames[-limit:]).format())
        out.append((head + listed + message).strip())
        said = message
    return "\n".join(out)


def _library_frame(filename: str) -> bool:
    """A frame of the evaluator, importlib, the standard library or an installed package."""
    return filename.startswith(("<frozen", _PKG_PREFIX, *_LIBRARY_PREFIXES))


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def _is_oom(err: BaseException) -> bool:
    text = str(err).lower()
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


def _is_cuda_error(err: BaseException) -> bool:
    return type(err).__name__ == "AcceleratorError" or "CUDA error" in str(err)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_in(tensors))


def warm(device: str) -> float:
    """Launch the evaluator's own kernels once on ``device`` before the job (a GPU worker's
    head start; seconds spent): the comparisons' PyTorch passes, masked and not, in float32
    and float64, the float64 relative error and its 16-bit roundings, the fingerprints' sums,
    the random inputs' draws, the flush's fill, the sleep and events of a timed call.

    A kernel's first launch in a process loads its module from the library (CUDA's lazy
    loading): on the H200 the PyTorch passes over the one-pass comparison's four small
    self-check sets took 0.36 s in a fresh process, all of it first launches (session 27), a
    cost each job's checks paid once. Values are drawn from a generator of its own, so the
    job's seeded draws are unchanged."""
    t0 = time.perf_counter()
    gpu = str(device).startswith("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    tol = tolerances_for(torch.float32)
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            ref = torch.randn(4096, device=device, dtype=dtype, generator=g)
            out = ref + torch.rand(4096, device=device, dtype=dtype, generator=g) * 1e-3
            for masked in (False, True):
                correctness._sums(out, ref, tol, correctness.CHUNK, masked)
            exact = ref.to(torch.float64)
            relative_error(out, exact)
            out[0] = float("inf")  # its second, masked pass
            relative_error(out, exact)
            ig.rounding_error(exact, correctness.CHUNK)
            Fingerprints(device, seed=0).of(out)
        flush = torch.empty(1 << 20, dtype=torch.int32, device=device)
        flush.zero_()
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)
            start.record()
            end.record()
            torch.cuda.synchronize()
            start.elapsed_time(end)
    del ref, out, exact, flush
    if gpu:
        torch.cuda.empty_cache()  # nothing of it held while the worker waits
    return time.perf_counter() - t0


class Evaluation:
    """State of one evaluation; ``payload`` is what goes back to the executor."""

    def __init__(self, job: Job, ch):
        import torch._dynamo  # noqa: F401 - dispatch modes import it lazily; it rewraps manual_seed

        t0 = time.perf_counter()
        self.job, self.ch = job, ch
        self.device = job.device
        self.gpu = self.device.startswith("cuda")
        self.plan = MemoryPlan.from_json(job.plan)
        self.chunk = self.plan.chunk_elements
        if self.gpu:
            fraction = self.plan.memory_fraction if job.plan else job.gpu_memory_fraction
            torch.cuda.set_per_process_memory_fraction(fraction)
            self.stream = torch.cuda.current_stream().cuda_stream  # the stream events time
        self.timer = Timer(self.device)  # captures synchronize / Event before the candidate
        self.caller = Caller(self.device)  # every forward, the same way (caller.py)
        self.counter = ig.LaunchCounter()
        self.guard = ig.Guard(extra=list(self.counter.wrapped))
        self.flags = precision.current()  # the run's TF32 flags (worker/main.py set them)
        self.compiles: CompileNotifier | None = None
        self.comparison = "PyTorch passes"  # how outputs are compared (correctness.py)
        self.fresh()
        if self.gpu:
            torch.cuda.synchronize()
        # (recorded: a prestarted worker's set-up phase took 0.5-1.5 s a candidate on the H200)
        self._spent("setting up the evaluation", t0)
        if self.gpu and job.fused_comparison:
            t0 = time.perf_counter()
            cache = str(compare_cache(job.launchers_dir)) if job.launchers_dir else None
            last = [t0]

            def step(name: str) -> None:  # where the making's time goes, step by step
                self._spent(f"one-pass kernel: {name}", last[0])
                last[0] = time.perf_counter()

            self.comparison = correctness.prepare(self.device, cache, step)
            self._spent("making the one-pass comparison kernel", t0)
        self.payload["comparison"] = self.comparison

    def fresh(self) -> None:
        """A new verdict's state (a sweep's winner is judged after its screen, in the same
        worker): payload, log, fingerprints and the memory and step accounts start over."""
        self.payload: dict = {"compiled": False, "ran": False, "correctness": False, "log": [],
                              "integrity_checks": [], "timing_method": self.timer.method,
                              "precision_flags": asdict(self.flags),
                              "comparison": self.comparison}
        self.log = self.payload["log"]
        self.ref_ptrs: set[int] = set()
        self.history: list[tuple] = []  # fingerprints of earlier first outputs (replays)
        self.fingerprints: Fingerprints | None = None  # keyed after the candidate is imported
        self.cand_ran = False
        self.cand_kept = 0  # bytes the candidate keeps allocated across its last call
        self.peaks: dict[str, int] = {}
        self.steps_s: dict[str, float] = {}  # seconds of each step that mark() ends
        self.spent_s: dict[str, float] = {}  # seconds inside each of ours()'s blocks, by what
        self._step_t0 = time.perf_counter()
        if self.gpu:
            torch.cuda.reset_peak_memory_stats()

    # -- bookkeeping ------------------------------------------------------------------------
    def violation(self, check: str, message: str) -> dict:
        self.payload["integrity_violation"] = check
        self.payload["correctness"] = False
        self.log.append(f"INTEGRITY VIOLATION [{check}]: {message}")
        return self.payload

    def ran_checks(self, *names: str) -> None:
        for n in names:
            if n not in self.payload["integrity_checks"]:
                self.payload["integrity_checks"].append(n)

    def mark(self, phase: str) -> None:
        """Record the device memory peak and the seconds of the step that ends here."""
        now = time.perf_counter()
        self.steps_s[phase] = round(self.steps_s.get(phase, 0.0) + now - self._step_t0, 3)
        self._step_t0 = now
        if self.gpu:
            self.peaks[phase] = max(self.peaks.get(phase, 0), int(torch.cuda.max_memory_reserved()))
            torch.cuda.reset_peak_memory_stats()

    def memory_report(self) -> dict:
        report = {"footprint_bytes": self.plan.footprint_bytes, "plan_level": self.plan.level,
                  "precision_set": self.plan.precision_set}
        self.mark("end")
        report["steps_s"] = dict(self.steps_s)
        # Where the steps' seconds went: the evaluator's own work by what it was doing, and
        # the candidate's calls (each block ends on the device's finish, so GPU work counts
        # where it was launched).
        report["spent_s"] = {k: round(v, 3) for k, v in
                             sorted(self.spent_s.items(), key=lambda kv: -kv[1])}
        if self.gpu:
            peak = max(self.peaks.values(), default=0)
            # The timer's L2 flush buffer is a fixed cost of honest timing, not of the problem.
            fixed = FLUSH_BYTES
            report.update(peak_bytes=peak, fixed_bytes=fixed, phase_peak_bytes=dict(self.peaks))
            if self.plan.footprint_bytes:
                report["peak_over_footprint"] = round(max(peak - fixed, 0) / self.plan.footprint_bytes, 3)
        return report

    @contextlib.contextmanager
    def ours(self, where: str, timed: bool = False):
        """The evaluator's own code: a failure here is an evaluator fault, unless the candidate
        caused it (then a CandidateFault or an integrity violation). ``timed``: a call the
        timer measures (never synchronized here, nor counted as the evaluator's time)."""
        t0 = time.perf_counter()
        try:
            yield
            if not timed:
                if self.gpu:
                    torch.cuda.synchronize()
                self._spent(where, t0)
        except (ig.IntegrityViolation, EvaluatorFault, CandidateFault):
            raise
        except Exception as err:
            changed = self.guard.changed()
            if changed:
                raise ig.IntegrityViolation("patched_functions", f"the candidate replaced "
                                            f"{', '.join(changed)} (the evaluator then failed "
                                            f"while {where}: {type(err).__name__})") from err
            if _is_oom(err):
                slack = max(256 << 20, self.plan.footprint_bytes // 4)
                if self.cand_kept > slack:
                    raise CandidateFault(
                        f"out of device memory while {where}: the candidate keeps "
                        f"{_gib(self.cand_kept)} allocated between calls") from err
                raise EvaluatorFault(where, "out_of_memory", f"{type(err).__name__}: {err}") from err
            if self.cand_ran and _is_cuda_error(err):
                raise CandidateFault(f"a CUDA error surfaced while {where}, after the "
                                     f"candidate's kernels ran: {err}") from err
            kind = "cuda" if _is_cuda_error(err) else "error"
            raise EvaluatorFault(where, kind, f"{type(err).__name__}: {err}\n{_tail(err)}") from err

    def _spent(self, what: str, t0: float) -> None:
        self.spent_s[what] = self.spent_s.get(what, 0.0) + time.perf_counter() - t0

    def _crowded(self, err: BaseException) -> bool:
        """Whether the candidate's out-of-memory came from a GPU short of what the plan counted
        on (its request no larger than the reference's own, this worker within its budget)."""
        if not self.gpu or not self.plan.footprint_bytes:
            return False
        asked = oom_request(err)
        held = int(torch.cuda.memory_allocated())
        return asked <= self.plan.footprint_bytes and (not self.plan.budget_bytes
                                                       or held + asked <= self.plan.budget_bytes)

    # -- build ----------------------------------------------------------------------------
    def build(self) -> bool:
        job, path = self.job, Path(self.job.code_path)
        self.ch.phase("build")
        if job.backend == "cuda" and not self.gpu:
            targets = job.cuda_targets or [job.gpu_arch or ""]
            ok, log, module = check_cuda_sources(path, Path(job.scratch), targets,
                                                 job.build_timeout_s)
            self.payload.update(compiled=ok, runnable=False)
            self.log.append(log)
            if module is not None:
                return self.check_launches(module)
            self.log.append("CUDA C++ cannot run on this machine (no GPU): compiled with nvcc "
                            "only, not tested or timed.")
            return False
        set_cuda_targets(job)  # a CUDA C++ candidate builds for every target at import
        try:
            self.module = import_candidate(path)
        except BaseException as err:  # SystemExit and friends included: a candidate fault
            self.log.append(f"import failed:\n{_tail(err)}")
            return False
        self.payload["compiled"] = True
        return True

    def check_launches(self, module) -> bool:
        """Without a GPU, an NVRTC candidate's forward runs once with its kernels' launches
        checked, not run (its outputs mean nothing); a rejected launch is its first call's
        failure. Always False: nothing more can run here."""
        from openkernel.nvrtc import COMPILED, LaunchError

        try:
            model = self.rt.make_model(module.ModelNew)
            load_state(self.ref_model, model)
            inputs = self.rt.inputs(0)
            self.caller(model, inputs)
        except LaunchError as err:
            self.payload["runnable"] = True  # it could not have run anywhere: judged here
            self.log.append(f"first call failed: launch description rejected: {err}")
            return False
        except Exception as err:  # e.g. a forward that moves data to the GPU itself
            self.log.append("the launches could not be checked without a GPU "
                            f"({type(err).__name__}: {str(err)[:200]})")
        else:
            n = sum(len(k.launches) for k in COMPILED)
            self.log.append(f"forward made {n} kernel launch(es): each launch description "
                            "checked against its kernel's parameters and CUDA's limits")
        self.log.append("CUDA cannot run on this machine (no GPU): compiled with NVRTC, "
                        "not tested or timed.")
        return False

    # -- one call with the per-call checks --------------------------------------------------
    def call(self, inputs: list, record: bool = False) -> tuple[list, list[str]]:
        """One checked forward of the candidate (its code: its failures are its own)."""
        t0 = time.perf_counter()
        before = self.before_call()
        recorder = ig.OpRecorder() if record else None
        out = self.forward(inputs, (lambda: recorder) if recorder else None)
        if self.gpu:
            self.timer._sync()
        outs = self.after_call(before, out)
        self._spent("the candidate's calls", t0)
        return outs, (recorder.ops if recorder else [])

    def forward(self, inputs: list, around=None):
        """The candidate's forward on ``inputs``, through the caller (a timed call is this)."""
        self.cand_ran = True
        try:
            return self.caller(self.model, inputs, around)
        except torch.OutOfMemoryError as err:
            if self._crowded(err):
                raise EvaluatorFault("running the candidate", "out_of_memory",
                                     f"the GPU was short of memory the plan counted on: {err}") from err
            raise

    def before_call(self) -> tuple:
        """What :meth:`after_call` compares with: threads, launches, memory, child processes."""
        memory = int(torch.cuda.memory_allocated()) if self.gpu else 0
        return _active_count(), self.counter.count, memory, ig.has_children()

    def after_call(self, before: tuple, out) -> list:
        """The checks every call of the candidate gets, checked or timed, once it returned (and,
        on a GPU, its work finished): its outputs, flattened."""
        threads, launches, memory, children = before
        if _active_count() > threads:
            raise ig.IntegrityViolation("background_thread", "a thread started in forward was "
                                        "still running when it returned (work hidden from the timer)")
        if not children and ig.has_children():
            raise ig.IntegrityViolation("background_process", "a process started in forward "
                                        "was still there when it returned (work hidden from the "
                                        "timer)")
        why = precision.changed(self.flags)
        if why:
            raise ig.IntegrityViolation("precision", why)
        if self.gpu:
            other = self.counter.streams - {self.stream}
            self.counter.streams.clear()
            if other:
                raise ig.IntegrityViolation("hidden_work", "a Triton kernel was launched on "
                                            "another CUDA stream than the caller's (unseen by "
                                            "the timer's events)")
        if self.job.backend == "triton" and self.counter.count == launches:
            raise ig.IntegrityViolation("kernel_launches", "forward launched no Triton kernel: "
                                        "the answer was computed some other way")
        outs = flatten_outputs(out)
        problem = ig.output_problem(outs, torch.device(self.device))
        if problem:
            raise ig.IntegrityViolation("lazy_output", problem)
        if self.gpu:
            self.cand_kept = max(0, int(torch.cuda.memory_allocated()) - memory - _nbytes(outs))
        return outs

    def reference(self, inputs: list, record: bool = False) -> tuple[list, list[str]]:
        recorder = ig.OpRecorder() if record else None
        out = self.caller(self.ref_model, inputs, (lambda: recorder) if recorder else None)
        return flatten_outputs(out), (recorder.ops if recorder else [])

    def retire(self, ref_outs: list) -> None:
        """Remember where reference answers lived, then poison them (freed by the caller)."""
        for t in ref_outs:
            self.ref_ptrs.add(t.data_ptr())
            if t.is_floating_point():
                t.fill_(float("nan"))

    def poison(self) -> None:
        """Leave NaN in the allocator's free memory, so unwritten outputs show up as NaN."""
        nbytes = self.plan.poison_bytes
        if nbytes > 0:
            block = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=self.device)
            block.fill_(float("nan"))
            del block

    def remember(self, outs: list) -> None:
        if outs and isinstance(outs[0], torch.Tensor) and len(self.history) < 8:
            self.history.append(self._print(outs[0]))

    def _print(self, t: torch.Tensor) -> tuple:
        return (tuple(t.shape), t.dtype, self.fingerprints.of(t) if self.fingerprints else None)

    def explain(self, where: str, msg: str, outs: list, stats: dict) -> bool:
        """Name the cheat behind a mismatch when one explains it (True: a violation is recorded)."""
        named = self.explained(where, msg, outs, stats)
        if named:
            self.violation(*named)
        return named is not None

    def explained(self, where: str, msg: str, outs: list, stats: dict) -> tuple[str, str] | None:
        """The check and message that name the cheat behind a mismatch, or None."""
        if outs and "relative error" in msg and stats.get("ref_norm") and (
                stats.get("out_norm", 0.0) < 0.1 * stats["ref_norm"]):
            return "tiny_outputs", (f"{where}: {msg}; the output is (nearly) zero where the "
                                    "reference's is small but not zero")
        # Memory that held a reference answer holds NaN once it is retired: an output there
        # that shows no NaN was written since (the GPU's allocator hands freed blocks on, so a
        # wrong output often lies where an answer once did; on the H100 a call-counting cheat's
        # saved output did, and was misnamed before this).
        if outs and "NaN value" in msg and any(t.data_ptr() in self.ref_ptrs for t in outs):
            return "reference_memory_reuse", (f"{where}: {msg}; the output lies in memory that "
                                              "held a reference output")
        if outs and self.fingerprints is not None and "NaN value" not in msg:
            # (an output of NaN alone is the same bytes every call: NaN, not a replay, says it)
            with self.ours("fingerprinting an output"):
                seen = self._print(outs[0]) in self.history
            if seen:
                return "memoization", (f"{where}: returned the previous call's output for new "
                                       "input values")
        return None

    # -- correctness and integrity ----------------------------------------------------------
    def test(self) -> dict:
        p, rt, tol = self.payload, self.rt, self.rt.hook("get_tolerances")
        self.ran_checks("static_scan", "patched_functions", "kernel_launches", "background_thread",
                        "background_process", "lazy_output", "inputs_modified", "reference_memory_reuse", "memoization",
                        "precision", "torch_compute", "held_out_shapes")
        base = self.job.seed_base  # 0; a re-judgement draws fresh seeds (host/results.py)
        seeds = list(range(base + 1, base + self.job.correctness_seeds + 1))
        inputs: list = []
        for k, seed in enumerate(seeds):
            inputs = []  # one input set alive at a time
            with self.ours("generating inputs"):
                inputs = rt.inputs(seed)
                marks = self.fingerprints.of_all(tensors_in(inputs))
                pristine = clone(inputs) if self.plan.keep_pristine else None
                self.poison()
            outs, ops = self.call(inputs, record=k == 0)
            p["ran"] = True
            with self.ours("checking the inputs"):
                changed = self.fingerprints.of_all(tensors_in(inputs)) != marks
            if changed and not self.plan.keep_pristine:
                return self.violation("inputs_modified", f"seed {seed}: forward changed its inputs")
            with self.ours("running the reference"):
                ref_outs, ref_ops = self.reference(pristine if pristine is not None else inputs,
                                                   record=k == 0)
                del pristine
            if k == 0:
                ref_compute, cand_compute = compute_ops(ref_ops), compute_ops(ops)
                if torch_covers(ref_compute, cand_compute):
                    return self.violation("torch_compute", "forward runs every compute op of the "
                                          f"reference in PyTorch ({', '.join(sorted(ref_compute))})")
                why = ig.lowered_dtype(outs, ref_outs)
                if why:
                    return self.violation("precision", why)
            with self.ours("comparing outputs"):
                ok, msg, stats = compare_outputs(outs, ref_outs, tol, self.chunk)
            if not ok:
                if self.explain(f"seed {seed}", msg, outs, stats):
                    return p
                if k == 0:  # lowered precision would explain a mismatch: name it if so
                    del outs, ref_outs
                    if self.precision(None if self.plan.keep_pristine else inputs,
                                      explaining=True) is not None:
                        return p
                self.log.append(f"seed {seed}: {msg}")
                return p
            p.setdefault("errors", []).append({k: stats[k] for k in ("max_abs_error", "rel_error")})
            with self.ours("retiring the reference outputs"):
                self.remember(outs)
                self.retire(ref_outs)
            del outs, ref_outs
        self.mark("seeds")
        # Same addresses, new values: a result keyed on data_ptr (or cached) shows here.
        with self.ours("rewriting the inputs in place"):
            fresh = rt.inputs(base + 10_000)
            for t, f in zip(tensors_in(inputs), tensors_in(fresh)):
                t.copy_(f)
            del fresh
            pristine = clone(inputs) if self.plan.keep_pristine else None
        outs, _ = self.call(inputs)
        with self.ours("running the reference"):
            ref_outs, _ = self.reference(pristine if pristine is not None else inputs)
            del pristine
        with self.ours("comparing outputs"):
            ok, msg, stats = compare_outputs(outs, ref_outs, tol, self.chunk)
        if not ok:
            if not self.explain("inputs rewritten in place", msg, outs, stats):
                self.violation("memoization", f"inputs rewritten in place at the same addresses: {msg}")
            return p
        with self.ours("retiring the reference outputs"):
            self.retire(ref_outs)
        del outs, ref_outs, inputs
        self.mark("in_place")
        if self.precision() is not None:
            return p
        self.mark("precision")
        with self.ours("making the held-out inputs"):
            extra, source = rt.extra_inputs(base + 20_000, self.ref_model)
        p["heldout_source"] = source
        n_extra = len(extra)
        while extra:
            ins = extra.pop(0)  # the set in hand is the only one the loop holds
            try:
                outs, _ = self.call(ins)
            except (ig.IntegrityViolation, EvaluatorFault):
                raise
            except Exception as err:
                p["heldout_ok"] = False
                return self.violation("held_out_shapes", f"held-out input set "
                                      f"{n_extra - len(extra) - 1} ({source}) raised "
                                      f"{type(err).__name__}: {err}")
            with self.ours("running the reference on held-out inputs"):
                ref_outs, _ = self.reference(ins)
            with self.ours("comparing outputs"):
                ok, msg, _ = compare_outputs(outs, ref_outs, tol, self.chunk)
            if not ok:
                p["heldout_ok"] = False
                return self.violation("held_out_shapes", f"held-out input set "
                                      f"{n_extra - len(extra) - 1} ({source}): {msg}")
            del outs, ref_outs, ins
        self.mark("held_out")
        p["heldout_ok"] = True
        p["correctness"] = True
        self.log.append(f"correct on {len(seeds)} seed(s), in-place rewritten inputs and "
                        f"{n_extra} held-out input set(s) ({source})")
        return p

    def precision(self, main: list | None = None, explaining: bool = False) -> dict | None:
        """The float64 precision check on the set the plan names; the payload if it failed.

        ``main``: the main input set (seed 1) when the caller still holds it unchanged.
        ``explaining``: run only to name a mismatch's cause; one that passes says nothing (a
        wrong kernel's log opened with "precision check ... passed").

        The float64 reference runs first, alone (its upcast copies freed when it returns); the
        candidate's and the reference's errors against it are then taken one output list at a
        time, so the check holds the inputs, the float64 outputs and one output list.
        """
        where, tol = self.plan.precision_set, self.rt.hook("get_tolerances")
        if where == "skip":
            self.log.append(f"precision check against float64: skipped ({self.plan.precision_why})")
            return None
        with self.ours("making the precision check's inputs"):
            small = self.rt.small_inputs(1, self.plan.small_set, self.ref_model) if (
                where == "small") else None
            if small is not None:
                inputs, label = small
                del small
            else:
                inputs = main if main is not None else self.rt.inputs(self.job.seed_base + 1)
                label = "the main input set"
        host = self.plan.precision_on_host and self.gpu
        exact, why = None, ""
        if where == "main":
            with self.ours("reading the task's float64 answer"):
                exact, why = float64.stored(self.job.float64_path, inputs, self.ref_model,
                                            self.chunk, self.job.float64_wait_s)
                if exact is not None:
                    exact = [e.to(self.device) for e in exact]
                    label += " (the task's float64 answer, computed once)"
            if why:
                self.log.append(f"{why}: the float64 reference runs here")
        if exact is None:
            with self.ours("running the reference in float64" + (" on the host" if host else "")):
                exact = ig.float64_reference(self.ref_model, inputs, host=host)
                if host and exact is not None:
                    exact = [e.to(self.device) for e in exact]
                    label += " (the float64 run on the host)"
        if exact is None:
            self.log.append("precision check against float64: skipped (the reference has no "
                            "float64 path" + (" on the host CPU)" if host else ")"))
            return None
        outs, _ = self.call(clone(inputs) if self.plan.keep_pristine else inputs)
        with self.ours("comparing with the float64 reference"):
            usable = [i for i, (o, e) in enumerate(zip(outs, exact))
                      if o.is_floating_point() and o.shape == e.shape and e.dtype == torch.float64]
            err_cand = [relative_error(outs[i], exact[i], self.chunk) for i in usable]
        del outs
        with self.ours("running the reference"):
            ref_outs, _ = self.reference(inputs)
        with self.ours("comparing with the float64 reference"):
            err_ref = [relative_error(ref_outs[i], exact[i], self.chunk) for i in usable]
            floors = [tolerances_for(ref_outs[i].dtype, tol)["max_rel_error"] / 2 for i in usable]
            rounding = [ig.rounding_error(exact[i], self.chunk) for i in usable]
            if any(ref_outs[i].dtype == torch.float64 for i in usable):
                usable = []  # a float64 reference is its own exact answer: nothing to check
        del ref_outs, exact, inputs, main
        why = ig.precision_problem(err_cand, err_ref, rounding, floors) if usable else None
        if why:
            return self.violation("precision", f"{why} (on {label})")
        if not explaining:
            self.log.append(f"precision check against float64 on {label}: passed")
        return None

    def benchmark(self) -> None:
        """The candidate and the reference timed in rounds; every timed call checked
        (``benchmark.py``), unless the job says otherwise (to measure what that costs)."""
        self.ch.phase("benchmark")
        if self.job.check_timed_calls:
            self.ran_checks("timed_calls")
            samples, record = timed_rounds.Rounds(self).run()
            self.log.append(f"every timed call checked: {record['calls']} calls of the "
                            f"candidate and of the reference, each round on an input set of its "
                            f"own, outputs compared (largest relative error "
                            f"{record['max_rel_error']:.3g}; {record['checked_rel_error']:.3g} "
                            "on the checked seeds)")
        else:
            samples, record = timed_rounds.unchecked(self)
            self.log.append("timed calls not checked (eval_config.check_timed_calls: false): "
                            "one input set for every call, no timed output compared")
        self.payload["timed_calls"] = record
        ref, cand = summarize(samples["reference"]), summarize(samples["candidate"])
        cand.update(stopping.verdict(samples["reference"], samples["candidate"]),
                    stop_reason=self.timer.stop_reason, adaptive=self.job.adaptive_trials)
        self.payload.update(ref_stats=ref, cand_stats=cand)
        if self.gpu:
            self.gpu_checks(cand)
        self.mark("benchmark")

    def gpu_checks(self, cand: dict) -> None:
        with self.ours("making the profiled call's inputs"):
            inputs = self.rt.inputs(secrets.randbits(62))

        def profiled() -> tuple[list[str], float]:
            profile = ig.KernelProfile(self.timer._sync)
            self.forward(inputs, lambda: profile)
            return profile.names, profile.kernel_ms

        names, kernel_ms, tries = ig.hidden_work(profiled, cand["median"])
        del inputs
        self.payload["kernels"] = sorted(set(names))[:20]
        self.ran_checks("hidden_work")
        seen = ", ".join(f"{t:.4f}" for t in tries)
        if self.job.backend == "cuda" and not ig.custom_kernels(names):
            self.violation("kernel_launches", "forward launched only PyTorch library kernels")
        elif ig.beyond_timed(kernel_ms, cand["median"]):
            self.violation("hidden_work", f"the profiler saw {kernel_ms:.4f} ms of kernels per "
                           f"call at least ({seen} ms in {len(tries)} calls), the timed stream "
                           f"{cand['median']:.4f} ms: work ran on another stream or outside "
                           "the timed region")
        elif len(tries) > 1:
            self.log.append(f"hidden-work check: profiled {len(tries)} calls ({seen} ms of "
                            f"kernels) against the timed {cand['median']:.4f} ms")


def _fault(ev: Evaluation, fault: EvaluatorFault) -> dict:
    ev.payload["correctness"] = False
    ev.payload["fault"] = {"where": fault.where, "kind": fault.kind, "error": fault.error[-4000:]}
    ev.log.append(f"EVALUATOR FAULT while {fault.where}: {fault.error.splitlines()[0][:500]}")
    return ev.payload


def run_evaluate(job: Job, ch) -> dict:
    """Worker mode ``evaluate``: the payload, with the worker's memory peaks."""
    ev = Evaluation(job, ch)
    payload = _evaluate(ev)
    payload["memory"] = ev.memory_report()
    if ev.compiles is not None:
        payload["compile"] = ev.compiles.report()
    return payload


def _evaluate(ev: Evaluation) -> dict:
    from openkernel.evaluation.worker import sandbox

    job, ch = ev.job, ev.ch
    try:
        with ev.ours("loading the reference"):
            ev.rt = TaskRuntime(job.reference_path, job.hooks_path, ev.device)
            ev.ref_model = ev.rt.reference_model()
    except EvaluatorFault as fault:
        return _fault(ev, fault)
    t0 = time.perf_counter()
    ev.payload["confinement"] = sandbox.confine(
        Path(job.scratch), [Path(p) for p in job.read_only], gpu=ev.gpu,
        writable=[job.build_cache] if job.build_cache else [])
    ev._spent("confining the worker", t0)
    ev.compiles = CompileNotifier(ch).install()  # compiling after the build phase counts as build time
    if not ev.build():
        return ev.payload
    return judge_built(ev)


def judge_built(ev: Evaluation) -> dict:
    """From the imported candidate (``ev.module``) to the verdict: the integrity checks on its
    code, its first call, then, in the GPU's turn, every test and the timing."""
    job, ch = ev.job, ev.ch
    changed = ev.guard.changed()
    if changed:
        return ev.violation("patched_functions", f"the candidate replaced {', '.join(changed)}")
    if precision.changed(ev.flags):
        return ev.violation("precision", precision.changed(ev.flags))
    for check, message in ig.static_scan(Path(job.code_path).read_text(encoding="utf-8")):
        ev.ran_checks("static_scan")
        return ev.violation(check, message)
    # Keyed only now: nothing the candidate's import did can know the fingerprints' weights.
    ev.fingerprints = Fingerprints(ev.device)
    try:
        ev.model = ev.rt.make_model(ev.module.ModelNew)
        ev.payload["weights_copied"] = load_state(ev.ref_model, ev.model)
        with ev.ours("generating inputs"):
            warm = ev.rt.inputs(0)
        ch.phase("warmup")  # the first call; its kernel compilations count as build time
        children = ig.has_children()
        first = flatten_outputs(ev.caller(ev.model, warm))
        if ev.gpu:
            ev.timer._sync()
        with ev.ours("fingerprinting an output"):
            ev.remember(first)
        del first, warm
    except EvaluatorFault as fault:
        return _fault(ev, fault)
    except torch.OutOfMemoryError as err:
        if ev._crowded(err):  # built beside other candidates: the GPU was full, not its fault
            return _fault(ev, EvaluatorFault("the first call", "out_of_memory",
                                             f"the GPU was short of memory the plan counted on: {err}"))
        ev.log.append(f"first call failed:\n{_tail(err)}")
        return ev.payload
    except BaseException as err:
        compile_err = is_compile_error(err)
        ev.payload["compiled"] = not compile_err
        ev.log.append(("kernel compilation failed" if compile_err else "first call failed")
                      + f":\n{_tail(err)}")
        return ev.payload
    if not children and ig.has_children():  # (threads: a first call may start a library's)
        return ev.violation("background_process", "the first call: a process started in "
                            "forward was still there when it returned (work hidden from the timer)")
    if ev.gpu:
        torch.cuda.empty_cache()  # while waiting for the turn, hold no task data for others
    ev.mark("warmup")
    # Built and warmed up side by side with other candidates. Timing runs alone on the GPU
    # (the executor grants the turn); the tests too, unless checks overlap (then they share
    # the GPU with other candidates' checks, and the turn is asked for before timing).
    ch.wait_turn("check" if ev.job.overlap_checks else None)
    ev.mark("queued")  # the wait for a check's share (or the turn): no step's own time
    ch.phase("test")
    try:
        ev.test()
        if ev.payload["correctness"]:
            if ev.job.overlap_checks:
                if ev.gpu:
                    torch.cuda.empty_cache()  # the checks' memory back to the GPU for others
                ch.wait_turn("time")
                ev.mark("queued")
            ev.benchmark()
    except ig.IntegrityViolation as v:
        ev.violation(v.check, str(v))
    except EvaluatorFault as fault:
        _fault(ev, fault)
    except CandidateFault as err:
        ev.log.append(f"test failed: {err}")
        ev.payload["correctness"] = False
    except BaseException as err:
        ev.log.append(f"test failed:\n{_tail(err)}")
        ev.payload["correctness"] = False
    changed = ev.guard.changed()
    if changed:
        ev.payload.pop("fault", None)  # a patched function explains whatever broke
        ev.violation("patched_functions", f"the candidate replaced {', '.join(changed)}")
    return ev.payload
