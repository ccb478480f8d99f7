"""Where a Triton kernel's first launch goes in a worker with an empty Triton cache.

Every worker points TRITON_CACHE_DIR at its candidate's own build cache, so besides the
kernel's compilation it builds Triton's host-side C modules with the system compiler: the
driver's utilities (``cuda_utils``, once a process) and, on Triton releases that generate one, a
launcher per kernel signature. Each case runs in a fresh process: with an empty cache, then
again over the same cache (the C modules and the kernel found there).

    python benchmarks/triton_first_launch.py --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import json, time, sys
t0 = time.perf_counter()
import torch, triton, triton.language as tl
from triton.runtime import driver
imports = time.perf_counter() - t0
torch.empty(1, device="cuda"); torch.cuda.synchronize()
spent = {"compile": 0.0, "launcher": 0.0}
import triton.compiler as tc
_compile = tc.compile
def compile(*a, **k):
    t = time.perf_counter()
    try:
        return _compile(*a, **k)
    finally:
        spent["compile"] += time.perf_counter() - t
tc.compile = compile
t = time.perf_counter()
active = driver.active
utils = active.utils
utils_s = time.perf_counter() - t
cls = active.launcher_cls
_init = cls.__init__
def init(self, *a, **k):
    t = time.perf_counter()
    try:
        return _init(self, *a, **k)
    finally:
        spent["launcher"] += time.perf_counter() - t
cls.__init__ = init

@triton.jit
def scale(x, y, n, f, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n) * f, mask=i < n)

@triton.jit
def add3(a, b, c, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(a + i, mask=m) + tl.load(b + i, mask=m) + tl.load(c + i, mask=m), mask=m)

x = torch.randn(1 << 20, device="cuda"); y = torch.empty_like(x)
firsts = []
for fn, args in ((scale, (x, y, x.numel(), 2.0)), (add3, (x, x, x, y, x.numel()))):
    t = time.perf_counter()
    fn[(x.numel() // 1024,)](*args, BLOCK=1024)
    torch.cuda.synchronize()
    firsts.append(round(time.perf_counter() - t, 3))
t = time.perf_counter()
scale[(x.numel() // 512,)](x, y, x.numel(), 2.0, BLOCK=512)  # same signature, new constant
torch.cuda.synchronize()
firsts.append(round(time.perf_counter() - t, 3))
print(json.dumps({"imports_s": round(imports, 3), "driver_utils_s": round(utils_s, 3),
                  "first_launches_s": firsts, "compile_s": round(spent["compile"], 3),
                  "launcher_s": round(spent["launcher"], 3), "triton": triton.__version__}))
'''


def run(cache: str) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": cache}
    script = os.path.join(cache, "..", os.path.basename(cache) + "_child.py")  # @jit reads its file
    with open(script, "w") as f:
        f.write(CHILD)
    out = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            for case in ("empty cache", "the same cache again"):
                row = {"case": case, "repeat": r, **run(cache)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "triton_first_launch", "rows": rows,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f, indent=1)


if __name__ == "__main__":
    main()
