"""Comparing a candidate's outputs with the reference's (runs inside a worker process).

Two tests must both pass, per output tensor:

* elementwise: ``|out - ref| <= atol + rtol * |ref|`` everywhere (``torch.allclose``
  semantics), with NaN never passing and infinities matching exactly;
* relative norm: ``||out - ref||_2 / ||ref||_2 <= max_rel_error``. This is what catches
  outputs so small that ``atol`` alone would pass an all-zero answer.

Default tolerances per dtype (a task's ``get_tolerances(dtype)`` hook overrides any key):

=========  =====  =====  =============  ===============================================
dtype      atol   rtol   max_rel_error  why
=========  =====  =====  =============  ===============================================
float64    1e-6   1e-6   1e-9
float32    1e-2   1e-2   1e-3           admits TF32 matmuls (~3e-4), rejects bf16 (~3e-3)
float16    2e-2   2e-2   5e-3           unit roundoff 4.9e-4 plus fp32-accumulation noise
bfloat16   5e-2   5e-2   2e-2           unit roundoff 3.9e-3
ints/bool  0      0      0              exact
=========  =====  =====  =============  ===============================================

Every comparison is done in float64 with functions captured when this module is imported,
before any candidate code runs, so a candidate that patches ``torch.allclose`` gains nothing.
It is done in blocks of at most ``chunk`` elements (slices along the leading dimensions, so no
copy of the whole tensor is ever made): a 6 GiB float32 output costs 8 bytes per element of
one block in float64, not 12 GiB. Norms are accumulated as sums of squares over the blocks.
A first pass assumes every element finite (no NaN counts or infinity masks: about half the
passes a block); its sums of squares are finite exactly when that held, and otherwise the
comparison runs again with NaN and infinities looked for.

On a GPU with ``eval_config.fused_comparison``, float32 and float64 outputs are compared by one
kernel that reads each element once and does the same float64 arithmetic per element
(``compare_kernel.py``), made and checked against these passes before the candidate is imported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Private references: captured before candidate code is imported (see integrity.Guard).
_isnan = torch.isnan
_isinf = torch.isinf
_abs = torch.abs
_norm = torch.linalg.vector_norm
_where = torch.where
_equal = torch.equal
_sum = torch.sum
_any = torch.any
_maximum = torch.maximum
_zeros = torch.zeros
_stack = torch.stack

CHUNK = 1 << 24  # elements per block: 128 MiB per float64 temporary

# The one-pass kernel (compare_kernel.CompareKernel) of a GPU worker, once prepare() made and
# checked it: before the candidate's import, so nothing the candidate does reaches it.
_kernel = None
# prepare()'s answer for a device, made before the job by ahead() (the worker's only GPU)
_prepared: dict[str, str] = {}

DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"atol": 1e-6, "rtol": 1e-6, "max_rel_error": 1e-9},
    "float32": {"atol": 1e-2, "rtol": 1e-2, "max_rel_error": 1e-3},
    "float16": {"atol": 2e-2, "rtol": 2e-2, "max_rel_error": 5e-3},
    "bfloat16": {"atol": 5e-2, "rtol": 5e-2, "max_rel_error": 2e-2},
}
_EXACT = {"atol": 0.0, "rtol": 0.0, "max_rel_error": 0.0}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerances_for(dtype: torch.dtype, hook: Any = None) -> dict[str, float]:
    """The tolerances for outputs of ``dtype``, with the task hook's keys taking precedence."""
    base = dict(DEFAULT_TOLERANCES.get(dtype_name(dtype), _EXACT if not dtype.is_floating_point
                                       else DEFAULT_TOLERANCES["float32"]))
    if hook is not None:
        override = hook(dtype) or {}
        base.update({k: float(v) for k, v in override.items() if k in base})
    return base


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """Outputs as a flat list of tensors; raises TypeError for anything else."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        flat: list[torch.Tensor] = []
        for item in out:
            flat.extend(flatten_outputs(item))
        return flat
    raise TypeError(f"forward returned {type(out).__name__}, expected a tensor or a tuple of tensors")


def blocks(shape: tuple[int, ...], chunk: int = CHUNK) -> Iterator[tuple]:
    """Index tuples that cut a tensor of ``shape`` into blocks of at most ``chunk`` elements.

    Each block is a slice along one leading dimension (deeper ones only when a single row is
    larger than ``chunk``), so indexing gives a view: no copy, whatever the strides.
    """
    if not shape:
        yield ()
        return
    inner = math.prod(shape[1:])
    if inner <= chunk:
        step = max(1, chunk // max(inner, 1))
        for i in range(0, shape[0], step):
            yield (slice(i, i + step),)
        return
    for i in range(shape[0]):
        for rest in blocks(tuple(shape[1:]), chunk):
            yield (i, *rest)


def _f64(t: torch.Tensor) -> torch.Tensor:
    """A float64 copy of a block (always a copy: the comparisons work on it in place)."""
    return t.detach().to(torch.float64, copy=True)


def relative_error(out: torch.Tensor, ref: torch.Tensor, chunk: int = CHUNK,
                   through: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """``||out - ref|| / ||ref||`` in float64 over the finite elements (inf if NaN appears;
    0/0 counts as 0). ``through`` transforms each block of ``out`` first (a rounding, say)."""
    sums = _relative_sums(out, ref, chunk, through, masked=False)
    if not all(map(math.isfinite, sums)):  # a NaN or an infinity somewhere: mask them
        sums = _relative_sums(out, ref, chunk, through, masked=True)
    num, den = sums
    if math.isnan(num):
        return math.inf
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num) / math.sqrt(den)


def _relative_sums(out, ref, chunk, through, masked: bool) -> list[float]:
    """``[||out - ref||^2, ||ref||^2]``; ``masked``: over the elements finite in both (without
    it, three passes a block fewer, and a sum is finite only where every element was)."""
    sums = _zeros(2, dtype=torch.float64, device=ref.device)  # num, den: one read at the end
    for idx in blocks(tuple(ref.shape), chunk):
        o = _f64(out[idx])
        if through is not None:
            o = _f64(through(o))
        r = _f64(ref[idx])
        if masked:
            infinite = _isinf(o) | _isinf(r)
            o.masked_fill_(infinite, 0.0)
            r.masked_fill_(infinite, 0.0)
            del infinite
        sums[1] += _norm(r) ** 2
        sums[0] += _norm(o.sub_(r)) ** 2  # in place: one block of temporaries
        del o, r
    return sums.tolist()


def norm(t: torch.Tensor, chunk: int = CHUNK) -> float:
    """The 2-norm of ``t`` in float64, in blocks."""
    total = _zeros((), dtype=torch.float64, device=t.device)
    for idx in blocks(tuple(t.shape), chunk):
        total += _sum(_f64(t[idx]) ** 2)
    return math.sqrt(total.item())


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float], name: str,
                   chunk: int = CHUNK) -> tuple[bool, str, dict[str, float]]:
    """Check one output tensor; returns (ok, message, stats).

    The stats hold ``max_abs_error``, ``rel_error`` and both norms (``out_norm``,
    ``ref_norm``), so a caller explaining a failure needs no second pass over the tensors.
    """
    if tuple(out.shape) != tuple(ref.shape):
        return False, f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}", {}
    if out.dtype != ref.dtype:
        return False, f"{name}: dtype {dtype_name(out.dtype)} != reference {dtype_name(ref.dtype)}", {}
    if out.device != ref.device:
        return False, f"{name}: on {out.device}, the reference's on {ref.device}", {}
    if out.numel() == 0:
        return True, "", {"max_abs_error": 0.0, "rel_error": 0.0}
    if not ref.dtype.is_floating_point:
        ok = all(_equal(out[idx], ref[idx]) for idx in blocks(tuple(ref.shape), chunk))
        return ok, "" if ok else f"{name}: integer/bool values differ", {}
    one_pass = _one_pass(out, ref, tol)
    if one_pass is not None:
        (n_nan, n_inf, out_sq, den, num, bad), max_abs = one_pass
    else:
        # First as if every element were finite (no masks: ~13 passes a block instead of ~22);
        # the sums of squares are finite exactly when they were (or a float64 square
        # overflowed), else the comparison runs again with NaN and infinities looked for.
        (n_nan, n_inf, out_sq, den, num, bad), max_abs = _sums(out, ref, tol, chunk, masked=False)
        if not (math.isfinite(out_sq) and math.isfinite(den)):
            (n_nan, n_inf, out_sq, den, num, bad), max_abs = _sums(out, ref, tol, chunk,
                                                                    masked=True)
    n_nan, bad = int(n_nan), int(bad)
    inf_mismatch = n_inf > 0
    if n_nan:
        return False, f"{name}: {n_nan} NaN value(s) in the output (NaN never passes)", {}
    if inf_mismatch:
        return False, f"{name}: infinities differ from the reference", {}
    rel = 0.0 if den == 0.0 and num == 0.0 else (math.inf if den == 0.0 else math.sqrt(num / den))
    stats = {"max_abs_error": max_abs, "rel_error": rel, "out_norm": math.sqrt(out_sq),
             "ref_norm": math.sqrt(den)}
    if bad:
        return False, (f"{name}: {bad}/{out.numel()} elements outside atol={tol['atol']:g}, "
                       f"rtol={tol['rtol']:g} (max abs error {max_abs:.3g})"), stats
    if rel > tol["max_rel_error"]:
        return False, (f"{name}: relative error ||out-ref||/||ref|| = {rel:.3g} > "
                       f"{tol['max_rel_error']:g} (elementwise tolerances passed; outputs may be "
                       "too small for atol to mean anything)"), stats
    return True, "", stats


def _sums(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float], chunk: int,
          masked: bool) -> tuple[list[float], float]:
    """``[NaN count, infinity mismatches, |out|^2, |ref|^2, |out-ref|^2, elements outside the
    tolerance]`` and the largest ``|out - ref|``; ``masked``: NaN and infinities counted and
    left out of the rest (without it, the first two are 0)."""
    # Every figure accumulates on the device and is read once at the end: a read per block
    # waits for the GPU, and on a GPU that other workers' processes share each wait can
    # cost a time slice.
    sums = _zeros(6, dtype=torch.float64, device=ref.device)
    peak = _zeros((), dtype=torch.float64, device=ref.device)
    for idx in blocks(tuple(ref.shape), chunk):
        o, r = _f64(out[idx]), _f64(ref[idx])
        if masked:
            sums[0] += _sum(_isnan(o))
            o_inf, r_inf = _isinf(o), _isinf(r)
            # infinities in the same places with the same signs: where either is infinite, equal
            sums[1] += _sum((o_inf | r_inf) & (o != r))
            # In place, to hold few block-sized temporaries: o becomes the difference, r |r|.
            o.masked_fill_(o_inf, 0.0)
            r.masked_fill_(r_inf, 0.0)
            del o_inf, r_inf
        sums[2] += _norm(o) ** 2
        sums[3] += _norm(r) ** 2
        o.sub_(r).abs_()  # |out - ref| on the finite elements (0 where both are infinite)
        sums[4] += _norm(o) ** 2
        if o.numel():
            peak = _maximum(peak, o.max())
        r.abs_().mul_(tol["rtol"]).add_(tol["atol"])  # the bound
        sums[5] += _sum(o > r)
        del o, r
    return sums.tolist(), peak.item()


def _one_pass(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float],
              kernel=None) -> tuple[list[float], float] | None:
    """The masked pass's figures from the one-pass kernel, or None where it does not apply
    (none made, another dtype or device, a strided tensor) or a NaN in the reference leaves
    the outcome to the passes above (they let it through the same way)."""
    kernel = kernel or _kernel
    if kernel is None or not kernel.fits(out, ref):
        return None
    f = kernel.figures(out, ref, tol["atol"], tol["rtol"])
    if f[2]:
        return None
    return [f[0], f[1], f[3], f[4], f[5], f[6]], f[7]


SELF_CHECK_TOL = {"atol": 1e-2, "rtol": 1e-2}
# The self-check's values and the PyTorch passes' figures on them, per (dtype, finite): made on
# the CPU, whose float64 subtractions, products and sums of two round as the GPU's (only the
# sums of squares add in another order, which _disagreement allows for). The passes on the GPU
# took 0.36 s of a fresh process on the H200 (their kernels' first launches); on the CPU, 0.05 s.
_self_check: dict[tuple[torch.dtype, bool], tuple[torch.Tensor, torch.Tensor, tuple]] = {}


def self_check_sets(threads: int | None = 1) -> dict[tuple[torch.dtype, bool],
                                                      tuple[torch.Tensor, torch.Tensor, tuple]]:
    """``(dtype, finite) -> (out, ref, figures)`` on the CPU: the masked pass's, made once, with
    torch's CPU operations on ``threads`` threads meanwhile (None: as they are).

    One, by default: a bench's workers share the host's cores with each other and with Triton's
    compilations, and each of these small operations is a parallel region that ends only when
    all of a worker's threads (one per core) have had their turn. On the 2-core machine beside
    six processes keeping its cores busy, making the sets took 1.5-3.1 s on two threads and
    0.12-0.19 s on one (0.03 s alone; ``benchmarks/compare_prepare.py --cpu-only``); in the
    H200's bench workers, making the kernel took 2.0-2.4 s of every job with them made in it."""
    if not _self_check:
        from openkernel.evaluation.worker.compare_kernel import self_check_values

        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            for dtype in (torch.float32, torch.float64):
                for finite in (True, False):
                    out, ref = self_check_values(dtype, "cpu", finite)
                    _self_check[(dtype, finite)] = (out, ref, _sums(out, ref, SELF_CHECK_TOL,
                                                                   CHUNK, masked=True))
        finally:
            torch.set_num_threads(before)
    return _self_check


