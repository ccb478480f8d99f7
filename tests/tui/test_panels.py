"""The panels on what the engine's own functions produce."""

from __future__ import annotations

import io

from rich.console import Console

from kernelcode.tui.app import create_app
from kernelcode.tui.demo import CPU
from kernelcode.tui.widgets.profiling import ProfilingPanel
from openkernel import events as ev
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.critic import roofline_estimate

from .conftest import SIZE, held_run, settle


async def test_profiling_panel_says_an_uncounted_intensity_is_unknown():
    """A task with no arithmetic (a copy): the estimate has no FLOPs, and the panel says the
    intensity is unknown instead of 0.00 FLOP/byte."""
    probe = TaskProbe(ok=True, flops=0.0, bytes_moved=16384.0, output_dtypes=["torch.float32"])
    estimate = roofline_estimate(2.0, probe, Hardware(CPU, "cpu", "cpu", interpreter=True))
    program = Program(id="p0", code="", metadata={"label": "i0-b0", "branch": 0})
    program.add_eval_results(EvalResult(compiled=True, correctness=True, runtime=2.0,
                                        runtime_improvement=0.5, perf_score=3,
                                        profiler_data=estimate))
    events = [ev.RunStarted(1, "copy", "j", "triton", CPU, ("offline",), "offline", "db", 1, 1),
              ev.CandidateEvaluated(program, Status.CORRECT, "i0-b0", 0.5, 0.5),
              ev.BestImproved(program, -1.0, 0.5)]
    app = create_app(event_source=held_run(events))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(events))
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(app.query_one(ProfilingPanel).render())
    text = console.export_text()
    assert "unknown (no FLOPs counted for these ops)" in text and "0.00 FLOP/byte" not in text
    assert "16.4 kB per call" in text  # a small task is not "0.0 MB"
    assert not any(line.startswith("FLOPs") for line in text.splitlines())


async def test_an_80_column_header_keeps_the_iteration_and_the_state(demo):
    """Issue 58: at 80x24 the header was cut before "iteration" and the state; now the other
    fields give way (cut with an ellipsis), and both lines fit the terminal."""
    from kernelcode.tui.widgets.header import RunHeader

    app = create_app(event_source=held_run(demo))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, len(demo))
        header = app.query_one(RunHeader)
        lines = str(header.render()).splitlines()
        assert all(len(line) <= 78 for line in lines), lines
        assert "iteration" in lines[0] and header.state_word in lines[0], lines
        assert "…" in lines[0]  # something gave way
        assert "best" in lines[1], lines
    wide = create_app(event_source=held_run(demo))
    async with wide.run_test(size=SIZE) as pilot:  # wide: the whole line, as before
        await settle(pilot, len(demo))
        assert str(wide.query_one(RunHeader).render()).startswith("kernel code v")
