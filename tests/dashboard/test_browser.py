"""The pages in a real headless Chromium (Debian's), served on 127.0.0.1 like kernelfoundry-gui, from the
sample database in SQLite and from its copy in PostgreSQL."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest
import sample_db

from kernelcode.dashboard import job_url, queries, serve_in_background
from openkernel.store import Store, open_readonly
from openkernel.wording import Tally, speedup_text

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install chromium; CI's .ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
WAIT = 30_000  # ms; generous because CI shares two cores with other suites
CY = ("[document.getElementById('job-graph'), ...document.querySelectorAll('#job-graph *')]"
      ".find(e => e && e._cyreg)._cyreg.cy")


def _fingerprint(db: Path | str) -> tuple:
    if isinstance(db, Path):
        return db.stat().st_mtime_ns, hashlib.sha256(db.read_bytes()).hexdigest()
    from openkernel.store.tables import Base

    engine = open_readonly(db)  # PostgreSQL: a digest of every row of every table
    with engine.connect() as conn:
        digests = tuple(conn.exec_driver_sql(
            f"SELECT count(*), md5(string_agg(t::text, ',' ORDER BY t::text)) FROM {table.name} t").one()
            for table in Base.metadata.sorted_tables)
    engine.dispose()
    return digests


@pytest.fixture(scope="module")
def sample_pg(sample, postgres):
    """The sample database copied into PostgreSQL: the same pages, read from the server."""
    return sample_db.copy_to(sample["path"], postgres.new_database("dashboard"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request, sample):
    """The dashboard served on the sample database: the SQLite file, then its PostgreSQL copy
    (the same pages must render from either). Tests whose pages read nothing the runs page, a
    node's fields and the panels do not (marked ``["sqlite"]``) run on the file alone."""
    db = sample["path"] if request.param == "sqlite" else request.getfixturevalue("sample_pg")
    before = _fingerprint(db)
    base = serve_in_background(db)
    yield {"base": base, "before": before, **sample, "db": db}


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


def _nodes(page, n: int, timeout_ms: float = 30_000) -> None:
    page.wait_for_function(f"() => {{ try {{ return {CY}.nodes().length === {n}; }} catch (e) {{ return false; }} }}",
                           timeout=timeout_ms)


N_KERNELS = sample_db.ITERS * sample_db.BRANCHES + 1  # the LLM job's candidates and the reference


def _kernel(served, kernel_id: str) -> dict:
    """One kernel as stored, read-only (the last test checks the file was never written)."""
    return queries.kernel_detail(open_readonly(served["db"]), kernel_id)


def _open_job(page, base: str) -> None:
    page.goto(job_url(base, sample_db.TASK, sample_db.JOB))
    _nodes(page, N_KERNELS)


