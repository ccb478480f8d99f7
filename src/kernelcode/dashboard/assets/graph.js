/* The generation graph: elements go straight into cytoscape, not through the component's props.

dash-cytoscape's `elements` prop costs, for 5,000 kernels, a diff of every element, then a
bounding box of the whole graph (componentDidUpdate), then 100 ms later a second preset layout
and a copy of every element back into Dash (its 'add' listeners, which call el.json() three times
per element and make React diff the lot again). This draws the elements from a dcc.Store once,
in one batch, fits once, and only patches what changed on live refreshes. Clicks still reach
Dash through the component's own tap listener (tapNodeData).

Detail follows the view (detailSoon). A job of up to EDGE_BUDGET kernels has every edge, arrowhead
and all, in cytoscape all the time. A larger one has all its nodes but no edges until it is zoomed
in to EDGE_ZOOM with at most EDGE_BUDGET edges in view: then cytoscape holds exactly the edges in
view, added and dropped as the view moves. At the zoom that fits thousands of kernels an edge is
far under a pixel wide, and styling, measuring and drawing 5,000 of them was half of the first
frame.
*/
window.dash_clientside = window.dash_clientside || {};

// Labels are drawn from this zoom on (font-size 10 at min-zoomed-font-size 7, as the stylesheet).
const LABEL_ZOOM = 0.7;
// Jobs of more kernels than this hold at most this many edges in cytoscape, those in view
// (graph.py EDGE_BUDGET: the same number, which the legend's zoom note follows).
const EDGE_BUDGET = 1000;
// ... and only from this zoom on, where an arrowhead (about 23 graph units) is 4 px or more and
// an edge is no longer a fraction of a pixel wide that nobody sees.
const EDGE_ZOOM = 0.2;
// Graph units around the view that count as in view (so edges and labels are there as it pans).
const MARGIN = 60;

// This page's own state per cytoscape instance. Not cy.scratch(): setting the core's scratch
// re-applies the style of every element (it is defined like cy.data(), which stylesheets may
// read), which for 5,000 kernels cost a whole second frame.
const STATE = new WeakMap();
function state(cy) {
    let s = STATE.get(cy);
    if (!s) { s = {}; STATE.set(cy, s); }
    return s;
}

// cy.fit() measures the bounding box of every element (styles, label text, edge geometry),
// work the first frame repeats anyway; the preset positions and node sizes give it directly.
function fit(cy, nodes, padding) {
    let x1 = Infinity, y1 = Infinity, x2 = -Infinity, y2 = -Infinity;
    for (const e of nodes) {
        const r = (e.data.size || 30) / 2 + 4;  // + the best kernel's border
        x1 = Math.min(x1, e.position.x - r); x2 = Math.max(x2, e.position.x + r);
        y1 = Math.min(y1, e.position.y - r); y2 = Math.max(y2, e.position.y + r + 16);  // label
    }
    if (x1 === Infinity) { return; }
    const w = cy.width(), h = cy.height();
    let zoom = Math.min((w - 2 * padding) / (x2 - x1), (h - 2 * padding) / (y2 - y1));
    zoom = Math.max(cy.minZoom(), Math.min(cy.maxZoom(), zoom));
    cy.viewport({zoom: zoom, pan: {x: (w - zoom * (x1 + x2)) / 2, y: (h - zoom * (y1 + y2)) / 2}});
}

// A frame after the view moves: nodes in view and big enough to read carry 'lbl' (their label,
// so 5,000 label texts are not measured just to be hidden), and for a large job the edges in
// view are put into cytoscape once zoomed in to EDGE_ZOOM with at most EDGE_BUDGET of them.
function detailSoon(cy) {
    const st = state(cy);
    if (st.detailQueued) { return; }
    st.detailQueued = true;
    requestAnimationFrame(() => {
        st.detailQueued = false;
        const ext = cy.extent(), zoom = cy.zoom();
        const inView = (p) => p !== undefined && p.x > ext.x1 - MARGIN && p.x < ext.x2 + MARGIN &&
            p.y > ext.y1 - MARGIN && p.y < ext.y2 + MARGIN;
        const labels = zoom >= LABEL_ZOOM ? cy.nodes().filter(n => inView(n.position())) : cy.collection();
        const hadLabels = cy.nodes('.lbl');
        let addEdges = [], dropEdges = cy.collection();
        if (st.lazyEdges) {
            let near = zoom < EDGE_ZOOM ? [] : (st.edges || []).filter(
                e => inView(st.pos.get(e.data.source)) || inView(st.pos.get(e.data.target)));
            if (near.length > EDGE_BUDGET) { near = []; }
            const keep = new Set(near.map(e => e.data.id));
            dropEdges = cy.edges().filter(e => !keep.has(e.id()));
            addEdges = near.filter(e => cy.getElementById(e.data.id).empty());
        }
        cy.batch(() => {
            hadLabels.difference(labels).removeClass('lbl');
            labels.difference(hadLabels).addClass('lbl');
            if (dropEdges.length) { dropEdges.remove(); }
            if (addEdges.length) { cy.add(addEdges); }
        });
    });
}

