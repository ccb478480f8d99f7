"""EditActions: a person's own kernels join the live job (``e``, ``E``). A mixin of the app.

``e`` opens the selected candidate (or the best) in ``$VISUAL``/``$EDITOR`` with the app
suspended; a saved change is submitted to the engine (``RunControl.submit``) as the person's
candidate, with the edited kernel as its parent, and its verdict streams into the log like any
other (label ``u<N>``). ``E`` takes an instruction in the input line and asks the job's model
to revise the selected kernel with it; the answer streams into the chat, then it is judged.
The app decides nothing: the engine labels, judges and stores.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from textual.app import SuspendNotSupported
from textual.widgets import Input

from kernelcode.tui.formatting import label_of
from kernelcode.tui.narrate import ACCENT, WARN
from kernelcode.tui.widgets.chat import STEER_PLACEHOLDER
from openkernel.errors import OpenKernelError
from openkernel.schemas import Program
from openkernel.search.external import Submission

class EditActions:
    """``e`` and ``E``; mixed into KernelCodeApp (which provides state, control and say)."""

    revising: Program | None = None  # the kernel E asks the model to revise, while typing

    def _kernel_to_edit(self, what: str) -> Program | None:
        """The candidate under the log's cursor if it has code, else the job's best."""
        if not self.state.active:
            self.say(f"The run is over: {what} has no live job to join. (A kernel can still "
                     "join the finished job from Python: openkernel.submit(task, code, job=NAME).)",
                     WARN)
            return None
        log = self.query_one("#experiment-log")
        labels = log.labels
        row = (self.state.candidates.get(labels[log.cursor_row])
               if 0 <= log.cursor_row < len(labels) else None)
        program = row.program if row is not None and row.program is not None else None
        if program is None or not program.code.strip() or program.is_program0:
            program = self.state.best
        if program is None:
            self.say(f"Nothing to start {what} from yet: wait for a judged candidate.", WARN)
        return program

    # -- e -------------------------------------------------------------------------------------
    def action_edit(self) -> None:
        program = self._kernel_to_edit("an edited kernel")
        if program is None:
            return
        label = label_of(program)
        folder = Path(tempfile.mkdtemp(prefix="kernel-code-edit-"))
        path = folder / f"{label}.py"
        path.write_text(program.code, encoding="utf-8")
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            status = self._run_editor(shlex.split(editor) + [str(path)])
            edited = path.read_text(encoding="utf-8")
        except OSError as err:
            self.say(f"Could not run the editor {editor!r} ({err.strerror or err}): set $EDITOR. "
                     "Nothing was submitted.", WARN)
            return
        finally:
            self.refresh()
        if status != 0:
            self.say(f"The editor ({editor}) exited with status {status}: nothing was "
                     "submitted.", WARN)
        elif edited == program.code:
            self.say(f"No change to {label}: nothing was submitted.")
        else:
            self._submit(f"✎ Your edit of {label} is submitted: it is judged as soon as a "
                         "worker is free.", code=edited, author="user", parent_id=program.id,
                         description=f"edited by hand from {label}")
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()

    def _run_editor(self, command: list[str]) -> int:
        """The editor's exit status, run with the app suspended (where the terminal can be:
        headless, the editor runs as it is)."""
        try:
            with self.suspend():
                return subprocess.call(command)
        except SuspendNotSupported:
            return subprocess.call(command, stdin=subprocess.DEVNULL)

    def _submit(self, said: str, **fields) -> None:
        """Queue a Submission into the live job, or say in one line why not."""
        try:
            self.control.submit(Submission(**fields))
        except OpenKernelError as err:
            self.say(f"Not submitted: {err}", WARN)
            return
        self.say(said, ACCENT)

    # -- E -------------------------------------------------------------------------------------
    def action_revise(self) -> None:
        if self.state.started is not None and not self.state.uses_llm:
            self.say("E asks the job's model to revise a kernel, and this run has none (the "
                     "offline generator cannot follow an instruction): set `inference` in the "
                     "config. e edits a kernel yourself.", WARN)
            return
        program = self._kernel_to_edit("a revised kernel")
        if program is None:
            return
        self.revising = program
        steer = self.query_one("#steer", Input)
        steer.placeholder = (f"How should the model revise {label_of(program)}? (Enter sends, "
                             "Esc cancels)")
        steer.focus()

    def send_revision(self, text: str) -> None:
        """The instruction typed after E: the model revises the kernel with it."""
        program, self.revising = self.revising, None
        self.query_one("#steer", Input).placeholder = STEER_PLACEHOLDER
        if not text:
            self.say("No instruction: nothing was asked.")
            return
        self.say(f"you (revise {label_of(program)}): {text}", "bold")
        self._submit(f"✎ Asked the model to revise {label_of(program)}: its answer streams "
                     "here, then it is judged.", author="user", parent_id=program.id,
                     instruction=text)

    def cancel_revision(self) -> None:
        if self.revising is not None:
            self.revising = None
            self.query_one("#steer", Input).placeholder = STEER_PLACEHOLDER
