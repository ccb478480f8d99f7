"""Inductor's kernels as a kernel family: torch.compile's own code, as a candidate to keep.

On a GPU the probe captures what Inductor writes for the reference (``TaskProbe.inductor``);
this family turns it into a standalone module (rewrite.py, render.py) whose tunables are the
launch configs Inductor's autotuner would have tried, one tunable per kernel (``K<n>``: which
config). Inductor specialises its code to each input's rank and dtype, so the probe captures
once per input signature of the benchmark and held-out sets; with several, the module holds
every signature's kernels (named apart, ``K<n>`` numbered across them) and its forward runs the
wrapper of its inputs' signature. Those captures are shape-generic (dynamic sizes: looped
reductions, runtime sizes), while torch.compile's default mode specialises on the first call's
shapes; so the probe also captures the benchmark inputs at their own sizes, and the module runs
those kernels when its inputs have exactly the benchmark's shapes and dtypes, the shape-generic
ones on any other (never specialised to a held-out shape). The offline generator offers it
beside the compiler's family (odd branches of the first iteration start from it; a seed's
children stay seeds), and instead of a refusal where the compiler has no kernel: on a GPU, every
task Inductor compiles has a candidate.
"""

from __future__ import annotations

from openkernel.aten_ops import compute_ops, torch_covers
from openkernel.generators.compiler.replay import CUDA_GRAPH, offered
from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.seeds import beyond
from openkernel.generators.seeds.render import render, render_signatures
from openkernel.generators.seeds.rewrite import (
    StaticSeed,
    Unsupported,
    _prefix,
    describe,
    parse,
    shapes,
)
from openkernel.records import TaskProbe
from openkernel.task import Task


