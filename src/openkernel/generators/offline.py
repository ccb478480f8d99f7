"""The offline generator: real kernels from parametrised kernel families, no network.

It matches the task (the probe's traced graph, or its aten ops plus the reference's syntax
tree) against the families, then searches the family's tunables: curated start points in iteration 0 (one per
branch), afterwards a mutation of the parent's params, sometimes recombined with an
inspiration's. When no family fits it says so (``supports``) and never writes a fake kernel.

Params flow: every Proposal carries ``params = {"template": FAMILY, TUNABLE: value, ...}``; the
search loop stores them in ``Program.metadata["params"]``, which is where the next proposal
reads its parent's (and inspirations') params from.
"""

from __future__ import annotations

import threading

from openkernel.generators.base import Proposal, ProposalRequest, param_key
from openkernel.generators.compiler.families import FusedMatmul, FusedPointwise, FusedReduction
from openkernel.generators.family import Family, Match
from openkernel.generators.handwritten.common import op_bases
from openkernel.generators.handwritten.elementwise import Elementwise
from openkernel.generators.seeds.family import InductorSeed
from openkernel.records import TaskProbe
from openkernel.schemas import Program
from openkernel.task import Task
from openkernel.templating import Variant

# The hand-written elementwise family first (tuned for its one op, and the only one with CUDA
# C++), then the compiler's, written from the traced graph: they cover everything else (the
# hand-written softmax and matmul families they made redundant are retired).
FAMILIES: tuple[Family, ...] = (Elementwise(), FusedPointwise(), FusedReduction(), FusedMatmul())
SEED = InductorSeed()  # beside them where the probe captured Inductor's code (see _choose)


def _interpreter(request: ProposalRequest) -> bool:
    """Triton under TRITON_INTERPRET=1: prefer few, large programs (each one costs time)."""
    hw = request.probe.hardware
    if hw is not None:
        return bool(hw.interpreter)
    return "interpret" in request.hardware_label.lower()


def find_match(task: Task, probe: TaskProbe, backend: str) -> Match | str:
    """The first family that fits, or the plainest reason none does.

    With the probe's traced graph the reason names exactly the ops no kernel covers and
    where they are ("no kernel covers aten.avg_pool2d.default (op 1 of 1)").
    """
    near = []
    for family in FAMILIES:
        result = family.match(task, probe, backend)
        if isinstance(result, Match):
            return result
        if isinstance(result, str):
            near.append(result)
    exact = [r for r in near if r.startswith("no kernel covers")]
    if exact:
        return (f"The offline generator has no kernel family for this task: {exact[0]}. "
                "Configure a model under `inference` to search it.")
    ops = ", ".join(probe.aten_ops) or "none recorded"
    reason = (f"The offline generator has no kernel family for this task (ops: {ops})"
              + (f": {near[0]}" if near else "") + ". Configure a model under `inference` "
              "to search it.")
    return reason


def skill_matches(probe: TaskProbe, backend: str, task: Task | None = None,
                  interpreter: bool = False) -> list[dict]:
    """Templates that claim the task's ops, for the TUI's "s" panel.

    Each dict: ``template`` (the family's name), ``summary``, ``why`` (or the reason it cannot be used, with
    ``usable`` False), ``backends`` and ``tunables`` ({name: {"choices": [...], "why": str}}).
    Without ``task`` only the op set is checked (the reference's arguments are not read).
    Under the interpreter the choices are the CPU's (issue 58: the panel listed GPU block
    sizes that a CPU run never tries).
    """
    out = []
    for family in FAMILIES:
        usable, why = True, ""
        if task is not None:
            result = family.match(task, probe, backend)
            if result is None:
                continue
            usable = isinstance(result, Match)
            why = result.why if usable else result
        elif not _claims(family, probe):
            continue
        else:
            why = f"ops {', '.join(op_bases(probe))} fit: {family.summary}"
        if backend not in family.backends:
            usable, why = False, f"{family.name} has no {backend} version"
        out.append({
            "template": family.name, "summary": family.summary, "why": why,
            "usable": usable, "backends": list(family.backends),
            "tunables": {t.name: {"choices": list(t.values(interpreter)), "why": t.why}
                         for t in family.tunables_for(backend)},
        })
    return out


def _claims(family: Family, probe: TaskProbe) -> bool:
    from openkernel.generators.activations import ATEN_NAMES
    from openkernel.generators.compiler.families import CompiledFamily, plan_for

    if isinstance(family, CompiledFamily):
        plan = plan_for(None, probe.trace) if probe.trace is not None else None
        return plan is not None and not isinstance(plan, str) and plan.kind == family.kind
    ops = op_bases(probe)
    return family.name == "elementwise" and len(ops) == 1 and ops[0] in ATEN_NAMES


def _params_of(program: Program | None, family: Family) -> dict | None:
    params = program.metadata.get("params") if program is not None else None
    if isinstance(params, dict) and params.get("template") == family.name:
        return {k: v for k, v in params.items() if k != "template"}
    return None