def test_runs_page_lists_the_jobs_with_their_best_and_state(served, page):
    page.goto(served["base"] + "/")
    page.wait_for_selector("#runs-listing")
    head, *body = page.evaluate("() => [...document.querySelectorAll('#runs-listing tr')]"
                                ".map(tr => [...tr.cells].map(td => td.innerText.trim()))")
    rows = {cells[1]: dict(zip(head, cells)) for cells in body}
    llm = rows[sample_db.JOB]
    best = _kernel(served, served["best"])
    assert llm["best speedup"] == f"{speedup_text(served['best_speedup'])} ({best['label']})" != "1.00x"
    assert llm["hardware"] == "CPU (Triton interpreter)" and llm["state"] == "completed"
    # not the reference; and those with no verdict (not run here, no kernel) said so, as
    # `openkernel runs` and the chat say them (openkernel.wording.Tally)
    listed = next(r for r in queries.list_jobs(open_readonly(served["db"]))[0]
                  if r["job_name"] == sample_db.JOB)
    assert llm["candidates"] == Tally.of(listed["status"]).words(noun=False)
    assert llm["candidates"].startswith(f"{sample_db.ITERS * sample_db.BRANCHES} (")
    assert llm["candidates"].endswith(" not judged)")
    assert "generation failed" in llm["status mix"] and "not run" in llm["status mix"]
    assert rows[sample_db.KILLED_JOB]["state"] == "interrupted"
    assert rows[sample_db.OFFLINE_JOB]["runs"] == "2"
    page.fill("#runs-search", "offline")
    page.wait_for_function("() => !document.querySelector('#runs-listing').innerText.includes('llm job')")
    assert sample_db.OFFLINE_JOB in page.inner_text("#runs-listing")
    page.fill("#runs-search", "")
    page.click("#runs-listing >> text=llm job")
    _nodes(page, N_KERNELS)
    assert page.errors == []


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)  # the backend is read above
def test_graph_colours_best_arrows_and_legend(served, page):
    _open_job(page, served["base"])
    ids = served["ids"]
    rows = queries.job_kernels(open_readonly(served["db"]), sample_db.TASK, sample_db.JOB)
    known = {r["id"] for r in rows}
    info = page.evaluate(f"""() => {{ const cy = {CY};
        const c = id => cy.getElementById(id).style('background-color');
        return {{edges: cy.edges().length, best: c('{served['best']}'),
                 border: cy.getElementById('{served['best']}').style('border-color'),
                 red: c('{ids['compile_error'][0]}'), pink: c('{ids['build_timeout'][0]}'),
                 purple: c('{ids['generation_failed'][0]}'), grey: c('{ids['not_run'][0]}'),
                 yellow: c('{ids['test_timeout'][0]}'),
                 label: cy.getElementById('{ids['not_run'][0]}').data('label'),
                 y0: cy.getElementById('{ids['correct'][0]}').position('y'),
                 y2: cy.getElementById('{ids['not_run'][0]}').position('y')}}; }}""")
    assert info["edges"] == sum(1 for r in rows if r["parent_id"] in known)
    assert info["best"] == "rgb(255,255,255)" and info["border"] == "rgb(0,0,0)"
    assert (info["red"], info["pink"], info["yellow"]) == ("rgb(214,39,40)", "rgb(255,105,180)", "rgb(242,197,0)")
    assert (info["purple"], info["grey"]) == ("rgb(148,103,189)", "rgb(158,158,158)")
    assert info["label"].startswith("i2-b") and info["y0"] < info["y2"]
    legend = page.inner_text("#graph-legend")
    assert "Did not compile" in legend and "The best kernel of the job" in legend
    assert "Generation failed: no kernel to judge" in legend
    assert "Zoom in" not in legend  # a small job draws every arrow from the start
    critic = page.inner_text("#job-critic")
    stored = queries.job_critiques(open_readonly(served["db"]), sample_db.TASK, sample_db.JOB)
    assert critic.startswith("Critic") and len(stored) == sample_db.ITERS
    assert critic.index(stored[0]["text"][:60]) < critic.rindex(stored[-1]["text"][:60])
    facts = page.inner_text("#job-facts")
    assert f"{sample_db.ITERS * sample_db.BRANCHES} candidates" in facts and "models: openai/test-model" in facts
    assert page.errors == []


def _click(page, kernel_id: str) -> None:
    box = page.locator("#job-graph").bounding_box()
    pos = page.evaluate(f"() => {CY}.getElementById('{kernel_id}').renderedPosition()")
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])


def test_clicking_a_node_shows_every_field_with_highlighted_code(served, page):
    _open_job(page, served["base"])
    row = next(r for r in (_kernel(served, i) for i in served["ids"]["incorrect"])
               if r["meta"].get("integrity_violation") == "inputs_modified")
    _click(page, row["id"])
    page.wait_for_function(f"() => (document.querySelector('#kernel-info') || {{innerText: ''}})"
                           f".innerText.includes('{row['label']}')")
    info = page.inner_text("#kernel-info")
    for expected in (row["label"], sample_db.TASK, sample_db.JOB, sample_db.MODEL,
                     "CPU (Triton interpreter)", "incorrect"):
        assert expected in info
    assert "inputs_modified" in page.inner_text("#kernel-integrity")
    panel = page.locator("#kernel-panel-body")
    assert "PROMPT-MARKER" in panel.text_content() and row["eval_log"].splitlines()[0] in panel.text_content()
    assert "reuse the input buffer" in panel.text_content() and "class Model" in panel.text_content()
    # highlight.js is served by Dash itself: keywords get hljs spans with no network
    page.wait_for_selector("#kernel-panel-body .code .hljs-keyword", state="attached")
    best = _kernel(served, served["best"])
    _click(page, best["id"])
    page.wait_for_function(f"() => document.querySelector('#kernel-info').innerText.includes('{best['label']}')")
    runtime = page.inner_text("#kernel-runtime")
    stats = best["runtime_stats"]
    assert "n_trials" in runtime and str(stats["n_trials"]) in runtime
    assert f"{best['runtime_improvement']:.4g}x" in runtime
    assert f"{stats['reference']['median']:.4g}" in runtime  # the reference median, as stored
    assert page.errors == []


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)  # the backend is read above
def test_a_generation_failure_says_what_happened(served, page):
    _open_job(page, served["base"])
    row = next(r for r in (_kernel(served, i) for i in served["ids"]["generation_failed"])
               if r["meta"]["generation_failed"] == "service")
    _click(page, row["id"])
    page.wait_for_function(f"() => (document.querySelector('#kernel-info') || {{innerText: ''}})"
                           f".innerText.includes('{row['label']}')")
    assert "generation_failed" in page.inner_text("#kernel-info")
    text = page.locator("#kernel-panel-body").text_content()
    assert "service answered with an error" in text and "SERVICE-MARKER" in text
    assert page.errors == []


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)  # the backend is read above
def test_experiment_table_quick_filter_and_row_click(served, page):
    _open_job(page, served["base"])
    page.click(".tab >> text=Experiment table")
    # the candidates, not the reference (issue 58: the pager counted it as one)
    page.wait_for_function("() => document.querySelectorAll('#exp-grid .ag-center-cols-container .ag-row')"
                           f".length === {N_KERNELS - 1}")
    assert f"of {N_KERNELS - 1}" in page.inner_text("#exp-grid .ag-paging-row-summary-panel")
    headers = page.inner_text("#exp-grid .ag-header")
    assert "trials" in headers and "CV %" in headers and "N_trials" not in headers
    page.fill("#table-search", "build_timeout")
    page.wait_for_function("() => document.querySelectorAll('#exp-grid .ag-center-cols-container .ag-row').length === 1")
    page.locator("#exp-grid .ag-center-cols-container .ag-row").first.click()
    label = _kernel(served, served["ids"]["build_timeout"][0])["label"]
    page.wait_for_function(f"() => (document.querySelector('#kernel-info') || {{innerText: ''}}).innerText.includes('{label}')")
    assert "build timeout" in page.text_content("#kernel-panel-body").lower()
    assert page.errors == []


