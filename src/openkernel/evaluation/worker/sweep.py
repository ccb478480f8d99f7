"""Worker mode ``sweep``: every combination of a templated candidate, screened in one worker.

Each combination is a plain candidate module (the engine instantiated it from the template's
text). The worker imports them all (CUDA builds run side by side, one thread each: nvcc or
NVRTC does the work) and makes each one's first call on the screening set (the memory plan's
smaller input set when there is one, else the main set; on a GPU the first alone, then as many
side by side as the memory plan's share for them holds). In one GPU turn it checks each there
against the reference, screens the correct ones against each other, dropping the clearly
slower ones early (``screening.py``), and only the finalists are checked at full size and
timed together with the reference, interleaved, by the same method as any candidate: so their
times are comparable with each other. The winner then gets the full evaluation (every seed,
held-out shapes, integrity, ``evaluate.judge_built``) right here, on a fresh instance of its
model: its kernels are compiled already, so no second worker starts, imports and compiles them
again (its start, first call and second wait for the GPU's turn: 1.9 s a candidate, median
of the H200's kb22-s16 run). When the screen saw replaced functions, or the
evaluator failed here, the engine judges the winner in a worker of its own instead.
"""

from __future__ import annotations

import gc
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker import screening, stopping
from openkernel.evaluation.worker.build import CompileNotifier, is_compile_error, set_cuda_targets
from openkernel.evaluation.worker.correctness import compare_outputs, flatten_outputs
from openkernel.evaluation.worker.evaluate import Evaluation, EvaluatorFault, _tail, oom_request
from openkernel.evaluation.worker.task_runtime import (
    TaskRuntime, load_module, load_state, share_state, state_bytes)
from openkernel.evaluation.worker.stopping import verdict
from openkernel.evaluation.worker.timing import summarize
from openkernel.schemas import CompilationResult


def _module_name(index: int) -> str:
    return f"openkernel_variant_{index}"


def _import(path: str, index: int):
    module = load_module(path, _module_name(index))
    if not hasattr(module, "ModelNew"):
        raise AttributeError("the candidate defines no ModelNew class")
    return module


