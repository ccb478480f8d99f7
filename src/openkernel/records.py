"""Records that several layers share: what candidates run on, and what the task probe learned.

The generators, the search, the evaluator's two sides and the UIs all read these; they live
beside ``schemas.py`` so none of those has to import another's internals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

CPU_LABEL = "CPU (Triton interpreter)"


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
    flops: float = 0.0
    bytes_moved: float = 0.0  # inputs read once + outputs written once
    warnings: list[str] = field(default_factory=list)
    hardware: Hardware | None = None
    log: str = ""


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
