"""The engine's LLM path end to end: a real OpenAI-compatible server on 127.0.0.1 answers,
the kernel it wrote is built and judged under the interpreter, and the database records it."""

import sys
from pathlib import Path

import openkernel
from openkernel import events as ev
from openkernel.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer  # noqa: E402

KERNEL = '''Idea: one program per 4096 elements, exact erf GELU, masked tail.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
```
'''


def test_llm_search_end_to_end(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=KERNEL) as server:
        server.script = [KERNEL, "I could not write it this time, sorry."]
        inference = ('[{"model": "openai/model-a", "api_base": "%s", "api_key_env": "OK_TEST_KEY"}]'
                     % server.url)
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
            f"inference={inference}", "max_iters=2", "branches_per_iteration=2",
            "eval_config.max_workers=1", "job_name=llm", "search.seed=3",
            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}",
            "user_instructions=Prefer one pass over memory."]))
    assert events[0].generator == "llm" and events[0].models == ("openai/model-a",)
    assert events[-1].reason == "completed", events[-1].error
    assert len(server.requests) == 4
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "Prefer one pass over memory." in prompt and "class Model" in prompt
    assert "sk-test-not-a-real-key" in server.requests[0]["_auth"]

    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm") if not r.is_program0]
    assert len(rows) == 4
    malformed = [r for r in rows if not r.code]
    assert len(malformed) == 1 and malformed[0].status == "compile_error"
    assert "sorry" in malformed[0].answer and malformed[0].eval_log
    judged = [r for r in rows if r.code]
    assert all(r.correctness and r.model == "openai/model-a" and r.prompt for r in judged)
    # The same kernel came back three times: built and judged once, reused twice.
    duplicates = [r for r in judged if r.meta.get("duplicate_of")]
    assert len(duplicates) == 2 and "reused" in duplicates[0].eval_log
    stored = (tmp_path / "k.sqlite3").read_bytes()
    assert b"sk-test-not-a-real-key" not in stored  # the key never reaches the database
    assert all(e.program.kernel_exec_result.runtime > 0 for e in events
               if isinstance(e, ev.CandidateEvaluated) and e.program.code)
