"""The job page's Critic section, rendered by the real Dash app (its Flask server, no browser)."""

from __future__ import annotations

import json
import shutil

import sample_db

from kernelcode.dashboard.app import create_app, job_path
from openkernel.store import Store


def _post(client, output: str, outputs, inputs: list, state: list, changed: list) -> dict:
    resp = client.post("/_dash-update-component", json={
        "output": output, "outputs": outputs, "inputs": inputs, "state": state, "changedPropIds": changed})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["response"]


def _find(node, component_id: str):
    """The component with this id in a Dash JSON tree."""
    if isinstance(node, dict):
        if node.get("props", {}).get("id") == component_id:
            return node
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find(child, component_id)
        if found is not None:
            return found
    return None


def _text(node) -> str:
    """Every string in a Dash JSON tree, in document order."""
    if isinstance(node, str):
        return node + "\n"
    if isinstance(node, dict):
        return "".join(_text(v) for k, v in node.items() if k in ("props", "children"))
    if isinstance(node, list):
        return "".join(_text(v) for v in node)
    return ""


def _open_page(client, task: str, job: str) -> dict:
    url = [{"id": "url", "property": "pathname", "value": job_path(task, job)},
           {"id": "url", "property": "search", "value": ""}]
    return _post(client, "page.children", {"id": "page", "property": "children"}, url, [],
                 ["url.pathname"])["page"]["children"]


def _refresh(client, task: str, job: str, sig: list) -> dict:
    outs = [("graph-elements", "data"), ("job-header", "children"), ("job-health", "children"),
            ("job-critic", "children")]
    return _post(client, ".." + "...".join(f"{i}.{p}" for i, p in outs) + "..",
                 [{"id": i, "property": p} for i, p in outs],
                 [{"id": "job-sig", "property": "data", "value": sig}],
                 [{"id": "job-key", "property": "data", "value": {"task": task, "job": job}}],
                 ["job-sig.data"])


def test_job_page_has_a_critic_section_newest_last(sample):
    client = create_app(sample["path"]).server.test_client()
    page = _open_page(client, sample_db.TASK, sample_db.JOB)
    section = _find(page, "job-critic")
    assert section is not None and _find(page, "critic-table") is not None
    text = _text(section)
    assert text.startswith("Critic\n")
    stored = Store(sample["path"]).job_critiques(sample_db.TASK, sample_db.JOB)
    assert [c.iteration for c in stored] == list(range(sample_db.ITERS))
    marks = [text.index(c.text) for c in stored]
    assert marks == sorted(marks)  # iteration 0 first, the newest last
    assert "i2\n" in text and "Triton-interpreter timings" in text
    # the section sits between the graph row and the tabs
    ids = json.dumps(page)
    assert ids.index('"job-graph"') < ids.index('"job-critic"') < ids.index('"job-tabs"')


def test_a_job_without_critic_lines_says_so(sample):
    """The killed job never finished an iteration, so the critic never spoke."""
    client = create_app(sample["path"]).server.test_client()
    page = _open_page(client, sample_db.TASK, sample_db.KILLED_JOB)
    section = _find(page, "job-critic")
    assert _find(section, "critic-empty") is not None and _find(section, "critic-table") is None
    assert "No critic lines stored for this job yet" in _text(section)


def test_a_new_critic_line_changes_the_signature_and_is_redrawn(sample, tmp_path):
    path = tmp_path / "live.sqlite3"
    shutil.copy(sample["path"], path)
    app = create_app(path)
    client, source = app.server.test_client(), app.server.config["KERNELCODE_SOURCE"]
    _open_page(client, sample_db.TASK, sample_db.JOB)
    before = source.signature(sample_db.TASK, sample_db.JOB)
    assert before[0] == sample_db.ITERS * sample_db.BRANCHES + 1 and before[2] == sample_db.ITERS
    store = Store(path)
    last = store.job_critiques(sample_db.TASK, sample_db.JOB)[-1]
    store.add_critique(run_id=last.run_id, task_name=sample_db.TASK, job_name=sample_db.JOB,
                       iteration=sample_db.ITERS, text="CRITIC-MARKER-3: compute bound now.")
    store.close()
    after = source.signature(sample_db.TASK, sample_db.JOB)
    assert after[:2] == before[:2] and after[2] == before[2] + 1  # no new kernel, yet it redraws
    assert after[3] == before[3] == "completed"
    response = _refresh(client, sample_db.TASK, sample_db.JOB, list(after))
    text = _text(response["job-critic"]["children"])
    assert text.index(last.text) < text.index("CRITIC-MARKER-3")
