"""e and E: a person's kernels join the live job.

The cheap tests play a scripted run and look at what reaches the engine's RunControl; the slow
one runs the real engine against the local OpenAI-compatible server: an edited kernel and a
model's revision are judged, stored with their parent and author, and shown in the log."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from kernelcode.tui.app import create_app
from openkernel.store import Store

from .conftest import SIZE, chat_text, held_run, settle, wait_until

EDITOR = f"{sys.executable} -S {Path(__file__).with_name('edit_constant.py')}"  # -S: starts fast


async def says(pilot, text: str) -> None:
    """Wait until the chat has said ``text`` (its lines wrap: compared with spaces folded)."""
    try:
        await wait_until(pilot, lambda: text in " ".join(chat_text(pilot.app).split()),
                         timeout=30)
    except AssertionError:
        raise AssertionError(f"the chat never said {text!r}:\n{chat_text(pilot.app)}") from None


def _queued(app) -> list:
    return app.control.take_submissions()


async def test_e_submits_an_edit_and_nothing_when_unchanged_or_failed(demo, monkeypatch):
    monkeypatch.setenv("EDITOR", EDITOR)
    monkeypatch.delenv("VISUAL", raising=False)
    app = create_app(event_source=held_run(demo))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        first = app.query_one("#experiment-log").labels[0]
        parent = app.state.candidates[first].program
        monkeypatch.setenv("EDIT_MODE", "unchanged")
        await pilot.press("e")
        await says(pilot, f"No change to {first}: nothing was submitted.")
        monkeypatch.setenv("EDIT_MODE", "fail")
        await pilot.press("e")
        await says(pilot, "exited with status 1: nothing was submitted.")
        assert _queued(app) == []
        monkeypatch.setenv("EDIT_MODE", "")
        await pilot.press("e")
        await says(pilot, f"Your edit of {first} is submitted")
        [sent] = _queued(app)
        assert (sent.author, sent.parent_id) == ("user", parent.id)
        assert sent.code != parent.code and sent.code.count("\n") == parent.code.count("\n")
        assert sent.description == f"edited by hand from {first}"


async def test_e_with_code_that_does_not_parse_and_E_without_a_model(demo, monkeypatch, tmp_path):
    broken = tmp_path / "break.py"
    broken.write_text("import sys\nopen(sys.argv[-1], 'a').write('\\ndef oops(:\\n')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {broken}")
    app = create_app(event_source=held_run(demo))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(demo))
        await pilot.press("e")
        await says(pilot, "Not submitted: the code does not parse: line")
        await pilot.press("E")  # the demo's generator is the offline one
        await says(pilot, "E asks the job's model to revise a kernel, and this run has none")
        assert _queued(app) == [] and app.focused.id == "experiment-log"


def test_footer_shows_e_and_E():
    from kernelcode.tui.app import KernelCodeApp

    keys = {b.key: b.description for b in KernelCodeApp.BINDINGS if b.show}
    assert keys["e"] == "Edit" and keys["E"] == "Revise"


REVISED = "Idea: smaller blocks, as asked.\n\n```python\n{code}```\n"


@pytest.mark.slow
async def test_edit_and_revise_in_a_live_run(tmp_path, examples_dir, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from llm_server import ChatServer, critic_json, is_critic
    from test_engine_llm import KERNEL

    code = KERNEL.split("```python\n")[1].split("```")[0]
    # The run's last step is the critic's reading: held until the keys are pressed, so the
    # run is still live for them (one iteration, no second candidate to wait for).
    release = threading.Event()

    def model(body):
        prompt = body["messages"][-1]["content"]
        if is_critic(body):
            release.wait(300)
            return critic_json(body)
        if "Revise the parent kernel as the user asks: use smaller blocks" in prompt:
            return REVISED.format(code=code.replace("4096", "1024"))
        return KERNEL

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    monkeypatch.setenv("EDITOR", EDITOR)
    monkeypatch.setenv("EDIT_MODE", "")
    db = tmp_path / "k.sqlite3"
    with ChatServer(default=model, chunk_chars=40) as server:
        inference = json.dumps([{"model": "openai/model-a", "api_base": server.url,
                                 "api_key_env": "OK_TEST_KEY"}])
        app = create_app(examples_dir / "gelu", [
            f"inference={inference}", "max_iters=1", "branches_per_iteration=1",
            "job_name=edits", "eval_config.correctness_seeds=1", f"paths.kernels_db_path={db}",
            f"paths.scratch_dir={tmp_path / 'scratch'}"])
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: getattr(app.state.candidates.get("i0-b0"),
                                                    "status", None) is not None, timeout=300)
            first = app.state.candidates["i0-b0"].program
            await pilot.press("e")
            await says(pilot, "Your edit of i0-b0 is submitted")
            await pilot.press("E")
            assert app.focused.id == "steer" and "revise i0-b0" in app.focused.placeholder
            await pilot.press(*"use smaller blocks", "enter")
            await says(pilot, "Asked the model to revise i0-b0")
            release.set()
            judged = lambda label: getattr(app.state.candidates.get(label), "status", None)  # noqa: E731
            await wait_until(pilot, lambda: judged("u1") and judged("u2"), timeout=400)
            await wait_until(pilot, lambda: app.state.finished is not None, timeout=300)
            await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
            said = " ".join(chat_text(app).split())
            edit, revised = app.state.candidates["u1"], app.state.candidates["u2"]
            assert "u1 [user] edited by hand from i0-b0" in said
            assert revised.answer.startswith("Idea: smaller blocks")  # streamed into the chat
            assert edit.status.value == revised.status.value == "correct", said
            assert edit.program.parent_id == revised.program.parent_id == first.id
            assert "1024" in revised.program.code and "2048" in edit.program.code
            assert "✓ u1" in said and "✓ u2" in said
    store = Store(db)
    rows = {r.label: r for r in store.job_kernels("gelu", "edits")}
    store.close()
    assert (rows["u1"].author, rows["u1"].origin, rows["u1"].parent_id) == ("user", "user", first.id)
    assert (rows["u2"].author, rows["u2"].model) == ("user", "openai/model-a")
    assert rows["u2"].description == "user asked openai/model-a: use smaller blocks"
    assert "use smaller blocks" in rows["u2"].prompt
