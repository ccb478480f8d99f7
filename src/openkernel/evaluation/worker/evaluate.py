"""One candidate's evaluation inside a worker: build, correctness + integrity, benchmark.

The order matters for integrity: on every seed the candidate runs *before* the reference, on
the very input tensors (then checked unchanged), while the reference runs on pristine clones;
reference outputs are poisoned with NaN once compared, so memory still holding a reference
answer is useless to a candidate. The functions the checks rely on are captured (Guard,
Timer, correctness' private references) before the candidate is imported.
"""

from __future__ import annotations

import threading
import traceback
from pathlib import Path

import torch

from openkernel.evaluation.protocol import PKG_DIR, Job
from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker.build import (
    check_cuda_sources,
    import_candidate,
    is_compile_error,
    set_cuda_targets,
)
from openkernel.evaluation.worker.correctness import compare_outputs, flatten_outputs
from openkernel.evaluation.worker.task_runtime import (
    TaskRuntime,
    clone,
    load_state,
    tensors_in,
)
from openkernel.evaluation.worker.timing import Timer, summarize

_PKG_PREFIX = str(PKG_DIR) + "/"
_active_count = threading.active_count
_equal = torch.equal


def _tail(err: BaseException, limit: int = 6) -> str:
    """The exception with its last frames outside openkernel and importlib: the candidate's
    own lines (and the libraries it called) are what its author can act on."""
    te = traceback.TracebackException.from_exception(err)
    pending, seen = [te], set()
    while pending:
        t = pending.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        frames = [f for f in t.stack if not _evaluator_frame(f.filename)]
        t.stack = traceback.StackSummary.from_list(frames[-limit:])
        pending += [c for c in (t.__cause__, t.__context__) if c is not None]
    return "".join(te.format()).strip()


def _evaluator_frame(filename: str) -> bool:
    return filename.startswith(("<frozen importlib", _PKG_PREFIX))


