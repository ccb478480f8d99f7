"""What the MCP server's search_status says of a job (issue 58): speedups to three significant
figures as every view, and the job's model calls, tokens and cost, live or stored."""

from __future__ import annotations

from openkernel import events as ev
from openkernel.costs import Ledger, LLMCall
from openkernel.mcp_server.jobs import LiveJob, spend_fields
from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.spending import stored_ledger
from openkernel.store import Store


def _judged(label: str, speedup: float) -> ev.CandidateEvaluated:
    p = Program(id=label, code="x", metadata={"label": label})
    p.add_eval_results(EvalResult(compiled=True, correctness=True, runtime_improvement=speedup))
    return ev.CandidateEvaluated(p, Status.CORRECT, label, speedup, speedup)


def test_live_status_says_three_figures_and_what_the_models_cost():
    job = LiveJob("search", "gelu", "j", "k.sqlite3", max_iters=2)
    job.see(_judged("i0-b0", 0.5659))
    job.see(_judged("i0-b1", 0.00517))
    ledger = Ledger()
    ledger.add(LLMCall("openai/m", "generate", 1200, 300, 0.0042, "config"))
    ledger.add(LLMCall("local/m", "generate", 100, 50, 0.0, "unknown"))
    job.see(ev.ModelCalled("i0-b1", 0, LLMCall("local/m", "generate", 100, 50, 0.0, "unknown"),
                           ledger.snapshot()))
    status = job.status()
    assert status.recent == ["i0-b0 correct 0.566x", "i0-b1 correct 0.00517x"]
    assert (status.model_calls, status.tokens, status.cost_usd) == (2, 1650, 0.0042)
    assert status.cost == "$0.0042 + unknown (1 calls unpriced)"


def test_a_stored_jobs_calls_are_counted(tmp_path):
    store = Store(tmp_path / "k.sqlite3")
    run = store.start_run(task_name="gelu", job_name="j", backend="triton", gpu_arch="cpu",
                          hardware="cpu", generator="llm", models=["openai/m"], config={},
                          task_path="x")
    for tokens in (100, 200):
        store.add_llm_call(run_id=run.id, task_name="gelu", job_name="j", iteration=0,
                           model="openai/m", purpose="generate", prompt_tokens=tokens,
                           completion_tokens=10, cost_usd=0.001, price="litellm")
    fields = spend_fields(stored_ledger(store, "gelu", "j").snapshot())
    assert fields == {"model_calls": 2, "tokens": 320, "cost_usd": 0.002, "cost": "$0.002"}
    store.close()
