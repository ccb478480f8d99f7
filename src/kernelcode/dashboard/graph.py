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
    """Top-down positions: one layer per iteration, children ordered under their parents
    (``layout``'s positions)."""
    return layout(rows)[0]


def _ranks(rows: list[dict]) -> dict[str, int]:
    """Each kernel's layer: its iteration's, and always below its parent's (a person's ``u1``
    filed under iteration 0 beside its parent ``i0-b0`` goes one layer down, instead of an edge
    drawn sideways through ``i0-b1..b3``); each iteration starts below the one before."""
    by_id = {r["id"]: r for r in rows}
    iterations: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        iterations[int(r.get("iteration") or 0)].append(r)
    ranks: dict[str, int] = {}
    floor = 0
    for iteration in sorted(iterations):
        members = iterations[iteration]
        deepest = floor
        pending = list(members)
        while pending:  # a parent of the same iteration is ranked first
            waiting = {r["id"] for r in pending}
            left = []
            for r in pending:
                parent = r.get("parent_id")
                if parent in waiting and parent not in ranks:
                    left.append(r)
                    continue
                ranks[r["id"]] = max(floor, ranks[parent] + 1 if parent in ranks else floor)
                deepest = max(deepest, ranks[r["id"]])
            if len(left) == len(pending):  # a cycle (never written): rank them as they come
                for r in left:
                    ranks[r["id"]] = floor
                break
            pending = left
        floor = deepest + 1
    return ranks


def layout(rows: list[dict]) -> tuple[dict[str, tuple[float, float]],
                                      dict[str, list[tuple[float, float]]]]:
    """Positions and edge routes of a job's graph.

    Each layer (``_ranks``) is ordered by the barycentre of what is above it; an edge that
    spans several layers holds a slot of its own in each layer it crosses (a Sugiyama dummy),
    so no kernel sits on it, and is drawn through those slots.

    Args:
        rows: kernels with ``id``, ``iteration``, ``branch`` and ``parent_id``.

    Returns:
        id -> (x, y), each layer centred on x = 0; and child id -> the points its edge from
        its parent passes through (only for edges that span layers).
    """
    ranks = _ranks(rows)
    by_id = {r["id"]: r for r in rows}
    layers: dict[int, list] = defaultdict(list)
    for r in rows:
        layers[ranks[r["id"]]].append(r)
    for r in rows:  # a dummy per layer strictly between a parent and its child
        parent = r.get("parent_id")
        if parent in ranks:
            for rank in range(ranks[parent] + 1, ranks[r["id"]]):
                layers[rank].append(("via", r["id"], rank))
    pos: dict[str, tuple[float, float]] = {}
    via: dict[tuple[str, int], tuple[float, float]] = {}

    def above(child: str, parent: str | None, rank: int) -> tuple[float, float] | None:
        """The point its edge comes from in the layer above: the parent, or the slot there."""
        if parent not in ranks:
            return None
        return via.get((child, rank - 1)) or (pos.get(parent) if ranks[parent] == rank - 1
                                              else None)

    for rank in sorted(layers):
        def order(m) -> tuple:
            if isinstance(m, tuple):
                _, child, _ = m
                row = by_id[child]
                point = above(child, row.get("parent_id"), rank)
                return (0, point[0] if point else 0.0, row.get("branch") or 0)
            point = above(m["id"], m.get("parent_id"), rank)
            return (0, point[0], m.get("branch") or 0) if point else (1, 0.0, m.get("branch") or 0)

        members = sorted(layers[rank], key=order)
        width = (len(members) - 1) * NODE_GAP
        for i, m in enumerate(members):
            xy = (i * NODE_GAP - width / 2, rank * LAYER_GAP)
            if isinstance(m, tuple):
                via[(m[1], rank)] = xy
            else:
                pos[m["id"]] = xy
    routes: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (child, rank), xy in sorted(via.items(), key=lambda kv: kv[0][1]):
        routes[child].append(xy)
    return pos, dict(routes)


def _segments(source: tuple[float, float], target: tuple[float, float],
              points: list[tuple[float, float]]) -> tuple[str, str]:
    """Cytoscape's ``segment-weights`` and ``segment-distances`` of an edge through ``points``:
    each point's fraction along source -> target and its distance from that line."""
    (sx, sy), (tx, ty) = source, target
    dx, dy = tx - sx, ty - sy
    length2 = dx * dx + dy * dy or 1.0
    length = length2 ** 0.5
    weights, distances = [], []
    for px, py in points:
        weights.append(((px - sx) * dx + (py - sy) * dy) / length2)
        distances.append(((py - sy) * dx - (px - sx) * dy) / length)  # cytoscape's side
    return (" ".join(f"{w:.4f}" for w in weights), " ".join(f"{d:.1f}" for d in distances))


def graph_elements(rows: list[dict], best_id: str | None = None) -> list[dict]:
    """Cytoscape elements: a node per kernel and an edge from each parent to its child.

    Args:
        rows: light kernel rows of one job.
        best_id: the kernel to draw white with a black outline (``best_kernel_id``).

    Returns:
        Nodes (with preset positions and status classes), then edges whose both ends exist
        (one that spans layers routed through its slots: class ``routed``).
    """
    pos, routes = layout(rows)
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
            edge = {"data": {"source": parent, "target": r["id"]}}
            if r["id"] in routes:
                weights, distances = _segments(pos[parent], pos[r["id"]], routes[r["id"]])
                edge["data"].update(w=weights, d=distances)
                edge["classes"] = "routed"
            edges.append(edge)
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
        # an edge across layers, through the slots kept for it (no kernel sits on it)
        {"selector": "edge.routed", "style": {
            "curve-style": "segments", "segment-weights": "data(w)",
            "segment-distances": "data(d)", "edge-distances": "node-position"}},
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
