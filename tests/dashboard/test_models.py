"""The job page's per-model table, from a real two-model run against a local model server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_critic import _find, _open_page, _text

import openkernel
from kernelcode.dashboard.app import create_app
from kernelcode.dashboard.spend import per_model
from openkernel.store import Store

sys.path.insert(0, str(Path(__file__).parents[1]))
from llm_server import ChatServer, critic_json, is_critic  # noqa: E402
from test_engine_llm import KERNEL  # noqa: E402

BROKEN = "Idea: try.\n```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n```\n"


@pytest.fixture(scope="module")
def ensemble_db(tmp_path_factory, examples_dir):
    tmp = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    mp.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")

    def answer(body):  # model-b writes a kernel without a kernel: never correct
        if is_critic(body):
            return critic_json(body)
        return BROKEN if body["model"] == "model-b" else KERNEL

    with ChatServer(default=answer) as server:
        inference = json.dumps([
            {"model": "openai/model-a", "api_base": server.url, "api_key_env": "OK_TEST_KEY",
             "price": {"input_usd_per_mtok": 500.0, "output_usd_per_mtok": 1500.0}},
            {"model": "openai/model-b", "api_base": server.url, "api_key_env": "OK_TEST_KEY"}])
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
            f"inference={inference}", "max_iters=2", "branches_per_iteration=3",
            "eval_config.max_workers=1", "job_name=ensemble", "search.seed=5",
            f"paths.kernels_db_path={tmp / 'k.sqlite3'}", f"paths.scratch_dir={tmp / 'scratch'}"]))
    mp.undo()
    assert events[-1].reason == "completed", events[-1].error
    return tmp / "k.sqlite3", events[-1]


def test_the_job_page_shows_calls_tokens_cost_and_results_per_model(ensemble_db):
    path, finished = ensemble_db
    store = Store(path)
    kernels = [k for k in store.job_kernels("gelu", "ensemble") if not k.is_program0]
    calls = store.job_llm_calls("gelu", "ensemble")
    page = _open_page(create_app(path).server.test_client(), "gelu", "ensemble")
    table = _find(page, "models-table")
    assert table is not None
    rows = table["props"]["children"][1]["props"]["children"]
    cells = {(_text(r).split("\n")[0]): _text(r).split("\n")[:-1] for r in rows}
    assert set(cells) <= {"openai/model-a", "openai/model-b"} and "openai/model-a" in cells
    for model, row in cells.items():
        mine = [c for c in calls if c.model == model]
        cands = [k for k in kernels if k.model == model]
        critic = sum(c.purpose == "critic" for c in mine)
        assert row[1] == f"{len(mine)}" + (f" ({critic} critic)" if critic else "")
        assert row[5:8] == [str(len(cands)), str(sum(k.correctness for k in cands)),
                            str(sum(k.status == "faster" for k in cands))]
    a = cells["openai/model-a"]
    cost_a = sum(c.cost_usd for c in calls if c.model == "openai/model-a")
    assert a[4].startswith("$") and "unknown" not in a[4] and cost_a > 0
    if "openai/model-b" in cells:
        b = cells["openai/model-b"]
        assert b[4] == "$0.00 (unknown)" and b[6] == "0" and b[9] == "-"
    total = _text(_find(page, "models-total"))
    assert "unknown price" in total or "openai/model-b" not in cells
    assert finished.spend.calls == len(calls)


def test_per_model_on_a_database_without_call_records():
    rows = [{"id": "r", "is_program0": True, "status": "correct", "model": ""},
            {"id": "a", "origin": "llm", "model": "m", "status": "faster", "runtime_improvement": 1.5,
             "meta": {"llm": {"prompt_tokens": 10, "completion_tokens": 5}}},
            {"id": "b", "origin": "offline", "model": "offline:elementwise", "status": "faster"}]
    (entry,) = per_model(rows, None)
    assert entry["model"] == "m" and entry["candidates"] == 1 and entry["faster"] == 1
    assert (entry["prompt_tokens"], entry["completion_tokens"]) == (10, 5)
    assert entry["recorded"] is False and entry["best_speedup"] == 1.5


def test_a_kernels_panel_shows_what_its_calls_cost(ensemble_db):
    from kernelcode.dashboard.components import kernel_panel
    from kernelcode.dashboard.queries import kernel_detail
    from openkernel.store import open_readonly

    path, _ = ensemble_db
    row = next(k for k in Store(path).job_kernels("gelu", "ensemble")
               if k.model == "openai/model-a")
    from plotly.utils import PlotlyJSONEncoder

    panel = kernel_panel(kernel_detail(open_readonly(path), row.id))
    text = _text(json.loads(json.dumps(panel, cls=PlotlyJSONEncoder)))
    llm = row.meta["llm"]
    assert "model calls / tokens in / out / cost" in text
    assert f"1 / {llm['prompt_tokens']:,} / {llm['completion_tokens']:,} / $" in text
