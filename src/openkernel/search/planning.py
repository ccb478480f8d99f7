"""What each iteration starts from: the archive's first programs (the reference, a starting
kernel), each branch's parent and inspirations, the critic's diagnoses, and the controls a
user set (a backend switch, instructions).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

from openkernel.events import (
    BackendSwitched,
    CriticDiagnosed,
    Event,
    InstructionAdded,
    LogEmitted,
)
from openkernel.schemas import EvalResult, Program, new_program_id
from openkernel.search.history import branch_failures


class Planning:
    """The Search's planning (a part of search/loop.py's Search: the same state)."""

    def _seed_archive(self) -> Iterator[Event]:
        program0 = Program(
            id=new_program_id(), code=self.task.reference_code, is_program0=True,
            iteration_found=-1,
            metadata={"branch": 0, "label": "ref", "origin": "reference", "model": "",
                      "backend": "pytorch", "description": "the reference (program 0)"},
        )
        program0.add_eval_results(EvalResult(
            compiled=True, correctness=True, runtime_improvement=1.0, perf_score=3,
            eval_log="The reference implementation (program 0): speedup 1.0x by definition.",
        ))
        yield from self._record(program0)
        start = None
        if self.config.kernels_iter_0_path:
            path = Path(self.config.kernels_iter_0_path).expanduser()
            start = ("file", path.read_text(encoding="utf-8"), f"starting kernel {path}")
        elif self.config.start_from_best:
            row = self.store.best_kernel(self.task_name, self.gpu_arch)
            if row is None:
                yield LogEmitted("warning", f"start_from_best: no stored kernel for "
                                 f"{self.task_name} on {self.gpu_arch}; starting from the reference")
            else:
                start = ("best", row.code, f"best stored kernel {row.id} ({row.job_name})")
        if start:
            origin, code, what = start
            yield LogEmitted("info", f"Evaluating the {what}")
            result = self.evaluator.evaluate(code, self.backend, label="start")
            program = Program(
                id=new_program_id(), code=code, parent_id=program0.id, iteration_found=-1,
                metadata={"branch": 1, "label": "start", "origin": origin, "model": "",
                          "backend": self.backend, "description": what},
            )
            program.add_eval_results(result)
            self._remember(program)
            yield from self._record(program)

    def _plan(self, branches: list[int], iteration: int) -> list[tuple]:
        """(branch, parent, inspirations, rng) for each branch to run. While the archive has
        nothing correct, a branch whose latest candidate failed builds on that failure (its
        log and code are the parent's), not on the reference again."""
        plan = []
        for branch in branches:
            parent = self.archive.sample_parent(self.rng)
            inspirations = self.archive.sample_inspirations(
                parent, self.config.search.num_inspirations, self.rng)
            if self.generator.name == "llm" and (
                    parent is None or parent.is_program0 or not parent.can_be_best):
                failed = branch_failures(self._judged_in, branch, iteration)
                parent = failed[0] if failed else parent
            plan.append((branch, parent, inspirations, random.Random(self.rng.random())))
        return plan

    def _critique(self, iteration: int, parents: list[Program],
                  cheap: bool = False) -> Iterator[Event]:
        """Diagnose the best kernel and each parent; store, announce and return the diagnoses."""
        events: list[Event] = []
        critic = self.rules_critic if cheap or self.spending.reason else self.critic
        if critic.model and not self.spending.begin(events.append):  # the budget allows none
            critic = self.rules_critic
        yield from events
        events = []
        if critic.model:  # a model call blocks the stream for a while: say what it waits for
            yield LogEmitted("info", f"Critic {critic.model} reads iteration {iteration}…")
        try:
            report = critic.judge(iteration, self.archive.best, parents,
                                  self._judged_in.get(iteration, []), self.probe, self.hardware,
                                  self.task_name, self.backend, outcomes=self.outcomes)
        finally:
            if critic.model:
                self.spending.end()
        for call in report.calls:
            event = self.spending.add(call, "", iteration)
            self.spending.store_call(self.run_id, event)
            events.append(event)
        self.spending.check(events.append)
        yield from events
        if report.warning:
            yield LogEmitted("warning", report.warning)
        for d in report.diagnoses:
            self.store.add_critique(
                run_id=self.run_id, task_name=self.task_name, job_name=self.job_name,
                iteration=iteration, text=d.said, source=d.source, kernel_id=d.kernel_id,
                label=d.label, role=d.role, bottleneck=d.bottleneck, headroom=d.headroom,
                model=d.model)
        if report.diagnoses:
            yield CriticDiagnosed(iteration, "\n".join(d.said for d in report.diagnoses),
                                  tuple(report.diagnoses))
        return report.diagnoses

    def _critic_preflight(self) -> str | None:
        """A critic model of its own (not one of the ensemble) is checked as they are: its key
        set and its service answering, before the first candidate."""
        cfg = self.critic.cfg
        models = getattr(self.generator, "_models", [])
        if any((m.model, m.api_base, m.api_key_env) == (cfg.model, cfg.api_base, cfg.api_key_env)
               for m in models):
            return None  # the generator's preflight checked it
        from openkernel.generators.llm import LLMGenerator

        problem = LLMGenerator([cfg]).preflight()
        return f"critic.model: {problem}" if problem else None

    def _apply_controls(self, iteration: int) -> Iterator[Event]:
        backend = self.control.take_backend()
        if backend and backend != self.backend:
            reason = self.generator.supports(self.task, self.probe, backend)
            if reason:
                yield LogEmitted("warning", f"Backend stays {self.backend}: {reason}")
            else:
                self.backend = backend
                yield BackendSwitched(backend, iteration)
        for text in self.control.take_instructions():
            self.instructions.append(text)
            yield InstructionAdded(text, iteration)

