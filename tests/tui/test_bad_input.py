"""Bad input shows one clear message in the app, never a traceback."""

from __future__ import annotations

from kernelcode.tui.app import create_app
from kernelcode.tui.widgets.header import RunHeader

from .conftest import SIZE, chat_says, chat_text, wait_until


async def test_missing_task_path_is_a_clear_message(tmp_path):
    app = create_app(tmp_path / "no_such_task.py")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "error", timeout=60)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        text = chat_text(app)
        assert "Cannot start:" in text and "no_such_task" in text
        assert "Traceback" not in text
        assert app.query_one(RunHeader).state_word == "ERROR"
        await pilot.press("p")  # keys stay calm on a run that never started
        await chat_says(pilot, "No run in progress")


async def test_bad_override_is_a_clear_message():
    app = create_app(None, ["max_iters=zero"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "error", timeout=60)
        assert "max_iters" in app.state.error and "Traceback" not in chat_text(app)