def ahead(cache_dir: str) -> str:
    """Make and check the one-pass kernel while a GPU worker waits for its job (cuda.core's
    import, the self-check's sets on one thread, the kernel from the machine's cache
    ``cache_dir``); the job's ``prepare`` then takes its answer as it is. In a bench the making
    took 1.0-2.4 s of every job on the H200 (kb22-s27-b, -c) against 0.08 s alone: whatever
    slows it there now slows a spare's wait instead. Returns what it made, for the record."""
    t0 = time.perf_counter()
    answer = prepare("cuda", cache_dir)
    _prepared["cuda"] = answer
    return f"{answer}, made in {time.perf_counter() - t0:.2f} s"


def prepare(device: str, cache_dir: str | None,
            step: Callable[[str], None] | None = None) -> str:
    """Make the one-pass kernel for this worker's GPU and check it against the PyTorch passes'
    figures on crafted values; returns how outputs will be compared (and why not by the
    kernel). ``step(name)`` is called as each step ends (the worker times them: in a bench on
    the H200 the whole took 2.0-2.4 s a job against 0.08-0.31 s in a process alone, the
    self-check's sets then made on every core's thread: see ``self_check_sets``). Where
    ``ahead`` made it before the job, its answer is the job's."""
    global _kernel
    step = step or (lambda name: None)
    if device in _prepared:  # made and checked before the job came (ahead)
        step("made before the job")
        return _prepared[device]
    try:
        from openkernel.evaluation.worker.compare_kernel import CompareKernel
        from openkernel.nvrtc.kernel import _cuda_core

        _cuda_core()
        step("importing cuda.core")
        sets = self_check_sets()
        step("the self-check's figures")
        kernel = CompareKernel(torch.device(device), cache_dir)
        step("loading the kernel")
        for (dtype, finite), (out, ref, want) in sets.items():
            got = _one_pass(out.to(device), ref.to(device), SELF_CHECK_TOL, kernel)
            why = _disagreement(got, want, finite)
            if why:
                return f"PyTorch passes (the one-pass kernel disagreed on {dtype}: {why})"
        step("the self-check")
    except Exception as err:  # noqa: BLE001 - no kernel: the PyTorch passes, as without the option
        return f"PyTorch passes (no one-pass kernel: {type(err).__name__}: {str(err)[:300]})"
    _kernel = kernel
    return "one-pass kernel"


