"""RunState, the chat wording and the event buffer, without a screen."""

from __future__ import annotations

import threading

from kernelcode.tui.bridge import EventBuffer, EventsReady, pump
from kernelcode.tui.demo import demo_events
from kernelcode.tui.narrate import narrate
from kernelcode.tui.state import RunCouldNotStart, RunCrashed, RunState
from openkernel import events as ev
from openkernel.errors import TaskError
from openkernel.schemas import Status


def test_state_folds_the_demo_run():
    state = RunState()
    for event in demo_events():
        state.apply(event)
    assert state.phase == "running" and state.iteration == 2 and len(state.evaluated) == 9
    assert state.best.metadata["label"] == "i2-b0" and state.best_speedup == 1.84
    marks = [c.mark for c in state.evaluated]
    # i0-b0 is correct, slower than the reference (0.92x), and the first best: the reference
    # is never the best, so it is a keep.
    assert marks[:3] == ["keep", "keep", "error"] and marks.count("keep") == 4
    assert state.best_before["i2-b0"].metadata["label"] == "i1-b0"
    assert state.trajectory[0] == 0.92 and state.trajectory[-1] == 1.84


def test_chat_lines_say_outcomes_and_speedup_moves():
    lines = [str(t) for e in demo_events() for t in narrate(e)]
    assert "✓ i0-b1 faster  1.31x" in lines
    assert any(line.startswith("↑ first best 0.920x") for line in lines)
    assert any(line.startswith("↑ 0.920x → 1.31x") for line in lines)
    assert any(line.startswith("↑ 1.31x → 1.62x") for line in lines)
    assert "✗ i0-b2 build error" in lines
    assert any(line.startswith("Critic: ") for line in lines)


def test_failed_run_says_why_and_keeps_what_was_stored():
    finished = ev.RunFinished("failed", None, 1.3, 4, "runs/k.sqlite3", error="worker died")
    state = RunState()
    state.apply(finished)
    text = "\n".join(map(str, narrate(finished)))
    assert state.phase == "failed" and state.error == "worker died"
    # the event's new_candidates is 0: the four were stored by earlier runs of the job
    assert "Run failed: worker died" in text and "kept: 4 candidates (0 in this run); database" in text


def test_a_run_stopped_by_its_models_is_an_error_to_fix_said_in_the_chat():
    why = ("every model failed too often: openai/m: 3 consecutive calls failed (last: connection "
           "failed: [Errno 111] Connection refused) (inference[].max_consecutive_failures)")
    finished = ev.RunFinished("failed", None, -1.0, 3, "runs/k.sqlite3", error=why,
                              stopped_by="models")
    state = RunState()
    state.apply(finished)
    assert state.phase == "error" and state.error == why  # kernel-code exits 2, as for bad input
    text = "\n".join(map(str, narrate(finished)))
    assert f"Run failed: {why}" in text and "kept: 3 candidates (0 in this run)" in text


def test_pump_turns_errors_into_events():
    got: list[object] = []
    buffer = EventBuffer(lambda: None)

    def bad_input():
        raise TaskError("examples/nope: no such task file or folder")
        yield  # pragma: no cover

    def bug():
        yield ev.RunStarted(1, "t", "j", "triton", "cpu", (), "offline", "db", 1, 1)
        raise ValueError("boom")

    pump(bad_input, buffer)
    pump(bug, buffer)
    got = buffer.drain(10)
    assert isinstance(got[0], RunCouldNotStart) and "no such task" in got[0].message
    assert isinstance(got[-1], RunCrashed) and "ValueError: boom" in got[-1].message
    assert "Traceback" in got[-1].traceback


def test_buffer_wakes_once_until_drained():
    wakes = []
    buffer = EventBuffer(lambda: wakes.append(1))
    threads = [threading.Thread(target=lambda: [buffer.put(i) for i in range(1000)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wakes) == 1
    assert len(buffer.drain(5000)) == 4000 and len(wakes) == 1
    buffer.put("x")
    assert len(wakes) == 2
    assert len(buffer.drain(0)) == 0 and len(wakes) == 3  # more left: wakes again
    assert EventsReady().can_replace(EventsReady())


def test_status_colours_follow_the_seed():
    from kernelcode.tui.formatting import STATUS_COLOURS

    assert set(STATUS_COLOURS) == set(Status)


def test_streamed_pieces_coalesce_per_answer_without_jumping_other_events():
    buffer = EventBuffer(lambda: None)
    piece = lambda label, text, attempt=1: ev.AnswerStreamed(label, "m", text, attempt)  # noqa: E731
    for e in [piece("a", "1"), piece("b", "x"), piece("a", "2"), piece("b", "y"),
              ev.LogEmitted("info", "between"), piece("a", "3"), piece("a", "4", attempt=2),
              piece("a", "5", attempt=2)]:
        buffer.put(e)
    got = buffer.drain(100)
    assert [(e.label, e.delta, e.attempt) if isinstance(e, ev.AnswerStreamed) else "log"
            for e in got] == [("a", "12", 1), ("b", "xy", 1), "log", ("a", "3", 1), ("a", "45", 2)]
    # 1,000 pieces of four branches while the UI is busy: four events wait, nothing is lost
    for i in range(1000):
        buffer.put(piece(f"b{i % 4}", "."))
    got = buffer.drain(100)
    assert len(got) == 4 and sum(len(e.delta) for e in got) == 1000


def test_state_streams_an_answer_restarts_on_retry_and_counts_the_spend():
    from kernelcode.tui.demo import llm_demo_events

    state = RunState()
    events = llm_demo_events()
    for e in events:
        state.apply(e)
    assert [c.label for c in state.streaming()] == ["i0-b1", "i0-b2"]  # i0-b0 is judged
    b1 = state.candidates["i0-b1"]
    assert b1.answer.startswith("Idea: vectorised") and not b1.generated
    assert state.candidates["i0-b2"].generated and state.spend.calls == 2
    state.apply(ev.AnswerStreamed("i0-b1", "m", "Idea: again", attempt=2))
    assert b1.answer == "Idea: again" and b1.attempt == 2
    lines = [t.plain for e in events for t in narrate(e, state.candidates.get(getattr(e, "label", "")))]
    assert any(line.startswith("  ▸ The parent reads") for line in lines)
    state.apply(ev.RunFinished("stopped", None, 1.31, 1, "db", error="budget.max_usd reached"))
    assert state.streaming() == []  # nothing to wait for once the run is over


def test_not_judged_candidates_are_marked_apart_from_errors():
    """not_run, evaluator_fault and generation_failed say nothing about a candidate's code."""
    from openkernel.schemas import NOT_JUDGED, EvalResult, Program

    state = RunState()
    for n, status in enumerate([Status.COMPILE_ERROR, *sorted(NOT_JUDGED)]):
        program = Program(id=f"p{n}", code="", metadata={"label": f"i0-b{n}", "branch": n})
        program.add_eval_results(EvalResult())
        state.apply(ev.CandidateEvaluated(program, status, f"i0-b{n}", -1.0, -1.0))
    assert state.marks == {"keep": 0, "discard": 0, "error": 1, "not_judged": 3}


def test_rows_left_in_flight_when_the_run_ends_say_not_judged():
    state = RunState()
    state.apply(ev.CandidateStarted("i0-b0", 0, 0, None, "offline"))
    state.apply(ev.CandidatePhaseChanged("i0-b0", "queued"))
    rows = state.apply(ev.RunFinished("stopped", None, -1.0, 0, "db"))
    assert [r.label for r in rows] == ["i0-b0"] and rows[0].phase == "abandoned"
