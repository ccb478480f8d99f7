"""KernelCodeApp: the main screen, the engine worker, and how events reach the panels.

Events flow one way: the engine (or an injected source) runs in a thread worker and feeds an
``EventBuffer``; the buffer posts one coalescing ``EventsReady`` message; the UI drains a batch,
folds it into ``RunState``, writes the chat lines and rows, and redraws the other panels once
per batch. The keys (``KeyActions``) only talk to ``RunControl``; the app holds no engine logic.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive

from kernelcode.tui.actions import KeyActions
from kernelcode.tui.bridge import EventBuffer, EventsReady, pump
from kernelcode.tui.editing import EditActions
from kernelcode.tui.engine import EventSource, engine_events, source_events
from kernelcode.tui.narrate import narrate
from kernelcode.tui.screens.overlay import OverlayFrame
from kernelcode.tui.state import RunState
from kernelcode.tui.widgets.chat import ChatPanel
from kernelcode.tui.widgets.experiment_log import ExperimentLog
from kernelcode.tui.widgets.footer import KeysFooter
from kernelcode.tui.widgets.header import RunHeader
from kernelcode.tui.widgets.profiling import ProfilingPanel
from kernelcode.tui.widgets.streams import StreamView
from kernelcode.tui.widgets.trajectory import TrajectoryPanel
from openkernel import events as ev
from openkernel.costs import format_tokens, format_usd
from openkernel.search.control import RunControl

# Events taken per drain, and drains at most every DRAIN_INTERVAL_S: a fast stream is applied
# in batches a few frames apart, so between them the loop is free for keys and redraws.
BATCH_LIMIT = 200
DRAIN_INTERVAL_S = 0.05
# The panels show what the drains folded into the state at most every SHOW_INTERVAL_S (at once
# in a normal run): each showing costs a frame that repaints most of the screen, so under a
# fast stream they come a few times a second, and a key press never waits behind many.
SHOW_INTERVAL_S = 0.25
# Under a fast stream the app keeps thousands of candidates (programs, rows, chat strips), and
# Python's full garbage collections, which walk every live object, grew to 150-300 ms pauses
# in the middle of frames. While events arrive faster than BUSY_EVENTS_PER_S, what is alive is
# frozen (gc.freeze) every FREEZE_INTERVAL_S so collections only walk what is new; once the
# stream calms down it is unfrozen and the collector again sees (and can free) everything.
BUSY_EVENTS_PER_S = 200
FREEZE_INTERVAL_S = 2.0


class KernelCodeApp(EditActions, KeyActions, App[int]):
    """The kernel-code terminal app. Build it with :func:`create_app`."""

    CSS_PATH = "app.tcss"
    TITLE = "kernel code"
    AUTO_FOCUS = "#experiment-log"
    BINDINGS = [
        Binding("d", "dashboard", "Dashboard"),
        Binding("k", "kernel_diff", "Kernel diff"),
        Binding("r", "roofline", "Roofline"),
        Binding("s", "skills", "Skills"),
        Binding("p", "pause", "Pause/resume"),
        Binding("b", "backend", "Backend"),
        Binding("e", "edit", "Edit"),
        Binding("E", "revise", "Revise"),
        Binding("slash", "steer", "Steer"),
        Binding("q", "quit", "Quit"),
        Binding("escape", "escape", "Back", show=False),
        Binding("o", "sort_combinations", "Sort combinations", show=False),
        # While a view is open these scroll it (the focus stays on the panels); otherwise
        # they pass through to the focused widget.
        *(Binding(key, f"overlay_key('{how}')", show=False, priority=True)
          for key, how in (("up", "up"), ("down", "down"), ("left", "left"), ("right", "right"),
                           ("pageup", "page_up"), ("pagedown", "page_down"),
                           ("home", "home"), ("end", "end"), ("enter", ""))),
    ]

    paused: reactive[bool] = reactive(False, init=False)
    pending_backend: reactive[str] = reactive("", init=False)
    stopping: reactive[bool] = reactive(False, init=False)

    def __init__(self, task_or_config: str | Path | None = None, overrides: Sequence[str] = (),
                 *, event_source: EventSource | None = None, quit_timeout_s: float = 5.0):
        super().__init__()
        self.task_or_config, self.overrides = task_or_config, tuple(overrides)
        self.event_source = event_source
        self.quit_timeout_s = quit_timeout_s
        self.control = RunControl()
        self.state = RunState()
        self.buffer = EventBuffer(lambda: self.post_message(EventsReady()))
        self.events_applied = 0  # for tests and the benchmark
        self._last_drain = 0.0
        self._drain_scheduled = False
        self._touched: dict[str, object] = {}  # rows changed since the panels were last shown
        self._last_show = 0.0
        self._show_scheduled = False
        self._events_since_show = 0
        self._last_freeze = 0.0
        self._frozen = False

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="main"):
            yield ChatPanel(id="chat")
            with Vertical(id="right"):
                yield TrajectoryPanel(id="trajectory")
                yield ProfilingPanel(id="profiling")
                yield ExperimentLog(id="experiment-log")
        yield KeysFooter()
        yield OverlayFrame(id="overlay-frame")

    def on_mount(self) -> None:
        titles = {"#chat": "Chat / Agent", "#trajectory": "Optimization Trajectory",
                  "#profiling": "Profiling Summary", "#experiment-log": "Experiment Log"}
        for selector, title in titles.items():
            self.query_one(selector).border_title = title
        self.engine_worker = self.run_engine()
        self.prewarm()

    @work(thread=True, exit_on_error=False, group="prewarm")
    def prewarm(self) -> None:
        """Load the syntax highlighter now, so the first kernel diff opens without that wait."""
        from kernelcode.tui.screens.diff import side_by_side

        side_by_side("x = 1", "x = 2", "a", "b")

    def on_unmount(self) -> None:
        """However the app ends, tell the engine to stop after the candidates in flight."""
        self.control.stop()
        if self._frozen:
            gc.unfreeze()
            self._frozen = False

    # -- the engine, in a thread ---------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="engine", name="engine")
    def run_engine(self) -> None:
        """Iterate the engine's (or the injected) events in this worker thread."""
        if self.event_source is not None:
            source = self.event_source
            pump(lambda: source_events(source, self.control), self.buffer)
        else:
            pump(lambda: engine_events(self.task_or_config, self.overrides, self.control),
                 self.buffer)

    @property
    def engine_running(self) -> bool:
        return not self.engine_worker.is_finished

    @on(EventsReady)
    def _drain(self) -> None:
        """Apply what is buffered now, or schedule it if the last batch was very recent."""
        if self._drain_scheduled:
            return
        wait = self._last_drain + DRAIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            self._drain_scheduled = True
            self.set_timer(wait, self._drain_now)
        else:
            self._drain_now()

    def _drain_now(self) -> None:
        self._drain_scheduled = False
        self._last_drain = time.monotonic()
        self.apply_events(self.buffer.drain(BATCH_LIMIT))

    def apply_events(self, batch: list[object]) -> None:
        """Fold a batch of events into the state; the panels follow (see ``show_state``)."""
        if not batch:
            return
        touched = self._touched  # label -> row: a row changed many times is drawn once
        lines = []
        for event in batch:
            rows = self.state.apply(event)
            for row in rows:
                touched[row.label] = row
            if isinstance(event, ev.CandidateWithdrawn):  # never a candidate: no row
                touched.pop(event.label, None)
                self.query_one(ExperimentLog).remove(event.label)
            elif isinstance(event, ev.IterationStarted):
                self.pending_backend = ""  # the engine took (or refused) the switch by now
            elif isinstance(event, ev.RunPaused):
                self.set_reactive(KernelCodeApp.paused, True)
            lines.extend(narrate(event, rows[0] if len(rows) == 1 else None))
        self.query_one(ChatPanel).queue(lines)
        self.events_applied += len(batch)
        self._events_since_show += len(batch)
        if self._show_scheduled:
            return
        wait = self._last_show + SHOW_INTERVAL_S - time.monotonic()
        if wait > 0:
            self._show_scheduled = True
            self.set_timer(wait, self.show_state)
        else:
            self.show_state()

    @property
    def showing_pending(self) -> bool:
        """True while applied events wait for the panels' next showing (tests wait on it)."""
        return self._show_scheduled or self.query_one(ChatPanel).pending

    def show_state(self) -> None:
        """Bring the table, the chat and the other panels up to the state, in one frame."""
        self._show_scheduled = False
        now = time.monotonic()
        rate = self._events_since_show / max(now - self._last_show, SHOW_INTERVAL_S)
        self._last_show, self._events_since_show = now, 0
        self._pace_garbage_collector(busy=rate > BUSY_EVENTS_PER_S)
        rows, self._touched = self._touched, {}
        self.query_one(ExperimentLog).upsert_many(rows.values())
        self.query_one(ChatPanel).flush()
        self.query_one(StreamView).show(self.state)
        self.refresh_panels()

    def _pace_garbage_collector(self, busy: bool) -> None:
        now = time.monotonic()
        if busy and now - self._last_freeze >= FREEZE_INTERVAL_S:
            gc.collect(1)  # young garbage first, so little of it is frozen with the rest
            gc.freeze()
            self._last_freeze, self._frozen = now, True
        elif not busy and self._frozen:
            gc.unfreeze()
            self._frozen = False

    def refresh_panels(self) -> None:
        """Copy the state into the header and redraw the trajectory and profile panels."""
        s, header = self.state, self.query_one(RunHeader)
        if s.started is not None:
            header.hardware = s.started.hardware
            header.models = ", ".join(s.started.models) or s.started.generator
            header.job, header.db_path = s.started.job_name, s.started.db_path
        header.problem = s.problem or header.problem
        header.backend, header.pending_backend = s.backend, self.pending_backend
        header.iteration, header.max_iters = s.iteration, s.max_iters
        header.phase = "stopping" if self.stopping and s.active else s.phase
        header.paused, header.best = self.paused, s.best_speedup
        header.in_flight = s.in_flight if self.paused else 0
        header.tally = s.tally.words() if s.started is not None else ""
        header.spend = spend_text(s)
        self.query_one(TrajectoryPanel).show(s)
        self.query_one(ProfilingPanel).show(s)

    def watch_paused(self) -> None:
        self.refresh_panels()

    def watch_pending_backend(self) -> None:
        self.refresh_panels()

    def watch_stopping(self) -> None:
        self.refresh_panels()

    @on(ExperimentLog.RowSelected, "#experiment-log")
    def _open_candidate(self, event: ExperimentLog.RowSelected) -> None:
        self.open_candidate(event.label)


