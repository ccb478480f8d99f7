"""The LLM critic: a model reads the profiles and the last results and writes the diagnosis.

One call per iteration covers the best kernel and every parent handed to the next iteration
(a failed kernel is one when its branch has nothing better).
The model sees, per kernel: its status and speedups, the Nsight Compute metrics (or the
analytic estimate, labelled so), its roofline placement (achieved rates against the measured
ceilings, bottleneck, headroom), the start of its evaluation log and its code; plus one line per
candidate of the iteration just judged (with the first error of each failure). It answers with JSON; a kernel it leaves out, an
answer that is not JSON, or a failed call gets the rules' diagnosis instead (and a warning), so
a flaky critic never stops the search.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from openkernel.config import ModelConfig
from openkernel.costs import LLMCall
from openkernel.generators.feedback import model_log
from openkernel.records import Diagnosis, Hardware, TaskProbe
from openkernel.schemas import NOT_JUDGED, Program
from openkernel.search.critic import first_error, judge_by_rules, roofline_estimate, subjects

CODE_LINES = 120  # the critic needs the kernel's shape, not every line of a long one
LOG_CHARS = 1500
BOTTLENECKS = ("memory_bound", "compute_bound", "latency_bound")

INSTRUCTIONS = """You are the critic of an evolutionary GPU-kernel search. For each kernel under \
"Kernels to diagnose", say what limits it and what the next version should try: read the \
profiler metrics and the roofline placement (how far it is from the memory or compute floor), \
and for a failed kernel the first error. Be concrete (tile sizes, loads, fusion, occupancy, \
the exact error to fix); two or three sentences per kernel.

Answer with one JSON object and nothing else:
{"kernels": [{"label": "<label as given>", "bottleneck": "memory_bound" | "compute_bound" | \
"latency_bound" | "unknown", "headroom": <runtime over the roofline floor, a number, or null>, \
"diagnosis": "<what limits it, and what to try next>"}]}"""


@dataclass
class CriticReport:
    """What one round of the critic produced."""

    diagnoses: list[Diagnosis]
    calls: list[LLMCall] = field(default_factory=list)
    warning: str = ""  # the model's diagnosis could not be used (the rules' stands in)


def _metrics(program: Program, probe: TaskProbe, hw: Hardware) -> tuple[str, str]:
    """(profiler metrics, roofline placement) as text for the prompt."""
    result = program.kernel_exec_result
    prof = {k: v for k, v in (result.profiler_data or {}).items()
            if not isinstance(v, (list, dict))}
    if prof and not prof.get("estimate"):
        metrics = "Nsight Compute: " + ", ".join(f"{k}={_num(v)}" for k, v in prof.items())
    elif prof:
        metrics = "No profile; analytic estimate: " + ", ".join(
            f"{k}={_num(v)}" for k, v in prof.items())
    else:
        metrics = "No profiler data."
    est = roofline_estimate(result.runtime, probe, hw) if result.runtime > 0 else {}
    if hw.interpreter:
        place = ("Timed under the Triton interpreter on the CPU: no roofline placement (these "
                 "timings say nothing about a GPU).")
    elif est.get("bottleneck"):
        # No FLOPs counted (a task without matmuls or pointwise ops): the intensity is unknown.
        intensity = (f"arithmetic intensity {est['arithmetic_intensity']:.3g} FLOP/byte"
                     if "arithmetic_intensity" in est else "arithmetic intensity unknown")
        rate = f" and {est['gflops']:.4g} GFLOP/s" if "gflops" in est else ""
        place = (f"{intensity}, achieved {est.get('achieved_gbs', 0):.4g} GB/s{rate}"
                 + (f" ({est['dram_throughput_pct']:.0f}% of the measured bandwidth)"
                    if "dram_throughput_pct" in est else "")
                 + f"; roofline says {est['bottleneck']}"
                 + (f", headroom {est['headroom']:.2f}x" if est.get("headroom") else ""))
    else:
        place = "No hardware ceilings or work counts: no roofline placement."
    return metrics, place


def _num(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _kernel_block(program: Program, role: str, probe: TaskProbe, hw: Hardware) -> str:
    result = program.kernel_exec_result
    label = program.metadata.get("label", program.label)
    speed = (f", {result.runtime_improvement:.3f}x over the reference"
             if result.runtime_improvement > 0 else "")
    vs_compile = (f", {result.improve_over_compile:.3f}x over torch.compile"
                  if result.improve_over_compile > 0 else "")
    lines = [f"### {label} ({'the best kernel so far' if role == 'best' else 'a parent'})",
             f"Status: {result.get_status().label}{speed}{vs_compile}."]
    if result.runtime > 0:
        lines.append(f"Median runtime: {result.runtime:.4g} ms.")
    metrics, place = _metrics(program, probe, hw)
    lines += [f"Profile: {metrics}", f"Roofline: {place}"]
    if not result.correctness:
        lines.append(f"First error: {first_error(result.eval_log) or 'none found in the log'}")
    log = model_log(result.eval_log or "").strip()  # without the operator's lines
    if log:
        lines.append("Evaluation log (start):\n```text\n" + log[:LOG_CHARS] + "\n```")
    code = program.code.rstrip("\n").splitlines()
    shown = "\n".join(code[:CODE_LINES]) + (
        f"\n# ... ({len(code) - CODE_LINES} more lines)" if len(code) > CODE_LINES else "")
    lines.append("```python\n" + shown + "\n```")
    return "\n".join(lines)


def critic_prompt(iteration: int, subjects: list[tuple[Program, str]], recent: list[Program],
                  probe: TaskProbe, hw: Hardware, task_name: str, backend: str) -> str:
    """The whole prompt of one critic call."""
    work = ""
    if probe.flops > 0:
        work = (f" Work per call: {probe.flops:.3g} FLOPs, {probe.bytes_moved:.3g} bytes at "
                "least.")
    elif probe.bytes_moved:
        work = f" Work per call: {probe.bytes_moved:.3g} bytes at least (FLOPs not counted)."
    ceilings = []
    if hw.peak_bandwidth_gbs:
        ceilings.append(f"{hw.peak_bandwidth_gbs:.0f} GB/s")
    ceilings += [f"{v:.1f} TFLOP/s {k}" for k, v in (hw.peak_tflops or {}).items()]
    task = (f"Task {task_name}, backend {backend}, hardware {hw.label}"
            + (f" (measured ceilings: {', '.join(ceilings)})" if ceilings else "") + "." + work)
    blocks = [_kernel_block(p, role, probe, hw) for p, role in subjects]
    results = []
    for p in recent:
        r = p.kernel_exec_result
        speed = f" {r.runtime_improvement:.3f}x" if r and r.runtime_improvement > 0 else ""
        status = r.get_status() if r else None
        why = first_error(r.eval_log) if r and not r.correctness and status not in NOT_JUDGED \
            else ""
        status = ("not judged" if status is None else status.value
                  + (" (not judged: says nothing about its code)" if status in NOT_JUDGED else ""))
        results.append(f"- {p.metadata.get('label', p.label)}: {status}{speed}; "
                       f"{p.metadata.get('description') or ''}".rstrip("; ")
                       + (f"; first error: {why}" if why else ""))
    return "\n\n".join([
        INSTRUCTIONS, "## Task\n\n" + task,
        f"## Results of iteration {iteration}\n\n" + ("\n".join(results) or "None."),
        "## Kernels to diagnose\n\n" + "\n\n".join(blocks)])


def parse_answer(text: str) -> dict[str, dict]:
    """label -> {bottleneck, headroom, diagnosis} from the model's JSON (fenced or bare)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        raise ValueError("no JSON object in the answer")
    data = json.loads(match.group(0))
    entries = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError('the JSON has no "kernels" list')
    out = {}
    for entry in entries:
        if isinstance(entry, dict) and str(entry.get("diagnosis") or "").strip():
            out[str(entry.get("label", "")).strip()] = entry
    return out


