"""Which offline templates and strategies match this task: the data behind the ``s`` key.

The engine's probe-based matcher (``openkernel.generators.offline.skill_matches``) needs the
probe of the reference, which only the engine holds and the event stream does not carry. So
this reads the match from what the stream does carry: each offline candidate's
``metadata["params"]["template"]``, and describes that template from the library itself,
with the tunable values this run has tried so far.
"""

from __future__ import annotations

from kernelcode.tui.state import RunState


def matches_for(state: RunState) -> tuple[list[dict], str]:
    """(matches, note) for the skills overlay; an empty list comes with the reason."""
    if state.started is not None and state.uses_llm:
        models = ", ".join(state.started.models)
        return [], (f"This run writes kernels with an LLM ({models}); the offline skill library "
                    "(templates and tunables) is not in use.")
    tried: dict[str, dict[str, set]] = {}
    for program in state.programs():
        params = dict(program.metadata.get("params") or {})
        name = params.pop("template", None)
        if name:
            slot = tried.setdefault(str(name), {})
            for key, value in params.items():
                slot.setdefault(key, set()).add(value)
    skills = getattr(state.started, "skills", ()) if state.started is not None else ()
    if skills:  # the engine's own probe-based match, sent with RunStarted
        rows = [{
            "template": m["template"] + ("" if m.get("usable", True) else " (not usable)"),
            "summary": m.get("why") or m.get("summary", ""),
            "backends": list(m.get("backends", [])),
            "tunables": {name: "/".join(map(str, t.get("choices", [])))
                         + _tried(tried.get(m["template"], {}).get(name))
                         for name, t in (m.get("tunables") or {}).items()},
            "candidates": sum(1 for p in state.programs()
                              if (p.metadata.get("params") or {}).get("template") == m["template"]),
        } for m in skills]
        return rows, (f"Offline templates matching {state.problem or 'this task'} on "
                      f"{state.backend} (the engine's match), with the tunables tried so far"
                      + (" (the CPU's choices: the Triton interpreter runs few, large programs)."
                         if state.on_cpu else "."))
    if not tried:
        if not state.evaluated:
            return [], ("No match known yet: the offline generator picks its template after the "
                        "engine has probed the reference. Press s again after the first candidate.")
        return [], "The judged candidates carry no template parameters: no skill was used."
    try:
        from openkernel.generators.offline import FAMILIES
    except ImportError as err:
        return [], f"The offline template library is not available ({err})."
    rows = []
    for template in FAMILIES:
        if template.name not in tried:
            continue
        values = tried[template.name]
        rows.append({
            "template": template.name,
            "summary": template.summary,
            "backends": list(template.backends),
            "tunables": {t.name: "/".join(map(str, t.values(state.on_cpu)))
                         + _tried(values.get(t.name))
                         for t in template.tunables_for(state.backend)},
            "candidates": sum(1 for p in state.programs()
                              if (p.metadata.get("params") or {}).get("template") == template.name),
        })
    return rows, (f"Offline templates matched for {state.problem or 'this task'} on "
                  f"{state.backend}, with the tunables tried so far (in brackets).")


def _tried(values: set | None) -> str:
    if not values:
        return ""
    ordered = sorted(values, key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0,
                                            str(v)))
    return f" [{', '.join(map(str, ordered))}]"
