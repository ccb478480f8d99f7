"""A templated candidate in kernel-code: the combination table in the candidate view, the
winner marked, ``o`` re-sorting it (a real offline run on the CPU, whose candidates sweep)."""

from __future__ import annotations

import pytest

import openkernel
from kernelcode.tui.app import create_app
from kernelcode.tui.screens.candidate import CandidateView

from .conftest import SIZE, settle


@pytest.fixture(scope="module")
def swept(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("sweep")
    return list(openkernel.optimize(examples_dir / "gelu", overrides=[
        "max_iters=1", "branches_per_iteration=1", "job_name=sweep", "search.seed=3",
        f"paths.kernels_db_path={tmp / 'k.sqlite3'}", f"paths.scratch_dir={tmp / 'scratch'}"]))


async def test_candidate_view_shows_the_combinations_and_o_sorts_them(swept):
    judged = [e for e in swept if type(e).__name__ == "CandidateEvaluated"]
    results = judged[0].program.kernel_exec_result.template_results
    assert len(results["combinations"]) >= 2 and results["winner"]
    app = create_app(event_source=swept)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(swept))
        app.open_candidate("i0-b0")
        await pilot.pause()
        view = app.overlay
        assert isinstance(view, CandidateView)
        text = "\n".join(str(line) for line in app.query_one("#overlay-body")._items)
        assert "Template combinations" in text and "★" in text and "by speedup" in text
        # the sweep's figure and the winner's full-checks figure, each named (issue 58)
        assert "sweep x" in text and "judged x" in text
        if judged[0].program.kernel_exec_result.correctness:
            from openkernel.wording import speedup_text
            assert speedup_text(judged[0].program.kernel_exec_result.runtime_improvement) in text
        await pilot.press("o")
        await pilot.pause()
        assert app.overlay.sort == 1
        text = "\n".join(str(line) for line in app.query_one("#overlay-body")._items)
        assert "by runtime" in text


async def test_skills_on_the_cpu_list_the_interpreters_choices(swept):
    """Issue 58: the skills overlay listed the GPU's block sizes (256, 512) and warps on a CPU
    run, which tries only the interpreter's few large programs."""
    app = create_app(event_source=swept)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, len(swept))
        await pilot.press("s")
        await pilot.pause()
        text = "\n".join(str(line) for line in app.query_one("#overlay-body")._items)
        assert "BLOCK=1024/2048/4096/8192/16384" in text, text
        assert "256/512" not in text and "num_warps=4" in text and "CPU's choices" in text
