"""What a prompt tells the model, once each: the tolerances, the held-out shapes by name and
size, the reference's runtime when the parent is the reference, the branch's recent failures
with their condensed logs and the lines of code they name; never a kernel twice, a sweep table
twice, the sandbox line, or an operator's hint."""

from __future__ import annotations

import random
from collections import Counter

from openkernel.generators.base import ProposalRequest
from openkernel.generators.prompt import SECTIONS, build_prompt
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.search.critic import judge_by_rules
from openkernel.task import load_task

MODULE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
PROBE = TaskProbe(ok=True, input_shapes=[[64, 1024]], input_dtypes=["torch.float32"],
                  output_shapes=[[64, 1024]], output_dtypes=["torch.float32"],
                  tolerances={"float32": {"atol": 0.01, "rtol": 0.01, "max_rel_error": 0.001}},
                  heldout=[{"name": "get_extra_inputs set 0", "shapes": [[37, 999]],
                            "dtypes": ["float32"]},
                           {"name": "get_extra_inputs set 1", "shapes": [[5000]],
                            "dtypes": ["float32"]}],
                  reference_ms=0.8125)
SANDBOX = "sandbox: landlock ABI 7; scratch /home/me/runs/scratch/w-123 (threads before: 0)"


def _program(pid, label, code, **result):
    p = Program(id=pid, code=code, metadata={"label": label, "branch": 0,
                                              "description": f"try {label}"})
    p.add_eval_results(EvalResult(**result))
    return p


def _request(examples_dir, **fields) -> ProposalRequest:
    task = load_task(examples_dir / "gelu")
    fields = {"parent": None, "best": None, **fields}
    return ProposalRequest(task=task, probe=PROBE, backend="triton", iteration=2, branch=0,
                           user_instructions=task.user_instructions,
                           hardware_label="CPU (Triton interpreter)", rng=random.Random(0),
                           **fields)


def test_first_prompt_carries_tolerances_heldout_shapes_and_reference_runtime_once(examples_dir):
    ref = Program(id="ref", code="", is_program0=True, metadata={"label": "ref"})
    ref.add_eval_results(EvalResult(compiled=True, correctness=True, runtime_improvement=1.0,
                                    eval_log="The reference implementation (program 0)."))
    prompt = build_prompt(_request(examples_dir, parent=ref, best=ref, reference_ms=0.8125,
                                   reference_timing="a few calls when the task was probed"))
    for fact in ("atol 0.01, rtol 0.01, max_rel_error 0.001",
                 "get_extra_inputs set 0: [37, 999] float32; get_extra_inputs set 1: [5000] float32",
                 "The reference's median runtime here: 0.8125 ms (a few calls when the task was "
                 "probed)."):
        assert prompt.count(fact) == 1, fact
    assert "program 0" not in prompt  # the reference's own "log" says nothing to the model
    assert "## Recent failures of this branch\n\nNone." in prompt


def test_a_failed_parent_and_the_branchs_failures_with_the_code_they_name(examples_dir):
    broken = MODULE.replace("return x", "return x +")
    syntax = _program("f1", "i1-b0", broken, compiled=False, perf_score=0,
                      metadata={"syntax_error": "x"},
                      eval_log="The code did not compile (the parser refused it), so nothing was "
                               "built:\nSyntaxError: invalid syntax (line 6, column 19)\n"
                               "    return x +")
    wrong_code = MODULE.replace("return x", "y = x * 0.5\n        return y")
    mismatch = _program("f0", "i0-b0", wrong_code, compiled=True, perf_score=2, eval_log="\n".join(
        ["loading the candidate"] * 3 + [
            "Traceback (most recent call last):",
            '  File "<i0-b0>", line 6, in forward', "AssertionError: x",
            "correctness: output 0 mismatch on seed 0: max abs error 0.84 > atol 0.01 + rtol 0.01 "
            "* |ref| at [3, 17]", SANDBOX]))
    prompt = build_prompt(_request(examples_dir, parent=syntax, failures=[mismatch]))
    parent = prompt[prompt.index("## Parent kernel"):prompt.index("## Recent failures")]
    assert "SyntaxError: invalid syntax (line 6, column 19)" in parent and broken in parent
    failures = prompt[prompt.index("## Recent failures"):prompt.index("## Critic's diagnosis")]
    assert "### i0-b0 (f0): Compiled, but failed a correctness test" in failures
    assert "max abs error 0.84" in failures and wrong_code in failures
    assert "- line 6: `y = x * 0.5`" in failures  # the line its traceback names
    assert "sandbox:" not in prompt and "/home/me" not in prompt


def test_each_kernel_and_sweep_once_and_no_operator_hint(examples_dir):
    combos = [{"params": {"BLOCK": 128}, "status": "faster", "runtime": 0.5, "speedup": 2.0,
               "error": ""}]
    log = "\n".join(["Template: 1 combination(s) of 1 screened on one input set and timed together.",
                     "  BLOCK=128: 0.5000 ms, 2.00x <- winner",
                     "The winner (BLOCK=128) had the full checks:", "runtime 0.5 ms", SANDBOX])
    best = _program("b1", "i1-b1", MODULE.replace("x", "x * 1"), compiled=True, correctness=True,
                    runtime=0.5, runtime_improvement=2.0, perf_score=4, eval_log=log,
                    template_results={"space": {"BLOCK": [128]}, "space_size": 1,
                                      "combinations": combos, "winner": {"BLOCK": 128}})
    other = _program("o1", "i1-b2", MODULE.replace("x", "x + 0"), compiled=True, correctness=True,
                     runtime=0.6, runtime_improvement=1.5, perf_score=4)
    hw = Hardware(label="CPU (Triton interpreter)", device="cpu", gpu_arch="cpu", interpreter=True)
    said = tuple(judge_by_rules(best, [best], PROBE, hw))
    prompt = build_prompt(_request(examples_dir, parent=best, best=best, inspirations=[best, other],
                                   diagnoses=said))
    assert prompt.count(best.code) == 1 and prompt.count("i1-b1 (b1)") == 1
    assert prompt.count(other.code.splitlines()[-1]) == 1  # the other elite, as an inspiration
    assert prompt.count("BLOCK=128: 0.5000 ms") == 1  # the sweep once, in full
    assert "Run on a GPU" not in prompt and "sandbox:" not in prompt
    counts = Counter(line for line in prompt.splitlines() if line.startswith("## "))
    assert [counts[f"## {s}"] for s in SECTIONS] == [1] * len(SECTIONS)


def test_a_parents_long_log_is_condensed_and_its_figures_have_three_figures(examples_dir):
    """Issue 58: the parent's log is condensed as the branch's failures' are (its first error
    and verdict kept, not 300 lines), and speedups read to three significant figures, as the
    log's own lines do (0.00517x, not 0.01x)."""
    noise = [f"  File \"/usr/lib/python3/site-packages/triton/x.py\", line {i}, in f" for i in range(300)]
    slow = _program("p1", "i1-b0", MODULE, compiled=True, correctness=True, perf_score=3,
                    runtime=1.234567, runtime_improvement=0.00517, improve_over_compile=0.5659,
                    eval_log="\n".join(noise + ["runtime 1.2346 ms: 0.00517x (wall clock)"]))
    prompt = build_prompt(_request(examples_dir, parent=slow))
    parent = prompt[prompt.index("## Parent kernel"):prompt.index("## Recent failures")]
    assert "[log condensed from" in parent and parent.count("site-packages") < 20
    assert "Speedup over the reference: 0.00517x." in parent
    assert "Speedup over torch.compile: 0.566x." in parent and "Runtime: 1.23 ms" in parent