def run_sweep(job: Job, ch) -> dict:
    """Screen every variant: built?, correct on one input set?, and how fast."""
    from openkernel.evaluation.worker import sandbox

    ev = Evaluation(job, ch)
    out: dict = {"variants": [{"index": i, "built": False, "correct": False, "error": ""}
                              for i in range(len(job.variant_paths))],
                 "timing_method": ev.timer.method}
    try:
        with ev.ours("loading the reference"):
            rt = TaskRuntime(job.reference_path, job.hooks_path, ev.device)
            ev.rt, ev.ref_model = rt, rt.reference_model()
    except EvaluatorFault as fault:
        return {**out, "fault": {"where": fault.where, "kind": fault.kind, "error": fault.error}}
    t0 = time.perf_counter()
    out["confinement"] = sandbox.confine(
        Path(job.scratch), [Path(p) for p in job.read_only], gpu=ev.gpu,
        writable=[job.build_cache] if job.build_cache else [])
    ev._spent("confining the worker", t0)
    compiles = CompileNotifier(ch).install()
    ch.phase("build")
    set_cuda_targets(job)
    rows = out["variants"]
    with ThreadPoolExecutor(max_workers=max(1, min(len(rows), job.build_threads))) as pool:
        imported = list(pool.map(lambda i: build_variant(job.variant_paths[i], i), range(len(rows))))
    ev.mark("build")
    ch.phase("warmup")
    with ev.ours("generating inputs"):  # first calls on the screening set: no full-size data yet
        small = rt.small_inputs(0, ev.plan.small_set, ev.ref_model)
        warm = small[0] if small else rt.inputs(0)
        reduced = small is not None
        del small
    made = {}
    # Where each combination's own copy of the weights would take the worker past the plan's
    # share for the sweep, they share one (level3/1 MLP's 2.5 GB of weights six times over ran
    # out of memory on the H200, session 19, and the combinations were called incorrect).
    share = shares_weights(sum(b.compile_success for b in imported), state_bytes(ev.ref_model),
                           ev.plan.first_calls_bytes)
    shared = None  # the combination whose weights the others share
    t0 = time.perf_counter()
    for built in imported:  # made one at a time: a constructor may draw from the global RNG
        i = built.idx
        if not built.compile_success:
            rows[i]["error"] = built.error
            continue
        try:
            made[i] = rt.make_model(built.binary.ModelNew)
            if shared is None or not share_state(made[shared], made[i]):
                if load_state(ev.ref_model, made[i]) and share and shared is None:
                    shared = i
        except BaseException as err:
            _failed(rows[i], err, ev)
    out["shared_weights"] = shared is not None
    if ev.gpu:
        torch.cuda.synchronize()
    ev._spent("making the combinations' models", t0)

    def first_call(i: int) -> None:
        with torch.no_grad():
            flatten_outputs(made[i](*warm))
        if ev.gpu:
            ev.timer._sync()

    t0 = time.perf_counter()
    # Triton compiles at a kernel's first launch, with the GIL released: on a GPU the first
    # calls run side by side, one thread each. The interpreter patches triton.language while a
    # kernel runs, so under it they take turns.
    threads = max(1, min(len(made), job.build_threads)) if ev.gpu else 1

    def called(i: int) -> BaseException | None:
        try:
            first_call(i)
        except BaseException as err:
            return err
        return None

    order = list(made)
    if threads > 1 and len(order) > 1:
        _start_triton()
        # The first combination alone first: the others are its neighbours, one tunable
        # apart, and most of their kernels are its own (same source and constants: the same
        # key in the sweep's Triton cache), found there instead of compiled again side by side.
        # Its call's own memory (its peak over what was held before) bounds how many run at
        # once: eight of LeNet-5's forwards on the main set took a worker to 6.6x the problem's
        # footprint on the H200 (kb22-s18). The step's peak so far is kept (mark() takes the max).
        # Not where no kernel is shared and the smaller set's calls clearly fit (all_at_once).
        ev.peaks["first_calls"] = max(ev.peaks.get("first_calls", 0),
                                      int(torch.cuda.max_memory_reserved()))
        torch.cuda.reset_peak_memory_stats()
        errors = {}
        rest = order
        if not all_at_once([imported[i].binary for i in order], threads, ev.plan, reduced):
            before = torch.cuda.memory_allocated()
            errors[order[0]] = called(order[0])
            threads = side_by_side(threads, torch.cuda.max_memory_allocated() - before,
                                   ev.plan.first_calls_bytes)
            rest = order[1:]
        out["first_calls_side_by_side"] = threads
        out["first_call_alone"] = rest is not order
        with ThreadPoolExecutor(max_workers=threads) as pool:
            calls = {i: pool.submit(called, i) for i in rest}
        errors.update({i: call.result() for i, call in calls.items()})
    else:  # in this (the main) thread, as a plain candidate's first call
        errors = {i: called(i) for i in order}
    models = {}
    for i, err in errors.items():
        if err is not None:
            _failed(rows[i], err, ev)
            continue
        rows[i]["built"] = True
        models[i] = made[i]
    out["first_calls_s"] = round(time.perf_counter() - t0, 3)
    ev._spent("the combinations' first calls (compiling)", t0)
    made_shared = made.get(shared) if shared is not None else None
    del made
    del warm
    if ev.gpu:
        torch.cuda.empty_cache()
    ev.mark("first_calls")
    ch.wait_turn()
    ch.phase("test")
    try:
        with ev.ours("generating inputs"):
            small = rt.small_inputs(1, ev.plan.small_set, ev.ref_model)
            reduced = small is not None  # else the main set: screened and timed on the same
            inputs, where = small if reduced else (rt.inputs(1), "the main input set")
            del small
        out["screen"] = {"set": where}
        _check(ev, rt, models, rows, inputs, where if reduced else "", made_shared)
        ev.mark("check")
        if models:
            ch.phase("benchmark")
            with torch.no_grad():
                found = screen({i: (lambda m=m: m(*inputs)) for i, m in models.items()},
                               ev.timer, job)
            out["screen"].update(rounds=found.rounds, stop_reason=found.stop_reason,
                                 finalists=found.finalists)
            for i, values in found.samples.items():
                rows[i]["screen"] = summarize(values)
            for i, drop in found.dropped.items():
                rows[i]["dropped"] = drop
                models.pop(i)
            ev.mark("screen")
            if reduced:  # the finalists at full size: checked, then timed
                del inputs
                with ev.ours("generating inputs"):
                    inputs = rt.inputs(1)
                _check(ev, rt, models, rows, inputs, "", made_shared)
                ev.mark("finalists_check")
        if models:
            ref_in = inputs

            def reference():
                with ev.ours("timing the reference", timed=True):
                    return ev.ref_model(*ref_in)

            fns = {"reference": reference}
            fns.update({f"v{i}": (lambda m=m: m(*inputs)) for i, m in models.items()})
            def ranked(s: dict) -> str | None:  # the winner is known: no more rounds needed
                ours = {k: v for k, v in s.items() if k != "reference"}
                return "the finalists' order is settled" if screening.settled(ours) else None

            with torch.no_grad():
                samples = ev.timer.interleaved(
                    fns, budget_s=job.bench_budget_s * max(1.0, len(models) / 2),
                    min_trials=job.min_trials, max_trials=job.max_trials,
                    stop=ranked, check_every=stopping.CHECK_EVERY)
            out["timing_stop"] = ev.timer.stop_reason
            ref_samples = samples.pop("reference")
            out["ref_stats"] = summarize(ref_samples)
            for key, values in samples.items():
                # the same rounds as the reference: the speedup's interval and the tie rule
                rows[int(key[1:])]["stats"] = {**summarize(values), **verdict(ref_samples, values)}
            ev.mark("timing")
    except EvaluatorFault as fault:
        out["fault"] = {"where": fault.where, "kind": fault.kind, "error": fault.error}
    changed = ev.guard.changed()
    if changed:
        out["patched"] = changed
    out["memory"] = ev.memory_report()
    out["compile"] = compiles.report()
    winner = _winner(rows, out.get("ref_stats") or {})
    if job.winner_seeds and winner is not None and not changed and "fault" not in out:
        # Only the winner's own fresh instance below: every screened model and input set goes.
        models.clear()
        fns = ref_in = inputs = errors = made_shared = None  # noqa: F841 - held references
        # The other combinations' modules too: what they keep at module level (a capture
        # stream, a cache of buffers) would count in the winner's peak (level3/4 LeNet5 on
        # the H200: 5.4x its footprint judged here, 2.4-2.8x for its other winners).
        for built in imported:
            if built.idx != winner:
                built.binary = None
                sys.modules.pop(_module_name(built.idx), None)
        gc.collect()
        if ev.gpu:
            torch.cuda.empty_cache()
        try:
            judged = _judge_winner(ev, imported[winner].binary, winner, compiles,
                                   out.get("confinement"))
        except Exception as err:  # the evaluator's own failure: the engine judges it elsewhere
            sys.stderr.write(f"judging the winner here failed: {type(err).__name__}: {err}\n")
        else:
            out["winner"] = {"index": winner, "payload": judged}
    return out


