"""What the Chat / Agent panel says about each event: plain Rich Text, one or more lines.

Kept apart from the widgets so the wording can be read and tested on its own.
"""

from __future__ import annotations

import re

from rich.text import Text

from kernelcode.tui.formatting import (
    STATUS_COLOURS,
    STATUS_GLYPHS,
    STATUS_WORDS,
    label_of,
    pretty_backend,
    pretty_hardware,
    speedup_str,
)
from kernelcode.tui.state import Candidate, RunCouldNotStart, RunCrashed
from openkernel import events as ev
from openkernel.costs import format_tokens
from openkernel.db_location import shown

DIM = "#8b949e"
ERROR = "bold #f85149"
WARN = "#e3c341"
ACCENT = "bold #58a6ff"


ONE_LINE = 160  # characters of a judged answer's reasoning kept in the chat
_FENCE = re.compile(r"```[^\n]*\n(.*?)(```|\Z)", re.DOTALL)


def narrate(event: object, row: Candidate | None = None) -> list[Text]:
    """Chat lines for one event; an empty list for events the chat leaves out.

    ``row`` is the Experiment Log row the event touched: a streamed answer (``row.attempt``)
    was shown live, so its reasoning is not repeated, and once judged it collapses to a line.
    """
    handler = _HANDLERS.get(type(event))
    if handler is None:
        return []
    return handler(event, row) if type(event) in _WITH_ROW else handler(event)


def reasoning_view(answer: str) -> str:
    """The text around the code block: a block reads ``[kernel: N lines]`` (or, still being
    written, ``[writing the kernel: N lines so far…]``)."""
    def block(m: re.Match) -> str:
        n = len(m.group(1).splitlines())
        return f"[kernel: {n} lines]" if m.group(2) else f"[writing the kernel: {n} lines so far…]"

    return _FENCE.sub(block, answer)


def one_line(answer: str, limit: int = ONE_LINE) -> str:
    """A judged answer's reasoning in one line, clipped (its Idea line is the candidate's
    description, said already)."""
    text = reasoning_view(answer).strip()
    if text.startswith("Idea:") and "\n" in text:
        text = text.split("\n", 1)[1]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _started(e: ev.RunStarted) -> list[Text]:
    models = ", ".join(e.models) or e.generator
    lines = [Text.assemble(("▶ ", ACCENT), f"Optimizing {e.task_name} ({e.job_name}) with ",
                           (models, "bold"), f" on {pretty_hardware(e.hardware, e.backend)}, ",
                           f"{pretty_backend(e.backend)} backend: "
                           f"{_plural(e.max_iters, 'iteration')} × "
                           f"{_plural(e.branches_per_iteration, 'branch')}.")]
    if e.resumed_candidates:
        lines.append(Text(f"  Resuming: {_plural(e.resumed_candidates, 'candidate')} already "
                          "stored.", DIM))
    if e.generator == "offline":
        lines.append(Text("  Offline generator: templates and tunables, no LLM.", DIM))
    return lines


def _iteration(e: ev.IterationStarted) -> list[Text]:
    return [Text(f"── iteration {e.iteration} ──", DIM)]


def _generated(e: ev.CandidateGenerated, row: Candidate | None) -> list[Text]:
    lines = [Text.assemble((f"{e.label} ", "bold"), (f"[{e.model}] ", DIM),
                           e.description or "(no description)")]
    if e.reasoning.strip() and not (row and row.attempt):  # a streamed one was shown live
        lines.append(Text("  " + " ".join(e.reasoning.split()), style="italic"))
    return lines


def _evaluated(e: ev.CandidateEvaluated, row: Candidate | None) -> list[Text]:
    colour = STATUS_COLOURS[e.status]
    text = Text.assemble((f"{STATUS_GLYPHS[e.status]} {e.label} ", colour),
                         (STATUS_WORDS[e.status], colour))
    if e.speedup > 0:
        text.append(f"  {speedup_str(e.speedup)}")
    if row and row.attempt and row.answer.strip():  # its live box collapses to this line
        return [Text.assemble(("  ▸ ", "#d2a8ff"), (one_line(row.answer), "italic #c9d1d9"),
                              no_wrap=True, overflow="ellipsis"), text]
    return [text]


def _best(e: ev.BestImproved) -> list[Text]:
    if e.previous_speedup <= 0:  # the first correct kernel: nothing to move from
        return [Text.assemble(("↑ ", "bold #3fb950"), "first best ",
                              (speedup_str(e.speedup), "bold #3fb950"),
                              (f"  {label_of(e.program)}", DIM))]
    return [Text.assemble(("↑ ", "bold #3fb950"),
                          f"{speedup_str(e.previous_speedup)} → ",
                          (speedup_str(e.speedup), "bold #3fb950"),
                          (f"  new best: {label_of(e.program)}", DIM))]