def _key(params: dict) -> tuple:
    return param_key("", params)[1]


def _nearest_untried(family: Family, params: dict, taken: set, interp: bool,
                     backend: str) -> dict | None:
    """The untried point fewest one-value steps from ``params`` (ring by ring outward), None
    when the rings end first (a point the steps cannot reach from there)."""
    seen, ring = {_key(params)}, [params]
    while ring:
        outer = []
        for point in ring:
            for near in family.neighbours(point, interp, backend):
                key = _key(near)
                if key in seen:
                    continue
                if key not in taken:
                    return near
                seen.add(key)
                outer.append(near)
        ring = outer
    return None


def _moved(center: dict, others: list[dict]) -> str:
    """What the sweep varies around its point, e.g. "BLOCK 1024/2048, num_warps 4/8"."""
    parts = []
    for k, v in center.items():
        values = [v] + [o[k] for o in others if o[k] != v]
        if len(values) > 1:
            parts.append(f"{k} " + "/".join(str(x) for x in dict.fromkeys(values)))
    return ", ".join(parts)


def _fmt(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


class OfflineGenerator:
    """Family-based candidates; see the module docstring."""

    name = "offline"
    # Branches propose in branch order (search/loop.py): which combinations each takes then
    # follows from the seed, not from which thread ran first (a first sweep can take a whole
    # small space, leaving a sibling nothing).
    ordered = True

    def __init__(self) -> None:
        self._matches: dict[tuple, Match | str] = {}
        self._seen: dict[tuple, set] = {}  # params already proposed, per task and backend
        self._lock = threading.Lock()

    @property
    def models(self) -> list[str]:
        # Each proposal names its family ("offline:elementwise"); the run as a whole has one.
        return ["offline"]

    def _match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str:
        key = (task.digest, tuple(probe.aten_ops), tuple(map(tuple, probe.input_shapes)), backend)
        if key not in self._matches:
            self._matches[key] = find_match(task, probe, backend)
        return self._matches[key]

    def preflight(self) -> str | None:
        return None  # no network, nothing to reach

    def _seed(self, task: Task, probe: TaskProbe, backend: str) -> Match | None:
        """Inductor's own kernels as a family, where the probe captured them (on a GPU)."""
        key = (task.digest, "seed", backend)
        if key not in self._matches:
            result = SEED.match(task, probe, backend) if probe.inductor else None
            self._matches[key] = result if isinstance(result, Match) else None
        return self._matches[key]

    def supports(self, task: Task, probe: TaskProbe, backend: str) -> str | None:
        """None when a family fits; otherwise the plain reason."""
        result = self._match(task, probe, backend)
        if isinstance(result, str) and self._seed(task, probe, backend) is not None:
            return None  # Inductor's kernels are a candidate where the compiler has none
        return result if isinstance(result, str) else None

    def _choose(self, request: ProposalRequest) -> Match | str:
        """The compiler's family or Inductor's seed: a parent's own; without one, odd branches
        of the first iteration (later: a coin) start from the seed; the seed alone where the
        compiler refused."""
        match = self._match(request.task, request.probe, request.backend)
        seed = self._seed(request.task, request.probe, request.backend)
        if seed is None:
            return match
        if isinstance(match, str) or _params_of(request.parent, seed.family) is not None:
            return seed
        if _params_of(request.parent, match.family) is not None:
            return match
        odd = request.branch % 2 == 1 if request.iteration == 0 else request.rng.random() < 0.5
        return seed if odd else match

    def propose(self, request: ProposalRequest) -> Proposal:
        """One candidate: a start point, or the parent's params mutated (and recombined),
        swept with untried neighbours. Branches propose side by side: one at a time here, so
        no two take the same combination."""
        with self._lock:
            return self._propose(request)

    def _propose(self, request: ProposalRequest) -> Proposal:
        match = self._choose(request)
        if isinstance(match, str):
            return Proposal(code="", prompt=match, answer=match, model="offline",
                            origin="offline", description="no family fits", log=match,
                            failed="no_code")
        family, rng, backend = match.family, request.rng, request.backend
        interp = _interpreter(request)
        seen = self._seen.setdefault((request.task.digest, backend), set())
        taken = seen | {key[1] for key in request.judged if key[0] == family.name}
        # Lazily: a compiler family's space can hold millions of points (its tunables' product).
        first_untried = next((p for p in family.points(interp, backend) if _key(p) not in taken),
                             None)
        if first_untried is None:
            why = (f"every combination of the {family.name} family "
                   f"({sum(1 for _ in family.points(interp, backend))}) has been "
                   "judged in this job: nothing new to propose")
            return Proposal(code="", prompt=why, answer=why, model=f"offline:{family.name}",
                            origin="offline", description="the template's space is exhausted",
                            log=why, failed="exhausted")
        parent_params = _params_of(request.parent, family)
        steps: list[str] = []
        if parent_params is None:
            n = len(family.cpu_starts if interp and family.cpu_starts else family.starts)
            index = request.branch if request.iteration == 0 else n + 1
            params = family.start(rng, interp, index, backend)
            origin = "curated start point" if index < n else "random start"
            if _key(params) in taken and index < n:
                # Another branch's sweep judged this start already (a neighbour of its own):
                # the next curated start nobody has, before a random one.
                other = next((q for k in range(index + 1, index + n)
                              if _key(q := family.start(rng, interp, k % n, backend)) not in taken),
                             None)
                if other is not None:
                    params, origin = other, "curated start point (this branch's own was judged)"
            for _ in range(64):  # later start points are random: avoid repeats
                if _key(params) not in taken:
                    break
                params = family.start(rng, interp, 10**6, backend)
                origin = "random start"
            short = origin
        else:
            base = parent_params
            others = [p for p in request.inspirations if _params_of(p, family) is not None
                      and (request.parent is None or p.id != request.parent.id)]
            if others and rng.random() < 0.5:
                mate = rng.choice(others)
                base = family.crossover(base, _params_of(mate, family), rng, interp, backend)
                steps.append(f"recombined with inspiration {mate.label} ({mate.id})")
            for _ in range(64):  # mutate until the point is new to this search
                params, changed = family.mutate(base, rng, interp, backend)
                if _key(params) not in taken:
                    break
            steps.append("mutated " + ", ".join(changed) if changed else "kept the params")
            short = ("mutated " + " and ".join(c.split()[0] for c in changed) + " from parent"
                     if changed else "parent's params")
            if len(steps) > 1:
                short = "recombined, " + short
            origin = "; ".join(steps)
        if _key(params) in taken:  # the neighbourhood is spent: the nearest untried point
            params = _nearest_untried(family, params, taken, interp, backend) or first_untried
            origin += "; every nearer point was judged, so the nearest untried one"
            short += ", nearest untried"
        # A sweep: the point and untried neighbours, judged together (the fastest is kept).
        others = [p for p in family.neighbours(params, interp, backend)
                  if _key(p) not in taken and p != params]
        rng.shuffle(others)
        sweep = [params] + others[: max(0, min(request.max_variants, self.sweep_size(interp)) - 1)]
        for point in sweep:
            seen.add(_key(point))
        code = family.render(match, params, backend)
        label = family.describe(match, params)
        knobs = [f"{k}={v}" for k, v in params.items() if k not in ("num_warps", "num_stages")]
        if "num_warps" in params:
            knobs.append(f"{params['num_warps']} warps")
        moved = _moved(params, sweep[1:])
        description = f"{label}, {', '.join(knobs)} ({short})" + (
            f"; a sweep of {len(sweep)}: {moved}" if len(sweep) > 1 else "")
        account = self._account(request, match, params, origin, interp)
        if len(sweep) > 1:
            account += "\nSweep (judged together, the fastest correct one is kept): " + "; ".join(
                _fmt(p) for p in sweep) + "."
        variants = [Variant(p, code if p is params else family.render(match, p, backend))
                    for p in sweep] if len(sweep) > 1 else []
        return Proposal(
            code=code, prompt=account,
            answer=account + "\n\n```python\n" + code.rstrip("\n") + "\n```\n",
            model=f"offline:{family.name}", origin="offline", description=description,
            reasoning=f"{match.why}. {origin[:1].upper() + origin[1:]}.",
            params={"template": family.name, **params}, variants=variants,
            precision=[({"template": family.name, **p}, family.precision(match, p, request.probe))
                       for p in sweep])

    @staticmethod
    def sweep_size(interpreter: bool) -> int:
        """Combinations per offline candidate: under the interpreter each costs seconds."""
        return 3 if interpreter else 6

    def _account(self, request: ProposalRequest, match: Match, params: dict, origin: str,
                 interp: bool) -> str:
        family = match.family
        lines = [
            f"Offline generator (no model): family `{family.name}`: {family.summary}.",
            f"Task: {request.task.name}; backend: {request.backend}; "
            f"ops: {', '.join(request.probe.aten_ops) or 'none'}.",
            f"Why this family: {match.why}.",
            "Device: Triton interpreter (CPU), so tunables come from the CPU choices (few, "
            "large programs)." if interp else f"Device: {request.hardware_label or 'GPU'}.",
        ]
        parent = request.parent
        if parent is not None:
            pp = _params_of(parent, family)
            result = parent.kernel_exec_result
            status = result.get_status().value if result else "not evaluated"
            lines.append(f"Parent: {parent.label} ({parent.id}), status {status}, "
                         + (f"params {_fmt(pp)}." if pp else "no family params (reference)."))
        lines.append(f"Step: {origin}.")
        lines.append(f"Params: {_fmt(params)}.")
        lines.append("Tunables:")
        for t in family.tunables_for(request.backend):
            lines.append(f"  {t.name} in {list(t.values(interp))}: {t.why}")
        return "\n".join(lines)
