/* The generation graph: elements go straight into cytoscape, not through the component's props.

dash-cytoscape's `elements` prop costs, for 5,000 kernels, a diff of every element, then a
bounding box of the whole graph (componentDidUpdate), then 100 ms later a second preset layout
and a copy of every element back into Dash (its 'add' listeners, which call el.json() three times
per element and make React diff the lot again). This draws the elements from a dcc.Store once,
in one batch, fits once, and only patches what changed on live refreshes. Clicks still reach
Dash through the component's own tap listener (tapNodeData).
*/
window.dash_clientside = window.dash_clientside || {};

// Labels are drawn from this zoom on (font-size 10 at min-zoomed-font-size 7, as the stylesheet).
const LABEL_ZOOM = 0.7;
// Edges of a large job (graph.py, ARROWS_ALWAYS_UP_TO) get their arrowheads from this zoom on,
// where an arrowhead (about 23 graph units) is 3 px or more; below it they are plain lines.
const ARROW_ZOOM = 0.15;
// Classes this file gives and takes away as the view moves (the server never sends them).
const VIEW_CLASSES = ['lbl', 'near'];

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
function fit(cy, els, padding) {
    let x1 = Infinity, y1 = Infinity, x2 = -Infinity, y2 = -Infinity;
    for (const e of els) {
        if (!e.position) { continue; }
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

// Detail follows the view, a frame after it moves: nodes in view and big enough to read carry
// 'lbl' (their label), and edges in view carry 'near' (their arrowhead) once zoomed in to
// ARROW_ZOOM. So 5,000 label texts are not measured and 5,000 arrowheads not drawn just to be
// invisible when zoomed out, and zooming in on any part of the graph shows both there.
function detailSoon(cy) {
    const st = state(cy);
    if (st.detailQueued) { return; }
    st.detailQueued = true;
    requestAnimationFrame(() => {
        st.detailQueued = false;
        const ext = cy.extent(), m = 60, zoom = cy.zoom();
        const inView = (p) => p.x > ext.x1 - m && p.x < ext.x2 + m && p.y > ext.y1 - m && p.y < ext.y2 + m;
        const labels = zoom >= LABEL_ZOOM ? cy.nodes().filter(n => inView(n.position())) : cy.collection();
        const arrows = zoom >= ARROW_ZOOM ? cy.edges().filter(
            e => inView(e.source().position()) || inView(e.target().position())) : cy.collection();
        const hadLabels = cy.nodes('.lbl'), hadArrows = cy.edges('.near');
        cy.batch(() => {
            hadLabels.difference(labels).removeClass('lbl');
            labels.difference(hadLabels).addClass('lbl');
            hadArrows.difference(arrows).removeClass('near');
            arrows.difference(hadArrows).addClass('near');
        });
    });
}

// The classes an element should have: the server's, plus those the view gave it.
function classesFor(have, e) {
    const keep = have.classes().filter(c => VIEW_CLASSES.includes(c));
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
            const els = elements || [];
            const want = new Map();
            for (const e of els) {
                if (e.data.source !== undefined && e.data.id === undefined) {
                    e.data.id = 'e:' + e.data.target;  // one parent per kernel: the edge is its child's
                }
                want.set(e.data.id, e);
            }
            const first = cy.elements().length === 0;
            cy.batch(() => {
                if (first) {
                    cy.add(els);
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
            if (!st.fitted && els.length) {
                // once: live refreshes keep the user's zoom and pan
                fit(cy, els, 30);
                st.fitted = true;
                cy.on('viewport', () => detailSoon(cy));
            }
            detailSoon(cy);
            performance.mark('graph-draw-end');
            return els.length;
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
