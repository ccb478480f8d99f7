"""A real offline search on the CPU, through the app: the Experiment Log fills, the run ends."""

from __future__ import annotations

import pytest

from kernelcode.tui.app import create_app
from kernelcode.tui.widgets.experiment_log import ExperimentLog
from kernelcode.tui.widgets.header import RunHeader
from kernelcode.tui.formatting import PHASE_WORDS, STATUS_WORDS
from openkernel.events import CandidatePhaseChanged

from .conftest import SIZE, chat_text, wait_until

# One combination and one seed: a gelu candidate is one worker, not a sweep and then a judge
# (these tests assert nothing about the sweep; test_withdrawn_branches keeps it).
FAST = ["prompt.max_template_combinations=1", "eval_config.correctness_seeds=1"]


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
    iterations as the labels do (i1-b*: "iteration 1"). At the end the Experiment Log holds
    every candidate, judged, and the header and the chat say the run finished."""
    monkeypatch.chdir(tmp_path)  # anything the engine writes by default lands here
    db = tmp_path / "k.sqlite3"
    app = create_app(None, ["max_iters=2", "branches_per_iteration=2", "job_name=phases",
                            "eval_config.max_workers=1", f"paths.kernels_db_path={db}",
                            f"paths.scratch_dir={tmp_path / 'scratch'}", *FAST])
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
        # held by the pause before it got the worker: "paused", not counted in flight
        assert seen["cells"][-1]["i0-b1"] == "paused" and "PAUSED" in seen["headers"][-1]
        await pilot.press("p")
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=200)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        assert app.state.finished.reason == "completed", chat_text(app)
        assert app.state.error == ""
        chat = chat_text(app)
        table = app.query_one(ExperimentLog)
        assert table.row_count == 4 and set(table.labels) == {"i0-b0", "i0-b1", "i1-b0", "i1-b1"}
        assert all(c.status is not None for c in app.state.candidates.values())
        header = app.query_one(RunHeader)
        assert header.state_word == "FINISHED" and "interpreter" in header.hardware.lower()
        assert "Run finished" in chat
    assert db.exists()
    shown = {cell for cells in seen["cells"] for cell in cells.values()}
    assert "running" not in shown
    # Every phase reaches the app; a phase shorter than one refresh may never be drawn (the
    # panels coalesce events), so what is drawn is only checked to be made of known words.
    assert {"queued", "building", "testing", "timing"} <= phases, phases
    assert shown <= set(PHASE_WORDS.values()) | set(STATUS_WORDS.values()), shown
    assert {"queued", "paused", "timing"} <= shown, shown
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
        # one count, one word for it, everywhere (openkernel.wording.Tally), and the machine
        # named for what a CUDA job does on it
        assert "iteration 0 done: 2 candidates, none judged so far" in chat
        assert "Run finished: best —, 2 candidates, none judged; database" in chat
        header = str(app.query_one(RunHeader).render())
        assert "CPU, no GPU: CUDA C++ compiled only" in header and "Triton interpreter" not in header
        assert "2 candidates, none judged" in header
        for row in app.state.evaluated:  # the sweep's log says what happened: compiled only
            log = row.program.kernel_exec_result.eval_log
            assert "screened" not in log and "compiled only (nvcc or NVRTC)" in log, log


@pytest.mark.slow
async def test_withdrawn_branches_pause_and_a_refused_backend(tmp_path, monkeypatch,
                                                              pointwise_task):
    """A real run whose offline space is spent in iteration 0 (3 combinations, Triton only):
    `b` is refused at the key; `p` while both candidates are in flight says "paused" only once
    they are stored; the branches of iteration 1 the generator had nothing for leave no row;
    the chat and the header count alike."""
    monkeypatch.chdir(tmp_path)
    # Workers started anew (not forked: eval_config.fork_workers), so that both candidates are
    # in flight for the ~2 s of their workers' imports: a window to press `p` in
    app = create_app(str(pointwise_task), [
        "max_iters=3", "branches_per_iteration=2", "job_name=words",
        "eval_config.fork_workers=false",
        f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}", f"paths.scratch_dir={tmp_path / 's'}"])
    # both past generating: holding a worker slot (queued while its worker starts) or judged;
    # the second is busy for only ~0.2 s after its worker started, too short a window to aim at
    busy = ("queued", "sweeping", "building", "testing", "timing")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.started is not None, timeout=150)
        await pilot.press("b")
        await wait_until(pilot, lambda: "Backend stays" in chat_text(app), timeout=5)
        # the chat wraps the generator's reason (the family named): words, not lines
        assert app.pending_backend == "" and "Triton only" in " ".join(chat_text(app).split())
        await wait_until(pilot, lambda: len(app.state.candidates) == 2 and all(
            c.phase in busy for c in app.state.candidates.values()), timeout=150)
        await pilot.press("p")
        await wait_until(pilot, lambda: "nothing in flight" in chat_text(app), timeout=200)
        chat = " ".join(chat_text(app).split())
        asked = chat.index("2 candidates in flight finish and will be stored first")
        paused = chat.index("Engine paused between candidates: nothing in flight")
        judged = [chat.index(f"{label} ") for label in ("✓ i0-b0", "✓ i0-b1")]
        assert asked < min(judged) and max(judged) < paused, chat
        await pilot.press("p")  # resume: iteration 1 has nothing new, the run ends
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=150)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        await pilot.pause()
        assert set(app.query_one(ExperimentLog).labels) == {"i0-b0", "i0-b1"}
        assert set(app.state.candidates) == {"i0-b0", "i0-b1"}  # no phantom i1-b* rows
        chat = " ".join(chat_text(app).split())
        assert "iteration 0 done: 2 candidates so far" in chat
        assert "2 candidates; database" in chat and "The search ends after iteration 0" in chat
        # iteration 1 judged nothing: the chat says so, the header names iteration 0 (issue 58)
        assert "iteration 1: nothing new to judge" in chat
        assert "iteration 1 done" not in chat
        assert "iteration 0 of 0–2" in str(app.query_one(RunHeader).render())
        assert "2 candidates" in str(app.query_one(RunHeader).render())


@pytest.mark.slow
async def test_a_resumed_job_shows_its_stored_candidates(tmp_path, monkeypatch):
    """Issue 58: resuming a job of two stored candidates for one more iteration, the Experiment
    Log and the trajectory hold all four (the stored ones first, as judged), and the header
    counts four, not the stored ones twice."""
    import openkernel

    monkeypatch.chdir(tmp_path)
    common = ["job_name=again", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
              f"paths.scratch_dir={tmp_path / 'scratch'}", "branches_per_iteration=2", *FAST]
    first = list(openkernel.optimize(None, overrides=["max_iters=1", *common]))
    assert first[-1].reason == "completed"
    app = create_app(None, ["max_iters=2", *common])
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.finished is not None or app.state.error,
                         timeout=200)
        await wait_until(pilot, lambda: not app.showing_pending, timeout=5)
        table = app.query_one(ExperimentLog)
        assert table.labels[:2] == ["i0-b0", "i0-b1"] and table.row_count == 4, table.labels
        assert all(app.state.candidates[k].status is not None for k in ("i0-b0", "i0-b1"))
        assert len(app.state.trajectory) == 4 and app.state.tally.candidates == 4
        assert "4 candidates" in str(app.query_one(RunHeader).render())
