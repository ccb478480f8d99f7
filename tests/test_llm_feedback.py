"""Failures reach the model, end to end against a real OpenAI-compatible server on 127.0.0.1:
a kernel with wrong results is the parent of its branch's next candidate (its mismatch log
and code in the prompt); an answer that does not parse is a compile error stored with its
code; the prompt after it lists the branch's earlier failure too; the LLM critic reads them;
the prompts carry the tolerances, the held-out shapes and the reference's runtime; the
instructions that shaped each kernel are stored with it and in its trace. One engine run (one
branch, three iterations, one candidate built) serves every test."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import openkernel
from openkernel.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer, critic_json, is_critic  # noqa: E402
from test_engine_llm import KERNEL  # noqa: E402

pytestmark = pytest.mark.slow  # one engine run: ~40 s on a quiet 2-core machine

SYNTAX = KERNEL.replace("(1.0 + tl.erf(x * 0.7071067811865476))", "(1.0 + tl.erf(x * 0.7071067811865476)")
SYNTAX2 = KERNEL.replace("mask = offs < n", "mask = offs <")
WRONG = KERNEL.replace("y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))", "y = 0.5 * x")
# i0 gives wrong results, i1 does not parse, nor does i2.
SCRIPT = {0: WRONG, 1: SYNTAX, 2: SYNTAX2}


def answer(body):
    if is_critic(body):
        return critic_json(body)
    prompt = body["messages"][-1]["content"]
    return SCRIPT[int(re.search(r"Iteration (\d+), branch 0\.", prompt).group(1))]


def _code(answer_text: str) -> str:
    return answer_text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("feedback")
    mp = pytest.MonkeyPatch()
    mp.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    try:
        with ChatServer(default=answer) as server:
            inference = json.dumps([{"model": "openai/model-a", "api_base": server.url,
                                     "api_key_env": "OK_TEST_KEY"}])
            events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
                f"inference={inference}", "max_iters=3", "branches_per_iteration=1",
                "eval_config.max_workers=1", "job_name=fb", "search.seed=3",
                "search.exploration_ratio=0", "user_instructions=Prefer one pass over memory.",
                "traces.enabled=true", f"traces.dir={tmp / 'traces'}",
                f"paths.kernels_db_path={tmp / 'k.sqlite3'}",
                f"paths.scratch_dir={tmp / 'scratch'}"]))
    finally:
        mp.undo()
    rows = {r.label: r for r in Store(tmp / "k.sqlite3").job_kernels("gelu", "fb")}
    return tmp, events, server, rows


def _section(prompt: str, title: str) -> str:
    start = prompt.index(f"## {title}\n")
    return prompt[start:prompt.index("\n## ", start + 1)]


def test_a_syntax_error_is_a_compile_error_with_its_code(run):
    _, events, _, rows = run
    assert events[-1].reason == "completed", events[-1].error
    assert rows["i0-b0"].status == "incorrect"
    row = rows["i1-b0"]
    assert row.status == "compile_error" and not row.compiled
    assert row.code == _code(SYNTAX) and row.answer == SYNTAX
    assert row.meta["syntax_error"].startswith("SyntaxError: ") and "(line 12" in row.eval_log
    assert "generation_failed" not in row.meta


def test_the_next_prompt_builds_on_the_branchs_failures(run):
    _, _, _, rows = run
    # nothing is correct: the branch's latest failure is its parent, its log and code shown
    assert rows["i1-b0"].parent_id == rows["i0-b0"].id
    parent = _section(rows["i1-b0"].prompt, "Parent kernel")
    assert _code(WRONG).strip() in parent and "elements outside atol=0.01" in parent
    assert rows["i2-b0"].parent_id == rows["i1-b0"].id
    parent = _section(rows["i2-b0"].prompt, "Parent kernel")
    assert _code(SYNTAX).strip() in parent and "SyntaxError: " in parent
    # the earlier failure (the parent left out) in a section of its own
    failures = _section(rows["i2-b0"].prompt, "Recent failures of this branch")
    assert "### i0-b0" in failures and "### i1-b0" not in failures
    assert _code(WRONG).strip() in failures and "elements outside atol=0.01" in failures
    assert _section(rows["i0-b0"].prompt, "Recent failures of this branch").endswith("None.\n")


def test_the_critic_reads_the_failures(run):
    _, _, server, _ = run
    asked = [r["messages"][-1]["content"] for r in server.requests if is_critic(r)]
    assert len(asked) == 2  # before iterations 1 and 2 (after the last: no best to read)
    assert "### i0-b0 (a parent)" in asked[0] and "- i0-b0: incorrect; " in asked[0]
    assert "first error: " in asked[0] and "elements outside atol" in asked[0]
    assert all("sandbox:" not in a for a in asked)  # the stored log has it: for the operator
    assert "### i1-b0 (a parent)" in asked[1] and "first error: SyntaxError" in asked[1]
    assert _code(SYNTAX).splitlines()[11] in asked[1]  # its code, the broken line included


def test_prompts_carry_tolerances_heldout_shapes_and_the_reference_runtime(run):
    _, _, _, rows = run
    first = rows["i0-b0"].prompt
    assert first.count("float32: atol 0.01, rtol 0.01, max_rel_error 0.001") == 1
    assert first.count("get_extra_inputs set 0: [37, 999] float32; get_extra_inputs set 1: "
                       "[5000] float32") == 1
    said = re.findall(r"The reference's median runtime here: ([\d.]+) ms \(a few calls when "
                      r"the task was probed", first)
    assert len(said) == 1 and float(said[0]) > 0
    assert "\nsandbox: " in rows["i0-b0"].eval_log  # kept for the operator...
    for row in rows.values():  # ...never shown to the model
        assert "sandbox:" not in row.prompt and "Run on a GPU" not in row.prompt


def test_the_instructions_that_shaped_a_kernel_are_stored_with_it(run):
    from openkernel.store.traces import read_dataset

    tmp, _, _, rows = run
    candidates = [r for r in rows.values() if not r.is_program0]
    assert len(candidates) == 3
    for row in candidates:
        assert "Prefer one pass over memory." in row.user_instructions
        assert "exact (erf) form" in row.user_instructions  # the task's USER_INSTRUCTIONS
    traced = read_dataset(tmp / "traces").to_pylist()
    assert len(traced) == 3 and all("Prefer one pass over memory." in t["user_instructions"]
                                    for t in traced)
