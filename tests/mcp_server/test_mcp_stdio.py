"""``openkernel mcp`` over stdio, as an editor launches it: the SDK's client lists the tools,
judges a correct and an incorrect GELU (CPU, Triton interpreter), and gets each bad input
back as a tool error while the server keeps serving."""

from __future__ import annotations

import pytest

from .conftest import CANDIDATES, FAST

pytestmark = pytest.mark.slow

TOOLS = {"evaluate", "start_search", "search_status", "stop_search", "best_kernel",
         "show_kernel", "list_runs", "bench", "submit"}


def test_the_tools_and_resources_are_listed_with_schemas(stdio_server):
    session, db = stdio_server
    tools = {t.name: t for t in session.list_tools().tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and "Args:" in tool.description, tool.name
        assert tool.input_schema["type"] == "object" and tool.output_schema, tool.name
    assert tools["evaluate"].input_schema["required"] == ["task", "code"]
    assert tools["evaluate"].input_schema["properties"]["backend"]["enum"] == ["triton", "cuda"]
    assert "database" in tools["submit"].output_schema["properties"]
    templates = {t.uri_template for t in session.list_resource_templates().resource_templates}
    assert templates == {"openkernel://kernels/{kernel_id}/code",
                         "openkernel://kernels/{kernel_id}/log",
                         "openkernel://jobs/{task}/{job}/kernels"}
    assert session.ok("list_runs") == {"database": str(db), "jobs": []}


def test_evaluate_judges_a_correct_and_an_incorrect_kernel(stdio_server):
    session, db = stdio_server
    good = session.ok("evaluate", task="examples/gelu", config=FAST,
                      code=(CANDIDATES / "good_gelu.py").read_text())
    assert good["status"] in ("correct", "faster") and good["correct"], good["eval_log"]
    assert good["speedup"] > 0 and good["runtime_ms"] > 0 and good["database"] == str(db)
    assert "interpreter" in good["hardware"].lower() and "sandbox: landlock" in good["eval_log"]
    bad = session.ok("evaluate", task="examples/gelu", config=FAST,
                     code=(CANDIDATES / "wrong.py").read_text())
    assert bad["status"] == "incorrect" and not bad["correct"] and bad["speedup"] is None
    assert "seed 1: output 0: relative error" in bad["eval_log"]


def test_bad_input_is_one_tool_error_and_the_server_keeps_serving(stdio_server):
    session, db = stdio_server
    code = (CANDIDATES / "good_gelu.py").read_text()
    said = {
        "parse": session.error("evaluate", task="examples/gelu", code="def f(:\n"),
        "task": session.error("evaluate", task="examples/no_such_task", code=code),
        "key": session.error("start_search", task="examples/gelu", config={"max_iterz": 1}),
        "job": session.error("search_status", job="no-such-job"),
        "stop": session.error("stop_search", job="no-such-job"),
        "submit": session.error("submit", job="no-such-job", code=code),
        "author": session.error("submit", job="no-such-job", code=code, author="bob"),
        "kernel": session.error("show_kernel", kernel="ffff"),
        "best": session.error("best_kernel", task="gelu"),
    }
    assert "does not parse: line 1" in said["parse"]
    assert "no_such_task" in said["task"]
    assert "max_iterz" in said["key"]
    # named as the tool takes it, not as the command line's --set (issue 58)
    assert "the config argument: unknown key" in said["key"] and "--set" not in said["key"]
    for key in ("job", "stop", "submit"):
        assert "no job 'no-such-job'" in said[key] and str(db) in said[key]
    assert "author 'bob'" in said["author"]
    assert "no kernel with id or prefix 'ffff'" in said["kernel"]
    assert "no correct kernel stored for task 'gelu'" in said["best"]
    assert all("Traceback" not in text and text.count("\n") == 0 for text in said.values())
    assert session.ok("list_runs")["database"] == str(db)  # still serving
