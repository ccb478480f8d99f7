"""A held-out sample of KernelBench problems no bench here has run (issue 57).

Draws, with a fixed seed, a number of problems per level among those whose name (``levelN/M``)
appears in no file this repository tracks (results, tables, problem lists, tests, docs), and
copies them out of a KernelBench git directory into DEST (git-ignored). Only counts are
printed: the names are for the bench's JSON once the sample is measured, not for tuning.

    python benchmarks/held_out.py /work/.mirror/ScalingIntelligence+KernelBench/repo .kb57
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
from pathlib import Path

# Issue 57's sample: the files of this commit say what was run before it was drawn (session
# 37; sha256 of its sorted names 0cd2cd138deba7e9e69c030c2f38d7f9e8c86a5cf9ce0d56ccd775b574f901fa)
AT = "0b4342794aa731f3836fb5bce50c2c3d4e6b356d"


def named_here(root: Path, at: str = "HEAD") -> set[tuple[int, int]]:
    """Every (level, number) a file of the repository's commit ``at`` names, but for the CPU's
    offline coverage (benchmarks/results/cpu_*: whether a kernel is proposed for each of the
    250 under the interpreter; nothing timed on a GPU, nothing tuned). A commit, not the
    working tree: the same draw on any checkout, however many files name problems later."""
    out = subprocess.run(["git", "-C", str(root), "grep", "-I", "-h", "-o", "-E",
                          r"level[1-4]/[0-9]+", at, "--", ".", ":!benchmarks/results/cpu_*"],
                         capture_output=True, text=True).stdout
    return {(int(a), int(b)) for a, b in re.findall(r"level([1-4])/(\d+)", out)}


def problems(git_dir: str) -> list[str]:
    out = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", "HEAD",
                          "KernelBench"], capture_output=True, text=True, check=True).stdout
    return [p.removeprefix("KernelBench/") for p in out.split()
            if re.match(r"KernelBench/level[1-3]/\d+_.*\.py$", p)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir")
    ap.add_argument("dest")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--at", default=AT, help="the commit whose files say which problems were run "
                    f"(default {AT}: issue 57's sample, drawn before its GPU measurement)")
    ap.add_argument("--per-level", default="1:14,2:14,3:8", help="level:count,...")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    taken = named_here(root, args.at)
    rng = random.Random(args.seed)
    chosen = []
    for part in args.per_level.split(","):
        level, count = map(int, part.split(":"))
        pool = sorted(p for p in problems(args.git_dir) if p.startswith(f"level{level}/")
                      and (level, int(p.split("/")[1].split("_")[0])) not in taken)
        chosen += rng.sample(pool, min(count, len(pool)))
        print(f"level {level}: {min(count, len(pool))} drawn of {len(pool)} no bench here named")
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    for rel in chosen:
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(subprocess.run(["git", "--git-dir", args.git_dir, "show",
                                         f"HEAD:KernelBench/{rel}"], capture_output=True,
                                        check=True).stdout)
    names = "\n".join(sorted(chosen))
    digest = hashlib.sha256(names.encode()).hexdigest()
    (dest / "sample.json").write_text(json.dumps({"seed": args.seed, "per_level": args.per_level,
                                                  "at": args.at, "excluded": len(taken),
                                                  "sha256": digest, "problems": chosen}))
    print(f"sha256 of the sorted names: {digest}")
    print(f"{len(chosen)} problems in {dest} (names in {dest / 'sample.json'}: not for tuning)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
