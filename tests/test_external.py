"""Submissions from outside the generator, before any engine: what RunControl and Submission
accept, refuse and say (the engine's side is tested end to end in tests/mcp_server and
tests/tui/test_editing.py)."""

from __future__ import annotations

import pytest

from openkernel.errors import OpenKernelError
from openkernel.search.control import RunControl
from openkernel.search.external import Submission, check_author, origin_of

CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_authors_and_code_are_checked_before_anything_is_queued():
    assert check_author("user") == "user" and check_author(" agent:claude-code ") == "agent:claude-code"
    assert origin_of("agent:cursor") == "agent" and origin_of("user") == "user"
    for bad in ("bob", "agent:", "agent", "Agent:x", "agent:" + "x" * 90):
        with pytest.raises(OpenKernelError, match="expected 'user' or 'agent:<name>'"):
            Submission(code=CODE, author=bad)
    with pytest.raises(OpenKernelError, match="does not parse: line 2"):
        Submission(code="x = 1\ndef f(:\n")
    with pytest.raises(OpenKernelError, match="the code is empty"):
        Submission(code="  \n")
    with pytest.raises(OpenKernelError, match="needs the kernel to revise"):
        Submission(instruction="make it faster")
    with pytest.raises(OpenKernelError, match="backend 'rocm'"):
        Submission(code=CODE, backend="rocm")
    assert Submission(instruction=" use bigger blocks ", parent_id="abc").instruction == "use bigger blocks"


def test_a_live_run_takes_submissions_until_it_closes():
    control = RunControl()
    first = control.submit(Submission(code=CODE, author="agent:a"))
    assert not control.close("the run has ended")  # one is queued: the run judges it first
    assert control.take_submissions() == [first] and control.take_submissions() == []
    assert control.close("the run has ended")
    with pytest.raises(OpenKernelError, match="the run has ended: the kernel was not submitted"):
        control.submit(Submission(code=CODE))


def test_a_stopped_or_failed_run_refuses_what_waits_with_the_reason():
    control = RunControl()
    waiting = control.submit(Submission(code=CODE))
    control.stop()
    assert control.take_submissions() == []
    with pytest.raises(OpenKernelError, match="stopped before it was judged"):
        waiting.result(1)
    with pytest.raises(OpenKernelError, match="the run is stopping"):
        control.submit(Submission(code=CODE))
    failed = RunControl()
    queued = failed.submit(Submission(code=CODE))
    failed.close("the run could not start (no GPU)", force=True)
    with pytest.raises(OpenKernelError, match=r"could not start \(no GPU\) before it was judged"):
        queued.result(1)
