"""How a view's input is indexed from its output's frame (reshape, permute, slice, ...).

Views move no data in the kernels: each maps the frame its output is computed at to the frame
of its input. A reshape goes through the row-major position; a permute or transpose reorders
the indices; an expand drops broadcast ones; a slice or select offsets one.
"""

from __future__ import annotations

from openkernel.generators.compiler.emit import Emitter, Frame, Unfusable, literal
from openkernel.generators.compiler.graph import Node, Value
from openkernel.generators.compiler.sizes import Size, numel, row_major


def view_problem(node: Node) -> str:
    """Why this view cannot be folded into indices ("" when it can)."""
    if node.op == "as_strided":
        src, size, stride = node.args[0], node.args[1], node.args[2]
        offset = node.arg(3, "storage_offset", 0)
        if offset not in (0, None) or list(map(_size, stride)) != row_major(
                tuple(map(_size, size))) or numel(map(_size, size)) != src.numel:
            return "a strided view that is not a reshape"
    if node.op == "unfold_copy":
        return "an unfold"
    return ""


def _size(s) -> Size:
    return s if isinstance(s, Size) else Size(int(s))


def source_frame(em: Emitter, node: Node, out: Value, f: Frame) -> Frame:
    """The frame of a view's input that gives the view's output at ``f``."""
    op, src = node.op, node.args[0]
    n_src = len(src.shape)
    if op in ("alias", "detach", "clone", "contiguous", "lift_fresh", "lift_fresh_copy", "real"):
        return Frame(src.shape, f.idx, f.flat)
    if op in ("view", "_unsafe_view", "reshape", "flatten", "squeeze", "unsqueeze", "view_as",
              "as_strided"):
        return em.reshape(f, src.shape)
    if op in ("expand", "expand_as"):
        return em.broadcast(f, src.shape)
    d = em.dims(f)
    if op == "permute":
        order = [p % n_src for p in node.args[1]]
        idx = [""] * n_src
        for j, p in enumerate(order):
            idx[p] = d[j]
        return Frame(src.shape, tuple(idx))
    if op == "flip":  # index i of a flipped dim reads size - 1 - i
        dims = {x % n_src for x in node.arg(1, "dims", [])}
        return Frame(src.shape, tuple(
            em.w.index(f"{em.w.size(s)} - 1 - {i}") if j in dims and s != Size(1) else i
            for j, (s, i) in enumerate(zip(src.shape, d))))
    if op in ("t", "transpose", "numpy_T"):
        if n_src < 2:
            return Frame(src.shape, d)
        a, b = (0, 1) if op == "t" else (node.args[1] % n_src, node.args[2] % n_src)
        if op == "numpy_T":
            return Frame(src.shape, tuple(reversed(d)))
        idx = list(d)
        idx[a], idx[b] = idx[b], idx[a]
        return Frame(src.shape, tuple(idx))
    if op in ("select", "unbind"):
        dim = node.arg(1, "dim", 0) % n_src
        index = out.index if op == "unbind" else node.arg(2, "index", 0)
        return Frame(src.shape, d[:dim] + (_start(em, index, src.shape[dim]),) + d[dim:])
    if op in ("slice", "split", "split_with_sizes"):
        dim = node.arg(1, "dim", 0) if op == "slice" else node.arg(2, "dim", 0)
        dim %= n_src
        if op == "slice":
            start = node.arg(2, "start", 0) or 0
            step = node.arg(4, "step", 1) or 1
        else:
            sizes = node.args[1]
            if op == "split":
                start, step = _size(sizes) * out.index if out.index else 0, 1
            else:
                start, step = sum(int(s) for s in sizes[:out.index]), 1
        first = _start(em, start, src.shape[dim])
        i = d[dim]
        moved = i if first == "0" else f"{first} + {i}"
        if step != 1:
            moved = f"{first} + {i} * {literal(step, 'i64')}" if first != "0" else f"{i} * {step}"
        idx = list(d)
        idx[dim] = em.w.index(moved)
        return Frame(src.shape, tuple(idx))
    raise Unfusable(node, f"no index rule for {op}")


def _start(em: Emitter, value, size: Size) -> str:
    """A start index (negative counts from the end)."""
    if isinstance(value, Size):
        return em.w.size(value)
    value = int(value)
    if value < 0:
        return f"({em.w.size(size)} - {-value})"
    return str(value)
