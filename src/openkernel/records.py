"""Records that several layers share: what candidates run on, and what the task probe learned.

The generators, the search, the evaluator's two sides and the UIs all read these; they live
beside ``schemas.py`` so none of those has to import another's internals.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

CPU_LABEL = "CPU (Triton interpreter)"


def device_words(hardware: str, backend: str = "triton") -> str:
    """The machine as the front ends name it for a job's backend: the CPU runs Triton under
    its interpreter, but a CUDA C++ job there is only compiled (its candidates are not run)."""
    if not hardware.lower().startswith("cpu"):
        return hardware
    if backend == "cuda":
        return "CPU, no GPU: CUDA C++ compiled only"
    return "CPU, Triton interpreter" if "interpreter" in hardware.lower() else hardware


def baseline_kind(allow_tf32: bool) -> str:
    """The store's kind of the reference's compiler baselines: timed under the run's TF32 flag
    (``eval_config.allow_tf32``), they are kept apart from those timed without it."""
    return "compile-tf32" if allow_tf32 else "compile"


@dataclass(frozen=True)
class PrecisionFlags:
    """The torch flags that decide how float32 GEMMs and convolutions compute on a GPU, as a
    worker ran under them (every worker of a run runs under the same ones)."""

    matmul_tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32 (eval_config.allow_tf32)
    conv_tf32: bool = True  # torch.backends.cudnn.allow_tf32 (PyTorch's default)


@dataclass(frozen=True)
class KernelPrecision:
    """How one GEMM or convolution of a candidate computes, under the run's flags on its
    device (``Program.metadata["precision"]``, one per such kernel)."""

    kernel: str  # the kernel's name in the candidate, e.g. "_k0_mm"
    op: str  # the aten op it computes: "mm", "bmm", "addmm", "convolution", ...
    by: str  # "triton", or the library that runs it: "cuBLAS", "cuBLASLt", "cuDNN"
    # what its inputs are multiplied in: "fp32", "tf32", "3xtf32" (three TF32 products: float32's
    # error on tensor cores), "bf16", "fp16", "fp64"
    precision: str


@dataclass(frozen=True)
class Hardware:
    """What candidates run on, as the engine reports and stores it."""

    label: str  # e.g. "NVIDIA H200 (sm_90)" or "CPU (Triton interpreter)"
    device: str  # "cuda" or "cpu"
    gpu_arch: str  # e.g. "sm_90" (the first GPU's); "cpu" without a GPU
    num_gpus: int = 0
    gpu_archs: tuple[str, ...] = ()  # each visible GPU's architecture, by index
    interpreter: bool = False  # Triton under TRITON_INTERPRET=1: timings are interpreter timings
    peak_bandwidth_gbs: float | None = None  # measured, not from datasheets (when known)
    peak_tflops: dict = field(default_factory=dict)  # dtype -> measured TFLOP/s
    gpu_memory_bytes: int = 0  # device memory of the first GPU (0 on the CPU)
    # torch, Triton and CUDA versions, backend flags (TF32, cuDNN) and compiler settings of the
    # workers: with the label, what the reference's stored timings are keyed by
    software: dict = field(default_factory=dict)


@dataclass
class TaskProbe:
    """What a worker learned by loading the reference and running it once.

    Used to validate the task (one clear error), to match offline templates (``aten_ops``),
    and for roofline estimates (``flops``, ``bytes_moved``).
    """

    ok: bool
    error: str = ""  # the one message for a bad task
    aten_ops: list[str] = field(default_factory=list)  # e.g. ["aten.gelu.default"]
    input_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    # FLOPs of one forward: matmuls and convolutions (torch.utils.flop_counter), plus one per
    # element of each pointwise op and reduction (worker/probe.py); 0.0: none counted, unknown.
    flops: float = 0.0
    bytes_moved: float = 0.0  # inputs read once + outputs written once
    warnings: list[str] = field(default_factory=list)
    hardware: Hardware | None = None
    log: str = ""
    memory: Footprint | None = None  # what the reference holds on its device (the memory plan's input)
    trace: OpTrace | None = None  # the forward's aten ops with their arguments (graph templates)
    flags: PrecisionFlags | None = None  # the TF32 flags the reference ran under
    # On a GPU with cuDNN's TF32 allowed: the reference's float32 convolutions computed
    # exactly all the same (its output moved less than TF32's rounding with TF32 off: cuDNN
    # picks non-TF32 kernels for some shapes, e.g. small groups), so ours may not round to TF32.
    conv_exact: bool = False
    # The reference's compute ops when they are all GEMMs or convolutions (e.g. "mm"): a lone
    # library call, which no kernel of ours can be "the library call with more around it".
    library_bound: str = ""
    # On a GPU: the code torch.compile's Inductor writes for the reference (worker/inductor.py:
    # {"code", "args", "outputs", "made", "signature"}), the offline generator's seed, one per
    # distinct input signature (each tensor input's rank and dtype) of the benchmark inputs
    # (first) and the held-out sets, then (newer probes) one at the benchmark inputs' own sizes
    # (with their "shapes"); None elsewhere. A lone dict (older probes) is one capture.
    inductor: list[dict] | None = None
    # What a candidate must meet, for the prompt: output dtype -> {atol, rtol, max_rel_error}
    # (the task's get_tolerances hook applied), and the held-out input sets checked besides
    # the main one, each {"name": where it came from, "shapes": [...], "dtypes": [...]}.
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    heldout: list[dict] = field(default_factory=list)
    reference_ms: float = 0.0  # the reference's median over a few calls at the probe (0: not timed)
    # Seconds of each step inside the worker (hardware, load, forward, heldout, footprint,
    # trace, inductor, timing): where the probe's share of a problem's fixed cost goes.
    steps_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.inductor, dict):  # one capture, as probes before per-signature ones
            self.inductor = [self.inductor]

    @classmethod
    def from_json(cls, data: dict[str, Any], hardware: Hardware | None = None) -> "TaskProbe":
        """The record back from a worker's report (nested records rebuilt)."""
        data = dict(data)
        if isinstance(data.get("memory"), dict):
            data["memory"] = Footprint(**data["memory"])
        if isinstance(data.get("trace"), dict):
            data["trace"] = OpTrace.from_json(data["trace"])
        if isinstance(data.get("flags"), dict):
            data["flags"] = PrecisionFlags(**data["flags"])
        if isinstance(data.get("hardware"), dict):
            data["hardware"] = hardware_from_json(data["hardware"])
        elif hardware is not None:
            data["hardware"] = hardware
        return cls(**data)


