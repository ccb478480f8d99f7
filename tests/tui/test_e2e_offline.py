"""A real offline search on the CPU, through the app: the Experiment Log fills, the run ends."""

from __future__ import annotations

import pytest

from kernelcode.tui.app import create_app
from kernelcode.tui.widgets.experiment_log import ExperimentLog
from kernelcode.tui.widgets.header import RunHeader
from openkernel.events import RunFinished

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