def _iteration_done(e: ev.IterationFinished) -> list[Text]:
    if e.judged == 0:
        return [Text(f"  iteration {e.iteration}: nothing new to judge (every branch was "
                     "withdrawn)", DIM)]
    return [Text(f"  iteration {e.iteration} done: {e.tally.words()} so far, "
                 f"best {speedup_str(e.best_speedup)}", DIM)]


def _critic(e: ev.CriticDiagnosed) -> list[Text]:
    said = [d.said for d in e.diagnoses] or [e.text]
    return [Text.assemble(("Critic: ", "bold #d2a8ff"), (f'"{s.strip()}"', "#d2a8ff"))
            for s in said]


def _budget(e: ev.BudgetReached) -> list[Text]:
    return [Text(f"$ {e.reason[:1].upper()}{e.reason[1:]}.", WARN)]


def _paused(e: ev.RunPaused) -> list[Text]:
    if e.in_flight:  # said when asked; "paused" only once they are stored
        return [Text(f"‖ {_plural(e.in_flight, 'candidate')} in flight finish"
                     f"{'es' if e.in_flight == 1 else ''} and will be stored first.", WARN)]
    return [Text("‖ Engine paused between candidates: nothing in flight (p resumes).", WARN)]


def _resumed(_: ev.RunResumed) -> list[Text]:
    return [Text("▶ Engine resumed.", ACCENT)]


def _switched(e: ev.BackendSwitched) -> list[Text]:
    return [Text(f"⇄ Backend is now {pretty_backend(e.backend)} "
                 f"(from iteration {e.from_iteration}).", ACCENT)]


def _instruction(e: ev.InstructionAdded) -> list[Text]:
    return [Text(f"✎ Instruction joins the prompt from iteration {e.from_iteration}: "
                 f"{e.text}", ACCENT)]


def _log(e: ev.LogEmitted) -> list[Text]:
    style = {"error": ERROR, "warning": WARN}.get(e.level, DIM)
    return [Text(e.message, style)]


def _finished(e: ev.RunFinished) -> list[Text]:
    counted = e.tally.words() if e.tally else _plural(e.candidates, "candidate")
    if e.new_candidates != e.candidates:
        counted += f" ({e.new_candidates} in this run)"
    stored = f"{counted}; database {shown(e.db_path)}"
    if e.reason == "failed":
        if e.candidates == 0:  # it never got to a candidate: the cause is what to fix
            return [Text(f"✗ Run failed: {e.error or 'no reason given'}", ERROR),
                    Text("  Nothing was judged. Fix the cause and run kernel-code again "
                         "(q quits).", DIM)]
        return [Text(f"✗ Run failed: {e.error or 'no reason given'}", ERROR),
                Text(f"  What was judged is kept: {stored}.", DIM)]
    verb = "stopped" if e.reason == "stopped" else "finished"
    lines = [Text.assemble(("■ ", ACCENT), f"Run {verb}: best ",
                           (speedup_str(e.best_speedup), "bold"), f", {stored}.")]
    if e.error:  # why it stopped by itself (a budget)
        lines.append(Text(f"  Stopped because {e.error}.", WARN))
    if e.spend is not None:
        lines.append(Text(f"  Model calls: {e.spend.calls}, {format_tokens(e.spend.tokens)} "
                          f"tokens, {e.spend.cost_text()}.", DIM))
    return lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('ch') else 's'}"


def _could_not_start(e: RunCouldNotStart) -> list[Text]:
    return [Text(f"✗ Cannot start: {e.message}", ERROR),
            Text("  Fix the task or config and run kernel-code again (q quits).", DIM)]


def _crashed(e: RunCrashed) -> list[Text]:
    lines = [Text(f"✗ Run failed: {e.message}", ERROR),
             Text("  Candidates judged before the failure stay in the database.", DIM)]
    if e.traceback:
        # Not an OpenKernelError: a bug, so the traceback stays visible for the report.
        lines.append(Text(e.traceback.rstrip(), DIM))
    return lines


_HANDLERS = {
    ev.RunStarted: _started, ev.IterationStarted: _iteration, ev.CandidateGenerated: _generated,
    ev.CandidateEvaluated: _evaluated, ev.BestImproved: _best,
    ev.IterationFinished: _iteration_done, ev.CriticDiagnosed: _critic, ev.RunPaused: _paused,
    ev.RunResumed: _resumed, ev.BackendSwitched: _switched, ev.InstructionAdded: _instruction,
    ev.LogEmitted: _log, ev.RunFinished: _finished, RunCouldNotStart: _could_not_start,
    RunCrashed: _crashed, ev.BudgetReached: _budget,
}
_WITH_ROW = {ev.CandidateGenerated, ev.CandidateEvaluated}
