"""CandidateView: everything recorded for one candidate: stats, code, the model's full answer,
evaluation log."""

from __future__ import annotations

from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from kernelcode.tui.formatting import label_of, speedup_str, status_text
from kernelcode.tui.screens.combinations import combination_table
from kernelcode.tui.screens.overlay import Block, Overlay, section
from openkernel.costs import format_usd
from openkernel.schemas import Program

DIM = "#8b949e"


def stats_table(program: Program) -> Table:
    """Kernel info and runtime stats, the fields the results browser shows."""
    result = program.kernel_exec_result
    meta = program.metadata
    table = Table.grid(padding=(0, 2))
    table.add_column(style=DIM)
    table.add_column()
    table.add_row("Status", status_text(program.status))
    table.add_row("Iteration / branch", f"{program.iteration_found} / {meta.get('branch', 0)}")
    table.add_row("Model", str(meta.get("model") or meta.get("origin") or "–"))
    table.add_row("Backend", str(meta.get("backend") or "–"))
    table.add_row("Parent", program.parent_id or "–")
    table.add_row("Program id", program.id)
    table.add_row("What it tried", str(meta.get("description") or "–"))
    if result is not None:
        table.add_row("Runtime", f"{result.runtime:.3g} ms (median)" if result.runtime > 0 else "–")
        table.add_row("Speedup vs reference", speedup_str(result.runtime_improvement))
        table.add_row("Speedup vs torch.compile", speedup_str(result.improve_over_compile))
        stats = dict(result.runtime_stats or {})
        reference = stats.pop("reference", None)  # the reference's, timed beside it
        if stats:
            table.add_row("Runtime stats", _pairs(stats))
        if isinstance(reference, dict) and reference:
            table.add_row("Reference stats", _pairs(reference))
        timing = result.metadata.get("timing_method") or result.metadata.get("hardware")
        if timing:
            table.add_row("Measured", str(timing))
        if result.profiler_data:
            table.add_row("Profiler data", ", ".join(
                f"{k} {_num(v)}" for k, v in result.profiler_data.items()
                if not isinstance(v, (list, dict)))[:600])
    if meta.get("user_instructions"):
        table.add_row("Steered by", str(meta["user_instructions"]))
    llm = meta.get("llm") or {}
    if llm.get("calls"):
        price = {"unknown": " (price unknown)", "config": " (local price)"}.get(llm["price"], "")
        table.add_row("Model calls", f"{llm['calls']}: {llm['prompt_tokens']:,} prompt + "
                      f"{llm['completion_tokens']:,} answer tokens, "
                      f"{format_usd(llm['cost_usd'])}{price}")
    for d in meta.get("critic") or []:
        table.add_row("Critic said", str(d.get("text", "")))
    return table


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _pairs(values: dict) -> str:
    """``median 49.55, n_trials 18``; nested records are left to the evaluation log."""
    return ", ".join(f"{k} {_num(v)}" for k, v in values.items() if not isinstance(v, (dict, list)))


class CandidateView(Overlay):
    """Opened by selecting a row of the Experiment Log."""

    TITLE_TEXT = "Candidate"

    def __init__(self, program: Program, sort: int = 0) -> None:
        self.program = program
        self.sort = sort  # the combination table's order (``o`` cycles it)
        self.TITLE_TEXT = f"Candidate {label_of(program)}"

    def blocks(self, width: int) -> list[Block]:
        program = self.program
        code = program.code.strip() or "(no code: nothing was extracted from the answer)"
        log = program.get_artifact().strip() or "(empty)"
        results = program.kernel_exec_result.template_results if program.kernel_exec_result else {}
        combos = [section("Template combinations (o: sort)"),
                  Block(combination_table(results, self.sort))] if results.get("combinations") else []
        blocks = [Block(stats_table(program)), *combos, section("Code"),
                  Block(Syntax(code, "python", theme="monokai", line_numbers=True,
                               background_color="default", word_wrap=False),
                        width=max(len(line) for line in code.splitlines()) + 8)]
        if program.metadata.get("origin") == "llm":  # the model's words, kept in full here
            answer = (program.raw_llm_code or "").strip() or "(the model gave no answer)"
            blocks += [section("Model's answer"), Block(Text(answer))]
        return blocks + [section("Evaluation log"), Block(Text(log))]
