"""Benchmark suites in the dashboard: the runs page groups a suite's jobs, the suite page shows
the same table and fast_p as `openkernel bench` (a database written by a real bench run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelcode.dashboard import serve_in_background
from kernelcode.dashboard.app import route
from kernelcode.dashboard.source import DataSource

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, x):
        return {expr}

def get_inputs():
    return [torch.randn({shape})]

def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def bench_db(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("suite")
    level = root / "level1"
    level.mkdir()
    (level / "19_ReLU.py").write_text(PROBLEM.format(init="", expr="torch.relu(x)", shape="8, 512"))
    (level / "89_sort.py").write_text(PROBLEM.format(init="", expr="torch.sort(x, dim=1).values",
                                                      shape="8, 64"))
    db = root / "kernels.sqlite3"
    out = root / "suite.json"
    proc = subprocess.run([sys.executable, "-m", "openkernel.cli", "bench", str(level),
                           # three iterations: the depth curve has three points (issue 57)
                           "--name", "kb level1", "--json", str(out), "--set", "max_iters=3",
                           "--set", "branches_per_iteration=1",
                           "--set", f"paths.kernels_db_path={db}",
                           "--set", f"paths.scratch_dir={root / 'scratch'}",
                           # one combination, one seed: the candidate is one worker, not a sweep
                           "--set", "prompt.max_template_combinations=1",
                           "--set", "eval_config.correctness_seeds=1"],
                          capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"db": db, "json": json.loads(out.read_text())}


def test_suite_page_agrees_with_the_bench_json(bench_db):
    src = DataSource(bench_db["db"])
    assert [s["suite"] for s in src.suites()] == ["kb level1"]
    page = str(route(src, "/suite/kb%20level1", ""))
    for problem in bench_db["json"]["problems"]:
        assert problem["name"] in page
    fast = bench_db["json"]["fast_p"]
    assert f"fast<sub>0</sub> {fast['0']:.2f}" in page and "no kernel" in page
    assert "vs cudagraphs" in page and "over cudagraphs" in page  # reduce-overhead's column
    assert "Unknown suite" in str(route(src, "/suite/nope", ""))
    runs = str(route(src, "/", ""))
    assert "suites-section" in runs and "kb level1" in runs
    # the depth curve: the best so far after each iteration, in the JSON and on the page
    data = bench_db["json"]
    relu = next(p for p in data["problems"] if p["name"] == "level1/19_ReLU")
    assert len(relu["depth"]) == 3 and relu["depth"][-1] == relu["speedup"]
    assert all(b >= a for a, b in zip(relu["depth"], relu["depth"][1:]))  # a best never falls
    assert [d["iteration"] for d in data["depth"]] == [0, 1, 2] and data["n_depth"] == 1
    assert data["depth"][-1]["geomean_eager"] == pytest.approx(data["geomean_eager"])
    assert "by iteration" in page and "depth: after iteration 0" in page and "suite-depth" in page


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_suites_in_a_real_browser(bench_db):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base = serve_in_background(bench_db["db"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "/")
        page.wait_for_selector("#suites-section")
        # The page's route callback may render it again just after it first appears (closing
        # the details a click had opened): settle, then open the suite until its jobs show.
        page.wait_for_load_state("networkidle")
        details = page.locator("#suites-section details.suite").first
        for _ in range(3):
            if not details.evaluate("d => d.open"):
                page.click("#suites-section summary")  # the suite's jobs, grouped under it
            try:
                page.wait_for_selector("#suites-section #suite-table a.job-link", timeout=5_000)
                break
            except PlaywrightTimeout:
                continue
        page.wait_for_selector("#suites-section #suite-table a.job-link")
        assert page.locator("#suites-section a.job-link").count() == 2
        page.click("a.suite-link")
        page.wait_for_selector("#suite-figures")
        text = page.inner_text("#suite-table")
        assert "level1/19_ReLU" in text and "level1/89_sort" in text and "failed" in text
        figures = page.inner_text("#suite-figures")
        assert "fast" in figures and "geomean over eager" in figures and "(1 correct of 2)" in figures
        assert "depth: after iteration 0" in figures
        page.wait_for_selector("#suite-depth .main-svg")  # the curve, drawn
        page.click("#suite-table a.job-link >> text=level1/19_ReLU")  # on to the problem's job
        page.wait_for_selector("#job-graph")
        assert not errors, errors
        browser.close()


def test_the_suite_page_reads_the_same_from_postgres(bench_db, postgres):
    import sample_db

    sqlite_src = DataSource(bench_db["db"])
    src = DataSource(sample_db.copy_to(bench_db["db"], postgres.new_database("suites")))
    assert src.suites() == sqlite_src.suites()
    assert src.suite("kb level1").to_json() == sqlite_src.suite("kb level1").to_json()
    page = str(route(src, "/suite/kb%20level1", ""))
    for problem in bench_db["json"]["problems"]:
        assert problem["name"] in page
    assert "suites-section" in str(route(src, "/", ""))


def test_a_suite_written_before_baseline_keys_still_reads(bench_db, tmp_path):
    """A database at revision 0001 (no costs, no keyed baselines), read without migrating it."""
    import shutil

    from alembic import command
    from sqlalchemy import create_engine

    from openkernel.store import migrate

    old = tmp_path / "old.sqlite3"
    shutil.copy(bench_db["db"], old)
    engine = create_engine(f"sqlite:///{old}")
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0001")
    engine.dispose()
    summary = DataSource(old).suite("kb level1")
    assert [p.name for p in summary.problems] == [p["name"] for p in bench_db["json"]["problems"]]
    assert all(p.fixed_s is None for p in summary.problems)
    assert summary.fast_p == bench_db["json"]["fast_p"]
    assert "fixed s" in str(route(DataSource(old), "/suite/kb%20level1", ""))