def _winner(rows: list[dict], ref_stats: dict) -> int | None:
    """The combination the engine keeps (host/templates.py, by the same rule): the correct one
    of highest speedup over the reference's median, the first of equals; -1 without timing."""
    ref = ref_stats.get("median")
    best, best_speedup = None, None
    for row in rows:
        if not row.get("correct"):
            continue
        median = (row.get("stats") or {}).get("median")
        speedup = ref / median if ref and median else -1.0
        if best is None or speedup > best_speedup:
            best, best_speedup = row["index"], speedup
    return best


def _judge_winner(ev: Evaluation, module, index: int, compiles: CompileNotifier,
                  confinement) -> dict:
    """The full checks and timing of the winner, as a candidate of its own (evaluate.py), in
    this worker: its kernels are compiled and its module imported already. A fresh instance of
    its model (nothing a screened instance kept carries over) and a fresh verdict."""
    from dataclasses import replace

    from openkernel.evaluation.worker.evaluate import judge_built

    t0 = time.perf_counter()
    ev.model = None  # the last screened instance: its weights go before the fresh one's come
    ev.ch.send(judging=index)  # the engine shows the winner's phases from here on
    ev.ch.phase("build")
    ev.job = replace(ev.job, code_path=ev.job.variant_paths[index],
                     correctness_seeds=ev.job.winner_seeds)
    ev.fresh()
    ev.module = module
    ev.payload.update(compiled=True, confinement=confinement)
    payload = judge_built(ev)
    payload["memory"] = ev.memory_report()
    payload["compile"] = compiles.report()
    payload["judge_s"] = round(time.perf_counter() - t0, 3)
    return payload


