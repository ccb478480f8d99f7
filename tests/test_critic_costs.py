"""The critic's parts and the cost ledger, one at a time: rules per parent, the LLM critic
against a real local server, the prompt section, prices, budgets, and older databases."""

from __future__ import annotations

import random
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pytest

from openkernel.config import BudgetConfig, Config, ModelConfig, build_config
from openkernel.costs import Ledger, LLMCall, format_usd, price_call
from openkernel.generators.base import ProposalRequest
from openkernel.generators.llm import LLMGenerator
from openkernel.generators.prompt import build_prompt, critic_text
from openkernel.records import Hardware, TaskProbe
from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.critic import judge_by_rules
from openkernel.search.llm_critic import LLMCritic, RulesCritic, critic_prompt, parse_answer
from openkernel.store import Store
from openkernel.task import load_task

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer, critic_json  # noqa: E402

H200 = Hardware(label="NVIDIA H200 (sm_90)", device="cuda", gpu_arch="sm_90", num_gpus=1,
                peak_bandwidth_gbs=4000.0, peak_tflops={"float32": 50.0})
PROBE = TaskProbe(ok=True, flops=1e6, bytes_moved=2 * 8192 * 8192 * 4,
                  output_dtypes=["torch.float32"])


def _program(pid, label, speedup=1.2, runtime=0.2, **result):
    p = Program(id=pid, code="import torch\nclass ModelNew(torch.nn.Module):\n    pass\n",
                metadata={"label": label, "description": f"try {label}"})
    ok = speedup > 0
    p.add_eval_results(EvalResult(**{"compiled": True, "correctness": ok, "runtime": runtime if ok else -1,
                                     "runtime_improvement": speedup, "perf_score": 4 if ok else 1,
                                     "profiler_data": {"source": "ncu", "bottleneck": "memory_bound",
                                                       "dram_throughput_pct": 62.0} if ok else {},
                                     **result}))
    return p


def test_rules_judge_the_best_and_each_distinct_parent():
    best, other = _program("b", "i1-b0", 1.4), _program("o", "i1-b2", 1.1)
    ref = Program(id="r", code="", is_program0=True, metadata={"label": "ref"})
    ref.add_eval_results(EvalResult(compiled=True, correctness=True, runtime_improvement=1.0))
    broken = _program("x", "start", -1, compiled=False,
                      eval_log="loading\nerror: expected ';' at line 3\nmore")
    said = judge_by_rules(best, [best, other, ref, other, broken], PROBE, H200)
    assert [(d.kernel_id, d.role) for d in said] == [("b", "best"), ("o", "parent"), ("x", "parent")]
    assert said[0].text.startswith("Best so far i1-b0: 1.40x") and said[0].bottleneck == "memory_bound"
    assert said[1].text.startswith("Parent i1-b2: 1.10x") and "62% of peak" in said[1].text
    assert "did not build (error: expected ';' at line 3)" in said[2].text
    (generic,) = judge_by_rules(None, [ref], PROBE, H200)
    assert generic.kernel_id is None and "No correct kernel yet" in generic.text


def test_the_prompt_section_names_who_said_what(examples_dir):
    best, parent = _program("b", "i1-b0", 1.4), _program("o", "i1-b2", 1.1)
    rules = judge_by_rules(best, [parent], PROBE, H200)
    llm = [d.__class__(d.kernel_id, d.label, d.role, "Use TMA loads.", source="llm", model="m")
           for d in rules]
    request = ProposalRequest(task=load_task(examples_dir / "gelu"), probe=PROBE, backend="triton",
                              iteration=2, branch=0, parent=parent, best=best,
                              rng=random.Random(0), diagnoses=tuple(llm))
    prompt = build_prompt(request)
    section = prompt[prompt.index("## Critic's diagnosis"):prompt.index("## Inspirations")]
    assert "- Best so far i1-b0 (critic model m): Use TMA loads." in section
    assert "- Parent i1-b2 (critic model m): Use TMA loads." in section
    assert critic_text(rules).count("\n- ") == 2 and "rule-based" in critic_text(rules)