def _disagreement(got, want, finite: bool) -> str:
    """What differs between the kernel's figures and the PyTorch pass's (empty: none). Counts
    must be equal; sums (added in another order) within 1e-9; the largest difference equal."""
    if got is None:
        return "no figures"
    (g, g_max), (w, w_max) = got, want
    names = ("NaN", "infinity mismatches", "|out|^2", "|ref|^2", "|out-ref|^2", "outside")
    for name, a, b in zip(names, g, w):
        if name in ("|out|^2", "|ref|^2", "|out-ref|^2"):
            if finite and not math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0):
                return f"{name} {a!r} against {b!r}"
        elif a != b:
            return f"{name} {a!r} against {b!r}"
    if finite and g_max != w_max:
        return f"largest difference {g_max!r} against {w_max!r}"
    return ""


def compare_outputs(outs: list[torch.Tensor], refs: list[torch.Tensor], tol_hook: Any = None,
                    chunk: int = CHUNK) -> tuple[bool, str, dict[str, float]]:
    """Check all outputs; returns (ok, first failure message, worst stats; the norms are the
    first output's)."""
    if len(outs) != len(refs):
        return False, f"returned {len(outs)} output(s), the reference returns {len(refs)}", {}
    worst = {"max_abs_error": 0.0, "rel_error": 0.0}
    for i, (o, r) in enumerate(zip(outs, refs)):
        ok, msg, stats = compare_tensor(o, r, tolerances_for(r.dtype, tol_hook), f"output {i}", chunk)
        for k in ("max_abs_error", "rel_error"):
            if k in stats:
                worst[k] = max(worst[k], stats[k])
        if i == 0:
            worst.update({k: stats[k] for k in ("out_norm", "ref_norm") if k in stats})
        if not ok:
            return False, msg, worst
    return True, "", worst