def spend_text(state: RunState) -> str:
    """The header's ``tokens 12.3k · $0.0123 of $0.50``; empty before the first model call."""
    started, spend = state.started, state.spend
    limits = (started.max_usd, started.max_tokens) if started else (None, None)
    if spend is None and not any(limits):
        return ""
    tokens, usd = (spend.tokens, spend.cost_text()) if spend else (0, format_usd(0.0))
    text = f"tokens {format_tokens(tokens)}"
    if limits[1]:
        text += f" of {format_tokens(limits[1])}"
    text += f" · {usd}"
    if limits[0]:
        text += f" of {format_usd(limits[0])}"
    if state.budget_reached:
        text += " · budget reached"
    return text


def create_app(task_or_config: str | Path | None = None, overrides: Sequence[str] = (), *,
               event_source: EventSource | None = None) -> KernelCodeApp:
    """Build the app as the CLI, the tests and the benchmark all do.

    Args:
        task_or_config: A task file or folder, or a run config YAML; None runs the shipped
            default example.
        overrides: ``key.sub=value`` strings, as ``--set`` on the command line.
        event_source: Events to show instead of a real run (an iterable, or a function of the
            app's RunControl returning one): for snapshot tests and the benchmark only.
    """
    return KernelCodeApp(task_or_config, overrides, event_source=event_source)
