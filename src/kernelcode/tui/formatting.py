"""How statuses, speedups and labels look everywhere in the app.

The colours are the generation graph's (seeds/results-browser.txt), so a candidate reads the
same here, in the dashboard and in kernelfoundry-gui.
"""

from __future__ import annotations

from rich.text import Text

from openkernel.schemas import NOT_JUDGED, Program, Status
from openkernel.records import device_words
from openkernel.wording import speedup_text

# Hex values rather than theme variables: the seed fixes the meaning of each colour, and the
# same hue must show in every theme (and in the exported SVG).
STATUS_COLOURS: dict[Status, str] = {
    Status.FASTER: "#3fb950",  # green
    Status.CORRECT: "#58a6ff",  # blue
    Status.INCORRECT: "#f0883e",  # orange
    Status.TEST_TIMEOUT: "#e3c341",  # yellow
    Status.COMPILE_ERROR: "#f85149",  # red
    Status.BUILD_TIMEOUT: "#ff7eb6",  # pink
    Status.NOT_RUN: "#8b949e",  # grey
    Status.EVALUATOR_FAULT: "#6e7681",  # dark grey: the evaluator's fault, not the candidate's
    Status.GENERATION_FAILED: "#a371f7",  # purple: no kernel came back to judge
    Status.FLAGGED: "#b08060",  # brown: faster than the hardware allows, kept for review
}

STATUS_WORDS: dict[Status, str] = {
    Status.FASTER: "faster",
    Status.CORRECT: "correct",
    Status.INCORRECT: "incorrect",
    Status.TEST_TIMEOUT: "test timeout",
    Status.COMPILE_ERROR: "build error",
    Status.BUILD_TIMEOUT: "build timeout",
    Status.NOT_RUN: "not run",
    Status.EVALUATOR_FAULT: "evaluator fault",
    Status.GENERATION_FAILED: "generation failed",
    Status.FLAGGED: "flagged",
}

# One glyph per outcome for the chat panel: the eye finds failures by shape, not only colour.
STATUS_GLYPHS: dict[Status, str] = {
    Status.FASTER: "✓",
    Status.CORRECT: "✓",
    Status.INCORRECT: "✗",
    Status.TEST_TIMEOUT: "✗",
    Status.COMPILE_ERROR: "✗",
    Status.BUILD_TIMEOUT: "✗",
    Status.NOT_RUN: "∅",
    Status.EVALUATOR_FAULT: "⚠",
    Status.GENERATION_FAILED: "∅",
    Status.FLAGGED: "⚑",
}

RUNNING_STYLE = "#8b949e italic"
# A candidate in flight, by phase (openkernel.events.PHASES): what its status cell says.
PHASE_WORDS = {"generating": "generating", "queued": "queued", "paused": "paused",
               "sweeping": "sweeping",
               "building": "building",
               "waiting_for_gpu": "GPU queue", "testing": "testing", "timing": "timing",
               "profiling": "profiling", "abandoned": "not judged"}


def speedup_str(value: float | None) -> str:
    """``1.80x`` (three significant figures: ``0.00312x``), or an em dash when the speedup
    was not measured (-1 in the schema)."""
    return speedup_text(value, missing="—")


def status_text(status: Status | None, phase: str = "") -> Text:
    """The status word in its seed colour; while the candidate is in flight, its phase
    (queued, building, testing, timing...)."""
    if status is None:
        return Text(PHASE_WORDS.get(phase, phase or "starting"), style=RUNNING_STYLE)
    return Text(STATUS_WORDS[status], style=STATUS_COLOURS[status])


def is_error(status: Status | None) -> bool:
    """True for candidates whose code failed (the trajectory's ``error`` mark); not for those
    never judged (not run here, an evaluator fault, no kernel generated)."""
    return status not in (None, Status.FASTER, Status.CORRECT) and status not in NOT_JUDGED


def label_of(program: Program) -> str:
    """``i<N>-b<M>`` as the engine stored it (``ref`` and ``start`` included)."""
    return program.label


def pretty_backend(backend: str) -> str:
    """``triton`` -> ``Triton``, ``cuda`` -> ``CUDA``."""
    return {"triton": "Triton", "cuda": "CUDA"}.get(backend, backend)


def pretty_hardware(hardware: str, backend: str = "triton") -> str:
    """The header's hardware label: the engine's CPU label reads "CPU, Triton interpreter"
    (a CUDA job there: "CPU, no GPU: CUDA C++ compiled only", ``openkernel.records``)."""
    return device_words(hardware, backend)
