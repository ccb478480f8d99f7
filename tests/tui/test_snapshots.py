"""SVG snapshots of the main screen and each overlay, from the scripted (deterministic) run.

Update after an intended change with: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from kernelcode.tui.app import create_app
from kernelcode.tui.demo import in_flight

from .conftest import SIZE, held_run, settle, wait_until


def _app(events):
    return create_app(event_source=held_run(events))


def _after(events, *keys):
    async def run_before(pilot) -> None:
        await settle(pilot, len(events))
        for key in keys:
            await pilot.press(key)
        await wait_until(pilot, lambda: not pilot.app.showing_pending)  # the keys' chat lines
        await pilot.pause()

    return run_before


def test_main_screen(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE, run_before=_after(demo))


def test_main_screen_on_cpu(snap_compare, cpu_demo):
    assert snap_compare(_app(cpu_demo), terminal_size=SIZE, run_before=_after(cpu_demo))


def test_kernel_diff(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE, run_before=_after(demo, "k"))


def test_roofline(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE, run_before=_after(demo, "r"))


def test_roofline_on_cpu(snap_compare, cpu_demo):
    assert snap_compare(_app(cpu_demo), terminal_size=SIZE, run_before=_after(cpu_demo, "r"))


def test_skills(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE, run_before=_after(demo, "s"))


def test_candidate_detail(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE,
                        run_before=_after(demo, "down", "down", "down", "enter"))


def test_paused(snap_compare, demo):
    assert snap_compare(_app(demo), terminal_size=SIZE, run_before=_after(demo, "p", "b"))


def test_chat_streams_model_answers(snap_compare):
    """Mid-iteration with a model: i0-b0 judged (its reasoning collapsed to a line), i0-b1
    still writing its kernel, i0-b2 answered and being judged; tokens and cost in the header."""
    from kernelcode.tui.demo import llm_demo_events

    events = llm_demo_events()
    streamed = "".join(e.delta for e in events if getattr(e, "label", "") == "i0-b1"
                       and type(e).__name__ == "AnswerStreamed")

    async def run_before(pilot) -> None:
        # streamed pieces coalesce in the bridge: wait for what they add up to, not a count
        state = pilot.app.state
        await wait_until(pilot, lambda: "i0-b1" in state.candidates
                         and state.candidates["i0-b1"].answer == streamed
                         and state.candidates.get("i0-b2") is not None
                         and state.candidates["i0-b2"].generated and state.evaluated)
        await wait_until(pilot, lambda: not pilot.app.showing_pending)
        await pilot.pause()

    assert snap_compare(_app(events), terminal_size=SIZE, run_before=run_before)


def test_candidates_in_flight(snap_compare, demo):
    """Mid-iteration: one candidate timed, one building, one queued for a worker."""
    events = in_flight(demo)
    assert snap_compare(_app(events), terminal_size=SIZE, run_before=_after(events))


def test_main_screen_at_80x24(snap_compare, demo):
    """Issue 58: the smallest common terminal; the header keeps the iteration and the state."""
    assert snap_compare(_app(demo), terminal_size=(80, 24), run_before=_after(demo))
