"""A templated kernel in the dashboard: the combination grid (sortable, the winner marked) and
runtime against the parameters, from the sample database's offline job (real sweeps)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sample_db

from kernelcode.dashboard import serve_in_background
from kernelcode.dashboard.app import route
from kernelcode.dashboard.combinations import combination_figure, combination_rows
from kernelcode.dashboard.source import DataSource

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _swept_kernel(path) -> str:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, template_results FROM kernels WHERE job_name = ? AND "
                            "is_program0 = 0 AND correctness = 1", (sample_db.OFFLINE_JOB,)).fetchall()
    ids = [i for i, t in rows if t and '"combinations"' in t]
    assert ids, "the offline job has no templated candidate"
    return ids[0]


def test_kernel_panel_has_the_combinations(sample):
    kernel_id = _swept_kernel(sample["path"])
    src = DataSource(sample["path"])
    page = str(route(src, f"/kernel/{kernel_id}", ""))
    assert "kernel-combinations" in page and "combination-grid" in page and "combination-figure" in page
    k = src.kernel(kernel_id)
    rows = combination_rows(k["template_results"])
    assert sum(r["winner"] == "★" for r in rows) == 1
    # the winner's row says what its full checks judged: the kernel's own speedup (issue 58:
    # a starred 0.185x beside a kernel of 0.131x); the sweep's figure is named apart
    from openkernel.wording import three_figures
    won = next(r for r in rows if r["winner"] == "★")
    assert won["judged"] == three_figures(k["runtime_improvement"])
    assert all(r["judged"] is None for r in rows if r is not won)
    assert "judged" in page and "in full" in page
    fig = combination_figure(k["template_results"])
    assert fig.data  # a line for one varied parameter, heatmaps for two or more


def test_combination_figure_draws_a_heatmap_for_two_parameters():
    rows = [{"params": {"BLOCK": b, "W": w}, "status": "correct", "runtime": b / w, "speedup": 1.0,
             "error": ""} for b in (64, 128) for w in (2, 4)]
    fig = combination_figure({"space": {"BLOCK": [64, 128], "W": [2, 4]}, "combinations": rows})
    assert [t.type for t in fig.data] == ["heatmap"]
    assert fig.data[0].z[0][0] == 32 and fig.data[0].z[1][1] == 32  # W=2 row: 64/2; W=4: 128/4
    one = combination_figure({"space": {"BLOCK": [64, 128]}, "combinations": rows[:1] + rows[2:3]})
    assert [t.type for t in one.data] == ["scatter"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_combination_grid_sorts_in_a_real_browser(sample):
    from playwright.sync_api import sync_playwright

    kernel_id = _swept_kernel(sample["path"])
    base = serve_in_background(sample["path"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(30_000)
        page.goto(f"{base}/kernel/{kernel_id}")
        page.wait_for_selector("#combination-grid .ag-row")
        page.wait_for_selector("#combination-figure .main-svg")
        n = page.locator("#combination-grid .ag-center-cols-container .ag-row").count()
        assert n >= 2
        assert page.locator("#combination-grid .ag-cell", has_text="★").count() == 1

        def column(col: str) -> list[str]:
            """The column's values in the order shown (ag-grid places rows by row-index, not
            by their order in the DOM)."""
            return page.evaluate(f"""() => [...document.querySelectorAll(
                '#combination-grid .ag-center-cols-container .ag-row')]
                .sort((a, b) => +a.getAttribute('row-index') - +b.getAttribute('row-index'))
                .map(r => (r.querySelector("[col-id='{col}']") || {{}}).innerText || '')""")

        shown = [float(x) for x in column("median_ms") if x]
        assert shown == sorted(shown)  # by median runtime, fastest first, to begin with
        page.click("#combination-grid .ag-header-cell[col-id='speedup']")  # now by speedup
        page.wait_for_timeout(500)
        speedups = [float(x) for x in column("speedup") if x]
        assert speedups == sorted(speedups) and len(speedups) >= 2
        browser.close()
