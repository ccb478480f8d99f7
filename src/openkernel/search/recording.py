"""What a search keeps: the archive, the database and the trace dataset, written from the
loop's thread alone, in order; a resumed job's stored candidates restored into the archive.
"""

from __future__ import annotations

import time
from typing import Iterator

from openkernel.events import (
    BestImproved,
    CandidateEvaluated,
    CandidateRestored,
    Event,
    LogEmitted,
)
from openkernel.generators.base import param_key
from openkernel.roofline import roofline_estimate
from openkernel.schemas import Program
from openkernel.search.judging import code_digest
from openkernel.search.records import kernel_fields, program_from_row


class Recording:
    """The Search's recording (a part of search/loop.py's Search: the same state)."""

    # starting points ---------------------------------------------------------------------
    def _restore(self, rows) -> dict[int, set[int]]:
        """Rebuild the archive from a stored job; returns the branches done per iteration."""
        done: dict[int, set[int]] = {}
        self._restored: list[CandidateRestored] = []  # told to the views at the run's start
        for row in rows:
            program = program_from_row(row)
            self.archive.add(program)
            if not row.is_program0:
                self._restored.append(CandidateRestored(
                    program, program.status, row.label,
                    program.kernel_exec_result.runtime_improvement
                    if program.kernel_exec_result else -1.0, self.archive.best_speedup))
            self._by_id[program.id] = program
            self._iteration_now = max(self._iteration_now, row.iteration)
            if row.author:  # from outside the generator: no branch of an iteration
                self._external += 1
                self._judged_in.setdefault(row.iteration, []).append(program)
                self.outcomes[program.status] += 1
                self._remember(program)
                continue
            if not row.is_program0:
                self._judged_in.setdefault(row.iteration, []).append(program)
                self.outcomes[program.status] += 1
            if not row.is_program0 and row.code.strip():
                self._remember(program)
            self._note_judged(program)
            done.setdefault(row.iteration, set()).add(row.branch)
        return done

    def _remember(self, program: Program) -> None:
        backend = program.metadata.get("backend", self.backend)
        result = program.kernel_exec_result
        seen = [(program.code, result)]
        template = result.template_results.get("template") if result is not None else None
        if template and result.template_results.get("winner"):
            # what was swept is remembered too: its twin is kept as the same winner
            twin = result.model_copy(deep=True)
            twin.template_results["winner_code"] = program.code
            seen.append((template, twin))
        with self._judged_lock:
            for code, judged in seen:
                self._judged.setdefault(code_digest(code, backend), (program.id, judged))

    def _note_judged(self, program: Program) -> None:
        """Remember which template parameters this job has judged (the offline no-repeat rule)."""
        params = program.metadata.get("params") or {}
        name = params.get("template") if isinstance(params, dict) else None
        if not name:
            return
        combos = (program.kernel_exec_result.template_results.get("combinations", [])
                  if program.kernel_exec_result else [])
        for p in [params] + [c.get("params") or {} for c in combos]:
            self._judged_params.add(param_key(name, p))

    def _record(self, program: Program) -> Iterator[Event]:
        result = program.kernel_exec_result
        if result and result.correctness and not result.profiler_data and not program.is_program0:
            # No profiler ran: place the kernel on the roofline analytically, labelled estimate.
            result.profiler_data = roofline_estimate(result.runtime, self.probe, self.hardware)
        self._note_judged(program)
        previous = self.archive.best_speedup
        is_best = self.archive.add(program)
        # Timing stops once a candidate is decided against the reference and, past 1x, the best.
        self.evaluator.incumbent_speedup = max(self.archive.best_speedup, 0.0) \
            if self.archive.best_speedup > 1.0 else 0.0
        replaced = self._retried.pop(program.metadata.get("label"), None)
        if replaced is not None:
            self.store.delete_kernel(replaced)
            if self.traces is not None:
                self.traces.drop(replaced)
        fields = kernel_fields(
            program, run_id=self.run_id, task_name=self.task_name, job_name=self.job_name,
            hardware=self.hardware.label, gpu_arch=self.gpu_arch,
            reference_code=self.task.reference_code,
        )
        self.store.add_kernel(**fields)
        self._by_id[program.id] = program
        waiting = self._waiting.pop(fields["label"], None)
        if waiting is not None:  # stored: the person or agent who sent it gets its verdict
            waiting.outcome.set_result(program)
        if program.is_program0:
            return
        yield from self._trace(fields, is_best)
        self._judged_in.setdefault(program.iteration_found, []).append(program)
        while self._notes_seen < len(self.evaluator.notes):
            yield LogEmitted("warning", self.evaluator.notes[self._notes_seen])
            self._notes_seen += 1
        self.candidates += 1
        self.outcomes[program.status] += 1
        result = program.kernel_exec_result
        yield CandidateEvaluated(program, program.status, program.metadata["label"],
                                 result.runtime_improvement, self.archive.best_speedup)
        if is_best:
            yield BestImproved(program, previous, self.archive.best_speedup)

    # traces (opt-in) ----------------------------------------------------------------------
    def _open_traces(self, hw) -> Iterator[Event]:
        if not self.config.traces.enabled:
            return
        from openkernel.search.job_traces import JobTraces
        from openkernel.store.traces import Session

        session = Session(session_id="", problem=self.task_name, job_name=self.job_name,
                          hardware=hw.label, gpu_arch=self.gpu_arch, backend=self.config.backend,
                          generator=self.generator.name, model=", ".join(self.generator.models))
        try:
            self.traces = JobTraces.open(self.config.traces.dir, self.store, self.run_id, session)
        except Exception as err:  # noqa: BLE001 - pyarrow missing or the folder not writable
            yield LogEmitted("warning", f"traces.enabled: traces are not written ({err})")
            return
        yield LogEmitted("info", f"Traces: writing Parquet to {self.traces.folder}")

    def _trace(self, fields: dict, became_best: bool) -> Iterator[Event]:
        if self.traces is None:
            return
        try:
            self.traces.add(fields, became_best, self.archive, self.spending.snapshot())
        except OSError as err:  # a full disk must not end the search: the database has all
            self.traces = None
            yield LogEmitted("warning", f"traces: writing failed ({err}); no more traces "
                             "this run (the database keeps every candidate)")

    def _finish_traces(self, status: str) -> int:
        if self.traces is None:
            return 0
        try:
            return self.traces.finish(status, self.archive, self.spending.snapshot())
        except OSError:
            return 0

    def _device_report(self, started: float) -> Iterator[Event]:
        """How busy each GPU was: its timed turns (tests, trials, profiles) over the run."""
        wall = time.monotonic() - started
        busy = self.evaluator.gpu_busy(since=started)
        report = {}
        for slot, b in busy.items():
            first = (b["intervals"][0][0] - started) if b["intervals"] else None
            report[slot] = {"busy_s": b["busy_s"], "turns": b["turns"],
                            "first_turn_s": round(first, 3) if first is not None else None}
            if b["turns"] and wall > 0:
                after = wall - first
                yield LogEmitted("info", f"GPU {slot}: busy {b['busy_s'] / wall:.0%} of the "
                                 f"{wall:.0f} s run, {b['busy_s'] / after:.0%} after its first "
                                 f"candidate built ({b['turns']} timed turns)")
        extra = {"wall_s": round(wall, 3), "gpu_busy": report} if report else {"wall_s": round(wall, 3)}
        if self.evaluator.pch:
            extra["pch"] = self.evaluator.pch
        return extra

    def _best_id(self) -> str | None:
        return self.archive.best.id if self.archive.best else None