def _poison(device: str, nbytes: int) -> None:
    """Leave NaN in the allocator's free memory, so unwritten outputs show up as NaN."""
    if nbytes > 0:
        block = torch.empty(max(nbytes // 4, 1) * 2, dtype=torch.float32, device=device)
        block.fill_(float("nan"))
        del block


class Evaluation:
    """State of one evaluation; ``payload`` is what goes back to the executor."""

    def __init__(self, job: Job, ch):
        self.job, self.ch = job, ch
        self.device = job.device
        self.gpu = self.device.startswith("cuda")
        self.timer = Timer(self.device)  # captures synchronize / Event before the candidate
        self.counter = ig.LaunchCounter()
        import torch._dynamo  # noqa: F401 - dispatch modes import it lazily; it rewraps manual_seed
        self.guard = ig.Guard(extra=[(cls, "run") for cls, _ in self.counter.wrapped])
        self.payload: dict = {"compiled": False, "ran": False, "correctness": False, "log": [],
                              "integrity_checks": [], "timing_method": self.timer.method}
        self.log = self.payload["log"]
        self.ref_ptrs: set[int] = set()
        self.history: list[torch.Tensor] = []  # earlier first outputs, to recognise replays
        if self.gpu:
            torch.cuda.set_per_process_memory_fraction(job.gpu_memory_fraction)
            self.stream = torch.cuda.current_stream().cuda_stream  # the stream events time

    def violation(self, check: str, message: str) -> dict:
        self.payload["integrity_violation"] = check
        self.payload["correctness"] = False
        self.log.append(f"INTEGRITY VIOLATION [{check}]: {message}")
        return self.payload

    def ran_checks(self, *names: str) -> None:
        for n in names:
            if n not in self.payload["integrity_checks"]:
                self.payload["integrity_checks"].append(n)

    # -- build ----------------------------------------------------------------------------
    def build(self) -> bool:
        job, path = self.job, Path(self.job.code_path)
        self.ch.phase("build")
        if job.backend == "cuda" and not self.gpu:
            targets = job.cuda_targets or [job.gpu_arch or ""]
            ok, log = check_cuda_sources(path, Path(job.scratch), targets, job.build_timeout_s)
            self.payload.update(compiled=ok, runnable=False)
            self.log.append(log)
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

    # -- one call with the per-call checks --------------------------------------------------
    def call(self, inputs: list, record: bool = False) -> tuple[list, list[str]]:
        threads, launches = _active_count(), self.counter.count
        recorder = ig.OpRecorder() if record else None
        with torch.no_grad():
            if recorder:
                with recorder:
                    out = self.model(*inputs)
            else:
                out = self.model(*inputs)
        if self.gpu:
            self.timer._sync()
        if _active_count() > threads:
            raise ig.IntegrityViolation("background_thread", "a thread started in forward was "
                                        "still running when it returned (work hidden from the timer)")
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
        return outs, (recorder.ops if recorder else [])

    def reference(self, inputs: list, record: bool = False) -> tuple[list, list[str], bool]:
        ins = clone(inputs)
        recorder = ig.OpRecorder() if record else None
        with torch.no_grad():
            if recorder:
                with recorder:
                    out = self.ref_model(*ins)
            else:
                out = self.ref_model(*ins)
        mutates = not all(_equal(a, b) for a, b in zip(tensors_in(ins), tensors_in(inputs)))
        return flatten_outputs(out), (recorder.ops if recorder else []), mutates

    def retire(self, ref_outs: list) -> None:
        """Remember where reference answers lived, then poison them."""
        for t in ref_outs:
            self.ref_ptrs.add(t.data_ptr())
            if t.is_floating_point():
                t.fill_(float("nan"))

    def remember(self, outs: list) -> None:
        if outs and isinstance(outs[0], torch.Tensor) and len(self.history) < 8:
            self.history.append(outs[0].detach().clone())

    def failure(self, where: str, msg: str, outs: list, refs: list) -> dict:
        """Name the cheat behind a mismatch when one explains it."""
        if outs and refs and "relative error" in msg and outs[0].shape == refs[0].shape and (
                float(outs[0].double().norm()) < 0.1 * float(refs[0].double().norm())):
            return self.violation("tiny_outputs", f"{where}: {msg}; the output is (nearly) zero "
                                  "where the reference's is small but not zero")
        if outs and any(t.data_ptr() in self.ref_ptrs for t in outs):
            return self.violation("reference_memory_reuse", f"{where}: {msg}; the output lies in "
                                  "memory that held a reference output")
        if outs and any(outs[0].shape == h.shape and outs[0].dtype == h.dtype and _equal(outs[0], h)
                        for h in self.history):
            return self.violation("memoization", f"{where}: returned the previous call's output "
                                  "for new input values")
        self.log.append(f"{where}: {msg}")
        return self.payload

    # -- correctness and integrity ----------------------------------------------------------
    def test(self) -> dict:
        p, rt, tol = self.payload, self.rt, self.rt.hook("get_tolerances")
        self.ran_checks("static_scan", "patched_functions", "kernel_launches", "background_thread",
                        "lazy_output", "inputs_modified", "reference_memory_reuse", "memoization",
                        "precision", "torch_compute", "held_out_shapes")
        seeds = list(range(1, self.job.correctness_seeds + 1))
        inputs = []
        for k, seed in enumerate(seeds):
            inputs = rt.inputs(seed)
            pristine = clone(inputs)
            _poison(self.device, sum(t.numel() * t.element_size() for t in tensors_in(inputs)))
            outs, ops = self.call(inputs, record=k == 0)
            p["ran"] = True
            ref_outs, ref_ops, ref_mutates = self.reference(pristine, record=k == 0)
            if not ref_mutates and not all(_equal(a, b) for a, b in zip(tensors_in(inputs), tensors_in(pristine))):
                return self.violation("inputs_modified", f"seed {seed}: forward changed its inputs")
            if k == 0:
                ref_compute, cand_compute = ig.compute_ops(ref_ops), ig.compute_ops(ops)
                if ref_compute and ref_compute <= cand_compute:
                    return self.violation("torch_compute", "forward runs every compute op of the "
                                          f"reference in PyTorch ({', '.join(sorted(ref_compute))})")
                why = ig.precision_problem(self.ref_model, pristine, outs, ref_outs, tol)
                if why:
                    return self.violation("precision", why)
            ok, msg, stats = compare_outputs(outs, ref_outs, tol)
            if not ok:
                return self.failure(f"seed {seed}", msg, outs, ref_outs)
            p.setdefault("errors", []).append(stats)
            self.remember(outs)
            self.retire(ref_outs)
        # Same addresses, new values: a result keyed on data_ptr (or cached) shows here.
        fresh = rt.inputs(10_000)
        for t, f in zip(tensors_in(inputs), tensors_in(fresh)):
            t.copy_(f)
        pristine = clone(inputs)
        outs, _ = self.call(inputs)
        ref_outs, _, _ = self.reference(pristine)
        ok, msg, _ = compare_outputs(outs, ref_outs, tol)
        if not ok:
            failure = self.failure("inputs rewritten in place", msg, outs, ref_outs)
            return failure if p.get("integrity_violation") else self.violation(
                "memoization", f"inputs rewritten in place at the same addresses: {msg}")
        self.retire(ref_outs)
        extra, source = rt.extra_inputs(20_000, self.ref_model)
        p["heldout_source"] = source
        for i, ins in enumerate(extra):
            try:
                outs, _ = self.call(ins)
            except ig.IntegrityViolation:
                raise
            except Exception as err:
                p["heldout_ok"] = False
                return self.violation("held_out_shapes", f"held-out input set {i} "
                                      f"({source}) raised {type(err).__name__}: {err}")
            ref_outs, _, _ = self.reference(ins)
            ok, msg, _ = compare_outputs(outs, ref_outs, tol)
            if not ok:
                p["heldout_ok"] = False
                return self.violation("held_out_shapes", f"held-out input set {i} ({source}): {msg}")
        p["heldout_ok"] = True
        p["correctness"] = True
        self.log.append(f"correct on {len(seeds)} seed(s), in-place rewritten inputs and "
                        f"{len(extra)} held-out input set(s) ({source})")
        return p

    def benchmark(self) -> None:
        self.ch.phase("benchmark")
        inputs = self.rt.inputs(1)
        ref_in = clone(inputs)
        with torch.no_grad():
            samples = self.timer.interleaved(
                {"reference": lambda: self.ref_model(*ref_in), "candidate": lambda: self.model(*inputs)},
                budget_s=self.job.bench_budget_s, min_trials=self.job.min_trials,
                max_trials=self.job.max_trials)
        ref, cand = summarize(samples["reference"]), summarize(samples["candidate"])
        self.payload.update(ref_stats=ref, cand_stats=cand)
        if self.gpu:
            self.gpu_checks(inputs, cand)

    def gpu_checks(self, inputs: list, cand: dict) -> None:
        with torch.no_grad():
            names, kernel_ms = ig.kernel_profile(lambda: self.model(*inputs), self.timer._sync)
        self.payload["kernels"] = sorted(set(names))[:20]
        self.ran_checks("hidden_work")
        if self.job.backend == "cuda" and not ig.custom_kernels(names):
            self.violation("kernel_launches", "forward launched only PyTorch library kernels")
        elif kernel_ms > 1.5 * cand["median"] + 0.005:
            self.violation("hidden_work", f"the profiler saw {kernel_ms:.4f} ms of kernels per "
                           f"call, the timed stream {cand['median']:.4f} ms: work ran on another "
                           "stream or outside the timed region")


def run_evaluate(job: Job, ch) -> dict:
    """Worker mode ``evaluate``."""
    from openkernel.evaluation.worker import sandbox

    ev = Evaluation(job, ch)
    ev.rt = TaskRuntime(job.reference_path, job.hooks_path, ev.device)
    ev.ref_model = ev.rt.make_model(ev.rt.ref.Model)
    ev.payload["confinement"] = sandbox.confine(
        Path(job.scratch), [Path(p) for p in job.read_only], gpu=ev.gpu,
        writable=[job.build_cache] if job.build_cache else [])
    if not ev.build():
        return ev.payload
    changed = ev.guard.changed()
    if changed:
        return ev.violation("patched_functions", f"the candidate replaced {', '.join(changed)}")
    for check, message in ig.static_scan(Path(job.code_path).read_text(encoding="utf-8")):
        ev.ran_checks("static_scan")
        return ev.violation(check, message)
    try:
        ev.model = ev.rt.make_model(ev.module.ModelNew)
        ev.payload["weights_copied"] = load_state(ev.ref_model, ev.model)
        ch.phase("warmup")  # still under the build timeout: Triton compiles at the first call
        with torch.no_grad():
            first = flatten_outputs(ev.model(*ev.rt.inputs(0)))
        ev.remember(first)
        if ev.gpu:
            ev.timer._sync()
    except BaseException as err:
        compile_err = is_compile_error(err)
        ev.payload["compiled"] = not compile_err
        ev.log.append(("kernel compilation failed" if compile_err else "first call failed")
                      + f":\n{_tail(err)}")
        return ev.payload
    # Built and warmed up side by side with other candidates; tests and timing run alone on
    # the GPU (the executor grants the turn).
    ch.wait_turn()
    ch.phase("test")
    try:
        ev.test()
        if ev.payload["correctness"]:
            ev.benchmark()
    except ig.IntegrityViolation as v:
        ev.violation(v.check, str(v))
    except BaseException as err:
        ev.log.append(f"test failed:\n{_tail(err)}")
        ev.payload["correctness"] = False
    changed = ev.guard.changed()
    if changed:
        ev.violation("patched_functions", f"the candidate replaced {', '.join(changed)}")
    return ev.payload