def test_every_panel_draws(served, page):
    """A CPU job, as users have it: plots where there is data, and where there is none (no
    GPU profile, interpreter timings) a note that says why and what to do."""
    _open_job(page, served["base"])
    for tab, selector in [("Optimization trajectory", "#trajectory-body .js-plotly-plot"),
                          ("Roofline", "#roofline-body .note"),
                          ("Resources", "#resources-body .note"),
                          ("Optimization landscape", "#landscape-body .js-plotly-plot"),
                          ("Archive", "#archive-body .js-plotly-plot"),
                          ("Memory heatmap", "#memory-help"),
                          ("Code diff", "#diff-table"), ("Run health", "#health-table")]:
        page.click(f".tab >> text={tab}")
        page.wait_for_selector(selector)
    page.click(".tab >> text=Roofline")
    assert "CPU" in page.inner_text("#roofline-body")
    page.click(".tab >> text=Archive")  # cells coloured by their elite's speedup
    occupied, elites = page.evaluate(
        "() => { const d = document.querySelector('#archive-body .js-plotly-plot').data;"
        " return [d[0].z.flat().filter(v => v === 1).length, d[1].z.flat().filter(v => v !== null)]; }")
    assert occupied >= 3 and elites and max(elites) == pytest.approx(served["best_speedup"])
    page.click(".tab >> text=Memory heatmap")  # a CPU job: why there is none
    assert "ran on the CPU" in page.inner_text("#memory-help")
    page.click(".tab >> text=Code diff")
    assert _kernel(served, served["best"])["label"] in page.inner_text("#panel-diff")
    page.click(".tab >> text=Run health")
    assert page.locator("#health-table tbody tr").count() == 7
    assert "got no kernel from the generator" in page.inner_text("#health-table")
    assert page.errors == []


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)  # the backend is read above
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


def test_a_damaged_database_gets_one_clear_page(sample, tmp_path, page):
    """Issue 58: the runs page and a job's page of a real run's file, damaged, say so (the
    file, the damage) instead of showing the SQL; nothing is written into it."""
    from damaged_file import damage

    bad = damage(sample["path"], tmp_path / "damaged.sqlite3")
    before = _fingerprint(bad)
    base = serve_in_background(bad)
    for url in (base + "/", job_url(base, sample_db.TASK, sample_db.JOB)):
        page.goto(url)
        text = page.wait_for_selector("#message-page").inner_text()
        assert "the database file is damaged" in text and "damaged.sqlite3" in text, text
        for raw in ("SELECT", "Traceback", "sqlalche.me"):
            assert raw not in page.content()
    assert _fingerprint(bad)[1] == before[1]