@pytest.fixture
def critic_server(monkeypatch):
    monkeypatch.setenv("CRITIC_KEY", "sk-critic-test-000000")
    with ChatServer(default=critic_json) as server:
        yield server


def _critic(server):
    cfg = ModelConfig(model="openai/critic-m", api_base=server.url, api_key_env="CRITIC_KEY",
                      num_retries=1)
    return LLMCritic(cfg, LLMGenerator([cfg], backoff_s=0.01).complete)


def test_llm_critic_reads_profiles_and_diagnoses_each_kernel(critic_server):
    best, parent = _program("b", "i1-b0", 1.4), _program("o", "i1-b2", 1.1)
    report = _critic(critic_server).judge(1, best, [parent], [best, parent], PROBE, H200, "gelu", "triton")
    assert report.warning == "" and len(report.calls) == 1 and report.calls[0].purpose == "critic"
    assert [(d.label, d.source, d.model) for d in report.diagnoses] == [
        ("i1-b0", "llm", "openai/critic-m"), ("i1-b2", "llm", "openai/critic-m")]
    assert report.diagnoses[0].headroom == 1.5 and report.diagnoses[0].bottleneck == "memory_bound"
    asked = critic_server.requests[0]["messages"][0]["content"]
    assert "Nsight Compute: source=ncu, bottleneck=memory_bound, dram_throughput_pct=62" in asked
    assert "Roofline: arithmetic intensity" in asked and "GB/s" in asked and "4000 GB/s" in asked
    assert "- i1-b0: faster 1.400x; try i1-b0" in asked


def test_llm_critic_falls_back_to_the_rules_kernel_by_kernel(critic_server):
    best, parent = _program("b", "i1-b0", 1.4), _program("o", "i1-b2", 1.1)
    critic_server.script = [lambda body: critic_json(body).replace("i1-b2", "i9-b9")]
    report = _critic(critic_server).judge(1, best, [parent], [], PROBE, H200, "gelu", "triton")
    assert [d.source for d in report.diagnoses] == ["llm", "rules"]
    assert "left out i1-b2" in report.warning
    critic_server.script = [(500, "down"), (500, "down")]
    report = _critic(critic_server).judge(1, best, [parent], [], PROBE, H200, "gelu", "triton")
    assert [d.source for d in report.diagnoses] == ["rules", "rules"] and report.calls == []
    assert "critic model openai/critic-m failed" in report.warning and "500" in report.warning
    with pytest.raises(ValueError):
        parse_answer('{"verdict": "fine"}')


def test_candidates_never_judged_are_said_as_such_by_both_critics():
    """Not run, no kernel, an evaluator fault: the rules (through either critic's judge) say
    so rather than "read the failures"; the LLM critic's prompt marks them not judged, and a
    task whose FLOPs were not counted has an unknown intensity, never a KeyError or a 0."""
    outcomes = Counter({Status.NOT_RUN: 2})
    (said,) = RulesCritic().judge(0, None, [], [], PROBE, H200, "gelu", "cuda",
                                  outcomes=outcomes).diagnoses
    assert said.text.startswith("No candidate judged yet: 2 compiled but not run here")
    (mixed,) = judge_by_rules(None, [], PROBE, H200, Counter({Status.NOT_RUN: 1,
                                                              Status.COMPILE_ERROR: 1}))
    assert "No correct kernel yet" in mixed.text and "Not judged: 1 compiled" in mixed.text
    no_flops = TaskProbe(ok=True, flops=0, bytes_moved=PROBE.bytes_moved,
                         output_dtypes=["torch.float32"])
    best = _program("b", "i1-b0", 1.4)
    failed = Program(id="g", code="", metadata={"label": "i1-b1", "description": "no kernel"})
    failed.add_eval_results(EvalResult(metadata={"generation_failed": "service"}))
    asked = critic_prompt(1, [(best, "best")], [best, failed], no_flops, H200, "gelu", "triton")
    assert "arithmetic intensity unknown" in asked and "FLOPs not counted" in asked
    assert "0 FLOPs" not in asked and "GFLOP/s" not in asked
    assert "- i1-b1: generation_failed (not judged: says nothing about its code)" in asked


