"""How a search's candidates run at once: one thread each, their events through one queue.

An iteration's branches (and kernels submitted from outside the generator) run in threads of
their own; the loop's thread takes what they put on the queue (events, judged programs) and is
the only one that records. A pause is told at once; a candidate waiting for a worker is parked
by it. With an ordered generator (the offline one) branches propose one after another.
"""

from __future__ import annotations

import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from openkernel.events import (
    Event,
    ModelCalled,
    RunPaused,
    RunResumed,
)
from openkernel.generators.base import ProposalRequest
from openkernel.records import Diagnosis
from openkernel.schemas import Program
from openkernel.search.external import LABEL_PREFIX
from openkernel.search.history import FAILURES_SHOWN, branch_failures, reference_timing

DONE = object()  # a candidate's thread has ended


class Turns:
    """One iteration's branches generating one after another, in branch order (a generator
    with ``ordered``, the offline one): each waits for the branch before it to have proposed,
    or to have ended without proposing."""

    def __init__(self, count: int) -> None:
        self._done = [threading.Event() for _ in range(count)]

    def wait(self, position: int) -> None:
        if position > 0:
            self._done[position - 1].wait()

    def done(self, position: int) -> None:
        self._done[position].set()


class Scheduling:
    """The Search's scheduling (a part of search/loop.py's Search: the same state)."""

    def _run_branches(self, iteration: int, plan: list[tuple],
                      diagnoses: list[Diagnosis]) -> Iterator[Event]:
        slots = threading.Semaphore(self.evaluator.max_workers)
        steering = "\n".join(self.instructions)
        instructions = "\n\n".join(
            s for s in (self.task.user_instructions.strip(), self.config.user_instructions.strip(),
                        steering) if s
        )
        best_said = [d for d in diagnoses if d.role == "best"]
        by_kernel = {d.kernel_id: d for d in diagnoses if d.role == "parent"}
        ref_ms, ref_how = reference_timing(self._judged_in, self.probe, self.hardware.label)
        jobs = []
        for branch, parent, inspirations, rng in plan:
            said = best_said + ([by_kernel[parent.id]] if parent and parent.id in by_kernel else [])
            failures = [p for p in branch_failures(self._judged_in, branch, iteration)
                        if parent is None or p.id != parent.id][:FAILURES_SHOWN]
            jobs.append(ProposalRequest(
                task=self.task, probe=self.probe, backend=self.backend, iteration=iteration,
                branch=branch, parent=parent, best=self.archive.best, inspirations=inspirations,
                user_instructions=instructions, hardware_label=self.hardware.label,
                rng=rng, diagnoses=tuple(said), judged=frozenset(self._judged_params),
                max_variants=self.config.prompt.max_template_combinations,
                allow_templated=self.config.prompt.allow_templated, failures=failures,
                reference_ms=ref_ms, reference_timing=ref_how,
            ))
        out: queue.Queue = queue.Queue()
        paused_seen = False
        settled = False  # paused, and said so once nothing was left in flight
        turns = Turns(len(jobs)) if getattr(self.generator, "ordered", False) else None
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="candidate") as pool:
            for position, request in enumerate(jobs):
                pool.submit(self._candidate, request, slots, out,
                            turn=(turns, position) if turns else None)
            pending = len(jobs)
            while pending:
                pending += self._start_external(slots, out)
                if self.control.paused != paused_seen:  # told at once, even while events flow
                    paused_seen, settled = self.control.paused, False
                    if not paused_seen:
                        yield RunResumed()
                    elif self._running():
                        yield RunPaused(self._running())
                try:
                    item = out.get(timeout=0.2)
                except queue.Empty:
                    # "paused" only once the queue is drained: the last candidate's verdict
                    # is stored (and told) before it
                    if paused_seen and not settled and self._running() == 0:
                        settled = True
                        yield RunPaused(0)
                    continue
                if item is DONE:
                    pending -= 1
                else:
                    yield from self._take(item)
        if paused_seen and not self.control.paused:
            yield RunResumed()

    def _flying(self, step: int) -> bool:
        with self._flight_lock:
            self._in_flight += step
        return True

    def _running(self) -> int:
        """Candidates in flight that a pause lets finish: not those waiting for a worker, which
        it parks (said so: their rows read "paused")."""
        with self._flight_lock:
            return max(self._in_flight - self._queued, 0)

    def _take(self, item) -> Iterator[Event]:
        """One item from the candidates' threads: a judged program is recorded, an event passed
        on (a model call stored first)."""
        if isinstance(item, Program):
            yield from self._record(item)
            return
        if isinstance(item, ModelCalled):
            self.spending.store_call(self.run_id, item)
        yield item

    def _start_external(self, slots, out: queue.Queue) -> int:
        """Start judging the kernels submitted since the last look (``RunControl.submit``),
        each in a thread of its own like a branch's; returns how many started."""
        started = 0
        for sub in self.control.take_submissions():
            parent = self._by_id.get(sub.parent_id) if sub.parent_id else None
            if sub.parent_id and parent is None:
                sub.refuse(f"no kernel {sub.parent_id} in job {self.job_name}")
                continue
            if sub.instruction and self.generator.name != "llm":
                sub.refuse("revising a kernel needs a model: set inference in the config")
                continue
            self._external += 1
            label = f"{LABEL_PREFIX}{self._external}"
            self._waiting[label] = sub
            asked = f"Revise the parent kernel as the user asks: {sub.instruction}"
            request = ProposalRequest(
                task=self.task, probe=self.probe, backend=sub.backend or self.backend,
                iteration=self._iteration_now, branch=self._external, parent=parent,
                best=self.archive.best, hardware_label=self.hardware.label,
                user_instructions="\n\n".join(s for s in (
                    self.task.user_instructions.strip(), self.config.user_instructions.strip(),
                    *self.instructions, asked if sub.instruction else "") if s),
                rng=random.Random(self.rng.random()),
                max_variants=self.config.prompt.max_template_combinations,
                allow_templated=self.config.prompt.allow_templated)
            threading.Thread(target=self._candidate, name=f"candidate-{label}", daemon=True,
                             args=(request, slots, out, sub, label)).start()
            started += 1
        return started

    def _drain_submissions(self) -> Iterator[Event]:
        """Judge what was submitted while the iterations ended (or, in a run that only judges
        submissions, all of it); once none is left, later submissions are refused."""
        slots = threading.Semaphore(self.evaluator.max_workers)
        out: queue.Queue = queue.Queue()
        pending = 0
        while True:
            pending += self._start_external(slots, out)
            if not pending and self.control.close("the run has ended"):
                return
            try:
                item = out.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is DONE:
                pending -= 1
            else:
                yield from self._take(item)

