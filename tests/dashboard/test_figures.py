"""Pure builders: graph elements, figures, profiler helpers, components (no browser, no server)."""

from __future__ import annotations

import re
from pathlib import Path

from kernelcode.dashboard import figures, graph, profile
from kernelcode.dashboard.components import code_block, diff_table
from kernelcode.dashboard.pages.panels import table_rows


def _row(i, status="faster", it=0, br=0, parent=None, speed=1.5, **extra):
    correct = status in ("faster", "correct")
    return {"id": f"k{i}", "label": f"i{it}-b{br}", "iteration": it, "branch": br, "parent_id": parent,
            "status": status, "correctness": correct, "runtime_improvement": speed if correct else -1.0,
            "runtime": 0.1 / speed if correct else -1.0, "score": 4 + speed if correct else 0.0,
            "is_program0": False, "profiler_data": {}, "features": {}, "meta": {}, **extra}


def test_status_colours_follow_the_seed_table():
    from openkernel.schemas import Status

    assert graph.STATUS_COLORS == {
        "faster": "#2ca02c", "correct": "#1f77b4", "incorrect": "#ff7f0e", "test_timeout": "#f2c500",
        "compile_error": "#d62728", "build_timeout": "#ff69b4", "not_run": "#9e9e9e",
        # outside the seed's table: no verdict on the candidate's code
        "evaluator_fault": "#5f6368", "generation_failed": "#9467bd",
        # outside it too: passed the checks, faster than the hardware allows (kept for review)
        "flagged": "#8c564b"}
    assert set(graph.STATUS_COLORS) == {s.value for s in Status} == set(graph.STATUS_MEANINGS)
    styles = {s["selector"]: s["style"] for s in graph.stylesheet()}
    assert styles[".best"]["background-color"] == "#ffffff"
    assert styles[".best"]["border-color"] == "#000000"
    assert styles["edge"]["target-arrow-shape"] == "triangle"
    for status, colour in graph.STATUS_COLORS.items():
        assert styles[f".{status}"]["background-color"] == colour


def test_best_kernel_is_highest_score_among_correct_and_never_program0():
    rows = [_row(0, speed=3.0, is_program0=True), _row(1, speed=1.2), _row(2, speed=2.0),
            _row(3, "incorrect"), _row(4, "correct", speed=0.9)]
    assert graph.best_kernel_id(rows) == "k2"
    assert graph.best_kernel_id([_row(0, "compile_error")]) is None
    # a tie goes to the earlier kernel, as in the search's archive and openkernel.store.summary
    tie = [_row(5, speed=2.0, created_at="2026-12-01 10:00:02"), _row(6, speed=2.0, created_at="2026-12-01 10:00:01")]
    assert graph.best_kernel_id(tie) == "k6"


def test_elements_layers_arrows_sizes_and_best_class():
    rows = [_row(0, it=0, br=0, speed=1.1), _row(1, "compile_error", it=0, br=1),
            _row(2, it=1, br=0, parent="k0", speed=2.5), _row(3, "correct", it=1, br=1, parent="k0", speed=0.8),
            _row(4, it=2, br=0, parent="missing")]
    els = graph.graph_elements(rows, best_id="k2")
    nodes = {e["data"]["id"]: e for e in els if "position" in e}
    edges = [e["data"] for e in els if "source" in e.get("data", {})]
    assert len(nodes) == 5
    assert {(e["source"], e["target"]) for e in edges} == {("k0", "k2"), ("k0", "k3")}  # parent -> child
    assert nodes["k0"]["position"]["y"] < nodes["k2"]["position"]["y"] < nodes["k4"]["position"]["y"]
    assert nodes["k2"]["classes"] == "faster best"
    assert nodes["k1"]["classes"] == "compile_error"
    assert nodes["k2"]["data"]["size"] > nodes["k0"]["data"]["size"] > nodes["k1"]["data"]["size"]
    assert nodes["k2"]["data"]["label"] == "i1-b0"


