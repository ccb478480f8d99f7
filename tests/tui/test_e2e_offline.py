"""A real offline search on the CPU, through the app: the Experiment Log fills, the run ends."""

from __future__ import annotations

import pytest

from kernelcode.tui.app import create_app
from kernelcode.tui.widgets.experiment_log import ExperimentLog
from kernelcode.tui.widgets.header import RunHeader
from kernelcode.tui.formatting import PHASE_WORDS, STATUS_WORDS
from openkernel.events import CandidatePhaseChanged, RunFinished

from .conftest import SIZE, chat_text, wait_until


@pytest.mark.slow
async def test_real_offline_run_fills_the_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything the engine writes by default lands here
    db = tmp_path / "kernels.sqlite3"
    app = create_app(None, ["max_iters=1", "branches_per_iteration=2", "job_name=tui-e2e",
                            f"paths.kernels_db_path={db}",
                            f"paths.scratch_dir={tmp_path / 'scratch'}"])
    seen: list[object] = []
    real_apply = app.apply_events
    app.apply_events = lambda batch: (seen.extend(batch), real_apply(batch))[1]
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=150)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        assert app.state.error == "", chat_text(app)
        finished = [e for e in seen if isinstance(e, RunFinished)]
        assert finished and finished[0].reason == "completed"
        table = app.query_one(ExperimentLog)
        assert table.row_count == 2
        assert set(table.labels) == {"i0-b0", "i0-b1"}
        assert all(c.status is not None for c in app.state.candidates.values())
        header = app.query_one(RunHeader)
        assert header.state_word == "FINISHED" and "interpreter" in header.hardware.lower()
        assert "Run finished" in chat_text(app)
    assert db.exists()


def _watch(app):
    """Record, at each showing of the panels, every status cell and the header."""
    from kernelcode.tui.formatting import status_text

    seen = {"cells": [], "headers": []}
    real_show = app.show_state

    def show():
        real_show()
        log = app.query_one(ExperimentLog)
        seen["cells"].append({label: status_text(row.status, row.phase).plain
                              for label, (row, _) in log._rows.items()})
        seen["headers"].append(str(app.query_one(RunHeader).render()))

    app.show_state = show
    return seen


@pytest.mark.slow
async def test_real_run_shows_queued_building_testing_timing_never_running(tmp_path, monkeypatch):
    """One worker, two branches: the second candidate is shown queued (also while paused),
    then building, testing and timing; no row ever says a bare "running". The header counts
    iterations as the labels do (i1-b*: "iteration 1")."""
    monkeypatch.chdir(tmp_path)
    app = create_app(None, ["max_iters=2", "branches_per_iteration=2", "job_name=phases",
                            "eval_config.max_workers=1", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
                            f"paths.scratch_dir={tmp_path / 'scratch'}"])
    seen = _watch(app)
    phases: set[str] = set()
    real_apply = app.apply_events
    app.apply_events = lambda batch: (
        phases.update(e.phase for e in batch if isinstance(e, CandidatePhaseChanged)),
        real_apply(batch))[1]
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(app.state.candidates) == 2, timeout=150)
        await pilot.press("p")  # pause while i0-b0 is in the worker and i0-b1 waits
        await wait_until(pilot, lambda: app.state.candidates["i0-b0"].status is not None, timeout=150)
        await pilot.pause(1.5)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        assert seen["cells"][-1]["i0-b1"] == "queued" and "PAUSED" in seen["headers"][-1]
        await pilot.press("p")
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=200)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        assert app.state.finished.reason == "completed", chat_text(app)
        chat = chat_text(app)
    shown = {cell for cells in seen["cells"] for cell in cells.values()}
    assert "running" not in shown
    # Every phase reaches the app; a phase shorter than one refresh may never be drawn (the
    # panels coalesce events), so what is drawn is only checked to be made of known words.
    assert {"queued", "building", "testing", "timing"} <= phases, phases
    assert shown <= set(PHASE_WORDS.values()) | set(STATUS_WORDS.values()), shown
    assert {"queued", "timing"} <= shown, shown
    both = [c for c in seen["cells"] if c.get("i0-b0") in ("building", "testing", "timing")]
    assert any(c.get("i0-b1") == "queued" for c in both)  # waiting for the one worker
    assert any("iteration 1 of 0–1" in h for h in seen["headers"])
    assert not any("iteration 2" in h for h in seen["headers"])
    assert "── iteration 1 ──" in chat and "── iteration 2 ──" not in chat
    assert set(app.state.candidates) == {"i0-b0", "i0-b1", "i1-b0", "i1-b1"}


@pytest.mark.slow
async def test_not_run_candidates_are_not_errors(tmp_path, monkeypatch):
    """CUDA C++ on the CPU (what `b` asks for here) is compiled, never run: grey, "not
    judged" in the trajectory, not "×error"."""
    from kernelcode.tui.widgets.trajectory import TrajectoryPanel

    monkeypatch.chdir(tmp_path)
    app = create_app(None, ["max_iters=1", "branches_per_iteration=2", "job_name=cuda-on-cpu",
                            "backend=cuda", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
                            f"paths.scratch_dir={tmp_path / 'scratch'}"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=200)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        assert [c.status.value for c in app.state.evaluated] == ["not_run", "not_run"], chat_text(app)
        assert app.state.marks == {"keep": 0, "discard": 0, "error": 0, "not_judged": 2}
        summary = str(app.query_one(TrajectoryPanel).render()).splitlines()[-1]
        assert "×error 0" in summary and "∅not judged 2" in summary
        chat = " ".join(chat_text(app).split())  # the panel wraps its lines
        assert "No candidate judged yet: 2 compiled but not run here" in chat
        assert "1 iteration × 2 branches" in chat