class LLMCritic:
    """Asks ``cfg``'s model through ``complete`` (``LLMGenerator.complete``)."""

    def __init__(self, cfg: ModelConfig, complete) -> None:
        self.cfg = cfg
        self._complete = complete

    @property
    def model(self) -> str:
        return self.cfg.model

    def judge(self, iteration: int, best: Program | None, parents: list[Program],
              recent: list[Program], probe: TaskProbe, hw: Hardware, task_name: str,
              backend: str, outcomes: Counter | None = None) -> CriticReport:
        rules = judge_by_rules(best, parents, probe, hw, outcomes)
        read = subjects(best, parents)
        if not read:  # nothing judged to read yet: the rules' generic advice
            return CriticReport(rules)
        prompt = critic_prompt(iteration, read, recent, probe, hw, task_name, backend)
        try:
            done = self._complete(self.cfg, prompt, purpose="critic")
        except Exception as err:  # noqa: BLE001 - LLMError or a bug: the rules stand in
            spent = getattr(err, "spent", None)  # a stream cut off mid-answer still cost
            return CriticReport(rules, [spent] if spent else [],
                                warning=f"critic model {self.model} failed ({err}); the "
                                "rule-based diagnosis is used")
        calls = [done.call]
        try:
            answers = parse_answer(done.text)
        except ValueError as err:
            return CriticReport(rules, calls, f"critic model {self.model} gave no usable "
                                f"diagnosis ({err}); the rule-based diagnosis is used")
        out, missing = [], []
        for d in rules:
            entry = answers.get(d.label) if d.kernel_id else None
            if entry is None:
                out.append(d)
                missing += [d.label] if d.kernel_id else []
                continue
            bottleneck = str(entry.get("bottleneck") or "")
            headroom = entry.get("headroom")
            out.append(Diagnosis(
                d.kernel_id, d.label, d.role, " ".join(str(entry["diagnosis"]).split()),
                bottleneck if bottleneck in BOTTLENECKS else "",
                float(headroom) if isinstance(headroom, (int, float)) else None,
                source="llm", model=self.model))
        warning = (f"critic model {self.model} left out {', '.join(missing)}: the rule-based "
                   "diagnosis is used for them" if missing else "")
        return CriticReport(out, calls, warning)


class RulesCritic:
    """The rule-based critic behind the same ``judge`` as the LLM one."""

    model = ""

    def judge(self, iteration: int, best: Program | None, parents: list[Program],
              recent: list[Program], probe: TaskProbe, hw: Hardware, task_name: str,
              backend: str, outcomes: Counter | None = None) -> CriticReport:
        """``outcomes``: the job's candidates by status (candidates never judged are said as
        such while there is no correct kernel)."""
        return CriticReport(judge_by_rules(best, parents, probe, hw, outcomes))
