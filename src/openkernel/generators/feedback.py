"""Condense long build and test logs before they are fed back into prompts.

A 40 kB nvcc or Triton log buries the one line that matters; models then "fix" the wrong
thing. Two ways to shorten a log:

- ``condense_log``: deterministic, no model. Keeps the first compiler ``error:`` lines (with
  the line after each, where nvcc prints the offending source), Python exception lines, the
  last frame of each traceback, and verdict lines (status, mismatch, timeout, speedup), in
  their original order, bounded in length.
- ``LogCondenser``: with ``use_feedback_llm`` and a model, one extra call summarises the log;
  if that call fails the deterministic extractor is used. Logs under the size bound pass
  through untouched either way.

Before either, ``model_log`` leaves out what is meant for the operator (where the worker was
confined), and ``named_lines`` finds the lines of a candidate's own source its log points at.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

LOG_BOUND = 4000  # characters; longer logs are condensed before they reach a prompt
MAX_CONDENSED = 2000
_MAX_LINE = 300
_MAX_ERRORS = 6

_COMPILER_ERROR = re.compile(r"(\berror\b\s*(?:[A-Z]\d+)?:|: fatal error|\bundefined reference\b"
                             r"|\bCompilationError\b|ninja: build stopped)", re.IGNORECASE)
_EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt|Warning)\b"
                        r"(?::|$)")
_FRAME = re.compile(r'^\s*File "[^"]+", line \d+')
_VERDICT = re.compile(r"(status\s*:|verdict|correctness|mismatch|max(imum)?[ _]abs|max[ _]rel|"
                      r"timed? ?out|speedup|runtime|passed|failed|\bPASS\b|\bFAIL\b|"
                      r"not runnable|integrity)", re.IGNORECASE)

# Log lines meant for the operator, not the model: where the worker was confined.
_OPERATOR_LINE = re.compile(r"^sandbox: ")
# The evaluator's own short sweep table (evaluation/host/templates.summary_lines): a prompt
# that shows the sweep in full leaves the log's copy out.
_SWEEP_HEAD = re.compile(r"^Template: \d+ combination")

SUMMARY_PROMPT = (
    "Below is the build/test log of a GPU kernel candidate. Condense it for the engineer who "
    "will write the next version: quote the first real error verbatim (file, line, message), "
    "the failing check and its numbers, and the final verdict. At most 15 lines, no advice.\n\n"
    "```text\n{log}\n```"
)


def model_log(log: str, sweep_shown: bool = False) -> str:
    """An evaluation log as the model should read it: without the operator's lines (and the
    evaluator's short sweep table when the prompt shows the sweep in full)."""
    out, in_sweep = [], False
    for line in log.splitlines():
        if sweep_shown and _SWEEP_HEAD.match(line):
            in_sweep = True
            continue
        if in_sweep and line.startswith("  "):
            continue
        in_sweep = False
        if not _OPERATOR_LINE.match(line):
            out.append(line)
    return "\n".join(out)


def named_lines(log: str, label: str, code: str) -> str:
    """``- line N: <code>`` for each line of a candidate's own source its log points at
    (tracebacks name the source ``<label>``, which has no file to show the line from)."""
    numbers = re.findall(r'File "<' + re.escape(label) + r'[^"]*>", line (\d+)', log)
    lines = code.splitlines()
    out = []
    for n in dict.fromkeys(int(x) for x in numbers[-3:]):
        if 0 < n <= len(lines) and lines[n - 1].strip():
            out.append(f"- line {n}: `{lines[n - 1].strip()}`")
    return "\n".join(out)


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 3] + "..."


def condense_log(log: str, max_chars: int = MAX_CONDENSED) -> str:
    """The first errors, the last traceback frame and the verdict lines of ``log``, bounded."""
    if len(log) <= max_chars:
        return log
    lines = log.splitlines()
    keep: dict[int, str] = {}  # line index -> why kept; insertion order = priority
    errors = 0
    last_frame = None
    for i, line in enumerate(lines):
        if _FRAME.match(line):
            last_frame = i
        elif _EXCEPTION.match(line) and last_frame is not None and errors < _MAX_ERRORS:
            # The innermost frame of this traceback: where the error was raised.
            keep.setdefault(last_frame, "frame")
            keep.setdefault(last_frame + 1, "frame")
            last_frame = None
        if errors < _MAX_ERRORS and (_COMPILER_ERROR.search(line) or _EXCEPTION.match(line)):
            errors += 1
            keep.setdefault(i, "error")
            if _COMPILER_ERROR.search(line) and i + 1 < len(lines):
                keep.setdefault(i + 1, "context")
    if last_frame is not None:  # a traceback cut off before its exception line
        keep.setdefault(last_frame, "frame")
        keep.setdefault(last_frame + 1, "frame")
    for i, line in enumerate(lines):
        if _VERDICT.search(line):
            keep.setdefault(i, "verdict")
    header = (f"[log condensed from {len(lines)} lines / {len(log)} characters: first errors, "
              "last traceback frame and verdict kept]")
    budget = max_chars - len(header) - 1
    chosen: list[int] = []
    for i in keep:  # priority order: errors and frames before verdicts
        if i >= len(lines):
            continue
        cost = len(_clip(lines[i])) + 5
        if cost > budget:
            break
        chosen.append(i)
        budget -= cost
    if not chosen:  # nothing recognisable: the head and the tail say the most
        half = max(max_chars // 2 - len(header), 100)
        return f"{header}\n{log[:half].rstrip()}\n...\n{log[-half:].lstrip()}"
    out, prev = [header], -1
    for i in sorted(chosen):
        if i != prev + 1:
            out.append("...")
        out.append(_clip(lines[i]))
        prev = i
    if prev != len(lines) - 1:
        out.append("...")
    return "\n".join(out)[:max_chars]


class LogCondenser:
    """Shortens logs over ``bound`` characters, by a model call or deterministically.

    Args:
        complete: ``prompt -> (text, tokens)``; None for the deterministic extractor only.
        bound: logs at most this long are returned unchanged.
        max_chars: length limit of a deterministic summary (and of a model's, clipped).
    """

    def __init__(self, complete: Callable[[str], tuple[str, int]] | None = None,
                 bound: int = LOG_BOUND, max_chars: int = MAX_CONDENSED) -> None:
        self.complete = complete
        self.bound = bound
        self.max_chars = max_chars
        self._cache: dict[str, tuple[str, int]] = {}  # the same parent log is sampled often

    def condense(self, log: str) -> tuple[str, int, str]:
        """Return (text, tokens spent, note); the note says how it was condensed, if it was."""
        if len(log) <= self.bound:
            return log, 0, ""
        key = hashlib.sha1(log.encode("utf-8", "replace")).hexdigest()
        if key in self._cache:
            text, _ = self._cache[key]
            return text, 0, "condensed (cached)"
        if self.complete is not None:
            try:
                text, tokens = self.complete(SUMMARY_PROMPT.format(log=log[-60000:]))
                if text.strip():
                    text = "[log summarised by the feedback model]\n" + text.strip()
                    text = text[: self.max_chars * 2]
                    self._cache[key] = (text, tokens)
                    return text, tokens, "condensed by the feedback model"
            except Exception as err:  # noqa: BLE001 - any failure falls back, never stops a run
                note = f"feedback model failed ({type(err).__name__}); condensed deterministically"
                text = condense_log(log, self.max_chars)
                return text, 0, note
        text = condense_log(log, self.max_chars)
        self._cache[key] = (text, 0)
        return text, 0, "condensed deterministically"
