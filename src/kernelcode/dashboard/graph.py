"""The generation graph of one job: colours, sizes, a layered layout and cytoscape elements.

Everything here is pure (kernel rows in, plain data out) so it is unit-tested without a browser.
The layout is computed here rather than by a cytoscape layout algorithm because force-directed
layouts take seconds on 5,000 nodes and do not read top down; a layer per iteration with a
barycentre ordering (children under their parents) is linear and stable across refreshes.
"""

from __future__ import annotations

from collections import defaultdict

# The seed's colour table (results-browser.txt), keyed by openkernel.schemas.Status values.
STATUS_COLORS = {
    "faster": "#2ca02c",  # green: correct and faster than the reference
    "correct": "#1f77b4",  # blue: correct, but no faster
    "incorrect": "#ff7f0e",  # orange: compiled, failed a correctness test
    "test_timeout": "#f2c500",  # yellow: compiled, the tests timed out
    "compile_error": "#d62728",  # red: did not compile
    "build_timeout": "#ff69b4",  # pink: the build itself timed out
    "not_run": "#9e9e9e",  # grey: compiled, this machine cannot run it
    "evaluator_fault": "#5f6368",  # dark grey, not a candidate colour: the evaluator failed
    "generation_failed": "#9467bd",  # purple, not a candidate colour: no kernel came back
    "flagged": "#8c564b",  # brown, not a seed colour: faster than the hardware allows
}
STATUS_MEANINGS = {
    "faster": "Correct and faster than the reference",
    "correct": "Correct, but no faster than the reference",
    "incorrect": "Compiled, but failed a correctness test",
    "test_timeout": "Compiled, but the tests timed out",
    "compile_error": "Did not compile",
    "build_timeout": "The build itself timed out",
    "not_run": "Compiled, but not runnable on this machine",
    "evaluator_fault": "The evaluator failed, not the candidate",
    "generation_failed": "Generation failed: no kernel to judge",
    "flagged": "Passed the checks, but faster than the hardware allows: flagged for review",
}
BEST_MEANING = "The best kernel of the job"
UNKNOWN_COLOR = "#9e9e9e"
LAYER_GAP = 90.0  # vertical distance between iterations, in graph units
NODE_GAP = 70.0  # horizontal distance between siblings
# A job of up to this many kernels has all its edges in cytoscape all the time. A larger one has
# only the edges in view, once zoomed in far enough to see an arrowhead with at most this many in
# view (assets/graph.js, EDGE_ZOOM and EDGE_BUDGET: keep the two budgets equal). At the zoom that
# fits thousands of kernels an edge is far under a pixel wide, and styling, measuring and drawing
# 5,000 of them was half of the first frame.
EDGE_BUDGET = 1000


def best_kernel_id(rows: list[dict]) -> str | None:
    """The id of the best kernel of a job, as ``openkernel.store.summary`` defines it: the
    highest score among correct candidates, never the reference (``is_program0``); the
    earliest wins a tie."""
    best, key = None, None
    for r in rows:
        if not r.get("correctness") or r.get("is_program0"):
            continue
        candidate = (-(r.get("score") or 0.0), r.get("created_at") or "", r["id"])
        if key is None or candidate < key:
            best, key = r["id"], candidate
    return best


SIZE_STEP = 2.0  # node diameters come in steps of this many graph units


def node_size(row: dict) -> float:
    """Diameter of a node: bigger is faster (speedup over the reference), failures smallest.

    Diameters are rounded to ``SIZE_STEP`` (0.08x of speedup, finer than the eye reads at any
    zoom): cytoscape draws each distinct node style once into a texture and then copies it, so
    5,000 kernels share a few dozen textures instead of drawing one each for the first frame.
    """
    speedup = row.get("runtime_improvement") or -1.0
    if not row.get("correctness") or speedup <= 0:
        return 16.0
    size = min(70.0, max(20.0, 20.0 + 25.0 * (speedup - 0.5)))
    return float(round(size / SIZE_STEP) * SIZE_STEP)