class InductorSeed(Family):
    name = "inductor_seed"
    summary = ("torch.compile's own Triton kernels (Inductor's output, rewritten standalone), "
               "launch configs chosen among Inductor's")

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        found = [c for c in probe.inductor or () if "code" in c]
        captures = [c for c in found if "shapes" not in c]  # shape-generic, one per signature
        static = next((c for c in found if "shapes" in c), None)  # at the benchmark's sizes
        if not captures:
            return None
        if backend != "triton":
            return "the inductor_seed family is Triton only"
        needed = _signatures(probe)
        own = [c.get("signature") or (needed[0] if needed else []) for c in captures]
        single = len(captures) == 1 and all(sig == own[0] for sig in needed)
        try:  # one signature covering every input set: no dispatch
            seeds, left = ([(own[0], parse(captures[0], "", 0 if static else None))], "") \
                if single else _parse_each(captures, own)
        except (Unsupported, SyntaxError, ValueError) as err:
            return f"Inductor's output cannot be rewritten: {err}"
        extern = [e for _, seed in seeds for e in seed.extern]
        if extern and torch_covers(compute_ops(probe.aten_ops), set(extern)):
            # e.g. a lone convolution: Inductor keeps cuDNN and adds the bias in Triton; the
            # integrity check would flag it (torch_compute), so it is no candidate
            return (f"Inductor's output is the reference's own library call "
                    f"({', '.join(dict.fromkeys(extern))}) with Triton kernels around it, "
                    "a PyTorch computation rather than a kernel")
        kernels = [k for _, seed in seeds for k in seed.kernels]
        fixed = None
        if static is not None:
            try:
                fixed = StaticSeed(static["shapes"], static.get("signature") or own[0],
                                   parse(static, "_static", len(kernels)))
                kernels += fixed.seed.kernels
            except (Unsupported, SyntaxError, ValueError) as err:
                left = "; ".join(filter(None, [left, f"the benchmark shapes' own: {err}"]))
        fitted = InductorSeed()
        fitted.tunables = tuple(
            Tunable(_prefix(k), tuple(range(len(k.configs))), None,
                    f"{k.name}: which of Inductor's {len(k.configs)} launch configs "
                    f"({k.kind})") for k in kernels)
        fitted.starts = tuple({t.name: min(i, len(t.choices) - 1) for t in fitted.tunables}
                              for i in range(max((len(t.choices) for t in fitted.tunables),
                                                 default=1)))
        # past Inductor's configs: scales its children move, Inductor's own (1) to start
        past = tuple(t for k in kernels for t in beyond.tunables(k))
        fitted.tunables += past
        fitted.starts = tuple({**p, **{t.name: 1 for t in past}} for p in fitted.starts)
        if offered(probe, len(seeds[0][1].kernels) + len(seeds[0][1].extern)):
            # replayed first, then launched one by one (CUDA graphs: compiler/replay.py)
            fitted.tunables += (CUDA_GRAPH,)
            fitted.starts = tuple({**p, CUDA_GRAPH.name: 1 - k % 2}
                                  for k, p in enumerate(fitted.starts * 2))
        label = (f"Inductor's {len(kernels)} Triton kernel{'s' if len(kernels) > 1 else ''}"
                 + (f" around {', '.join(dict.fromkeys(extern))}" if extern else ""))
        spec = {"seed": seeds[0][1], "label": label, "trace": probe.trace}
        why = f"{seeds[0][1].made}: {label}"
        if not single:
            missing = [describe(sig) for sig in needed if sig not in [s for s, _ in seeds]]
            spec["seeds"] = seeds
            why += (f", for the input signatures {'; '.join(describe(s) for s, _ in seeds)}"
                    + (f" (none for {'; '.join(missing)}: the candidate says so there)"
                       if missing else ""))
        if fixed is not None:
            spec.update(seeds=seeds, static=fixed, single=single)
            why += (f"; {len(fixed.seed.kernels)} of them specialised to the benchmark shapes "
                    f"({shapes(fixed.shapes)}), run on those alone")
        return Match(fitted, why + (f"; left out: {left}" if left else ""), spec)

    def clean(self, params: dict, interpreter: bool, backend: str) -> dict:
        # a scale a parent does not name (stored before it existed) is Inductor's own: 1
        unset = {t.name: 1 for t in self.tunables
                 if t.name.endswith(beyond.SUFFIXES) and t.name not in params}
        return super().clean({**params, **unset}, interpreter, backend)

    def describe(self, match: Match, params: dict) -> str:
        return match.spec["label"] + ("; replayed as a CUDA graph"
                                      if params.get(CUDA_GRAPH.name) else "")

    def render(self, match: Match, params: dict, backend: str) -> str:
        if "static" in match.spec:
            return render_signatures(match.spec["seeds"], params, match.spec["trace"],
                                     match.spec["static"], not match.spec["single"])
        if "seeds" in match.spec:
            return render_signatures(match.spec["seeds"], params, match.spec["trace"])
        return render(match.spec["seed"], params, match.spec["trace"])


def _signatures(probe: TaskProbe) -> list[list]:
    """The distinct input signatures (each tensor input's ``[rank, dtype]``) of the benchmark
    inputs (first) and the held-out sets, as the probe recorded them."""
    out: list[list] = []
    for shapes, dtypes in [(probe.input_shapes, probe.input_dtypes),
                           *((h.get("shapes", []), h.get("dtypes", [])) for h in probe.heldout)]:
        sig = [[len(s), d.removeprefix("torch.")] for s, d in zip(shapes, dtypes)]
        if shapes and sig not in out:
            out.append(sig)
    return out


def _parse_each(captures: list[dict], own: list[list]) -> tuple[list, str]:
    """Each signature's seed, kernels named apart; a held-out signature's that cannot be
    rewritten is left out (the benchmark inputs' must be)."""
    seeds, left = [], []
    for n, (captured, sig) in enumerate(zip(captures, own)):
        try:
            seeds.append((sig, parse(captured, f"_sig{n}",
                                     sum(len(s.kernels) for _, s in seeds))))
        except (Unsupported, SyntaxError, ValueError) as err:
            if n == 0:
                raise
            left.append(f"{describe(sig)}: {err}")
    return seeds, "; ".join(left)
