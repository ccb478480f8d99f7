"""The probe's Inductor captures, made once per task, hardware and software.

Inductor's code for the reference (the offline generator's seed, ``worker/inductor.py``) is
code generation alone: what decides it is the task's code (its digest), the hardware (its
label), the workers' software (``Hardware.software``, digested as for the baselines:
``baselines.environment_key``) and the TF32 flag. A probe on a GPU makes them (~3 s each on
the H200) and the engine stores them under that key; a later probe with the same key is handed
them in its job and makes none. ``eval_config.fresh_baselines`` (``--fresh-baselines``) makes
them again, as it times the baselines again. The worker judges the stored record's format.

The probe's trace of the reference (``worker/trace.py``: 1.4-2.0 s on the H200) is kept in the
same record, on the CPU too (where there are no captures): decided by the same key and by the
tracing code itself (``trace.VERSION``, a digest of trace.py; another version is traced again).
"""

from __future__ import annotations

from openkernel.evaluation.host.baselines import environment_key
from openkernel.records import Hardware


def _key(ev, hw: Hardware) -> tuple | None:
    env = environment_key(hw)
    if ev.store is None or not env:
        return None  # no store, or software unknown: nothing is kept or reused
    return ev.task.digest, hw.label, env, bool(ev.ec.allow_tf32)


def stored(ev, hw: Hardware) -> dict | None:
    """The captures kept for this task, hardware and software (None: none, or fresh ones
    are asked for)."""
    key = _key(ev, hw)
    if key is None or ev.ec.fresh_baselines:
        return None
    return ev.store.inductor_captures(*key)


def keep(ev, hw: Hardware, record: dict | None) -> None:
    """Store the captures a probe made (``record``: its worker's ``"captured"``)."""
    key = _key(ev, hw)
    if key is not None and record:
        ev.store.put_inductor_captures(*key, record)