// The classes an element should have: the server's, plus the label class the view gave it.
function classesFor(have, e) {
    const keep = have.classes().filter(c => c === 'lbl');
    return (e.classes ? e.classes.split(' ').filter(c => c) : []).concat(keep);
}

window.dash_clientside.kernelgraph = {
    draw: function (elements, graphId) {
        const find = () => {
            const root = document.getElementById(graphId);
            if (!root) { return null; }
            const els = [root, ...root.querySelectorAll('*')];
            const el = els.find(e => e._cyreg && e._cyreg.cy);
            return el ? el._cyreg.cy : null;
        };
        const apply = (cy) => {
            performance.mark('graph-draw-start');  // read by benchmarks/dashboard_scale.py
            const st = state(cy);
            if (!st.quiet) {
                // The component re-runs its layout and copies every element back into Dash
                // whenever elements are added, removed or dragged; this page needs neither (the
                // layout is precomputed and nothing reads the prop back). Its tap and
                // selection listeners stay.
                cy.off('add');
                cy.off('remove');
                cy.off('dragfree');
                st.quiet = true;
            }
            const nodes = [], edges = [];
            for (const e of elements || []) {
                if (e.data.source !== undefined) {
                    if (e.data.id === undefined) {
                        e.data.id = 'e:' + e.data.target;  // one parent per kernel: the edge is its child's
                    }
                    edges.push(e);
                } else {
                    nodes.push(e);
                }
            }
            st.edges = edges;
            st.pos = new Map(nodes.map(e => [e.data.id, e.position]));
            st.lazyEdges = nodes.length > EDGE_BUDGET;
            // what cytoscape should hold now: every node, and every edge unless they are lazy
            // (then the edges it already holds that still exist; detailSoon adds the rest)
            const want = new Map(nodes.map(e => [e.data.id, e]));
            for (const e of edges) {
                if (!st.lazyEdges || !cy.getElementById(e.data.id).empty()) { want.set(e.data.id, e); }
            }
            const first = cy.elements().length === 0;
            cy.batch(() => {
                if (first) {
                    cy.add([...want.values()]);
                    return;
                }
                cy.elements().filter(e => !want.has(e.id())).remove();
                const add = [];
                for (const [id, e] of want) {
                    const have = cy.getElementById(id);
                    if (have.empty()) { add.push(e); continue; }
                    if (e.position) {
                        const p = have.position();
                        if (p.x !== e.position.x || p.y !== e.position.y) { have.position(e.position); }
                    }
                    const d = have.data();
                    if (d.label !== e.data.label || d.size !== e.data.size) { have.data(e.data); }
                    const cls = classesFor(have, e);
                    if (cls.join(' ') !== have.classes().join(' ')) { have.classes(cls); }
                }
                if (add.length) { cy.add(add); }
            });
            if (!st.fitted && nodes.length) {
                // once: live refreshes keep the user's zoom and pan
                fit(cy, nodes, 30);
                st.fitted = true;
                cy.on('viewport', () => detailSoon(cy));
            }
            detailSoon(cy);
            performance.mark('graph-draw-end');
            return nodes.length + edges.length;
        };
        const cy = find();
        if (cy) { return apply(cy); }
        // the component mounts with the page; wait a frame or two if this came first
        return new Promise((resolve) => {
            const t0 = performance.now();
            const poll = () => {
                const c = find();
                if (c) { resolve(apply(c)); }
                else if (performance.now() - t0 > 10000) { resolve(-1); }
                else { requestAnimationFrame(poll); }
            };
            requestAnimationFrame(poll);
        });
    },
};
