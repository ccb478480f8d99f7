"""The pages in a real headless Chromium (Debian's), served on 127.0.0.1 like kernelfoundry-gui."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest
import sample_db

from kernelcode.dashboard import job_url, serve_in_background

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install chromium; CI's .ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
WAIT = 30_000  # ms; generous because CI shares two cores with other suites
CY = ("[document.getElementById('job-graph'), ...document.querySelectorAll('#job-graph *')]"
      ".find(e => e && e._cyreg)._cyreg.cy")


def _fingerprint(path: Path) -> tuple:
    return path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def served(sample):
    before = _fingerprint(sample["path"])
    base = serve_in_background(sample["path"])
    yield {"base": base, "before": before, **sample}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1500, "height": 1100})
    pg.set_default_timeout(WAIT)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.errors = errors
    yield pg
    pg.close()


def _nodes(page, n: int) -> None:
    page.wait_for_function(f"() => {{ try {{ return {CY}.nodes().length === {n}; }} catch (e) {{ return false; }} }}")


def _open_job(page, base: str) -> None:
    page.goto(job_url(base, sample_db.TASK, sample_db.JOB))
    _nodes(page, len(sample_db.PLAN))


def test_runs_page_lists_the_job_and_searches(served, page):
    page.goto(served["base"] + "/")
    listing = page.wait_for_selector("#runs-listing")
    text = listing.inner_text()
    assert sample_db.JOB in text and sample_db.TASK in text and "2.40x" in text and "NVIDIA H200" in text
    page.fill("#runs-search", "softmax")
    page.wait_for_function("() => !document.querySelector('#runs-listing').innerText.includes('demo job')")
    assert "other job" in page.inner_text("#runs-listing")
    page.fill("#runs-search", "")
    page.click("#runs-listing >> text=demo job")
    _nodes(page, len(sample_db.PLAN))
    assert page.errors == []


def test_graph_colours_best_arrows_and_legend(served, page):
    _open_job(page, served["base"])
    ids = served["ids"]
    info = page.evaluate(f"""() => {{ const cy = {CY};
        const c = id => cy.getElementById(id).style('background-color');
        return {{edges: cy.edges().length, best: c('{served['best']}'),
                 border: cy.getElementById('{served['best']}').style('border-color'),
                 red: c('{ids['i0-b1']}'), green: c('{ids['i1-b0']}'), pink: c('{ids['i1-b2']}'),
                 label: cy.getElementById('{ids['i1-b3']}').data('label'),
                 y0: cy.getElementById('{ids['i0-b0']}').position('y'),
                 y2: cy.getElementById('{served['best']}').position('y')}}; }}""")
    assert info["edges"] == 6
    assert info["best"] == "rgb(255,255,255)" and info["border"] == "rgb(0,0,0)"
    assert (info["red"], info["green"], info["pink"]) == ("rgb(214,39,40)", "rgb(44,160,44)", "rgb(255,105,180)")
    assert info["label"] == "i1-b3" and info["y0"] < info["y2"]
    legend = page.inner_text("#graph-legend")
    assert "Did not compile" in legend and "The best kernel of the job" in legend
    assert "Zoom in" not in legend  # a small job draws every arrow from the start
    critic = page.inner_text("#job-critic")
    assert critic.startswith("Critic") and critic.index("CRITIC-MARKER-0") < critic.index("CRITIC-MARKER-2")
    assert page.errors == []


def test_clicking_a_node_shows_every_field_with_highlighted_code(served, page):
    _open_job(page, served["base"])
    kid = served["ids"]["i0-b2"]
    box = page.locator("#job-graph").bounding_box()
    pos = page.evaluate(f"() => {CY}.getElementById('{kid}').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_selector("#kernel-info")
    info = page.inner_text("#kernel-info")
    for expected in ("i0-b2", sample_db.TASK, sample_db.JOB, "offline-templates", "NVIDIA H200 (sm_90)", "incorrect"):
        assert expected in info
    assert "output_aliasing" in page.inner_text("#kernel-integrity")
    panel = page.locator("#kernel-panel-body")
    assert "PROMPT-MARKER-2" in panel.text_content() and "EVAL-LOG-MARKER-2" in panel.text_content()
    assert "I will try BLOCK" in panel.text_content() and "class Model" in panel.text_content()
    # highlight.js is served by Dash itself: keywords get hljs spans with no network
    page.wait_for_selector("#kernel-panel-body .code .hljs-keyword", state="attached")
    best = served["best"]
    pos = page.evaluate(f"() => {CY}.getElementById('{best}').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_function("() => document.querySelector('#kernel-info').innerText.includes('i2-b0')")
    runtime = page.inner_text("#kernel-runtime")
    assert "n_trials" in runtime and "108" in runtime and "2.4x" in runtime and "1.92x" in runtime
    assert page.errors == []


def test_experiment_table_quick_filter_and_row_click(served, page):
    _open_job(page, served["base"])
    page.click(".tab >> text=Experiment table")
    page.wait_for_function("() => document.querySelectorAll('#exp-grid .ag-center-cols-container .ag-row').length === 10")
    page.fill("#table-search", "compile_error")
    page.wait_for_function("() => document.querySelectorAll('#exp-grid .ag-center-cols-container .ag-row').length === 1")
    page.locator("#exp-grid .ag-center-cols-container .ag-row").first.click()
    page.wait_for_function("() => (document.querySelector('#kernel-info') || {innerText: ''}).innerText.includes('i0-b1')")
    assert "expected ';'" in page.text_content("#kernel-panel-body")
    assert page.errors == []


def test_every_panel_draws(served, page):
    _open_job(page, served["base"])
    for tab, selector in [("Optimization trajectory", "#trajectory-body .js-plotly-plot"),
                          ("Roofline", "#roofline-body .js-plotly-plot"),
                          ("Resources", "#resources-body .js-plotly-plot"),
                          ("Optimization landscape", "#landscape-body .js-plotly-plot"),
                          ("Memory heatmap", "#memory-body .js-plotly-plot"),
                          ("Code diff", "#diff-table"), ("Run health", "#health-table")]:
        page.click(f".tab >> text={tab}")
        page.wait_for_selector(selector)
    assert "i1-b0" in page.inner_text("#panel-diff") and "i2-b0" in page.inner_text("#panel-diff")
    page.click(".tab >> text=Run health")
    assert page.locator("#health-table tbody tr").count() == 6  # the seed's five, evaluator faults
    assert page.errors == []


@pytest.mark.parametrize("path, expected", [("/job/nope/nope", "Unknown job"), ("/kernel/nope", "Unknown kernel"),
                                            ("/what/is/this/page", "Page not found")])
def test_bad_urls_get_a_clear_message(served, page, path, expected):
    page.goto(served["base"] + path)
    msg = page.wait_for_selector("#message-page")
    assert expected in msg.inner_text()
    assert "Traceback" not in page.content()


def test_missing_database_gets_a_clear_page(tmp_path, page):
    base = serve_in_background(tmp_path / "not-yet.sqlite3")
    page.goto(base + "/")
    assert "Cannot open the results database" in page.wait_for_selector("#message-page").inner_text()


def test_live_job_page_grows_by_itself(sample, tmp_path, page):
    from openkernel.store import Store

    path = tmp_path / "live.sqlite3"
    shutil.copy(sample["path"], path)
    base = serve_in_background(path)
    _open_job(page, base)
    store = Store(path)
    store.add_kernel(id="live0001", run_id=1, task_name=sample_db.TASK, job_name=sample_db.JOB, iteration=3,
                     branch=0, label="i3-b0", parent_id=sample["best"], origin="llm", status="faster",
                     compiled=True, correctness=True, runtime=0.03, runtime_improvement=3.3, score=7.3)
    store.close()
    _nodes(page, len(sample_db.PLAN) + 1)  # within a few refresh ticks, no reload
    page.wait_for_function("() => document.querySelector('#job-facts').innerText.includes('11 kernels')")
    store = Store(path)  # the critic's line comes after the iteration's last kernel: shown too
    store.add_critique(run_id=1, task_name=sample_db.TASK, job_name=sample_db.JOB, iteration=3,
                       text="CRITIC-MARKER-3: live")
    store.close()
    page.wait_for_function("() => document.querySelector('#job-critic').innerText.includes('CRITIC-MARKER-3')")


@pytest.fixture(scope="module")
def big_job(tmp_path_factory):
    """A job of 5,000 kernels, written by the scale benchmark's own builder (about a second)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import dashboard_scale

    path = tmp_path_factory.mktemp("big") / "kernels.sqlite3"
    dashboard_scale.build(path, total=dashboard_scale.BIG_N)
    return {"base": serve_in_background(path), "job": dashboard_scale.BIG_JOB, "n": dashboard_scale.BIG_N}