def layered_positions(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Top-down positions: one layer per iteration, children ordered under their parents.

    Args:
        rows: kernels with ``id``, ``iteration``, ``branch`` and ``parent_id``.

    Returns:
        id -> (x, y), each layer centred on x = 0.
    """
    layers: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        layers[int(r.get("iteration") or 0)].append(r)
    pos: dict[str, tuple[float, float]] = {}
    for depth, iteration in enumerate(sorted(layers)):
        members = layers[iteration]

        # Barycentre of the parent (already placed: parents come from earlier iterations);
        # kernels without a placed parent keep their branch order after those with one.
        def order(r: dict) -> tuple:
            parent = pos.get(r.get("parent_id") or "")
            return (0, parent[0], r.get("branch") or 0) if parent else (1, 0.0, r.get("branch") or 0)

        members.sort(key=order)
        width = (len(members) - 1) * NODE_GAP
        for i, r in enumerate(members):
            pos[r["id"]] = (i * NODE_GAP - width / 2, depth * LAYER_GAP)
    return pos


def graph_elements(rows: list[dict], best_id: str | None = None) -> list[dict]:
    """Cytoscape elements: a node per kernel and an edge from each parent to its child.

    Args:
        rows: light kernel rows of one job.
        best_id: the kernel to draw white with a black outline (``best_kernel_id``).

    Returns:
        Nodes (with preset positions and status classes), then edges whose both ends exist.
    """
    pos = layered_positions(rows)
    ids = set(pos)
    nodes, edges = [], []
    for r in rows:
        x, y = pos[r["id"]]
        status = r.get("status") or "unknown"
        classes = status + (" best" if r["id"] == best_id else "")
        label = r.get("label") or r["id"]
        if r.get("author"):  # a person's or an agent's kernel: its author beside its label
            label, classes = f"{label} · {r['author']}", classes + " external"
        # data is kept to what the stylesheet reads: the payload of 5,000 nodes is what the
        # browser parses before it can draw (the status lives in the classes)
        nodes.append({
            "data": {"id": r["id"], "label": label, "size": node_size(r)},
            "position": {"x": round(x), "y": round(y)},
            "classes": classes,
        })
        parent = r.get("parent_id")
        if parent and parent in ids:
            edges.append({"data": {"source": parent, "target": r["id"]}})
    return nodes + edges


def stylesheet() -> list[dict]:
    """Cytoscape styles: status colours, best kernel, arrows; labels only when readable.

    Labels belong to the ``lbl`` class, which assets/graph.js gives only to the nodes in view
    once the zoom makes 10 px text at least 7 px tall (``min-zoomed-font-size``): measuring
    5,000 label texts for the fitted overview, where none is drawn, cost a large part of the
    first frame. Edges, each with its arrowhead, are as many as are in cytoscape (see
    ``EDGE_BUDGET``). Everything else is per class (status, best) or one data field (size, in a
    few dozen distinct values).
    """
    styles = [
        {"selector": "node", "style": {
            "width": "data(size)", "height": "data(size)", "background-color": UNKNOWN_COLOR,
            "border-width": 1, "border-color": "#555"}},
        {"selector": "node.lbl", "style": {
            "label": "data(label)", "font-size": 10, "min-zoomed-font-size": 7,
            "text-valign": "bottom", "text-margin-y": 3, "text-events": "no"}},
        {"selector": "edge", "style": {
            "width": 1.2, "line-color": "#9a9a9a", "target-arrow-color": "#9a9a9a",
            "target-arrow-shape": "triangle", "arrow-scale": 0.8, "curve-style": "straight",
            "events": "no"}},  # nothing reads edge clicks or hovers
    ]
    for status, color in STATUS_COLORS.items():
        styles.append({"selector": f".{status}", "style": {"background-color": color}})
    styles.append({"selector": ".external", "style": {  # from a person or an agent
        "border-style": "dashed", "border-width": 3, "border-color": "#6f42c1"}})
    styles.append({"selector": ".best", "style": {
        "background-color": "#ffffff", "border-color": "#000000", "border-width": 4}})
    styles.append({"selector": "node:selected", "style": {
        "overlay-color": "#6f42c1", "overlay-opacity": 0.35, "overlay-padding": 6}})
    return styles
