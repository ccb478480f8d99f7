"""Which KernelBench problems the offline generator proposes a kernel for (no GPU, no data).

    python benchmarks/offline_coverage.py ~/KernelBench/KernelBench --out coverage.json

Each problem's reference is built and traced on the meta device (shapes only, nothing
computed, so level 3's networks trace in seconds), then the offline generator is asked, as the
search asks it, whether a template fits the trace. The table counts, per level, the problems
with a proposal and lists every refusal with the generator's own reason (the ops no template
covers). A proposal is not a verdict: whether the kernel is correct is the evaluator's to say
(``openkernel bench``); this measures what the generator attempts. Problems whose forward
cannot run on meta tensors (``.item()`` on data, a missing module) are listed as not traced.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import signal
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import torch

from openkernel.bench.problems import discover
from openkernel.evaluation.worker.trace import trace_forward
from openkernel.generators.offline import OfflineGenerator
from openkernel.records import TaskProbe
from openkernel.task import load_task

PREFIX = "The offline generator has no kernel family for this task: "
SUFFIX = " Configure a model under `inference` to search it."


class _Timeout(BaseException):  # not an Exception: the trace's fallbacks must not swallow it
    pass


def _alarm(*_):
    raise _Timeout()


def judge(path: Path, timeout_s: int) -> tuple[str, str]:
    """("proposed" | "refused" | "not traced", the reason)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        spec = importlib.util.spec_from_file_location("problem", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with torch.device("meta"):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs()).eval()
            inputs = module.get_inputs()
        trace = trace_forward(model, inputs)
        if trace is None:
            return "not traced", "no trace"
        probe = TaskProbe(ok=True, aten_ops=list(trace.top_ops), trace=trace)
        why = OfflineGenerator().supports(load_task(path), probe, "triton")
    except _Timeout:
        return "not traced", f"over {timeout_s} s"
    except Exception as err:  # noqa: BLE001 - a reference meta tensors cannot run
        return "not traced", f"{type(err).__name__}: {str(err)[:160]}"
    finally:
        signal.alarm(0)
    if why is None:
        return "proposed", ""
    return "refused", why.removeprefix(PREFIX).removesuffix(SUFFIX)[:400]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="KernelBench level folders (or their parent)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per problem")
    args = ap.parse_args()
    problems, _ = discover(args.paths)
    rows = []
    for p in problems:
        outcome, why = judge(p.path, args.timeout)
        rows.append({"name": p.name, "outcome": outcome, "why": why})
        print(f"{p.name:70} {outcome:10} {why[:100]}", flush=True)
    levels: dict[str, Counter] = {}
    for r in rows:
        level = r["name"].split("/")[0] if "/" in r["name"] else "-"
        levels.setdefault(level, Counter())[r["outcome"]] += 1
    summary = {lvl: {"problems": sum(c.values()), **dict(c)} for lvl, c in sorted(levels.items())}
    for lvl, c in summary.items():
        print(f"{lvl}: {c.get('proposed', 0)} of {c['problems']} proposed, "
              f"{c.get('refused', 0)} refused, {c.get('not traced', 0)} not traced")
    Path(args.out).write_text(json.dumps({
        "benchmark": "offline generator coverage of KernelBench (meta-device traces)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}), CPU only",
        "torch": torch.__version__, "python": sys.version.split()[0],
        "levels": summary, "problems": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
