"""What comparing a candidate's outputs costs (issue 22: a candidate's own time).

    python benchmarks/comparison_cost.py [--device cuda] [--elements N] [--out FILE]

Times the worker's own comparison (``correctness.compare_tensor``: a first pass as if every
element were finite, masked again only when one is not) against the masked pass alone (how
every block was compared before: NaN counted and infinities masked in each), and the precision
check's ``relative_error`` the same two ways, on a float32 output of N elements in blocks of the
worker's size; then the same output with one NaN in it (the unmasked pass, then the masked one).
On a GPU, then the one-pass kernel (``eval_config.fused_comparison``, ``compare_kernel.py``):
the time to make and check it as a worker does, and the same comparison through it (its verdict
and figures asserted equal to the PyTorch passes'). Each figure is the median of five calls,
synchronised on a GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time

import torch

from openkernel.evaluation.worker import correctness as c


def _median_s(fn, device: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 4)


def measure(device: str, elements: int, chunk: int) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    ref = torch.randn(elements // 1024, 1024, device=device, generator=gen)
    out = ref + 1e-4 * torch.randn(ref.shape, device=device, generator=gen)
    tol = c.tolerances_for(ref.dtype)
    nan = out.clone()
    nan[len(nan) // 2, 7] = float("nan")
    fig = {
        "compare_s": _median_s(lambda: c.compare_tensor(out, ref, tol, "o", chunk), device),
        "compare_masked_s": _median_s(lambda: c._sums(out, ref, tol, chunk, masked=True), device),
        "relative_error_s": _median_s(lambda: c.relative_error(out, ref, chunk), device),
        "relative_error_masked_s": _median_s(
            lambda: c._relative_sums(out, ref, chunk, None, masked=True), device),
        "compare_with_a_nan_s": _median_s(lambda: c.compare_tensor(nan, ref, tol, "o", chunk),
                                          device),
    }
    ok, msg, stats = c.compare_tensor(out, ref, tol, "o", chunk)
    assert ok and 0 < stats["rel_error"] < 1e-3, (msg, stats)
    assert "NaN" in c.compare_tensor(nan, ref, tol, "o", chunk)[1]
    fig["compare_speedup"] = round(fig["compare_masked_s"] / fig["compare_s"], 2)
    fig["relative_error_speedup"] = round(fig["relative_error_masked_s"] / fig["relative_error_s"], 2)
    if device == "cuda":
        import tempfile

        t0 = time.perf_counter()
        fig["one_pass"] = c.prepare(device, tempfile.mkdtemp())  # compiled: no machine cache
        fig["one_pass_prepare_s"] = round(time.perf_counter() - t0, 3)
        if c._kernel is not None:
            fused = c.compare_tensor(out, ref, tol, "o", chunk)
            assert fused[:2] == (ok, msg) and fused[2]["max_abs_error"] == stats["max_abs_error"]
            fig["compare_one_pass_s"] = _median_s(lambda: c.compare_tensor(out, ref, tol, "o", chunk),
                                                  device)
            fig["one_pass_speedup"] = round(fig["compare_s"] / fig["compare_one_pass_s"], 2)
            assert "NaN" in c.compare_tensor(nan, ref, tol, "o", chunk)[1]
            c._kernel = None
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--elements", type=int, default=1 << 24)
    parser.add_argument("--chunk", type=int, default=c.CHUNK)
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    fig = measure(args.device, args.elements, args.chunk)
    name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    result = {"benchmark": "comparison_cost", "device": name, "commit": commit, "elements": args.elements,
              "chunk": args.chunk, "torch_threads": torch.get_num_threads(), **fig,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