def test_critic_model_resolution():
    entry = {"model": "openai/a", "api_base": "http://h/v1", "api_key_env": "K",
             "price": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 2}}
    assert build_config({"inference": [entry]}).critic_model.api_base == "http://h/v1"
    named = build_config({"inference": [entry, {"model": "openai/b"}], "critic": {"model": "openai/a"}})
    assert named.critic_model.api_key_env == "K" and named.critic_model.price is not None
    own = build_config({"critic": {"model": {"model": "openai/c", "temperature": 0.1}}})
    assert own.critic_model.model == "openai/c" and own.critic_model.temperature == 0.1
    assert build_config({"inference": [entry], "critic": {"use_llm": False}}).critic_model is None
    assert Config().critic_model is None


def test_prices_ledger_and_budgets():
    priced = ModelConfig(model="x/y", price={"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0})
    assert price_call(priced, 1_000_000, 100_000) == (pytest.approx(4.5), "config")
    assert price_call(ModelConfig(model="openai/not-a-model-xyz"), 10, 10) == (0.0, "unknown")
    usd, source = price_call(ModelConfig(model="openai/gpt-4o-mini"), 1000, 1000)
    assert source == "litellm" and usd > 0
    ledger = Ledger()
    for model, price, usd in (("a", "litellm", 0.004), ("a", "litellm", 0.004), ("b", "unknown", 0.0)):
        ledger.add(LLMCall(model, "generate", 1000, 200, usd, price))
    spend = ledger.snapshot()
    assert spend.calls == 3 and spend.tokens == 3600 and spend.cost_usd == pytest.approx(0.008)
    assert [m.model for m in spend.models] == ["a", "b"] and spend.unpriced_calls == 1
    assert spend.cost_text() == "$0.008 + unknown (1 calls unpriced)"
    assert ledger.over_budget(BudgetConfig()) is None
    assert ledger.over_budget(BudgetConfig(max_usd=0.01)) is None
    assert ledger.over_budget(BudgetConfig(max_usd=0.008)).startswith("budget.max_usd reached: $0.008")
    assert ledger.over_budget(BudgetConfig(max_tokens=3600)).startswith("budget.max_tokens reached: 3,600")
    assert [format_usd(x) for x in (0, 0.5, 0.01234, 12.5)] == ["$0.00", "$0.50", "$0.0123", "$12.50"]


def test_an_older_database_gets_the_new_critique_columns(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:  # the critiques table as first shipped
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, task_name VARCHAR(200), "
                     "job_name VARCHAR(200), backend VARCHAR(20), status VARCHAR(20))")
        conn.execute("CREATE TABLE critiques (id INTEGER PRIMARY KEY, run_id INTEGER, "
                     "task_name VARCHAR(200), job_name VARCHAR(200), iteration INTEGER, "
                     "text TEXT, source VARCHAR(20), created_at DATETIME)")
        conn.execute("INSERT INTO critiques VALUES (1, 1, 't', 'j', 0, 'old line', 'rules', "
                     "'2026-11-30 10:00:00')")
    store = Store(path)
    store.add_critique(run_id=1, task_name="t", job_name="j", iteration=1, text="new", source="llm",
                       kernel_id="k1", label="i1-b0", role="parent", model="m", headroom=1.2)
    rows = store.job_critiques("t", "j")
    assert [(r.text, r.kernel_id, r.role) for r in rows] == [("old line", None, None),
                                                             ("new", "k1", "parent")]
    with sqlite3.connect(path) as conn:
        assert {r[1] for r in conn.execute("PRAGMA table_info(critiques)")} >= {
            "kernel_id", "label", "role", "bottleneck", "headroom", "model"}
        assert "llm_calls" in {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
