"""One candidate, in its own thread: generate it (or take a submitted kernel), wait for a
worker, judge it (an identical code's verdict reused), and hand the program to the loop.
Never writes the database.
"""

from __future__ import annotations

import hashlib
import queue
import re
import time
from dataclasses import asdict

from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.executor import Aborted
from openkernel.events import (
    CandidateGenerated,
    CandidatePhaseChanged,
    CandidateStarted,
    CandidateWithdrawn,
    LogEmitted,
)
from openkernel.generators.base import Proposal, ProposalRequest, precision_of
from openkernel.schemas import EvalResult, Program, new_program_id
from openkernel.search.external import Submission, origin_of
from openkernel.search.scheduling import DONE, Turns
from openkernel.search.spending import AnswerStream, call_summary
from openkernel.templating import is_template

# The worker's phases (evaluation.protocol.PHASES, and "profile") as a candidate's phase.
_WORKER_PHASES = {"setup": "building", "build": "building", "warmup": "building",
                  "queued": "waiting_for_gpu", "test": "testing", "benchmark": "timing",
                  "profile": "profiling", "sweep": "sweeping"}


def code_digest(code: str, backend: str) -> str:
    return hashlib.sha256(f"{backend}\0{code}".encode()).hexdigest()


def _mark_template(program: Program, result: EvalResult, proposal) -> None:
    """A templated candidate is kept as its winner: the concrete code, its parameters (where
    the offline generator's next mutation starts), and the template itself in the metadata."""
    results = result.template_results
    if not results:
        return
    program.is_templated = True
    program.template_parameter_combinations = [c["params"] for c in results.get("combinations", [])]
    winner_code = results.pop("winner_code", None)
    if winner_code:
        program.code = winner_code
    results["template"] = proposal.code  # stored with the combinations: what was swept
    winner = results.get("winner")
    params = program.metadata.get("params") or {}
    if winner and params.get("template"):
        program.metadata["params"] = {"template": params["template"], **winner}
    proposed = {k: v for k, v in params.items() if k != "template"}
    if winner and proposed and winner != proposed:
        program.metadata["description"] = _kept_point(
            program.metadata.get("description") or "", proposed, winner,
            len(results.get("combinations", [])))


def _kept_point(description: str, proposed: dict, winner: dict, n: int) -> str:
    """The description of a sweep's proposed point, told of the winner that is kept (issue 58:
    "BLOCK=2048 ...; a sweep of 3" over stored code with BLOCK=4096): its knobs read the
    winner's values, and it says which point was proposed."""
    head, _, swept = description.partition("; a sweep of ")
    moved = {k: v for k, v in winner.items() if proposed.get(k) != v}
    told = []
    for k, v in moved.items():
        said = re.subn(rf"\b{re.escape(k)}={re.escape(str(proposed.get(k)))}\b", f"{k}={v}", head)
        if k == "num_warps":
            said = re.subn(rf"\b{proposed.get(k)} warps\b", f"{v} warps", said[0])
        head = said[0]
        if not said[1]:
            told.append(f"{k}={v}")
    was = ", ".join(f"{k}={proposed.get(k)}" for k in moved)
    return ((", ".join(told) + ": " if told else "") + head
            + f"; the winner of a sweep of {n}" + (f" ({swept.split(': ', 1)[-1]})" if swept else "")
            + f" over the proposed {was}")


def _submitted(submission: Submission, parent: Program | None) -> Proposal:
    """A kernel from a person or an agent, as the generator's answer would carry it."""
    what = submission.description or (f"{submission.author}'s edit of {parent.label}"
                                       if parent else f"{submission.author}'s kernel")
    return Proposal(code=submission.code, prompt="", answer="", model=submission.author,
                    origin=origin_of(submission.author), description=what)