def shares_weights(n: int, weight_bytes: int, limit: int) -> bool:
    """Whether ``n`` combinations share one copy of the weights: where their own copies would
    add more than ``limit`` (the plan's share for the sweep, ``first_calls_bytes``; 0: no
    bound) beyond the reference's."""
    return n > 1 and limit > 0 and n * weight_bytes > limit


def _beside_others(ev: Evaluation, err: BaseException) -> str:
    """Why ``err`` is the sweep's doing, not the combination's ("" if it is the latter): out of
    memory asking no more than the problem's footprint, beside the other combinations."""
    if not isinstance(err, torch.OutOfMemoryError) or not ev.plan.footprint_bytes or \
            oom_request(err) > ev.plan.footprint_bytes:
        return ""
    return f"out of memory beside the sweep's other combinations: {_tail(err)}"


def _restore_weights(reference: torch.nn.Module, model: torch.nn.Module) -> str:
    """The names of ``model``'s weights that no longer equal the reference's (restored), ""."""
    ref = reference.state_dict()
    written = []
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not torch.equal(tensor, ref[name]):
                tensor.copy_(ref[name])
                written.append(name)
    return ", ".join(written[:3]) + (f" and {len(written) - 3} more" if len(written) > 3 else "")


def side_by_side(threads: int, per_call: int, limit: int) -> int:
    """How many first calls may run at once: each holds ``per_call`` bytes beyond what the
    worker holds already, together at most ``limit`` (the memory plan's share for them; 0: no
    bound); at least one."""
    if limit <= 0 or per_call <= 0:
        return threads
    return max(1, min(threads, limit // per_call))


# A first call on the smaller set is taken to hold at most this many times the reference's
# call there (beyond the weights) when none has been measured yet, and at least CALL_FLOOR.
CALL_MARGIN = 4
CALL_FLOOR = 64 << 20


def all_at_once(modules: list, threads: int, plan, reduced: bool) -> bool:
    """Whether a sweep's first calls may all start side by side, none alone first: each
    combination's module launches one Triton kernel at most (so no kernel of one is another's,
    found in the cache after the first compiled it), and ``threads`` calls on the smaller set
    (``reduced``) fit the plan's share for them with a wide margin over the reference's
    call there. The first alone was one compilation's time of every sweep's (0.5-1 s on the
    H200 for a GEMM or a convolution), its neighbours' compilations waiting for it."""
    if not reduced or plan.first_calls_bytes <= 0 or plan.small_call_bytes <= 0:
        return False
    per_call = max(CALL_MARGIN * plan.small_call_bytes, CALL_FLOOR)
    if threads * per_call > plan.first_calls_bytes:
        return False
    return all(triton_kernels(m) <= 1 for m in modules)


def triton_kernels(module) -> int:
    """How many Triton kernels (``@triton.jit`` functions, autotuned or not) a module defines."""
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return 0

    def home(value) -> str | None:  # an autotuner wraps the jit function, which wraps the def
        while hasattr(value, "fn"):
            value = value.fn
        return getattr(value, "__module__", None)

    return sum(1 for value in vars(module).values()
               if isinstance(value, KernelInterface) and home(value) == module.__name__)


def _start_triton() -> None:
    """Make Triton's driver (built lazily, with a helper module compiled on first use) before
    the threads of the first calls would all race to make it."""
    try:
        from triton.runtime import driver

        driver.active.get_current_target()
    except Exception:  # no Triton, or no usable driver: each first call meets it and says so
        pass


def _failed(row: dict, err: BaseException, ev: Evaluation) -> None:
    """A variant whose model could not be made or whose first call raised. Out of memory
    asking no more than the problem's footprint is the sweep's doing (it holds the other
    combinations), not the combination's: an evaluator fault of that row."""
    fault = _beside_others(ev, err)
    if fault:
        row["fault"] = fault
        return
    compiled = not is_compile_error(err)
    row["built"] = compiled
    row["error"] = ("first call failed" if compiled else "kernel compilation failed") \
        + f":\n{_tail(err)}"


def build_variant(path: str, index: int) -> CompilationResult:
    """Import (build) one combination: the seed's CompilationResult, ``binary`` the module."""
    try:
        return CompilationResult(index, _import(path, index), None, True)
    except BaseException as err:  # a variant that does not build is its own row, not the sweep's
        sys.stderr.write(f"variant {index}: {type(err).__name__}: {err}\n")
        return CompilationResult(index, None, None, False, error=f"import failed:\n{_tail(err)}")


def screen(fns: dict, timer, job: Job):
    """The screening rounds (``screening.py``) under the sweep's budget and trial cap."""
    return screening.screen(timer, fns, budget_s=job.bench_budget_s * max(1.0, len(fns) / 2),
                            max_rounds=job.max_trials,
                            min_rounds=screening.MIN_PAIRS if timer.gpu else 1,
                            far=screening.FAR if timer.gpu else None)


def _check(ev: Evaluation, rt: TaskRuntime, models: dict, rows: list, inputs: list,
           where: str, shared=None) -> None:
    """Each model against the reference on ``inputs``; the incorrect ones leave ``models``.
    ``shared``: the model whose weights all combinations share, checked unchanged after each
    call (one combination writing into them would fail the others)."""
    if shared is not None:  # what a first call or screening round wrote goes unjudged
        with ev.ours("checking the shared weights"):
            _restore_weights(ev.ref_model, shared)
    with ev.ours("running the reference"):
        ref_outs, _ = ev.reference(inputs)
    tol = rt.hook("get_tolerances")
    for i, model in list(models.items()):
        ev.model = model
        try:
            outs, _ = ev.call(inputs)
            if shared is not None:
                with ev.ours("checking the shared weights"):
                    written = _restore_weights(ev.ref_model, shared)
                if written:
                    raise ig.IntegrityViolation(
                        "weights", f"the combination wrote into its weights ({written}), which "
                        "the sweep's combinations share")
            with ev.ours("comparing outputs"):
                ok, msg, stats = compare_outputs(outs, ref_outs, tol, ev.chunk)
            del outs
        except (EvaluatorFault, KeyboardInterrupt):
            raise
        except ig.IntegrityViolation as v:
            ok, msg, stats = False, f"INTEGRITY VIOLATION [{v.check}]: {v}", {}
        except BaseException as err:
            fault = _beside_others(ev, err)
            if fault:
                rows[i]["fault"] = fault
                models.pop(i)
                continue
            ok, msg, stats = False, f"test failed:\n{_tail(err)}", {}
        rows[i]["correct"] = ok
        if ok:
            rows[i]["rel_error"] = stats.get("rel_error")
        else:
            rows[i]["error"] = (f"on the screening set, {where}: " if where else "") + msg
            models.pop(i)
    del ref_outs
