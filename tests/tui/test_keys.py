"""Every key of the app, driven with Pilot on a scripted run that stays open."""

from __future__ import annotations

import webbrowser

from textual.widgets import Input

from kernelcode.tui import dashboard_link
from kernelcode.tui.screens.candidate import CandidateView
from kernelcode.tui.screens.diff import DiffView
from kernelcode.tui.screens.roofline import RooflineView
from kernelcode.tui.screens.skills import SkillsView
from kernelcode.tui.widgets.header import RunHeader

from .conftest import SIZE, chat_says, chat_text, settle, wait_until


async def test_overlay_keys_open_toggle_and_escape(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        for key, view_type in (("k", DiffView), ("r", RooflineView), ("s", SkillsView)):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(held_app.overlay, view_type), key
            await pilot.press("escape")
            assert not isinstance(held_app.overlay, view_type), key
            await pilot.press(key, key)  # the key toggles its overlay
            await pilot.pause()
            assert not isinstance(held_app.overlay, view_type), key
        await pilot.press("k", "r")  # another overlay's key replaces the one on top
        await pilot.pause()
        assert isinstance(held_app.overlay, RooflineView) and len(held_app.screen_stack) == 1
        assert held_app.focused.id == "experiment-log"  # the focus stays: no restyle
        await pilot.press("pagedown", "end", "home")  # they scroll the view, not the table
        assert isinstance(held_app.overlay, RooflineView)
        assert held_app.query_one("#experiment-log").cursor_row == 0
        await pilot.press("escape")
        assert held_app.overlay is None and held_app.focused.id == "experiment-log"


async def test_kernel_diff_compares_latest_with_best_before_it(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("k")
        await pilot.pause()
        view = held_app.overlay
        assert view.new_title.startswith("i2-b2") and view.old_title.startswith("i2-b0")
        assert view.old != view.new and not view.message


async def test_kernel_diff_says_when_there_is_nothing_to_compare():
    from kernelcode.tui.app import create_app

    app = create_app(event_source=[])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("k")
        await pilot.pause()
        assert "Nothing to compare yet" in app.overlay.message


async def test_pause_and_resume(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        header = held_app.query_one(RunHeader)
        await pilot.press("p")
        assert held_app.control.paused and header.state_word == "PAUSED"
        assert "PAUSED" in str(header.render())
        await pilot.press("p")
        assert not held_app.control.paused and header.state_word == "RUNNING"
        await chat_says(pilot, "Pausing")
        await chat_says(pilot, "Resumed")


async def test_backend_switch_is_requested_and_logged(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("b")
        assert held_app.control.take_backend() == "cuda"
        assert "→ CUDA (next iteration)" in str(held_app.query_one(RunHeader).render())
        await chat_says(pilot, "Backend switch to CUDA requested")
        await pilot.press("b")
        assert held_app.control.take_backend() == "triton"


async def test_steering_input_reaches_control_and_says_offline_cannot_use_it(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("slash")
        assert isinstance(held_app.focused, Input)
        await pilot.press(*"use vector loads", "enter")
        await pilot.pause()
        assert held_app.control.take_instructions() == ["use vector loads"]
        await chat_says(pilot, "Free-text steering needs an LLM")
        assert held_app.focused.id == "experiment-log"  # sent: the keys are the app's again
        assert held_app.query_one("#steer", Input).value == ""
        await pilot.press("q")  # quits, rather than typing a q into the input
        assert held_app.control.stopped and held_app.stopping


async def test_empty_steering_line_also_gives_the_keys_back(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("slash", "enter")
        await pilot.pause()
        assert held_app.focused.id == "experiment-log"
        await pilot.press("p")
        assert held_app.control.paused


async def test_row_selection_opens_candidate_detail(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(held_app.overlay, CandidateView)
        assert held_app.overlay.program.metadata["label"] == "i0-b1"
        await pilot.press("escape")
        assert not isinstance(held_app.overlay, CandidateView)


async def test_quit_stops_the_engine_and_waits_for_it(held_app, demo):
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("q")
        assert held_app.control.stopped
        await held_app.workers.wait_for_complete()
        await pilot.pause(0.2)
    assert held_app.state.phase == "stopped"
    assert held_app.return_code == 0


async def test_dashboard_key_starts_it_and_opens_a_browser(held_app, demo, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISPLAY", ":0")
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url, new=0: opened.append(url))
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("d")
        header = held_app.query_one(RunHeader)
        await wait_until(pilot, lambda: header.dashboard_url)
        url = header.dashboard_url
        assert url.startswith("http://127.0.0.1:")
        await chat_says(pilot, url)
        assert opened == [url]


async def test_dashboard_key_says_plainly_when_unavailable(held_app, demo, monkeypatch):
    def broken(*_):
        raise RuntimeError("the dashboard module is not installed or not importable (test)")

    monkeypatch.setattr(dashboard_link, "start", broken)
    async with held_app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("d")
        await wait_until(pilot, lambda: "not available" in chat_text(held_app))
        assert "The dashboard is not available: the dashboard module" in chat_text(held_app)