def test_an_edge_across_layers_is_drawn_through_its_slots(tmp_path, page):
    """Issue 58: a kernel submitted into a finished job of three iterations with the first
    iteration's kernel as its parent: its edge crosses a layer, through the slot kept for it
    there (cytoscape's own segment points), so it runs through no other kernel."""
    import openkernel
    from kernelcode.dashboard.graph import layout
    from kernelcode.dashboard.source import DataSource

    db = tmp_path / "kernels.sqlite3"
    common = [f"paths.kernels_db_path={db}", f"paths.scratch_dir={tmp_path / 'scratch'}",
              "branches_per_iteration=1", "prompt.max_template_combinations=1",
              "eval_config.correctness_seeds=1"]
    task = sample_db.EXAMPLE
    list(openkernel.optimize(task, overrides=["job_name=routes", "max_iters=3", *common]))
    store = Store(db)
    first = next(k for k in store.job_kernels("gelu", "routes") if k.label == "i0-b0")
    mine = openkernel.submit(task, first.code, job="routes", parent=first.id,
                             overrides=common)
    rows = DataSource(db).job("gelu", "routes").rows
    pos, routes = layout(rows)
    assert mine.id in routes and routes[mine.id]
    base = serve_in_background(db)
    page.goto(job_url(base, "gelu", "routes"))
    _nodes(page, len(rows))
    drawn = page.evaluate(f"""() => {{ const e = {CY}.edges().filter(
        e => e.target().id() === '{mine.id}')[0];
        return {{style: e.style('curve-style'), points: e.segmentPoints()}}; }}""")
    assert drawn["style"] == "segments"
    want = routes[mine.id]
    assert len(drawn["points"]) == len(want)
    for got, (x, y) in zip(drawn["points"], want):
        assert abs(got["x"] - x) < 2 and abs(got["y"] - y) < 2, (drawn, want)
    assert page.errors == []


def test_live_job_page_grows_by_itself(sample, tmp_path, page):
    """The offline job resumed by a real engine while its page is open: the new kernels and
    the new critic line appear within a few refresh ticks, with no reload; a kernel an agent
    submitted into the run is drawn with its author, dashed."""
    import threading

    import openkernel
    from openkernel.search.external import Submission

    path = tmp_path / "live.sqlite3"
    shutil.copy(sample["path"], path)
    base = serve_in_background(path)
    page.goto(job_url(base, sample_db.TASK, sample_db.OFFLINE_JOB))
    _nodes(page, 5)  # the reference and 2 x 2 candidates
    page.wait_for_function("() => document.querySelector('#job-live').innerText.startsWith('completed')")
    done: list = []
    control = openkernel.RunControl()
    control.pause()  # the run starts, then holds before its first candidate: it reads running
    parent = next(r for r in queries.job_kernels(open_readonly(path), sample_db.TASK,
                                                 sample_db.OFFLINE_JOB) if r["correctness"]
                  and not r["is_program0"])
    # The agent sends the parent's own code back: its verdict is reused (no third build here).
    code = queries.kernel_detail(open_readonly(path), parent["id"])["code"]
    agents = control.submit(Submission(code=code, author="agent:browser", parent_id=parent["id"]))
    engine = threading.Thread(target=lambda: done.extend(openkernel.optimize(
        sample_db.EXAMPLE, control=control, overrides=[
            f"paths.kernels_db_path={path}", f"paths.scratch_dir={tmp_path / 's'}",
            f"job_name={sample_db.OFFLINE_JOB}", "max_iters=3", "branches_per_iteration=2",
            # one combination per candidate (no sweep): the page's refresh is what is tested
            "search.seed=1", "prompt.max_template_combinations=1"])))
    engine.start()
    page.wait_for_function("() => document.querySelector('#job-live').innerText.startsWith('running')")
    control.resume()
    _nodes(page, 8, timeout_ms=240_000)  # as long as the engine may run: its three candidates
    engine.join(timeout=240)
    assert done and done[-1].reason == "completed"
    page.wait_for_function("() => document.querySelector('#job-facts').innerText.includes('7 candidates')")
    mine = agents.result(0)
    drawn = page.evaluate(f"""() => {{ const n = {CY}.getElementById('{mine.id}');
        return [n.data('label'), n.style('border-style'), n.hasClass('external')]; }}""")
    assert drawn == ["u1 · agent:browser", "dashed", True]
    assert "Written by a person or an agent" in page.inner_text("#graph-legend")
    text = Store(path).job_critiques(sample_db.TASK, sample_db.OFFLINE_JOB)[-1].text
    page.wait_for_function(f"() => document.querySelector('#job-critic').innerText.includes({text[:40]!r})")
    page.wait_for_function("() => document.querySelector('#job-live').innerText.startsWith('completed')")


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
    """Last in the module: after every page above, the file is byte-for-byte the same (on
    PostgreSQL: every row of every table)."""
    assert _fingerprint(served["db"]) == served["before"]