class Judging:
    """The Search's judging (a part of search/loop.py's Search: the same state)."""

    def _candidate(self, request: ProposalRequest, slots, out: queue.Queue,
                   submission: Submission | None = None, label: str = "",
                   turn: tuple[Turns, int] | None = None) -> None:
        """Worker thread: generate (or take a submitted kernel), then evaluate in a confined
        subprocess. Never writes the db. ``turn``: (the iteration's turns, this branch's
        position) when branches generate in order."""
        label = label or f"i{request.iteration}-b{request.branch}"
        why = "the run stopped before it was judged"  # told to a submitter if it is not judged
        asks_model = submission is None or bool(submission.instruction)
        counted = False
        try:
            if not self.control.wait_while_paused():
                return  # stopped: this candidate never starts
            if asks_model and (self.spending.reason or self._outage):
                why = self.spending.reason or self._outage  # no model call starts
                return
            if asks_model and not self.spending.begin(out.put):
                why = self.spending.reason or "its model call could pass the budget"
                return  # its call could pass the budget: it never starts
            counted = self._flying(+1)
            model_hint = self.generator.models[0] if self.generator.models else self.generator.name
            if submission is not None and not submission.instruction:
                model_hint = submission.author
            out.put(CandidateStarted(label, request.iteration, request.branch,
                                     request.parent.id if request.parent else None, model_hint))
            program_id = new_program_id()
            t0 = time.perf_counter()
            if not asks_model:
                proposal = _submitted(submission, request.parent)
            else:
                out.put(CandidatePhaseChanged(label, "generating"))
                stream = request.on_text = AnswerStream(label, out.put)
                try:
                    if turn is not None:
                        turn[0].wait(turn[1])
                    proposal = self.generator.propose(request)
                finally:
                    self.spending.end()
                    if turn is not None:
                        turn[0].done(turn[1])
                stream.flush()
            gen_s = time.perf_counter() - t0
            for call in proposal.calls:
                out.put(self.spending.add(call, label, request.iteration, program_id))
            self.spending.check(out.put)
            self._check_models(out.put)
            if proposal.failed == "exhausted":  # nothing new to judge: no row, the job ends
                self._exhausted = proposal.log
                out.put(CandidateWithdrawn(label, proposal.log))
                return
            out.put(CandidateGenerated(label, proposal.model, proposal.description, proposal.reasoning))
            if proposal.code.strip():
                out.put(CandidatePhaseChanged(label, "queued"))  # for a worker, or a resume
            judged = self._judge_in_slot(proposal, request.backend, label, program_id, slots, out)
            if judged is None:
                return
            result, eval_s = judged
            parent = request.parent
            program = Program(
                id=program_id, code=proposal.code, raw_llm_code=proposal.answer,
                parent_id=parent.id if parent else None,
                generation=(parent.generation + 1) if parent else 1,
                iteration_found=request.iteration,
                metadata={
                    "branch": request.branch, "label": label, "origin": proposal.origin,
                    "model": proposal.model, "backend": request.backend,
                    "description": proposal.description, "params": proposal.params,
                    "prompt": proposal.prompt, "generation_log": proposal.log,
                    "inspiration_ids": [p.id for p in request.inspirations],
                    "user_instructions": request.user_instructions,
                    "tokens_used": proposal.tokens_used, "generation_s": gen_s,
                    "evaluation_s": eval_s, "llm": call_summary(proposal.calls),
                    "critic": [asdict(d) for d in request.diagnoses],
                },
            )
            if submission is not None:
                program.metadata["author"] = submission.author
                if submission.instruction:
                    program.metadata["description"] = (f"{submission.author} asked "
                                                       f"{proposal.model}: {submission.instruction}")
            program.add_eval_results(result)
            _mark_template(program, result, proposal)
            program.metadata["precision"] = precision_of(proposal, program.metadata["params"])
            submission = None  # judged: the loop stores it and answers the submitter
            out.put(program)
        except NoDeviceLeft as err:  # no GPU can judge anything any more: end the run
            why = str(err)
            out.put(LogEmitted("error", f"{label}: {err}"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
            self.control.stop()
        except Aborted as err:  # stopped from outside while in flight: no verdict, nobody's fault
            out.put(LogEmitted("warning", f"{label}: stopped before its verdict ({err})"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
        except Exception as err:  # a generator or evaluator bug: say so, keep the run going
            why = f"internal error: {err!r}"
            out.put(LogEmitted("error", f"{label}: internal error: {err!r}"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
        finally:
            if turn is not None:  # ended before proposing (stopped, budget): the next goes on
                turn[0].done(turn[1])
            if counted:
                self._flying(-1)
            if submission is not None:
                self._waiting.pop(label, None)
                submission.refuse(why)
            out.put(DONE)

    def _judge_in_slot(self, proposal: Proposal, backend: str, label: str, program_id: str,
                       slots, out: queue.Queue) -> tuple[EvalResult, float] | None:
        """Wait for a worker, then judge the proposal's code (an identical code's verdict is
        reused, an empty one is a generation failure); the result and the seconds it took, or
        None when the run stopped meanwhile."""
        phase = [""]

        def on_phase(worker_phase: str) -> None:
            mapped = _WORKER_PHASES.get(worker_phase)
            if mapped and mapped != phase[0]:
                phase[0] = mapped
                out.put(CandidatePhaseChanged(label, mapped))

        while True:
            with self._flight_lock:  # waiting for a worker: what a pause parks
                self._queued += 1
            try:
                slots.acquire()
            finally:
                with self._flight_lock:
                    self._queued -= 1
            if not self.control.paused:
                break
            # Parked by a pause, the worker given back (the others waiting park too): not in
            # flight while it waits, and its row says so.
            slots.release()
            self._flying(-1)
            out.put(CandidatePhaseChanged(label, "paused"))
            going = self.control.wait_while_paused()
            self._flying(+1)
            if not going:
                return None
            out.put(CandidatePhaseChanged(label, "queued"))
        try:
            return self._judge_held(proposal, backend, label, program_id, on_phase)
        finally:
            slots.release()

    def _judge_held(self, proposal: Proposal, backend: str, label: str, program_id: str,
                    on_phase) -> tuple[EvalResult, float]:
        """Judge the proposal with a worker slot held (see :meth:`_judge_in_slot`)."""
        t1 = time.perf_counter()
        key = code_digest(proposal.code, backend)
        with self._judged_lock:
            seen = self._judged.get(key)
        if seen is not None:
            result = seen[1].model_copy(deep=True)
            result.metadata["duplicate_of"] = seen[0]
            result.eval_log = (f"Identical to kernel {seen[0]} (same code and backend): "
                               f"its evaluation is reused, nothing was rebuilt.\n"
                               + result.eval_log)
        elif proposal.compile_error:  # it does not parse: nothing to build
            result = EvalResult(compiled=False, perf_score=0,
                                metadata={"syntax_error": proposal.compile_error},
                                eval_log="The code did not compile (the parser refused "
                                "it), so nothing was built:\n" + proposal.compile_error)
        elif proposal.code.strip():
            result = self._judge_proposal(proposal, backend, label, on_phase)
            with self._judged_lock:  # before the slot is freed: a twin waiting sees it
                # a copy: the stored result loses its winner's code to the program
                self._judged.setdefault(key, (program_id, result.model_copy(deep=True)))
        else:  # nothing to build: a generation failure, not a build status
            why = ("The model's service gave no answer, so there was no kernel to build."
                   if proposal.failed == "service" else
                   "No kernel was extracted from the answer, so nothing was built.")
            result = EvalResult(compiled=False, perf_score=0,
                                metadata={"generation_failed": proposal.failed or "no_code"},
                                eval_log=(why + "\n" + (proposal.log or "")).strip())
        return result, time.perf_counter() - t1

    def _check_models(self, put) -> None:
        """Say which models were paused (an ensemble goes on), and stop once none is left."""
        for notice in getattr(self.generator, "take_notices", lambda: [])():
            put(LogEmitted("warning", notice))
        outage = getattr(self.generator, "outage", "")
        if outage and not self._outage:
            self._outage = outage
            put(LogEmitted("error", f"{outage}. The run stops: no new candidate starts, those "
                           "in flight finish; what failed is tried again when the job resumes."))

    def _judge_proposal(self, proposal, backend: str, label: str, on_phase) -> EvalResult:
        """Evaluate a proposal: a templated one (the offline generator's sweep, or a model's
        TEMPLATE_PARAMS with ``prompt.allow_templated``) at every combination, the winner's
        concrete code kept in ``template_results["winner_code"]``; any other as it is."""
        templated = proposal.variants or (self.config.prompt.allow_templated
                                          and is_template(proposal.code))
        if not templated:
            return self.evaluator.evaluate(proposal.code, backend, label=label, on_phase=on_phase,
                                           source_name=f"<{label}>")
        result, winner = self.evaluator.evaluate_template(proposal.code, backend, label,
                                                          variants=proposal.variants or None,
                                                          on_phase=on_phase)
        if winner is not None:
            result.template_results["winner_code"] = winner
        return result

