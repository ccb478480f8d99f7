"""The LLM prompt, in the product brief's order (seeds/results-browser.txt):

intro, user instructions, reference implementation (with the shapes, the held-out shapes and
the tolerances a candidate must meet), best kernel so far, parent kernel (with its evaluation
log; the reference's runtime when the parent is the reference), this branch's recent failures
(their condensed logs and code), the critic's latest diagnosis (of the best kernel and of this
parent), inspirations, language-specific instructions, optimization strategies, then what the
answer must look like (a plan first, then exactly one fenced code block).
Every section is present in every prompt (saying "none" when empty), so a stored prompt
always reads the same way. Each kernel is shown once (the best kernel is no inspiration too),
and logs reach the model without what is meant for the operator (the sandbox line, a sweep
table the prompt shows in full anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from openkernel.generators.base import ProposalRequest
from openkernel.generators.feedback import condense_log, model_log, named_lines
from openkernel.generators.instructions import LANGUAGE, op_classes, strategies_for
from openkernel.records import Diagnosis
from openkernel.roofline import arithmetic_intensity
from openkernel.schemas import Program
from openkernel.templating import label as params_label
from openkernel.wording import speedup_text

SECTIONS = ("Task", "User instructions", "Reference implementation", "Best kernel so far",
            "Parent kernel", "Recent failures of this branch", "Critic's diagnosis",
            "Inspirations", "Language-specific instructions", "Optimization strategies",
            "Your answer")
NO_DIAGNOSIS = "None yet: the critic writes one after each iteration."
INSPIRATION_LINES = 60  # inspirations are shown short: the idea matters, not every line
FAILURE_LINES = 120  # a failure's code, enough to find the lines its error names
FAILURE_LOG_CHARS = 1500  # a failure's log, condensed to its errors and verdict
PARENT_LOG_CHARS = 2500  # the best's and the parent's logs (their profiles and sweeps too)

_BACKEND_NAMES = {"triton": "Triton", "cuda": "CUDA C++"}

ANSWER_FORMAT = """Answer in this order:
1. A line `Idea: <one line: what this version tries>`.
2. Your reasoning: what the parent's result says (the error, the failed check, or the bottleneck), and your plan.
3. The complete module in exactly one fenced ```python code block, defining `ModelNew`. Nothing after the block."""


_WORKED = Path(__file__).with_name("templated_{}.py.tmpl")
TEMPLATE_FORMAT = """You may answer with a templated kernel instead of one fixed version: declare the options of
each tunable and every combination is built, checked on one input set and timed in one GPU turn;
the fastest correct one then gets the full checks and is kept as this kernel. The form:
- a module-level literal `TEMPLATE_PARAMS = {{"NAME": [option, ...], ...}}` (ints, floats, strings
  or bools; at most {bound} combinations are judged, past that a seeded sample of them);
- for each NAME, a module-level assignment `NAME = <one of its options>` that the code reads.
  openkernel rewrites only those lines for each combination and never runs your module to do it.
{how}
A worked example for {backend}:

{example}"""
_TEMPLATE_HOW = {
    "triton": "In Triton, pass them as `tl.constexpr` block sizes and as `num_warps=` / `num_stages=`\n"
              "at the launch.",
    "cuda": "In CUDA, pass them to `RawKernel(..., defines={...})` as macros (or format them into\n"
            "the source: template arguments) and use them in the launch (block and grid shapes); with\n"
            "`load_inline`, also put them in the extension's name so each combination is a build of\n"
            "its own.",
}


def template_format(backend: str, bound: int) -> str:
    """The template section of the answer format, with the backend's worked example."""
    key = backend if backend in _TEMPLATE_HOW else "triton"
    return TEMPLATE_FORMAT.format(bound=bound, how=_TEMPLATE_HOW[key],
                                  backend=_BACKEND_NAMES.get(key, key),
                                  example=_fence(_WORKED.with_name(
                                      _WORKED.name.format(key)).read_text()))


def template_results_text(program: Program, shown: int = 6) -> str:
    """A templated program's sweep for the prompt: which combinations won and by how much, which
    failed and why (empty for a program that was no template)."""
    results = program.kernel_exec_result.template_results if program.kernel_exec_result else {}
    rows = (results or {}).get("combinations") or []
    if not rows:
        return ""
    winner = results.get("winner")
    space = results.get("space") or {}
    head = (f"This kernel is the winner of a template over {', '.join(space) or 'its parameters'}: "
            f"{len(rows)} of {results.get('space_size', len(rows))} combination(s) judged"
            + (" (a sample)" if results.get("sampled") else "") + ".")
    timed = sorted((r for r in rows if r.get("speedup", -1) > 0), key=lambda r: -r["speedup"])
    lines = [head]
    if timed:
        best = timed[0]["speedup"]
        lines.append("Fastest correct combinations (speedup over the reference, share of the best):")
        for r in timed[:shown]:
            mark = " (winner)" if r["params"] == winner else ""
            lines.append(f"- {params_label(r['params'])}: {r['runtime']:.4f} ms, "
                         f"{speedup_text(r['speedup'])}, {r['speedup'] / best:.0%}{mark}")
        if len(timed) > shown:
            lines.append(f"- ... {len(timed) - shown} more correct, the slowest "
                         f"{params_label(timed[-1]['params'])} at "
                         f"{speedup_text(timed[-1]['speedup'])}")
    failed = [r for r in rows if r.get("speedup", -1) <= 0 and r.get("status") in
              ("compile_error", "incorrect", "runtime_error")]
    if failed:
        lines.append("Combinations that failed:")
        for r in failed[:shown]:
            why = next((ln.strip() for ln in (r.get("error") or "").splitlines() if ln.strip()),
                       "")
            lines.append(f"- {params_label(r['params'])}: {r['status']}"
                         + (f": {why[:160]}" if why else ""))
        if len(failed) > shown:
            lines.append(f"- ... {len(failed) - shown} more failed")
    return "\n".join(lines)


def _fence(code: str) -> str:
    return "```python\n" + code.rstrip("\n") + "\n```"


def _clip_code(code: str, max_lines: int) -> str:
    lines = code.rstrip("\n").splitlines()
    if len(lines) <= max_lines:
        return code
    return "\n".join(lines[:max_lines]) + f"\n# ... ({len(lines) - max_lines} more lines)\n"


def format_result(program: Program, condense: Callable[[str], str] | None = None) -> str:
    """A program's evaluation for the prompt, its log condensed when ``condense`` is given."""
    result = program.kernel_exec_result
    if result is None:
        return "Not evaluated."
    log = model_log(program.feedback or result.eval_log,
                    sweep_shown=bool(template_results_text(program)))
    if condense is not None and log:
        log = condense(log)
    log = condense_log(log, PARENT_LOG_CHARS).strip()  # as the recent failures' are
    return result.model_copy(update={"eval_log": log}).format_for_prompt()


def failures_text(request: ProposalRequest,
                  condense: Callable[[str], str] | None = None) -> str:
    """The "Recent failures of this branch" section: each failure's status, its log condensed
    to the errors and the verdict, the lines of its code the log names, and the code."""
    if not request.failures:
        return "None."
    blocks = []
    for p in request.failures:
        result = p.kernel_exec_result
        status = result.get_status().label if result else "Not evaluated"
        log = model_log(result.eval_log if result else "")
        if condense is not None and log:
            log = condense(log)
        log = condense_log(log, FAILURE_LOG_CHARS).strip()
        named = named_lines(log, p.label, p.code)
        blocks.append(f"### {p.label} ({p.id}): {status}"
                      + (f"\n{p.metadata['description']}" if p.metadata.get("description") else "")
                      + (f"\n\n```text\n{log}\n```" if log else "")
                      + (f"\n\nThe lines its log names:\n{named}" if named else "")
                      + "\n\n" + _fence(_clip_code(p.code, FAILURE_LINES)))
    return ("Earlier candidates of this branch that failed, most recent first: find the cause "
            "in each and do not repeat it.\n\n" + "\n\n".join(blocks))


def _reference_text(request: ProposalRequest) -> str:
    if request.reference_ms <= 0:
        return "The reference has not been timed here yet."
    how = f" ({request.reference_timing})" if request.reference_timing else ""
    return f"The reference's median runtime here: {request.reference_ms:.4g} ms{how}."


def _probe_summary(request: ProposalRequest) -> str:
    probe = request.probe
    parts = []
    if probe.input_shapes:
        shapes = ", ".join(f"{list(s)} {d.replace('torch.', '')}"
                           for s, d in zip(probe.input_shapes, probe.input_dtypes or
                                           [""] * len(probe.input_shapes)))
        parts.append(f"Inputs (as benchmarked here): {shapes}.")
    if probe.output_shapes:
        parts.append("Outputs: " + ", ".join(f"{list(s)} {d.replace('torch.', '')}" for s, d in
                                             zip(probe.output_shapes, probe.output_dtypes)) + ".")
    if probe.aten_ops:
        parts.append(f"Aten ops: {', '.join(probe.aten_ops)} ({' + '.join(op_classes(probe))}).")
    intensity = arithmetic_intensity(probe.flops, probe.bytes_moved)
    if intensity is not None:
        parts.append(f"Work: {probe.flops:.3g} FLOPs, {probe.bytes_moved:.3g} bytes moved "
                     f"(arithmetic intensity {intensity:.2f} FLOP/byte).")
    elif probe.bytes_moved:
        parts.append(f"Work: {probe.bytes_moved:.3g} bytes moved at least (FLOPs not counted).")
    if probe.heldout:
        sets = "; ".join(f"{h['name']}: " + ", ".join(
            f"{list(shape)} {dtype}" for shape, dtype in zip(h["shapes"], h["dtypes"]))
            for h in probe.heldout)
        parts.append(f"Held-out shapes, checked for correctness too (never timed): {sets}. "
                     "Do not specialise the kernel to the benchmarked shape.")
    if probe.tolerances:
        tols = "; ".join(f"{dtype}: atol {t['atol']:g}, rtol {t['rtol']:g}, max_rel_error "
                         f"{t['max_rel_error']:g}" for dtype, t in probe.tolerances.items())
        parts.append("Tolerances: each output must match elementwise, |out - ref| <= atol + "
                     "rtol * |ref| (NaN never passes), and in relative error ||out - ref|| / "
                     f"||ref|| <= max_rel_error ({tols}).")
    return "\n".join(parts)


def critic_text(diagnoses: tuple[Diagnosis, ...] | list[Diagnosis]) -> str:
    """The "Critic's diagnosis" section: the best kernel's, then this parent's."""
    if not diagnoses:
        return NO_DIAGNOSIS
    return ("The critic's latest diagnosis (rule-based unless a critic model is named); act on "
            "it where it applies:\n\n" + "\n".join(f"- {d.said.strip()}" for d in diagnoses))


def _section(title: str, body: str) -> str:
    return f"## {title}\n\n{body.strip()}\n"


def build_prompt(request: ProposalRequest,
                 condense: Callable[[str], str] | None = None) -> str:
    """The full prompt for one proposal; ``condense`` shortens long evaluation logs."""
    backend = _BACKEND_NAMES.get(request.backend, request.backend)
    task = request.task
    intro = (
        "You are an expert GPU kernel engineer. Write `ModelNew`, a faster drop-in replacement "
        f"for the PyTorch module `Model` below, in {backend}. Each candidate is built, checked "
        "against `Model` on several random inputs (other shapes included) and timed against it."
        f"\n\nTask: {task.name}. Target hardware: {request.hardware_label or 'an NVIDIA GPU'}. "
        f"Iteration {request.iteration}, branch {request.branch}.")
    parts = [_section(SECTIONS[0], intro)]
    parts.append(_section(SECTIONS[1], request.user_instructions.strip() or "None given."))
    reference = _fence(task.reference_code)
    summary = _probe_summary(request)
    parts.append(_section(SECTIONS[2], reference + ("\n\n" + summary if summary else "")))

    parent, best = request.parent, request.best
    if best is None or best.is_program0 or not best.code.strip():
        best_text = "No kernel has beaten the reference yet."
    elif parent is not None and best.id == parent.id:
        best_text = "The parent kernel below is the best kernel so far."
    else:
        best_text = (f"{best.label} ({best.id}):\n\n{_fence(best.code)}\n\n"
                     + format_result(best, condense))
    parts.append(_section(SECTIONS[3], best_text))

    if parent is None or parent.is_program0 or not parent.code.strip():
        parent_text = ("The parent is the reference itself: write a first kernel for it. "
                       + _reference_text(request))
    else:
        note = parent.metadata.get("description")
        parent_text = (f"{parent.label} ({parent.id})" + (f": {note}" if note else "") + "\n\n"
                       + _fence(parent.code) + "\n\n" + format_result(parent, condense))
        sweep = template_results_text(parent)
        if sweep:
            parent_text += "\n\n" + sweep
    parts.append(_section(SECTIONS[4], parent_text))
    parts.append(_section(SECTIONS[5], failures_text(request, condense)))
    parts.append(_section(SECTIONS[6], critic_text(request.diagnoses)))

    shown_already = {p.id for p in (parent, best) if p is not None}  # each kernel once
    shown = [p for p in request.inspirations
             if p.code.strip() and not p.is_program0 and p.id not in shown_already]
    if shown:
        blocks = []
        for p in shown:
            result = p.kernel_exec_result
            status = result.get_status().label if result else "Not evaluated"
            speed = (f", {speedup_text(result.runtime_improvement)} over the reference"
                     if result and result.runtime_improvement > 0 else "")
            note = p.metadata.get("description")
            blocks.append(f"### {p.label} ({p.id}): {status}{speed}"
                          + (f"\n{note}" if note else "") + "\n\n"
                          + _fence(_clip_code(p.code, INSPIRATION_LINES)))
        insp_text = "Other kernels from the archive, for ideas:\n\n" + "\n\n".join(blocks)
    else:
        insp_text = "None yet."
    parts.append(_section(SECTIONS[7], insp_text))

    parts.append(_section(SECTIONS[8], LANGUAGE.get(request.backend, LANGUAGE["triton"])))
    strategies = strategies_for(request.probe, request.backend)
    parts.append(_section(SECTIONS[9], "\n".join(f"- {s}" for s in strategies)))
    answer = ANSWER_FORMAT
    if request.allow_templated:
        answer += "\n\n" + template_format(request.backend, request.max_variants)
    parts.append(_section(SECTIONS[10], answer))
    return "\n".join(parts)