class Fingerprints:
    """Keyed checksums of tensors' bytes, to see that memory changed without copying it.

    A copy of a 6 GiB input to compare against is 6 GiB; two 64-bit sums over its bytes,
    one plain and one weighted by secret random words drawn after the candidate is imported,
    cost one block of temporaries. Any change to the tensor's storage shows with
    overwhelming probability, and a candidate cannot aim a change at the sums it does not
    know the weights of.
    """

    WORDS = 1 << 20  # weights: 8 MiB, reused across each block's rows

    def __init__(self, device: str, chunk: int = CHUNK, seed: int | None = None):
        import os

        self.chunk = max(self.WORDS, chunk // self.WORDS * self.WORDS)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        self.weights = torch.randint(-(2**62), 2**62, (self.WORDS,), generator=gen,
                                     device=device, dtype=torch.int64) | 1

    def _sums(self, words: torch.Tensor) -> torch.Tensor:
        """The block's plain and weighted sums, on the device (int64, wrapping: modulo 2^64)."""
        w = words.to(torch.int64)
        rows = w.numel() // self.WORDS
        body = w[: rows * self.WORDS].view(rows, self.WORDS) if rows else w[:0].view(0, self.WORDS)
        tail = w[rows * self.WORDS:]
        weighted = _sum(body * self.weights) + _sum(tail * self.weights[: tail.numel()])
        return _stack([_sum(w), weighted])

    def of(self, t: torch.Tensor) -> tuple[int, int, int]:
        """(bytes, plain sum, weighted sum) of the storage under ``t``."""
        raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
        words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
        sums = _zeros(2, dtype=torch.int64, device=t.device)  # read once, after every block
        for start in range(0, words.numel(), self.chunk):
            sums += self._sums(words[start:start + self.chunk])
        plain, weighted = sums.tolist()
        mask = (1 << 64) - 1
        return raw.numel(), plain & mask, weighted & mask

    def of_all(self, tensors: list[torch.Tensor]) -> list[tuple[int, int, int]]:
        return [self.of(t) for t in tensors]
