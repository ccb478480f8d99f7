"""Where a run's time goes, as it happens: every event of ``openkernel.optimize`` with the
seconds since the start (the candidates' phases, their verdicts, the run's end).

    python benchmarks/event_times.py TASK [TASK ...] [--set KEY=VALUE ...]

Several tasks run one after the other in this one process, as ``openkernel bench`` runs a
suite's problems (spare workers carried from one to the next).

A problem that runs past its wall shows which phase each candidate was in when it was cut off
(in-flight candidates are not stored, so the database cannot say).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import openkernel


_LONG = ("code", "prompt", "answer", "result", "program", "text", "reference_code", "skills")


def _fields(event) -> str:
    out = []
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if f.name in _LONG or value in (None, "", [], {}):
            continue
        text = str(value).replace("\n", " ")
        out.append(f"{f.name}={text[:100]}")
    return " ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="+")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    for task in args.tasks:
        print(f"{time.monotonic() - t0:8.2f}  {task}", flush=True)
        for event in openkernel.optimize(task, overrides=args.set):
            print(f"{time.monotonic() - t0:8.2f}  {type(event).__name__:22} {_fields(event)}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