def test_node_sizes_come_in_few_values_and_the_edge_budget_matches_graph_js():
    big = [_row(i, it=i // 10, br=i % 10, parent=f"k{i - 10}" if i >= 10 else None, speed=0.5 + i / 2000)
           for i in range(5000)]
    els = graph.graph_elements(big)
    sizes = {e["data"]["size"] for e in els if "position" in e}
    assert len(sizes) <= 26 and all(s % graph.SIZE_STEP == 0 for s in sizes)  # shared textures
    assert graph.node_size(big[-1]) > graph.node_size(big[200]) > graph.node_size(big[0])  # still bigger is faster
    js = (Path(graph.__file__).parent / "assets" / "graph.js").read_text()
    assert re.search(r"const EDGE_BUDGET = (\d+);", js).group(1) == str(graph.EDGE_BUDGET)


def test_layout_places_children_under_their_parents_and_scales():
    rows = [_row(i, it=0, br=i) for i in range(3)]
    rows += [_row(10 + i, it=1, br=i, parent=f"k{2 - i}") for i in range(3)]  # reversed parents
    pos = graph.layered_positions(rows)
    assert [pos[f"k{10 + i}"][0] for i in range(3)] == sorted([pos[f"k{10 + i}"][0] for i in range(3)], reverse=True)
    big = [_row(i, it=i // 10, br=i % 10, parent=f"k{i - 10}" if i >= 10 else None) for i in range(5000)]
    pos = graph.layered_positions(big)
    assert len(pos) == 5000 and len({p for p in pos.values()}) == 5000  # no two nodes on one spot


def test_trajectory_has_every_candidate_and_best_so_far():
    ref = _row(9, "correct", it=-1, speed=1.0, is_program0=True)
    rows = [ref, _row(0, "correct", it=0, speed=0.4), _row(1, "compile_error", it=0, br=1),
            _row(2, it=1, speed=2.0), _row(3, "correct", it=2, speed=0.9),
            _row(4, "not_run", it=2, br=1)]
    fig = figures.trajectory_figure(rows)
    best = next(t for t in fig.data if t.name == "best so far")
    assert list(best.x) == [0, 1, 2]  # the reference is the dotted line, not a point
    assert list(best.y) == [0.4, 2.0, 2.0]  # never the reference's 1.0
    assert "iteration 0: best so far 0.400x" in best.text[0]
    assert "iteration 1: best so far 2.000x" in best.text[1]
    assert sum(len(t.x) for t in fig.data if t.name != "best so far") == 5
    hollow = next(t for t in fig.data if t.name.startswith("not_run"))
    assert hollow.name == "not_run (not judged)" and hollow.marker.symbol == "circle-open"
    assert figures.trajectory_figure([]) is None and figures.trajectory_figure([ref]) is None


def test_roofline_ceilings_points_and_estimate_note():
    rows = [_row(0, profiler_data={"arithmetic_intensity": 2.0, "gflops": 500.0}),
            _row(1, profiler_data={"flops": 1e9, "bytes": 1e8, "gflops": 100.0, "estimate": True})]
    fig, note = figures.roofline_figure(rows, {"gflops": 60000.0, "bandwidth_gbs": 4000.0})
    assert any(t.name.startswith("roof") for t in fig.data)
    assert {t.name for t in fig.data} >= {"measured", "estimate"}
    assert note == ""
    fig, note = figures.roofline_figure(rows[1:], {"gflops": None, "bandwidth_gbs": None})
    assert "only estimates" in note and "no hardware peaks" in note
    assert figures.roofline_figure([_row(0)], {})[0] is None


def test_profile_units_and_peaks():
    assert profile.metric_value({"achieved_occupancy_pct": 50.0}, "achieved_occupancy") == 50.0
    assert profile.metric_value({"shared_mem_per_block": 49152}, "shared_mem_per_block") == 48.0
    assert profile.metric_value({}, "l2_hit_rate_pct") is None
    assert profile.roofline_point(_row(0, profiler_data={"flops": 2e9, "bytes": 1e9, "gflops": 30.0})) == (2.0, 30.0, False)
    # no rate from the engine (a CPU estimate: interpreter timings): not placed
    assert profile.roofline_point(_row(0, profiler_data={"flops": 2e9, "bytes": 1e9, "estimate": True})) is None
    # a run config as the search stores it: the hardware record, and the compute ceiling the
    # engine's roofline uses for the task's dtype (TF32 for float32)
    hardware = {"peak_bandwidth_gbs": 4800, "peak_tflops": {"float32": 67.0, "tf32": 495.0}}
    peaks = profile.hardware_peaks([], [{"hardware": hardware, "peak_gflops": 495000.0}])
    assert peaks == {"gflops": 495000.0, "bandwidth_gbs": 4800.0}
    assert profile.hardware_peaks([_row(0, profiler_data={"peak_gflops": 1.0})], []) == {"gflops": 1.0, "bandwidth_gbs": None}


def test_gauges_only_for_present_metrics():
    fig = figures.gauges_figure({"achieved_occupancy_pct": 70.0, "registers_per_thread": 40, "l2_hit_rate_pct": 80})
    assert [t.value for t in fig.data] == [70.0, 40, 80]
    assert figures.gauges_figure({"flops": 1.0}) is None
    rows = [_row(0, speed=1.1, profiler_data={"l2_hit_rate_pct": 1}), _row(1, speed=2.0, profiler_data={"sm_throughput_pct": 3})]
    assert profile.best_profiled(rows)["id"] == "k1"
    assert profile.best_profiled(rows, prefer_id="k0")["id"] == "k0"


def test_landscape_uses_features_then_fills_axes():
    # the archive's features (search/features.py): tile and warps
    rows = [_row(i, features={"tile": i, "warps": i % 3}) for i in range(1, 5)] + [_row(9, "incorrect", features={"tile": 1, "warps": 2})]
    fig = figures.landscape_figure(rows)
    assert {fig.layout.scene.xaxis.title.text, fig.layout.scene.yaxis.title.text} == {"features.tile", "features.warps"}
    assert fig.layout.scene.zaxis.title.text == "iteration"
    assert {t.name for t in fig.data} == {"correct", "not correct"}


def test_code_block_fence_survives_backticks_and_diff_marks_changes():
    md = code_block("x = '```'\n", "cuda")
    assert md.children.startswith("````cpp\n") and md.children.endswith("\n````")
    a = {"label": "a", "code": "x = 1\ny = 2\n", "runtime": 0.2, "runtime_improvement": 1.0, "status": "correct"}
    b = {"label": "b", "code": "x = 1\ny = 3\nz = 4\n", "runtime": 0.1, "runtime_improvement": 2.0, "status": "faster"}
    table = diff_table(a, b)
    assert table.children[0].children == "2 changed line(s)"
    assert "median 0.1 ms" in str(table.children[1].children[0].children.children[1].children)


def test_table_rows_flags_and_blanks():
    rows = table_rows([_row(0, meta={"integrity_violation": "inputs_modified", "flagged_for_review": True}),
                       _row(1, "compile_error")])
    assert rows[0]["integrity"] == ("violation: inputs_modified, flagged: faster than the "
                                    "hardware allows")
    assert rows[1]["speedup"] is None and rows[1]["runtime"] is None


def test_table_rows_are_candidates_to_three_figures():
    """Issue 58: no 15.23073449993717 ms or CV 0.1666..., and the reference is no row of the
    candidates' table (its pager counted it as one)."""
    ref = {**_row(9, "correct", speed=1.0, is_program0=True), "label": "ref"}
    row = {**_row(0, "correct", speed=1.234567), "runtime": 15.23073449993717,
           "improve_over_compile": 0.5659, "runtime_stats": {"n_trials": 40, "cv": 0.16666666}}
    rows = table_rows([ref, row])
    assert [r["label"] for r in rows] == [row["label"]]
    assert (rows[0]["runtime"], rows[0]["speedup"], rows[0]["vs_compile"], rows[0]["cv"]) == (
        15.2, 1.23, 0.566, 16.7)


def test_archive_figure_colours_each_cell_by_its_elite():
    from kernelcode.dashboard.heatmaps import archive_figure
    from openkernel.search.occupancy import occupancy

    feats = [{"kind": "template", "launches": 1, "tile": t, "warps": 4} for t in (10, 12, 12)]
    rows = [_row(1, "correct", speed=0.5, features=feats[0]),
            _row(2, "correct", speed=0.8, features=feats[1]),
            _row(3, "correct", speed=0.9, features=feats[2]),
            _row(4, "incorrect", features={"kind": "hand", "launches": 2, "tile": 10, "warps": 8})]
    fig = archive_figure(occupancy(rows))
    grey, elites = fig.data
    assert list(elites.y) == ["fused template · 1 kernel", "hand-written · 2 kernels"]
    assert list(elites.x) == ["tile 2^10 · 4w", "tile 2^10 · 8w", "tile 2^12 · 4w"]
    assert list(elites.z[0]) == [0.5, None, 0.9] and list(elites.z[1]) == [None, None, None]
    assert "none correct" in elites.text[1][1] and list(grey.z[1]) == [0, 1, 0]
    assert "best of 2" in elites.text[0][2]
    assert archive_figure([]) is None


def test_memory_figure_draws_units_by_transfer_kind():
    from kernelcode.dashboard.heatmaps import memory_figure
    from openkernel.evaluation.host.ncu_memory import memory_tables, parse_raw_csv
    from test_profiling import _raw_sample  # the format sample (not a measurement)

    fig = memory_figure(memory_tables(parse_raw_csv(_raw_sample())), "Memory workload: i0-b1")
    heat = fig.data[0]
    assert list(heat.y) == ["L1/TEX", "L2", "DRAM"]
    assert list(heat.x) == ["global load", "global store", "read", "write"]
    assert heat.z[0][0] > 7 and heat.z[2][2] > 7 and heat.z[2][0] is None  # log10 bytes
    assert heat.z[0][2] is None and "hit 10%" in heat.text[0][0] and "393k req" in heat.text[0][0]
    assert memory_figure({}, "none") is None


def test_no_edge_runs_through_a_kernel():
    """Issue 58: u1 (filed under iteration 0, its parent i0-b0) goes a layer below its parent
    instead of beside i0-b1..b3; an edge from iteration 0 to 3 keeps a slot of its own in the
    layers between, so no kernel sits on it, and is routed through them."""
    rows = [_row(i, it=0, br=i) for i in range(4)]
    rows.append({**_row(9, it=0, parent="k0"), "label": "u1", "author": "user"})
    rows += [_row(10 + i, it=1, br=i, parent=f"k{i}") for i in range(4)]
    rows += [_row(20 + i, it=2, br=i, parent=f"k{10 + i}") for i in range(4)]
    rows.append(_row(30, it=3, parent="k0"))  # a parent three iterations up
    pos, routes = graph.layout(rows)
    assert pos["k9"][1] > pos["k0"][1]  # a layer down, not beside its parent
    assert pos["k10"][1] > pos["k9"][1]  # the next iteration below that
    # every edge of one layer only: no kernel strictly between its ends' layers
    nodes = {r["id"]: r for r in rows}
    for r in rows:
        parent = r.get("parent_id")
        if not parent or r["id"] in routes:
            continue
        assert pos[r["id"]][1] - pos[parent][1] == graph.LAYER_GAP, r["id"]
    # the long edge: one slot per layer it crosses, none of them a kernel's place
    way = routes["k30"]
    assert len(way) == (pos["k30"][1] - pos["k0"][1]) / graph.LAYER_GAP - 1
    assert not set(way) & set(pos.values())
    # drawn through them (the browser test checks cytoscape's own segment points)
    edge = next(e for e in graph.graph_elements(rows) if e["data"].get("target") == "k30")
    assert edge["classes"] == "routed" and len(edge["data"]["w"].split()) == len(way)
    assert len(nodes) == len(pos)
