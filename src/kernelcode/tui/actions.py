"""KeyActions: what each key does. A mixin of KernelCodeApp, kept apart to keep both small.

Every action either opens an overlay from the state the app already holds, or tells the
engine's ``RunControl`` what the person wants; none of them decides anything about the search.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import work
from textual.actions import SkipAction
from textual.widgets import Input

from kernelcode.tui import dashboard_link, skills
from kernelcode.tui.formatting import label_of, pretty_backend
from kernelcode.tui.messages import DashboardStarted, DashboardUnavailable, SkillsLoaded
from kernelcode.tui.narrate import ACCENT, DIM, WARN
from kernelcode.tui.screens.candidate import CandidateView
from kernelcode.tui.screens.diff import DiffView
from kernelcode.tui.screens.overlay import Overlay, OverlayBody, OverlayFrame
from kernelcode.tui.screens.roofline import RooflineView
from kernelcode.tui.screens.skills import SkillsView
from kernelcode.tui.widgets.chat import ChatPanel

NOT_RUNNING = "No run in progress: {what} has nothing to act on."


class KeyActions:
    """The app's key bindings; mixed into KernelCodeApp (which provides state and control)."""

    def say(self, text: str, style: str = DIM) -> None:
        """One line in the chat panel: written at once, or with the chat's next write when
        it wrote very recently (under a fast stream, within a quarter of a second). A key's
        own effect (header, view) does not wait for the chat."""
        self.query_one(ChatPanel).say([Text(text, style=style)])

    @property
    def overlay(self) -> Overlay | None:
        """The view open in the overlay frame, if any."""
        return self.query_one(OverlayFrame).view

    def _toggle(self, view_type: type[Overlay], build) -> None:
        """Open a view, or close it if it is the one open (its key toggles it); another
        view's key replaces it."""
        frame = self.query_one(OverlayFrame)
        if isinstance(frame.view, view_type):
            frame.close()
        else:
            frame.open(build())

    # -- d ------------------------------------------------------------------------------------
    def action_dashboard(self) -> None:
        started = self.state.started
        if started is None:
            self.say("The dashboard shows a job: wait until the run has started.", WARN)
            return
        self.say("Starting the dashboard for this job…")
        self.start_dashboard(started.db_path, started.task_name, started.job_name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="dashboard")
    def start_dashboard(self, db_path: str, task_name: str, job_name: str) -> None:
        """Start (or reuse) the dashboard server off the UI thread, then open a browser."""
        try:
            url = dashboard_link.start(db_path, task_name, job_name)
        except RuntimeError as err:
            self.post_message(DashboardUnavailable(str(err)))
            return
        self.post_message(DashboardStarted(url, dashboard_link.open_browser(url)))

    def on_dashboard_started(self, message: DashboardStarted) -> None:
        self.query_one("#header").dashboard_url = message.url
        self.say(f"Dashboard: {message.url} ({message.browser_note})", ACCENT)
        self.notify(message.url, title="Dashboard")

    def on_dashboard_unavailable(self, message: DashboardUnavailable) -> None:
        self.say(f"The dashboard is not available: {message.reason}", WARN)
        self.notify(message.reason, title="Dashboard not available", severity="warning")

    # -- k, r, s, row selection ---------------------------------------------------------------
    def action_kernel_diff(self) -> None:
        self._toggle(DiffView, self._diff_view)

    def _diff_view(self) -> DiffView:
        latest = self.state.latest
        if latest is None or latest.program is None:
            return DiffView(message="Nothing to compare yet: no candidate has been judged. "
                              "k compares the latest candidate with the best kernel before it.")
        base = self.state.best_before.get(latest.label)
        new_title = f"{latest.label} (latest, {latest.status.value if latest.status else '?'})"
        if base is not None:
            return DiffView(base.code, latest.program.code,
                              f"{label_of(base)} (best before it)", new_title)
        if self.state.reference_code:
            return DiffView(self.state.reference_code, latest.program.code,
                              "reference (PyTorch, best before it)", new_title)
        return DiffView(message=f"Nothing to compare yet: the best before {latest.label} is "
                          "the reference, whose code this run did not send.")

    def action_roofline(self) -> None:
        started = self.state.started
        peaks = (started.peak_bandwidth_gbs, started.peak_gflops) if started else (None, None)
        self._toggle(RooflineView, lambda: RooflineView(self.state.programs(),
                                                        on_cpu=self.state.on_cpu, peaks=peaks))

    def action_skills(self) -> None:
        if isinstance(self.overlay, SkillsView):
            self.query_one(OverlayFrame).close()
            return
        self.load_skills()

    @work(thread=True, exclusive=True, exit_on_error=False, group="skills")
    def load_skills(self) -> None:
        """Ask the offline generator which templates fit (off the UI thread: it may import)."""
        matches, note = skills.matches_for(self.state)
        self.post_message(SkillsLoaded(matches, note))

    def on_skills_loaded(self, message: SkillsLoaded) -> None:
        self._toggle(SkillsView, lambda: SkillsView(message.matches, message.note))

    def open_candidate(self, label: str) -> None:
        row = self.state.candidates.get(label)
        if row is None or row.program is None:
            self.notify(f"{label} is still being generated or evaluated.", title="Candidate")
            return
        self._toggle(CandidateView, lambda: CandidateView(row.program))

    def action_sort_combinations(self) -> None:
        """In a templated candidate's view: the next order of its combination table."""
        frame = self.query_one(OverlayFrame)
        view = frame.view
        if not isinstance(view, CandidateView):
            raise SkipAction()
        frame.open(CandidateView(view.program, view.sort + 1))

    # -- p, b, steering -----------------------------------------------------------------------
    def action_pause(self) -> None:
        if not self.state.active:
            self.say(NOT_RUNNING.format(what="pause"), WARN)
            return
        if self.paused:
            self.control.resume()
            self.say("▶ Resumed: the engine starts its next candidate.", ACCENT)
        else:
            self.control.pause()
            self.say("‖ Pausing: candidates in flight finish and are stored; no new one starts "
                     "until you press p again.", WARN)
        self.paused = not self.paused

    def action_backend(self) -> None:
        if not self.state.active:
            self.say(NOT_RUNNING.format(what="the backend switch"), WARN)
            return
        current = self.pending_backend or self.state.backend
        target = "cuda" if current == "triton" else "triton"
        refused = self.control.set_backend(target)  # decided now, by the generator
        if refused:
            self.say(f"⇄ Backend stays {pretty_backend(current)}: {refused}", WARN)
            return
        self.pending_backend = target
        self.say(f"⇄ Backend switch to {pretty_backend(target)} requested: it takes effect from "
                 "the next iteration.", ACCENT)
        if target == "cuda" and self.state.on_cpu:
            self.say("  No GPU here: CUDA candidates are compiled but cannot run (grey: not run).",
                     WARN)

    def action_steer(self) -> None:
        self.query_one("#steer", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Steering: the typed text goes to the engine (named handler: @on skips mixins)."""
        if event.input.id != "steer":
            return
        text = event.value.strip()
        event.input.clear()
        # Sent: the keys are the app's again (q quits, p pauses), as after Escape.
        self.query_one("#experiment-log").focus()
        if self.revising is not None:  # the instruction E asked for
            self.send_revision(text)
            return
        if not text:
            return
        self.say(f"you: {text}", "bold")
        if not self.state.active:
            self.say("The run is over: the instruction was not sent.", WARN)
            return
        self.control.add_instruction(text)
        if self.state.started is not None and not self.state.uses_llm:
            self.say("Free-text steering needs an LLM: the offline generator cannot act on it. "
                     "It is still recorded with the candidates from the next iteration; set "
                     "`inference` in the config to steer.", WARN)
        else:
            self.say("It joins the user instructions from the next iteration on.")

    def action_overlay_key(self, how: str) -> None:
        """Scroll the open view (Enter does nothing there); with none open, the key goes on
        to the focused widget."""
        frame = self.query_one(OverlayFrame)
        if not frame.is_open:
            raise SkipAction()
        if how:
            getattr(frame.query_one(OverlayBody), f"scroll_{how}")(animate=False)

    # -- escape, q ----------------------------------------------------------------------------
    def action_escape(self) -> None:
        """Close the open view, or leave the input line."""
        frame = self.query_one(OverlayFrame)
        if frame.is_open:
            frame.close()
        elif isinstance(self.focused, Input):
            self.cancel_revision()
            self.query_one("#experiment-log").focus()

    async def action_quit(self) -> None:
        """Stop the engine, wait briefly for the candidate in flight, then exit."""
        if self.stopping or not self.engine_running:
            self.exit(0)
            return
        self.control.stop()
        self.stopping = True
        self.say(f"■ Stopping: the candidate in flight finishes and is stored so the database "
                 f"stays consistent (waiting up to {self.quit_timeout_s:.0f} s; q again quits "
                 "now).", WARN)
        deadline = time.monotonic() + self.quit_timeout_s
        self._quit_timer = self.set_interval(0.05, lambda: self._quit_when_done(deadline))

    def _quit_when_done(self, deadline: float) -> None:
        if not self.engine_running:
            self.exit(0)
        elif time.monotonic() > deadline:
            self.exit(0, message="kernel-code: the engine is still storing the candidate in "
                      "flight; this process ends when it is stored (Ctrl+C abandons it).")
