"""The dashboard's memory heatmap from a real Nsight Compute profile (issue 25).

Two steps, since the GPU machine may have no browser:

    # on a GPU with ncu (benchmarks/h200_session.sh memory-heatmap): a small GELU job whose
    # correct candidates are profiled with eval_config.profile_memory; the database and the
    # tables land in OUT
    python benchmarks/memory_heatmap.py run --out OUT
    # anywhere with Chromium (this repository's CPU machines): the job page's memory tab,
    # served from that database, as a screenshot
    python benchmarks/memory_heatmap.py screenshot --db OUT/kernels.sqlite3 --png docs/memory-heatmap.png
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK, JOB = "gelu", "memory-heatmap"


def run(out: Path) -> int:
    import openkernel
    from openkernel import events as ev
    from openkernel.store import Store

    out.mkdir(parents=True, exist_ok=True)
    db = out / "kernels.sqlite3"
    finished, tables = None, []
    scratch = tempfile.mkdtemp(prefix="memory-heatmap-")  # not under OUT: it all comes back
    for event in openkernel.optimize(ROOT / "examples" / "gelu", overrides=[
            f"paths.kernels_db_path={db}", f"paths.scratch_dir={scratch}",
            f"job_name={JOB}", "max_iters=1", "branches_per_iteration=2", "search.seed=0",
            "eval_config.profile_memory=true"]):
        if isinstance(event, ev.CandidateEvaluated):
            prof = event.program.kernel_exec_result.profiler_data or {}
            memory = prof.get("memory_tables") or {}
            print(event.label, event.status.value, "memory cells:", len(memory.get("cells", [])),
                  memory.get("error", ""), flush=True)
            if memory.get("cells"):
                tables.append({"label": event.label, "id": event.program.id, **memory})
        elif isinstance(event, ev.RunFinished):
            finished = event
    store = Store(db)
    store.checkpoint()  # the one file holds everything (it travels back from the GPU machine)
    store.close()
    (out / "memory_tables.json").write_text(json.dumps(tables, indent=2))
    print(f"{finished.reason if finished else 'no end'}: {len(tables)} kernel(s) with memory "
          f"tables in {out / 'memory_tables.json'}")
    return 0 if tables else 1


def screenshot(db: Path, png: Path) -> int:
    from playwright.sync_api import sync_playwright

    from kernelcode.dashboard import job_url, serve_in_background

    base = serve_in_background(db)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(60_000)
        page.goto(job_url(base, TASK, JOB))
        page.click(".tab >> text=Memory heatmap")
        page.wait_for_selector("#memory-body .js-plotly-plot")
        page.wait_for_timeout(1000)  # the plot's own transition
        png.parent.mkdir(parents=True, exist_ok=True)
        page.locator("#panel-memory").screenshot(path=str(png))
        browser.close()
    print(f"wrote {png}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="step", required=True)
    r = sub.add_parser("run", help="profile a small job's kernels (GPU with ncu)")
    r.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("screenshot", help="the memory tab of that job, as a PNG (Chromium)")
    s.add_argument("--db", type=Path, required=True)
    s.add_argument("--png", type=Path, default=ROOT / "docs" / "memory-heatmap.png")
    args = p.parse_args()
    return run(args.out) if args.step == "run" else screenshot(args.db, args.png)


if __name__ == "__main__":
    sys.exit(main())
