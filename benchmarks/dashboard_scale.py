"""Dashboard at scale: a results database of 1,000,000 kernels, timed in a real browser.

Builds (once) a database in /tmp with many jobs and one job of 5,000 kernels, written through
SQLAlchemy Core executemany into the engine's own schema (openkernel.store.tables), with
realistic prompt/answer/log sizes and short code. Then serves the dashboard on 127.0.0.1 and
measures, in headless Chromium (Debian's /usr/bin/chromium driven by Playwright):

- the runs page: the listing query alone, and navigation until the listing is on screen;
- the job of 5,000 kernels: navigation until cytoscape holds every node and has painted; then,
  not judged, zooming in from that overview until the edges in view are held and drawn.

Targets (issue 5): runs page < 1 s, 5,000-kernel graph < 2 s, the graph judged on the painted
time (every node in cytoscape and two animation frames after, so its frame has been drawn). The
machine is shared: the script first waits (up to --quiet-wait s) for the 1-minute load to drop
below --quiet-load, and records the load at start and end either way. Writes
benchmarks/results/dashboard_scale.json. Usage:

    .venv/bin/python benchmarks/dashboard_scale.py [--db /tmp/...sqlite3] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import create_engine, event, func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from openkernel.store.tables import Base, Kernel, Run  # noqa: E402

TOTAL = 1_000_000
BIG_JOB = ("matmul_gelu", "big-5000")
BIG_N, BIG_BRANCHES = 5000, 10
JOB_SIZE = 500  # every other job
STATUSES = ["faster", "correct", "incorrect", "test_timeout", "compile_error", "build_timeout", "not_run"]
WEIGHTS = [0.2, 0.2, 0.2, 0.05, 0.25, 0.05, 0.05]
PROMPT = ("You are an expert GPU kernel engineer. Optimize the reference below.\n" + "x" * 1400)
ANSWER = "Plan: fuse the elementwise ops and vectorize loads.\n" + "y" * 700 + "\n```python\n{code}\n```\n"
REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n" * 3
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _kernel(rng: random.Random, run_id: int, task: str, job: str, n: int, branches: int,
            prev: list[str], t: datetime) -> dict:
    it, br = divmod(n, branches)
    status = rng.choices(STATUSES, WEIGHTS)[0]
    if n == 0:  # program 0, as the search stores it: the reference, "ref", 1.0x by definition
        it, br, status = -1, 0, "correct"
    correct = status in ("faster", "correct")
    speed = rng.uniform(1.01, 3.0) if status == "faster" else rng.uniform(0.3, 1.0) if correct else -1.0
    speed = 1.0 if n == 0 else speed
    kid = f"{run_id:06x}{n:06x}{rng.getrandbits(32):08x}"
    code = f"@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr = {64 << (n % 4)}):\n    pass  # {n}"
    return dict(
        id=kid, run_id=run_id, task_name=task, job_name=job, iteration=it, branch=br,
        label="ref" if n == 0 else f"i{it}-b{br}",
        parent_id=rng.choice(prev) if prev else None, inspiration_ids=prev[-2:], is_program0=n == 0,
        origin="llm", model="openai/gpt-5", hardware="NVIDIA H200 (sm_90)", gpu_arch="sm_90",
        backend="triton", language="python", description="fuse + vectorize, BLOCK sweep",
        prompt=PROMPT, answer=ANSWER.format(code=code), reference_code=REFERENCE, code=code,
        user_instructions="", status=status, compiled=status not in ("compile_error", "build_timeout"),
        correctness=correct, runtime=0.1 / speed if correct else -1.0,
        runtime_stats={"median": 0.1 / speed, "mean": 0.1 / speed, "std": 0.001, "min": 0.09 / speed,
                       "max": 0.12 / speed, "cv": 0.01, "n_trials": 100, "unit": "ms",
                       "reference": {"median": 0.1, "mean": 0.1, "std": 0.001, "min": 0.09,
                                     "max": 0.12, "cv": 0.01, "n_trials": 100}} if correct else {},
        runtime_improvement=speed, improve_over_compile=speed * 0.8 if correct else -1.0,
        perf_score=4 if status == "faster" else 3 if correct else 0, score=(3 + speed) if correct else 0.0,
        features={"tile": n % 8, "warps": n % 6},  # the archive's two dimensions
        profiler_data={"estimate": True, "source": "analytic", "flops": 1e9, "bytes": 4e8,
                       "arithmetic_intensity": 2.5, "gflops": 1e9 * speed / 1e5, "achieved_gbs": 4e8 * speed / 1e5,
                       "peak_bandwidth_gbs": 4800.0, "dram_throughput_pct": 70.0} if correct else {},
        meta={"timing_method": "do_bench"},
        eval_log=("error: expected ';' before '}' token\n" if status == "compile_error" else "ok\n") * 4,
        generation_log="", tokens_used=3000, generation_s=4.2, evaluation_s=1.3, created_at=t, evaluated_at=t)


def build(path: Path, total: int = TOTAL, seed: int = 0) -> dict:
    """Write the benchmark database (Core executemany in large transactions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _fast(conn, _rec):  # a throwaway file: durability does not matter while building
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")

    Base.metadata.create_all(engine)
    rng, t0 = random.Random(seed), datetime(2026, 1, 1, tzinfo=timezone.utc)
    jobs = [(BIG_JOB, BIG_N, BIG_BRANCHES)]
    rest, i = total - BIG_N, 0
    while rest > 0:
        n = min(JOB_SIZE, rest)
        jobs.append(((f"task_{i % 200:03d}", f"job_{i:05d}"), n, 4))
        rest, i = rest - n, i + 1
    started = time.perf_counter()
    written = 0
    with engine.begin() as conn:
        for run_id, ((task, job), n, branches) in enumerate(jobs, start=1):
            t = t0 + timedelta(minutes=30 * run_id)
            conn.execute(Run.__table__.insert(), [dict(
                id=run_id, task_name=task, job_name=job, backend="triton", gpu_arch="sm_90",
                hardware="NVIDIA H200 (sm_90)", generator="llm", models=["openai/gpt-5"],
                config={"branches_per_iteration": branches}, task_path="", status="completed", error="",
                started_at=t, finished_at=t + timedelta(minutes=n // 10))])
            batch, prev = [], []
            for k in range(n):
                row = _kernel(rng, run_id, task, job, k, branches, prev, t + timedelta(seconds=k))
                batch.append(row)
                if row["branch"] == branches - 1:
                    prev = [r["id"] for r in batch[-branches:]]
            conn.execute(Kernel.__table__.insert(), batch)
            written += n
            if run_id % 200 == 0:
                print(f"  {written:,} kernels ({time.perf_counter() - started:.0f} s)", flush=True)
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return {"kernels": written, "jobs": len(jobs), "build_s": round(time.perf_counter() - started, 1),
            "size_mb": round(path.stat().st_size / 2**20, 1)}


def _machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    chrome = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout.strip()
    import sqlite3

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "browser": chrome, "platform": platform.platform(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}  # the machine is shared: say how busy


def _graph_ready_js(n: int) -> str:
    # cytoscape keeps its instance on the container (_cyreg); wait for every node, then a paint
    return ("() => { const els = [document.getElementById('job-graph'), "
            "...document.querySelectorAll('#job-graph *')];"
            "for (const el of els) { if (el && el._cyreg && el._cyreg.cy && "
            f"el._cyreg.cy.nodes().length >= {n}) return true; }} return false; }}")


# Zooming in from the fitted overview (where a job this large holds no edges) to `level` about the
# centre: ms until cytoscape holds the edges in view and two frames more have been drawn.
_ZOOM_IN_JS = """async (level) => {
    const root = document.getElementById('job-graph');
    const cy = [root, ...root.querySelectorAll('*')].find(e => e._cyreg && e._cyreg.cy)._cyreg.cy;
    const raf = () => new Promise(r => requestAnimationFrame(r));
    const fitted = cy.zoom(), pan = {...cy.pan()};  // a copy: cy.pan() is its live object
    const t0 = performance.now();
    cy.zoom({level: level, renderedPosition: {x: cy.width() / 2, y: cy.height() / 2}});
    while (cy.edges().length === 0 && performance.now() - t0 < 10000) { await raf(); }
    await raf(); await raf();
    const ms = performance.now() - t0, edges = cy.edges().length;
    cy.viewport({zoom: fitted, pan: pan});
    while (cy.edges().length > 0) { await raf(); }
    await raf();
    return [Math.round(ms), edges];
}"""
ZOOM_LEVELS = (0.2, 1.0)  # where a large job's edges appear (graph.js EDGE_ZOOM), and a close-up


def measure(path: Path, repeats: int = 5) -> dict:
    """Time the listing query and both pages in headless Chromium."""
    from playwright.sync_api import sync_playwright

    from kernelcode.dashboard import job_url, serve_in_background
    from kernelcode.dashboard.queries import list_jobs
    from kernelcode.dashboard.source import DataSource
    from openkernel.store import open_readonly

    engine = open_readonly(path)
    with engine.connect() as conn:
        n_kernels = conn.execute(select(func.count()).select_from(Kernel.__table__)).scalar_one()
    out: dict = {"kernels_in_db": n_kernels, "query_s": {}, "browser_s": {}}
    for name, search in (("runs_page", ""), ("runs_search", "task_01")):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            list_jobs(engine, search)
            times.append(time.perf_counter() - t)
        out["query_s"][name] = [round(x, 4) for x in times]
    src = DataSource(path)
    t = time.perf_counter()
    data = src.job(*BIG_JOB)
    out["query_s"]["job_5000_load"] = round(time.perf_counter() - t, 4)
    from kernelcode.dashboard.graph import graph_elements

    t = time.perf_counter()
    elements = graph_elements(data.rows, data.best_id)
    out["query_s"]["job_5000_elements"] = round(time.perf_counter() - t, 4)
    out["graph_payload_kb"] = round(len(json.dumps(elements)) / 1024)

    base = serve_in_background(path)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        runs, graph, painted, marks = [], [], [], []
        zoom_in, zoom_edges = {}, {}
        for _ in range(repeats):
            t = time.perf_counter()
            page.goto(base + "/")
            page.wait_for_selector("#runs-listing", timeout=30000)
            runs.append(time.perf_counter() - t)
            t = time.perf_counter()
            page.goto(job_url(base, *BIG_JOB))
            page.wait_for_function(_graph_ready_js(BIG_N), timeout=60000, polling="raf")
            graph.append(time.perf_counter() - t)  # every node is in cytoscape
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            painted.append(time.perf_counter() - t)  # ... and a frame with them has been drawn
            marks.append(page.evaluate("() => Object.fromEntries(performance.getEntriesByType('mark')"
                                       ".map(m => [m.name, Math.round(m.startTime)]))"))
            for level in ZOOM_LEVELS:  # after the judged figure: what zooming in costs
                ms, edges = page.evaluate(_ZOOM_IN_JS, level)
                zoom_in.setdefault(str(level), []).append(round(ms / 1000, 3))
                zoom_edges[str(level)] = edges
        page.screenshot(path="/tmp/dashboard_scale_graph.png")
        browser.close()
    out["browser_s"]["runs_page"] = [round(x, 3) for x in runs]
    out["browser_s"]["graph_5000"] = [round(x, 3) for x in graph]
    out["browser_s"]["graph_5000_painted"] = [round(x, 3) for x in painted]
    out["graph_draw_marks_ms"] = marks  # in-page, from navigation start: elements drawn by assets/graph.js
    out["browser_s"]["graph_5000_zoom_in"] = zoom_in  # zoom level -> seconds per repeat, not judged
    out["graph_5000_zoom_in_edges"] = zoom_edges  # edges cytoscape held at that zoom
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", type=Path, default=Path("/tmp/openkernel_bench/kernels_1m.sqlite3"))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--kernels", type=int, default=TOTAL)
    p.add_argument("--quiet-load", type=float, default=1.2, help="wait for a 1-minute load below this")
    p.add_argument("--quiet-wait", type=float, default=600.0, help="... for at most this many seconds")
    args = p.parse_args()
    info = {}
    if args.rebuild or not args.db.exists():
        print(f"building {args.db} ({args.kernels:,} kernels) ...", flush=True)
        info = build(args.db, args.kernels)
        print(info, flush=True)
    waited, t = 0.0, time.monotonic()
    while os.getloadavg()[0] >= args.quiet_load and time.monotonic() - t < args.quiet_wait:
        time.sleep(5)
    waited = round(time.monotonic() - t)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    print(f"load {load_at_start} after waiting {waited} s", flush=True)
    figures = measure(args.db)
    # the first repeat pays for a cold browser cache (bundles parsed for the first time): the
    # targets are judged on the median of the repeats, and every repeat is reported
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    worst_runs = max(med(figures["browser_s"]["runs_page"]), max(figures["query_s"]["runs_page"]))
    worst_graph = med(figures["browser_s"]["graph_5000_painted"])
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {**_machine(), "loadavg_at_start": load_at_start, "waited_for_quiet_s": waited,
                    "quiet_load": args.quiet_load},
        "database": {"path": str(args.db), "size_mb": round(args.db.stat().st_size / 2**20, 1), **info},
        "figures": figures,
        "targets": {"runs_page_s": 1.0, "graph_5000_s": 2.0},
        "judged_s": {"runs_page": round(worst_runs, 3), "graph_5000": round(worst_graph, 3)},
        "pass": {"runs_page": worst_runs < 1.0, "graph_5000": worst_graph < 2.0},
        "notes": "browser times run from navigation start (page.goto) to the listing in the DOM / all "
                 "5,000 nodes in cytoscape (graph_5000) / the next two animation frames, so cytoscape "
                 "has drawn them fitted (graph_5000_painted, the judged figure; a job over "
                 "graph.EDGE_BUDGET kernels draws no edges in that overview, where they are sub-pixel, and "
                 "adds those in view on zooming in: graph_5000_zoom_in, in-page seconds from a zoom about "
                 "the centre to the edges held and drawn, not judged); the first repeat "
                 "includes a cold browser cache and the server's first load of the job; judged on "
                 "medians; query_s are server-side only; loadavg (1, 5, 15 min) at start and end.",
    }
    out = ROOT / "benchmarks" / "results" / "dashboard_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
