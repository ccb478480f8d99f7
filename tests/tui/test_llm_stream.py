"""The chat streams a real model's answer: the engine runs against a local OpenAI-compatible
server that streams slowly, and the app shows the answer while it arrives, then one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.text import Text

from kernelcode.tui.app import create_app
from kernelcode.tui.narrate import one_line, reasoning_view
from kernelcode.tui.screens.candidate import CandidateView
from kernelcode.tui.widgets.header import RunHeader
from kernelcode.tui.widgets.streams import StreamView

from .conftest import SIZE, chat_text, wait_until

sys.path.insert(0, str(Path(__file__).parents[1]))
from llm_server import ChatServer, critic_json, is_critic  # noqa: E402
from test_engine_llm import KERNEL  # noqa: E402

REASONING = "The reference is memory bound: one read and one write per element."
ANSWER = KERNEL.replace("masked tail.\n", f"masked tail.\n{REASONING}\n")


def test_reasoning_view_hides_the_code():
    assert reasoning_view("Plan.\n```python\nx = 1\ny = 2\n```\nDone.") == \
        "Plan.\n[kernel: 2 lines]\nDone."
    assert reasoning_view("Plan.\n```python\nx = 1\n") == \
        "Plan.\n[writing the kernel: 1 lines so far…]"
    assert one_line(ANSWER).startswith(REASONING) and "\n" not in one_line(ANSWER)
    assert len(one_line("word " * 100)) <= 160


@pytest.mark.slow
async def test_the_chat_streams_a_models_answer_then_collapses_it(tmp_path, examples_dir,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    answer = lambda body: critic_json(body) if is_critic(body) else ANSWER  # noqa: E731
    with ChatServer(default=answer, chunk_chars=6, chunk_delay_s=0.02) as server:
        inference = json.dumps([{"model": "openai/model-a", "api_base": server.url,
                                 "api_key_env": "OK_TEST_KEY"}])
        app = create_app(examples_dir / "gelu", [
            f"inference={inference}", "max_iters=1", "branches_per_iteration=1",
            "job_name=stream", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}"])
        async with app.run_test(size=SIZE) as pilot:
            view = app.query_one(StreamView)
            # while it arrives: a live box with the reasoning so far, no verdict yet
            await wait_until(pilot, lambda: REASONING[:30] in view.text(), timeout=120)
            row = app.state.candidates["i0-b0"]
            assert view.labels == ["i0-b0"] and len(row.answer) < len(ANSWER)
            assert "i0-b0 faster" not in chat_text(app) and "i0-b0 correct" not in chat_text(app)
            assert "class ModelNew" not in view.text()  # the code is counted, not shown
            await wait_until(pilot, lambda: "[writing the kernel:" in view.text(), timeout=30)
            # judged: the box is gone, one line of it stays in the chat
            await wait_until(pilot, lambda: app.state.finished is not None, timeout=150)
            await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
            await pilot.pause()
            assert view.labels == [] and row.answer == ANSWER
            log = chat_text(app)
            collapsed = next(line for line in log.splitlines() if "▸" in line)
            assert collapsed.strip().startswith(f"▸ {REASONING[:20]}")
            assert log.index(collapsed) < log.index("✓ i0-b0")  # then the verdict
            assert sum(REASONING[:20] in line for line in log.splitlines()) == 1  # said once
            header = app.query_one(RunHeader)
            assert header.spend.startswith("tokens ") and "unknown" in header.spend
            assert "Model calls: 2" in log  # the candidate's and the critic's
            # the full answer stays in the candidate view
            await pilot.press("enter")
            assert isinstance(app.overlay, CandidateView)
            texts = [b.renderable.plain for b in app.overlay.blocks(100)
                     if isinstance(b.renderable, Text)]
            assert ANSWER.strip() in texts
