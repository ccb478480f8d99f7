"""Inductor's kernels as a kernel family: torch.compile's own code, as a candidate to keep.

On a GPU the probe captures what Inductor writes for the reference (``TaskProbe.inductor``);
this family turns it into a standalone module (rewrite.py, render.py) whose tunables are the
launch configs Inductor's autotuner would have tried, one tunable per kernel (``K<n>``: which
config). The offline generator offers it beside the compiler's family (odd branches of the
first iteration start from it; a seed's children stay seeds), and instead of a refusal where
the compiler has no kernel: on a GPU, every task Inductor compiles has a candidate.
"""

from __future__ import annotations

from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.seeds.render import render
from openkernel.generators.seeds.rewrite import Unsupported, _prefix, parse
from openkernel.records import TaskProbe
from openkernel.task import Task


class InductorSeed(Family):
    name = "inductor_seed"
    summary = ("torch.compile's own Triton kernels (Inductor's output, rewritten standalone), "
               "launch configs chosen among Inductor's")

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        captured = probe.inductor
        if not captured or "code" not in captured:
            return None
        if backend != "triton":
            return "the inductor_seed family is Triton only"
        try:
            seed = parse(captured)
        except (Unsupported, SyntaxError, ValueError) as err:
            return f"Inductor's output cannot be rewritten: {err}"
        fitted = InductorSeed()
        fitted.tunables = tuple(
            Tunable(_prefix(k), tuple(range(len(k.configs))), None,
                    f"{k.name}: which of Inductor's {len(k.configs)} launch configs "
                    f"({k.kind})") for k in seed.kernels)
        fitted.starts = tuple({t.name: min(i, len(t.choices) - 1) for t in fitted.tunables}
                              for i in range(max((len(t.choices) for t in fitted.tunables),
                                                 default=1)))
        label = (f"Inductor's {len(seed.kernels)} Triton kernel"
                 f"{'s' if len(seed.kernels) > 1 else ''}"
                 + (f" around {', '.join(dict.fromkeys(seed.extern))}" if seed.extern else ""))
        return Match(fitted, f"{seed.made}: {label}", {"seed": seed, "label": label,
                                                        "trace": probe.trace})

    def render(self, match: Match, params: dict, backend: str) -> str:
        return render(match.spec["seed"], params, match.spec["trace"])
