"""Code extraction, the prompt's sections and order, and the deterministic log condenser."""

from __future__ import annotations

import random

import pytest

from openkernel.generators.base import ProposalRequest
from openkernel.generators.extract import extract_code
from openkernel.generators.feedback import LogCondenser, condense_log
from openkernel.generators.prompt import SECTIONS, build_prompt
from openkernel.records import TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.task import load_task

MODULE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```\n"


@pytest.mark.parametrize("tag", ["python", "py", "", "Python3"])
def test_extracts_labelled_and_unlabeled_blocks(tag):
    answer = "Idea: fuse the bias into the epilogue.\nThe parent failed because...\n\n" + fenced(
        MODULE, tag) + "\nThat's it."
    out = extract_code(answer)
    assert out.code == MODULE and out.log == ""
    assert out.description == "fuse the bias into the epilogue."
    assert out.reasoning.startswith("Idea:") and "```" not in out.reasoning


def test_prefers_the_block_defining_modelnew_and_the_last_of_several():
    sketch = "def helper():\n    pass\n"
    second = MODULE.replace("return x", "return x * 1")
    answer = ("Plan: first a helper.\n" + fenced(sketch) + "Then a C++ bit:\n"
              + fenced("int x;\n", "cpp") + fenced(MODULE) + "Better:\n" + fenced(second))
    out = extract_code(answer)
    assert out.code == second
    assert "took the last" in out.log
    assert out.description == "first a helper."


@pytest.mark.parametrize("answer, why", [
    ("I would write a kernel with tl.load and tl.store.", "no fenced code block"),
    ("Plan.\n" + fenced("x = 1\n", "cpp"), "no Python code block"),
    ("", "empty"),
])
def test_answers_without_code_give_empty_code_and_a_reason(answer, why):
    out = extract_code(answer)
    assert out.code == "" and out.error == ""
    assert why in out.log


@pytest.mark.parametrize("answer, error", [
    ("Plan.\n" + fenced("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n"),
     ["SyntaxError: ", "(line 2, column ", "\n    class ModelNew(torch.nn.Module:"]),
    ("Plan.\n" + fenced("def forward(x):\n    return x\n"), ["no code block defines class ModelNew"]),
    ("Plan.\n```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
     "        return (x\n", ["SyntaxError: ", "(line 4"]),
])
def test_code_that_is_no_valid_module_is_kept_with_the_parsers_message(answer, error):
    """A syntax error is a kernel that did not compile: its code and where it broke are kept."""
    out = extract_code(answer)
    assert out.code.strip() and out.code in answer
    assert out.error.startswith(error[0]) and all(e in out.error for e in error)
    assert ("not terminated" in out.log) == answer.rstrip().endswith("(x")


def _program(pid, code, result=None, **meta):
    prog = Program(id=pid, code=code, iteration_found=1, metadata={"branch": 2, **meta})
    if result is not None:
        prog.add_eval_results(result)
    return prog


def test_prompt_has_every_section_in_order(examples_dir):
    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"], flops=65536, bytes_moved=524288)
    best = _program("best1", MODULE.replace("x * 1", "x"), EvalResult(
        compiled=True, correctness=True, runtime=0.5, runtime_improvement=1.7, perf_score=4))
    parent_log = "Traceback (most recent call last):\n" + "noise\n" * 2000 + (
        '  File "cand.py", line 12, in forward\n    y = kernel(x)\n'
        "RuntimeError: CUDA error: misaligned address\nStatus: incorrect\n")
    parent = _program("par1", MODULE, EvalResult(compiled=True, correctness=False,
                                                 perf_score=2, eval_log=parent_log),
                      description="BLOCK 1024, vectorised")
    insp = _program("ins1", MODULE + "\n".join(f"# line {i}" for i in range(200)),
                    EvalResult(compiled=False, perf_score=0))
    request = ProposalRequest(
        task=task, probe=probe, backend="triton", iteration=3, branch=1, parent=parent,
        best=best, inspirations=[insp], user_instructions=task.user_instructions,
        hardware_label="NVIDIA H200 (sm_90)", rng=random.Random(0))
    condenser = LogCondenser()
    prompt = build_prompt(request, condense=lambda log: condenser.condense(log)[0])
    positions = [prompt.index(f"## {title}\n") for title in SECTIONS]
    assert positions == sorted(positions)
    assert prompt.startswith("## Task\n") and "NVIDIA H200" in prompt
    assert "exact (erf) form" in prompt  # the task's USER_INSTRUCTIONS, verbatim
    assert task.reference_code.strip() in prompt
    assert "aten.gelu.default" in prompt and "[64, 1024] float32" in prompt
    assert "best1" in prompt and "1.70x" in prompt
    assert "par1" in prompt and "BLOCK 1024, vectorised" in prompt
    assert "misaligned address" in prompt and "noise\n" * 50 not in prompt  # condensed log
    assert "more lines)" in prompt  # inspirations are short
    assert "@triton.jit" in prompt and "no fallback" in prompt
    assert "Memory bound" in prompt and "tensor cores" not in prompt
    assert "Idea:" in prompt and "exactly one fenced" in prompt


