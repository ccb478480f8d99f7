"""RunHeader: version, hardware, backend, problem, model(s), iteration and run state."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from kernelcode import __version__
from kernelcode.tui.formatting import pretty_backend, pretty_hardware, speedup_str
from kernelcode.tui.widgets.lines import TextLines
from openkernel.db_location import shown

SEP = ("  │  ", "#6e7681")
DETECTING = "detecting hardware…"
PHASE_WORDS = {"starting": "STARTING", "running": "RUNNING", "finished": "FINISHED",
               "stopped": "STOPPED", "stopping": "STOPPING", "failed": "FAILED",
               "error": "ERROR"}


class RunHeader(TextLines):
    """Two lines: what runs where (line 1), and where its results go (line 2).

    Every field is reactive, so the app can set them all after each batch of events and only
    an actual change repaints.
    """

    hardware = reactive(DETECTING)
    backend = reactive("triton")
    pending_backend = reactive("")  # asked for with `b`, not yet switched by the engine
    problem = reactive("…")
    models = reactive("…")
    iteration = reactive(-1)  # 0-based, as in the i<N> labels; -1 before the first
    max_iters = reactive(0)
    phase = reactive("starting")
    paused = reactive(False)
    job = reactive("")
    db_path = reactive("")
    best = reactive(-1.0)
    spend = reactive("")  # tokens and cost of the job's model calls (and the budget)
    tally = reactive("")  # the job's candidates, judged and not (openkernel.wording.Tally)
    in_flight = reactive(0)  # paused, with candidates still finishing
    dashboard_url = reactive("")

    def watch_phase(self, old: str, new: str) -> None:
        """Colour the whole bar by state, so a failed or finished run is seen from afar."""
        self.remove_class(f"-{old}")
        self.add_class(f"-{new}")

    def watch_paused(self, paused: bool) -> None:
        self.set_class(paused, "-paused")

    @property
    def state_word(self) -> str:
        """RUNNING, PAUSED, FINISHED, ...: what the right end of line 1 says."""
        if self.paused and self.phase in ("running", "starting"):
            return f"PAUSING ({self.in_flight} in flight)" if self.in_flight else "PAUSED"
        return PHASE_WORDS.get(self.phase, self.phase.upper())

    def render(self) -> Text:
        backend = pretty_backend(self.backend)
        if self.pending_backend and self.pending_backend != self.backend:
            backend += f" → {pretty_backend(self.pending_backend)} (next iteration)"
        # Counted as the i<N> labels are, from 0: "iteration 2 of 0–4" runs i2-b*.
        it = "iteration –" if self.iteration < 0 else f"iteration {self.iteration}"
        if self.max_iters:
            it += f" of 0–{self.max_iters - 1}"
        ended = self.phase in ("error", "failed")  # no "detecting…" after the run failed
        hardware = pretty_hardware(self.hardware, self.backend)
        if ended and self.hardware == DETECTING:
            hardware = "no hardware detected"
        # What must show at any width: the iteration and the state; the rest gives way
        # (issue 58: at 80 columns the line was cut before both).
        room = max(20, self.size.width - 2) if self.size.width else 10**4
        title = ("kernel code ", "bold"), (f"v{__version__}", "bold"), SEP
        fields = [(hardware, "bold #58a6ff"), (backend, "bold"), (self.problem, ""),
                  (self.models, "")]
        tail = [SEP, (it, ""), SEP, ("● " + self.state_word, "bold")]
        fixed = sum(len(t) for t, _ in tail) + len(SEP[0]) * (len(fields) - 1)
        if fixed + sum(len(t) for t, _ in (*title, *fields)) > room:
            title = ()  # the app's name and version first, then each field cut to fit
            fields = fit(fields, room - fixed)
        line1 = Text.assemble(*title, *_joined(fields), *tail)
        parts = []
        if self.job:
            parts.append(f"job {self.job}")
        if self.db_path:
            parts.append(f"db {shown(self.db_path)}")  # a URL's password masked
        if self.tally:
            parts.append(self.tally)
        if self.best > 0:
            parts.append(f"best {speedup_str(self.best)}")
        if self.spend:
            parts.append(self.spend)
        if self.dashboard_url:
            parts.append(f"dashboard {self.dashboard_url}")
        idle = "the run did not start (the chat says why)" if ended else "waiting for the engine…"
        parts = [t for t, _ in fit([(p, "") for p in parts], room - 5 * (len(parts) - 1))]
        line2 = Text("  ·  ".join(parts) or idle, style="#8b949e")
        return Text("\n").join([line1, line2])


def fit(fields: list[tuple[str, str]], room: int, least: int = 6) -> list[tuple[str, str]]:
    """(text, style) fields cut to ``room`` cells in all, the longest first, each to no less
    than ``least`` (an ellipsis says where): a long path or model list gives way first."""
    texts = [t for t, _ in fields]
    over = sum(map(len, texts)) - room
    while over > 0:
        i = max(range(len(texts)), key=lambda j: len(texts[j]))
        if len(texts[i]) <= least:
            break
        cut = min(over, len(texts[i]) - least)
        texts[i] = texts[i][: len(texts[i]) - cut - 1] + "…"
        over -= cut
    return [(t, style) for t, (_, style) in zip(texts, fields)]


def _joined(fields: list[tuple[str, str]]) -> list:
    out = []
    for i, field in enumerate(fields):
        out += [SEP, field] if i else [field]
    return out