def test_large_job_shows_arrows_and_labels_where_zoomed_in(big_job, page):
    from kernelcode.dashboard.graph import EDGE_BUDGET

    task, job = big_job["job"]
    page.goto(job_url(big_job["base"], task, job))
    _nodes(page, big_job["n"])
    assert "Zoom in to see the arrows and labels" in page.inner_text("#graph-legend")
    view = f"""() => {{ const cy = {CY}, w = cy.width(), h = cy.height();
        const shown = e => {{ const p = e.renderedMidpoint(); return p.x > 0 && p.x < w && p.y > 0 && p.y < h; }};
        const edges = cy.edges(), lbl = cy.nodes('.lbl');
        return {{zoom: cy.zoom(), edges: edges.length, shown: edges.filter(shown).length,
                 arrow: edges.length ? edges[0].style('target-arrow-shape') : null,
                 down: edges.filter(e => e.source().position('y') < e.target().position('y')).length,
                 labels: lbl.length, label: lbl.length ? lbl[0].style('label') : null}}; }}"""
    fitted = page.evaluate(view)
    assert fitted["edges"] == 0 and fitted["labels"] == 0  # the overview: every circle, no sub-pixel edges
    # zoom in with the mouse wheel over the graph, as a user would
    box = page.locator("#job-graph").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(60):
        if page.evaluate(f"() => {CY}.zoom()") >= 1.0:
            break
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(30)
    page.wait_for_function(f"() => {CY}.nodes('.lbl').length > 0 && {CY}.edges().length > 0")
    near = page.evaluate(view)
    assert near["zoom"] >= 1.0 and 0 < near["edges"] < EDGE_BUDGET and near["shown"] > 0
    assert near["arrow"] == "triangle" and near["down"] == near["edges"]  # parent above, arrow to the child
    assert 0 < near["labels"] < 200 and near["label"].startswith("i") and "-b" in near["label"]
    # a circle in this view still opens its fields
    label, pos = page.evaluate(f"""() => {{ const cy = {CY}, w = cy.width() / 2, h = cy.height() / 2;
        const d = n => Math.hypot(n.renderedPosition().x - w, n.renderedPosition().y - h);
        const n = cy.nodes('.lbl').sort((a, b) => d(a) - d(b))[0];
        return [n.data('label'), n.renderedPosition()]; }}""")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])
    page.wait_for_function(
        f"() => (document.querySelector('#kernel-info') || {{innerText: ''}}).innerText.includes('{label}')")
    assert task in page.inner_text("#kernel-info")
    # panning keeps the edges in view; zooming back out to the overview drops them again
    page.evaluate(f"() => {CY}.panBy({{x: 0, y: -2000}})")
    page.wait_for_function(f"() => {{ const cy = {CY}; return cy.edges().filter("
                           "e => e.renderedMidpoint().y > 0 && e.renderedMidpoint().y < cy.height()).length > 0; }")
    # back out with the wheel, as a user would (one jump from 1.0 to the overview drew every
    # edge and label in a single frame, and crashed Chromium's software renderer under load)
    for _ in range(120):
        if page.evaluate(f"() => {CY}.zoom()") <= fitted["zoom"]:
            break
        page.mouse.wheel(0, 300)
        page.wait_for_timeout(30)
    page.wait_for_function(f"() => {CY}.edges().length === 0 && {CY}.nodes('.lbl').length === 0")
    assert page.errors == []


def test_zz_database_not_modified(served):
    """Last in the module: after every page above, the file is byte-for-byte the same."""
    assert _fingerprint(served["path"]) == served["before"]
