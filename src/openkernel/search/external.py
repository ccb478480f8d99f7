"""Candidates from outside the generator: kernels written by a person or a coding agent, and a
model's revision of a kernel that a person asked for.

A ``Submission`` is queued into a live job with ``RunControl.submit``; the search loop takes
it between candidates, labels it ``u<N>`` (the job's N-th such candidate), judges it with the
same pipeline as its own candidates, stores it with its parent and its author, and adds it to
the archive, where it can be a later candidate's parent or inspiration. ``outcome`` resolves to
the stored ``Program``, or to an ``OpenKernelError`` saying why it was not judged (the run
stopped, the parent is not in the job).

Bad input is refused at once, before anything is queued: code that does not parse, an author
that is neither ``user`` nor ``agent:<name>``.
"""

from __future__ import annotations

import ast
import re
from concurrent.futures import Future
from dataclasses import dataclass, field

from openkernel import syntax
from openkernel.errors import OpenKernelError

USER = "user"
_AGENT = re.compile(r"^agent:[A-Za-z0-9][A-Za-z0-9._@/ -]{0,80}$")
LABEL_PREFIX = "u"  # u1, u2, ...: the job's candidates from outside the generator


def check_author(author: str) -> str:
    """``user`` or ``agent:<name>`` (a name of letters, digits and ``._@/ -``)."""
    author = (author or "").strip()
    if author == USER or _AGENT.match(author):
        return author
    raise OpenKernelError(f"author {author!r}: expected 'user' or 'agent:<name>' "
                          "(e.g. agent:claude-code)")


def check_code(code: str) -> str:
    """The kernel module, if it parses as Python; otherwise one message with the line."""
    if not code.strip():
        raise OpenKernelError("the code is empty: send the whole kernel module (ModelNew)")
    try:
        syntax.parse(code)
    except SyntaxError as err:
        raise OpenKernelError(f"the code does not parse: line {err.lineno}: {err.msg}") from None
    return code


def origin_of(author: str) -> str:
    """The ``origin`` column of such a candidate: ``user`` or ``agent``."""
    return author.split(":", 1)[0]


@dataclass
class Submission:
    """A candidate from outside the generator, for ``RunControl.submit``.

    Args:
        code: The whole kernel module (a ``ModelNew``); empty when ``instruction`` is given.
        author: ``user`` or ``agent:<name>``.
        parent_id: The job's kernel it was derived from (None: written from the reference).
        description: One line: what it tries (shown in the log and the graph).
        backend: ``triton`` or ``cuda``; None: the job's backend at the time.
        instruction: Ask the job's model to revise the parent with this instruction; the
            answer streams like a generated candidate's, then its code is judged.
    """

    code: str = ""
    author: str = USER
    parent_id: str | None = None
    description: str = ""
    backend: str | None = None
    instruction: str = ""
    outcome: Future = field(default_factory=Future, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.author = check_author(self.author)
        if self.backend not in (None, "triton", "cuda"):
            raise OpenKernelError(f"backend {self.backend!r}: expected triton or cuda")
        self.instruction = self.instruction.strip()
        if self.instruction:
            if self.parent_id is None:
                raise OpenKernelError("a revision needs the kernel to revise (parent_id)")
        else:
            check_code(self.code)

    def refuse(self, why: str) -> None:
        """It will not be judged: whoever waits on ``outcome`` gets ``why``."""
        if not self.outcome.done():
            self.outcome.set_exception(OpenKernelError(why))

    def result(self, timeout: float | None = None):
        """The judged ``Program`` (waits; raises ``OpenKernelError`` if it was refused)."""
        return self.outcome.result(timeout)
