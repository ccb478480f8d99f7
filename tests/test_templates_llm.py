"""Templated kernels on the LLM path: with prompt.allow_templated the prompt carries the form
and a worked example, a model's TEMPLATE_PARAMS answer (served by a real OpenAI-compatible server
on 127.0.0.1) is judged at every combination, and the next prompt shows the parent's sweep."""

import sys
from pathlib import Path

import openkernel
from openkernel import events as ev
from openkernel.generators.base import ProposalRequest
from openkernel.generators.prompt import build_prompt, template_results_text
from openkernel.records import TaskProbe
from openkernel.schemas import EvalResult, Program
from openkernel.store import Store
from openkernel.task import load_task

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer  # noqa: E402
from test_templates import GELU_BIG  # noqa: E402

ANSWER = "Idea: sweep the block size and the warps.\n\n```python\n" + GELU_BIG + "```\n"


def test_a_template_answer_from_the_model_is_judged_at_every_combination(tmp_path, examples_dir,
                                                                         monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=ANSWER) as server:
        inference = ('[{"model": "openai/model-t", "api_base": "%s", "api_key_env": "OK_TEST_KEY"}]'
                     % server.url)
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
            f"inference={inference}", "max_iters=1", "branches_per_iteration=2",
            "eval_config.max_workers=1",  # the twin waits for the first, then reuses it
            "eval_config.correctness_seeds=1",
            "prompt.allow_templated=true", "prompt.max_template_combinations=8", "job_name=tmpl",
            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}"]))
    assert events[-1].reason == "completed", events[-1].error
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "TEMPLATE_PARAMS" in prompt and "at most 8 combinations" in prompt
    assert "A worked example for Triton" in prompt and "gelu_kernel" in prompt
    phases = [e.phase for e in events if isinstance(e, ev.CandidatePhaseChanged)]
    assert "sweeping" in phases
    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "tmpl")
            if not r.is_program0]
    [row] = [r for r in rows if not r.meta.get("duplicate_of")]
    assert row.correctness and row.model == "openai/model-t"
    combos = row.template_results["combinations"]
    assert len(combos) == 6 and all(c["status"] in ("correct", "faster") for c in combos)
    winner = row.template_results["winner"]
    # the kernel kept is the winner's concrete code, the template stays in the metadata
    assert f"BLOCK = {winner['BLOCK']}" in row.code and f"NUM_WARPS = {winner['NUM_WARPS']}" in row.code
    assert row.template_results["template"] == GELU_BIG and row.answer == ANSWER
    # the same template answered twice: judged once, the twin kept as the same winner
    [twin] = [r for r in rows if r.meta.get("duplicate_of") == row.id]
    assert twin.label != row.label and twin.code == row.code and twin.status == row.status
    assert twin.template_results["winner"] == winner and "TEMPLATE_PARAMS = {" not in twin.code
    assert phases.count("sweeping") == 1


def test_the_next_prompt_shows_the_parents_sweep(examples_dir):
    combos = [{"params": {"BLOCK": 128, "NUM_WARPS": 4}, "status": "faster", "runtime": 0.5,
               "speedup": 2.0, "error": ""},
              {"params": {"BLOCK": 64, "NUM_WARPS": 4}, "status": "correct", "runtime": 1.0,
               "speedup": 1.0, "error": ""},
              {"params": {"BLOCK": 96, "NUM_WARPS": 4}, "status": "compile_error", "runtime": -1.0,
               "speedup": -1.0, "error": "\nValueError: arange's range must be a power of 2"}]
    result = EvalResult(compiled=True, correctness=True, runtime=0.5, runtime_improvement=2.0,
                        template_results={"space": {"BLOCK": [64, 96, 128], "NUM_WARPS": [4]},
                                          "space_size": 3, "combinations": combos,
                                          "winner": {"BLOCK": 128, "NUM_WARPS": 4}})
    parent = Program(id="p1", code="# winner code\n", metadata={"label": "i0-b0"})
    parent.add_eval_results(result)
    text = template_results_text(parent)
    assert "3 of 3 combination(s) judged" in text
    assert "BLOCK=128, NUM_WARPS=4: 0.5000 ms, 2.00x, 100% (winner)" in text
    assert "BLOCK=64, NUM_WARPS=4: 1.0000 ms, 1.00x, 50%" in text
    assert "BLOCK=96, NUM_WARPS=4: compile_error: ValueError: arange's range must be" in text
    task = load_task(examples_dir / "gelu")
    request = ProposalRequest(task=task, probe=TaskProbe(ok=True), backend="cuda", iteration=1,
                              branch=0, parent=parent, best=parent, allow_templated=True)
    prompt = build_prompt(request)
    assert text in prompt and "A worked example for CUDA C++" in prompt and "load_inline" in prompt
    plain = build_prompt(ProposalRequest(task=task, probe=TaskProbe(ok=True), backend="triton",
                                         iteration=1, branch=0, parent=parent, best=parent))
    assert "TEMPLATE_PARAMS" not in plain  # without allow_templated: no template form
    assert text in plain  # a templated parent's sweep is shown either way