@dataclass
class TracedTensor:
    """Shape and dtype of one tensor of a trace.

    A size is an int, or a Python expression over the input sizes the trace found symbolic
    (``"s0*s1"``; ``OpTrace.sizes`` says which input dimension each ``sN`` is).
    """

    shape: list = field(default_factory=list)
    dtype: str = "torch.float32"


@dataclass
class StateTensor:
    """One entry of the reference's ``state_dict`` (or a non-persistent buffer)."""

    name: str  # dotted, as in state_dict: "fc.weight"
    shape: list[int] = field(default_factory=list)
    dtype: str = "torch.float32"
    kind: str = "parameter"  # "parameter" or "buffer"
    persistent: bool = True  # False: a buffer state_dict leaves out (the evaluator cannot copy it)


@dataclass
class TracedOp:
    """One aten op the reference's forward dispatched.

    ``args`` and ``kwargs`` are JSON: a tensor argument is ``{"t": REF}`` where REF is
    ``"in<i>"`` (forward's i-th tensor argument), ``"s:<name>"`` (a ``state_dict`` entry),
    ``"op<k>"`` / ``"op<k>.<j>"`` (output j of an earlier op), ``"c<k>"`` (a small constant,
    ``OpTrace.constants``) or ``"?"`` (a tensor the trace cannot place); a symbolic size is
    ``{"sym": EXPR}``, a dtype ``{"dtype": "torch.float32"}``, a non-finite float
    ``{"float": "inf"}``, a device ``{"device": "cuda:0"}``, anything else not JSON
    ``{"repr": str}``.
    """

    op: str  # "aten.add.Tensor"
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    outputs: list[TracedTensor] = field(default_factory=list)
    origin: int = 0  # index into OpTrace.top_ops of the op this one was decomposed from
    note: str = ""  # what makes the op unusable as recorded, e.g. "writes through a view"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TracedOp":
        data = dict(data)
        data["outputs"] = [TracedTensor(**o) for o in data.get("outputs", [])]
        return cls(**data)


@dataclass
class OpTrace:
    """The reference's forward as a graph of aten ops, recorded once by the probe.

    Composite ops (softmax, layer_norm, group_norm, losses, ...) are recorded as torch's own
    decompositions into simpler aten ops; ``top_ops`` keeps the ops as dispatched before that,
    and each op's ``origin`` points into it, so a refusal can name what the reference called.
    """

    ops: list[TracedOp] = field(default_factory=list)
    top_ops: list[str] = field(default_factory=list)
    inputs: list[TracedTensor | None] = field(default_factory=list)  # None: not a tensor
    state: list[StateTensor] = field(default_factory=list)
    constants: list[dict] = field(default_factory=list)  # {"values", "shape", "dtype"}
    outputs: list[str] = field(default_factory=list)  # refs of the returned tensors, flattened
    output_kind: str = "tensor"  # "tensor", "tuple" or "list"
    sizes: dict[str, list[int]] = field(default_factory=dict)  # "s0" -> [input index, dim]
    symbolic: bool = False  # sizes are expressions over the inputs' (held-out shapes follow)
    note: str = ""  # why the trace is concrete, or incomplete

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OpTrace":
        data = dict(data)
        data["ops"] = [TracedOp.from_json(o) for o in data.get("ops", [])]
        data["inputs"] = [TracedTensor(**t) if isinstance(t, dict) else None
                          for t in data.get("inputs", [])]
        data["state"] = [StateTensor(**s) for s in data.get("state", [])]
        return cls(**data)


