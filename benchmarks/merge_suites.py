"""Issue 23's table over several bench runs: each problem's latest result wins.

    python3 benchmarks/merge_suites.py results/a.json results/b.json ... [--json OUT]

The files are `openkernel bench --json` outputs, oldest first; a problem in a later file
replaces its line from an earlier one. Prints the correct count, the geomean over
torch.compile by group (KernelBench level, or "llm" for benchmarks/llm_kernels), how many
are at least torch.compile's speed (the bench's tie rule: faster or a tie) and how many
faster, then the problems still slower with their ratio (library-bound ones say so).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path


def group(name: str) -> str:
    return name.split("/")[0] if name.startswith("level") else "llm"


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def merge(paths: list[Path]) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for path in paths:
        data = json.loads(path.read_text())
        for p in data["problems"]:
            if p.get("status") not in ("not started", "skipped"):  # (interrupted: judged so far)
                latest[p["name"]] = {**p, "file": path.name}
    return latest


def verdict(p: dict) -> str:
    """faster, tie or slower against torch.compile; runs older than the bench's tie rule
    (no vs_compile) by their ratio, 2% either way being a tie."""
    if p.get("vs_compile"):
        return p["vs_compile"]
    r = p.get("over_compile") or 0
    return "faster" if r > 1.02 else "tie" if r >= 0.98 else "slower"


def table(latest: dict[str, dict]) -> dict:
    rows = list(latest.values())
    ratios = {p["name"]: p["over_compile"] for p in rows if p.get("correct") and p.get("over_compile")}
    groups = sorted({group(n) for n in latest})
    at_least = [p["name"] for p in rows if verdict(p) in ("faster", "tie")]
    faster = [p["name"] for p in rows if verdict(p) == "faster"]
    return {
        "problems": len(rows), "correct": sum(bool(p.get("correct")) for p in rows),
        "geomean_compile": geomean(list(ratios.values())),
        "geomean_compile_by_group": {g: geomean([r for n, r in ratios.items() if group(n) == g])
                                     for g in groups},
        "at_least_compile": len(at_least), "faster": len(faster),
        "slower": sorted(({"name": p["name"], "over_compile": p.get("over_compile"),
                           "library_bound": p.get("library_bound") or "", "file": p["file"]}
                          for p in rows if p["name"] not in at_least),
                         key=lambda s: s["over_compile"] or 0),
        # every problem's line and the run it came from (which commit judged it)
        "rows": [{"name": p["name"], "group": group(p["name"]), "correct": bool(p.get("correct")),
                  "over_compile": p.get("over_compile"), "verdict": verdict(p),
                  "library_bound": p.get("library_bound") or "", "file": p["file"]}
                 for p in sorted(rows, key=lambda p: p["name"])],
        "from_files": dict(Counter(p["file"] for p in rows)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    t = table(merge(args.files))
    n = t["problems"]
    print(f"{n} problems, {t['correct']} correct; geomean over torch.compile "
          f"{t['geomean_compile']:.3f}x (" + ", ".join(
              f"{g} {v:.3f}x" for g, v in t["geomean_compile_by_group"].items() if v) + ")")
    print(f"at least torch.compile's speed: {t['at_least_compile']} of {n} "
          f"({100 * t['at_least_compile'] / n:.0f}%); faster: {t['faster']} "
          f"({100 * t['faster'] / n:.0f}%)")
    print("lines from: " + ", ".join(f"{f} {n}" for f, n in t["from_files"].items()))
    for s in t["slower"]:
        bound = f" (library-bound: {s['library_bound']})" if s["library_bound"] else ""
        print(f"  slower: {s['name']} {s['over_compile'] or 0:.3f}x{bound}  [{s['file']}]")
    if args.json:
        args.json.write_text(json.dumps(t, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
