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
        header = str(app.query_one(RunHeader).render())  # nothing is still being waited for
        assert "detecting hardware" not in header and "waiting for the engine" not in header
        assert "no hardware detected" in header and "the run did not start" in header
        await pilot.press("p")  # keys stay calm on a run that never started
        await chat_says(pilot, "No run in progress")


async def test_bad_override_is_a_clear_message():
    app = create_app(None, ["max_iters=zero"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "error", timeout=60)
        assert "max_iters" in app.state.error and "Traceback" not in chat_text(app)


async def test_model_that_cannot_be_reached_is_one_message(tmp_path, monkeypatch):
    """No OPENAI_API_KEY: the run stops before its first candidate, the chat says which model
    and which variable, once, and the header says ERROR (kernel-code then exits 2)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    app = create_app(None, ["inference=[{model: openai/gpt-4.1}]",
                            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "error", timeout=120)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        text = chat_text(app)
        assert text.count("OPENAI_API_KEY") == 1 and "openai/gpt-4.1" in text
        assert "Traceback" not in text and not app.state.candidates
        assert app.query_one(RunHeader).state_word == "ERROR"


def test_kernel_code_without_a_terminal_says_so(tmp_path):
    """`make run 2>&1 | tee log`: one message and exit 2, not frames of two sizes."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kernelcode.cli"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stdout == ""
    assert "not a terminal" in r.stderr and "openkernel run" in r.stderr
    assert "Traceback" not in r.stderr and "\x1b[" not in r.stderr


async def test_a_damaged_database_is_one_message(damaged_db, tmp_path, monkeypatch):
    """Issue 58: not the whole failed INSERT with its parameters, and nothing written."""
    import hashlib

    damaged = damaged_db
    before = hashlib.sha256(damaged.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)
    app = create_app(None, [f"paths.kernels_db_path={damaged}", "max_iters=1"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "error", timeout=120)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        text = chat_text(app)
        assert "the database file is damaged" in app.state.error, app.state.error
        assert text.count("the database file is damaged") == 1 and "INSERT" not in text, text
        assert "Traceback" not in text
    assert hashlib.sha256(damaged.read_bytes()).hexdigest() == before