@dataclass
class Footprint:
    """What one call of the reference holds on its device, measured by the probe.

    ``peak_bytes`` is the most memory allocated at once during a forward with the model's
    weights and the inputs resident: the problem's own footprint, against which a worker's
    peak is judged. On the CPU there is no device to measure: the peak is estimated as
    weights + inputs + outputs, and ``measured`` is False.
    """

    param_bytes: int = 0  # weights and buffers
    input_bytes: int = 0  # one input set
    output_bytes: int = 0
    peak_bytes: int = 0  # weights + inputs + outputs + the forward's transient memory
    measured: bool = False
    mutates_inputs: bool = False  # the reference writes into its inputs (then a pristine copy is kept)
    # A smaller input set for the float64 precision check, where the full one does not fit:
    # {"sizes": {global: value}} (KernelBench size globals), {"extra": index} (a task hook's
    # held-out set) or {} when none was found; with its own peak.
    small_set: dict = field(default_factory=dict)
    small_peak_bytes: int = 0


@dataclass
class MemoryPlan:
    """How an evaluation of this task uses device memory (``evaluation/host/memplan.py``).

    Made on the engine's side from the probe's :class:`Footprint` and the GPU's memory, sent
    to every worker with its job. Level 0 is the normal plan; a candidate retried after an
    evaluator fault gets level 1: the GPU to itself, smaller comparison chunks, the precision
    check on the small set (or skipped).
    """

    level: int = 0
    footprint_bytes: int = 0  # the problem's own footprint (Footprint.peak_bytes)
    budget_bytes: int = 0  # what the worker's own checks may reach (0: no limit, the CPU)
    workers_per_gpu: int = 1  # workers holding task data on one GPU at once
    checks_per_gpu: int = 1  # of them, at their checks' peak at once (eval_config.overlap_checks)
    exclusive: bool = False  # this worker has its GPU to itself (a retry)
    chunk_elements: int = 1 << 24  # comparisons, fingerprints and float64 work per chunk
    precision_set: str = "main"  # "main", "small" or "skip"
    precision_why: str = ""  # why not the main set, or not on the device (for the log)
    precision_on_host: bool = False  # the float64 run on the host CPU (memplan.HOST_FLOPS)
    # the task's float64 answer (made once, by a worker without a candidate) on the device
    # all the same: there it needs ~2x the footprint, not a check's ~2.8x
    answer_on_device: bool = False
    small_set: dict = field(default_factory=dict)  # Footprint.small_set
    keep_pristine: bool = False  # the reference mutates its inputs: keep a pristine copy
    poison_bytes: int = 0  # free memory filled with NaN before each candidate call
    memory_fraction: float = 0.9  # torch's per-process cap for this worker
    # what a sweep may add to what its worker holds (0: no bound): its combinations' own
    # copies of the weights (past it they share one), and its first calls side by side
    first_calls_bytes: int = 0
    # what the reference's call on the smaller set holds beyond its weights (the probe's
    # measure: inputs, outputs, transients); 0: no smaller set or not measured
    small_call_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "MemoryPlan":
        return cls(**(data or {}))


def software_key(software: dict | None) -> str:
    """A short digest of ``Hardware.software`` ("" when unknown): with the hardware label and
    the task's digest, the key of the reference's stored baselines."""
    if not software:
        return ""
    return hashlib.sha256(json.dumps(software, sort_keys=True).encode()).hexdigest()[:16]


def hardware_to_json(hw: Hardware) -> dict[str, Any]:
    return asdict(hw)


def hardware_from_json(data: dict[str, Any]) -> Hardware:
    """The record back from JSON, including one stored before ``gpu_archs`` existed (its GPUs
    were all taken to be the first one's kind) and ignoring keys this version does not know."""
    known = {f.name for f in fields(Hardware)}
    data = {k: v for k, v in data.items() if k in known}
    archs = data.get("gpu_archs")
    if archs is None:
        gpus = int(data.get("num_gpus") or 0) if data.get("device") == "cuda" else 0
        archs = [data.get("gpu_arch", "")] * gpus
    return Hardware(**{**data, "gpu_archs": tuple(archs)})




@dataclass(frozen=True)
class Diagnosis:
    """The critic's reading of one kernel: what limits it and what to try next.

    Written after each iteration for the best kernel and for each parent handed to the next
    one; the next prompts read it (section "Critic's diagnosis"), the store keeps it.
    """

    kernel_id: str | None  # None: about the job as a whole (no correct kernel yet)
    label: str  # i<N>-b<M>, "ref", "start", or "" with kernel_id None
    role: str  # "best" | "parent"
    text: str  # one to three sentences: bottleneck, headroom, what to try
    bottleneck: str = ""  # memory_bound | compute_bound | latency_bound | "" (not known)
    headroom: float | None = None  # runtime over the roofline floor, when known
    source: str = "rules"  # "rules" | "llm"
    model: str = ""  # the critic's model when source is "llm"

    @property
    def said(self) -> str:
        """One paragraph naming the kernel it is about (the rules' text names it already)."""
        if self.source != "llm":
            return self.text
        who = ("Best so far " if self.role == "best" else "Parent ") + self.label
        return f"{who} (critic model {self.model}): {self.text}"