def test_prompt_for_a_first_kernel_and_cuda_matmul(examples_dir):
    task = load_task(examples_dir / "matmul_bias_relu")
    probe = TaskProbe(ok=True, aten_ops=["aten.mm.default", "aten.add.Tensor",
                                         "aten.relu.default"])
    ref = Program(id="ref", code=task.reference_code, is_program0=True)
    request = ProposalRequest(task=task, probe=probe, backend="cuda", iteration=0, branch=0,
                              parent=ref, best=ref)
    prompt = build_prompt(request)
    positions = [prompt.index(f"## {title}\n") for title in SECTIONS]
    assert positions == sorted(positions)
    assert "No kernel has beaten the reference yet." in prompt
    assert "The parent is the reference itself" in prompt
    assert "User instructions\n\nNone given." in prompt
    assert "load_inline" in prompt and "mma.sync" in prompt and "Memory bound" not in prompt


def test_condense_log_keeps_first_errors_frame_and_verdict():
    noise = [f"[build] compiling object {i}" for i in range(800)]
    log = "\n".join(
        noise[:400]
        + ['/tmp/k.cu(41): error: identifier "tile" is undefined', "      tile[threadIdx.x] = v;"]
        + [f"/tmp/k.cu({50 + i}): error: later error {i}" for i in range(20)]
        + noise[400:]
        + ["Traceback (most recent call last):", '  File "/w/worker.py", line 80, in build',
           "    mod = load_inline(...)", '  File "/w/cpp_extension.py", line 2100, in _run',
           "    raise RuntimeError(message)", "RuntimeError: Error building extension 'k'",
           "Verdict: compile_error (build failed after 12.3 s)"])
    out = condense_log(log, max_chars=1500)
    assert len(out) <= 1500 and out.startswith("[log condensed from")
    assert 'identifier "tile" is undefined' in out and "tile[threadIdx.x]" in out
    assert "later error 19" not in out  # only the first errors
    assert 'line 2100, in _run' in out and "raise RuntimeError(message)" in out
    assert "line 80, in build" not in out  # only the innermost frame
    assert "RuntimeError: Error building extension" in out and "Verdict: compile_error" in out
    assert "compiling object 5" not in out


def test_condenser_bounds_and_fallbacks():
    short = "Status: correct\n"
    assert LogCondenser().condense(short) == (short, 0, "")
    plain = "x" * 50 + "\n"
    text, _, note = LogCondenser(bound=100, max_chars=300).condense(plain * 40)
    assert len(text) <= 400 and note == "condensed deterministically"
    calls = []

    def model(prompt):
        calls.append(prompt)
        return "RuntimeError at line 3; verdict incorrect", 42

    llm = LogCondenser(complete=model, bound=100)
    text, tokens, note = llm.condense(plain * 40)
    assert tokens == 42 and "verdict incorrect" in text and "feedback model" in note
    assert llm.condense(plain * 40)[2] == "condensed (cached)" and len(calls) == 1

    def broken(prompt):
        raise ConnectionError("down")

    text, tokens, note = LogCondenser(complete=broken, bound=100).condense(plain * 40)
    assert tokens == 0 and "failed" in note and text.startswith("[log condensed")
