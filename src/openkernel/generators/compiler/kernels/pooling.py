"""Pooling (max and average, 1-3 spatial dims) as a pointwise op: a window read per output.

Each output element reads its window from its input's frame, one load per window position
(kernel sizes are static, so the window is unrolled). A position outside the input (padding,
a ceil-mode tail) is read at a clamped index, so every load is in bounds, and left out with
``tl.where``: -inf for max, 0 (and not counted, without ``count_include_pad``) for the mean.
The input may itself be computed (a conv's stored result, a pointwise chain recomputed at the
window's indices), as for any operand.
"""

from __future__ import annotations

import itertools

from openkernel.generators.compiler.emit import Code, Emitter, Frame, Unfusable, ctype
from openkernel.generators.compiler.graph import Node, Value, int_list

POOL_OPS = {"avg_pool2d", "avg_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
            "max_pool2d", "max_pool3d"}


def pool(em: Emitter, node: Node, out: Value, frame: Frame) -> Code:
    """The pooled value ``out`` at ``frame``."""
    if out.index != 0:
        raise Unfusable(node, "max pooling's indices are used")
    is_max = node.op.startswith("max_pool")
    nd = 3 if "3d" in node.op else 2
    src: Value = node.args[0]
    kernel = int_list(node.arg(1, "kernel_size"), nd)
    stride = int_list(node.arg(2, "stride"), nd, kernel)
    padding = int_list(node.arg(3, "padding", 0), nd)
    if is_max:
        dilation = int_list(node.arg(4, "dilation", 1), nd)
        ceil_mode = bool(node.arg(5, "ceil_mode", False))
        include_pad, divisor = True, None
    else:
        dilation = [1] * nd
        ceil_mode = bool(node.arg(4, "ceil_mode", False))
        include_pad = bool(node.arg(5, "count_include_pad", True))
        divisor = node.arg(6, "divisor_override")
        if ceil_mode:  # its divisor counts the window clipped to the padded input
            raise Unfusable(node, "average pooling with ceil_mode")
    w = em.w
    d = em.dims(frame)
    lead, spatial = d[:-nd], d[-nd:]
    sizes = [w.size(s) for s in src.shape[-nd:]]
    checked = [padding[j] > 0 or ceil_mode for j in range(nd)]  # else always inside
    acc, count = None, None
    for offs in itertools.product(*(range(k) for k in kernel)):
        idx, valid = [], []
        for j, k in enumerate(offs):
            at = f"{spatial[j]} * {stride[j]}" if stride[j] != 1 else spatial[j]
            shift = k * dilation[j] - padding[j]
            at = at if shift == 0 else f"{at} + {shift}" if shift > 0 else f"{at} - {-shift}"
            at = w.index(at)
            if checked[j]:
                valid.append(f"({at} >= 0) & ({at} < {sizes[j]})")
                at = w.index(f"tl.minimum(tl.maximum({at}, 0), {sizes[j]} - 1)")
            idx.append(at)
        value = em.value(src, Frame(src.shape, tuple(lead) + tuple(idx))).expr
        inside = w.assign("ok", " & ".join(valid), shared=True) if valid else ""
        if is_max:
            term = f'tl.where({inside}, {value}, -float("inf"))' if inside else value
            acc = term if acc is None else f"tl.maximum({acc}, {term})"
        else:
            term = f"tl.where({inside}, {value}, 0.0)" if inside else value
            acc = term if acc is None else f"{acc} + {term}"
            if not include_pad:
                one = f"tl.where({inside}, 1.0, 0.0)" if inside else "1.0"
                count = one if count is None else f"{count} + {one}"
        acc = w.assign("p", acc)
        if count is not None:
            count = w.assign("n", count)
    if not is_max:
        if divisor:
            acc = w.assign("p", f"{acc} / {float(divisor)}")
        elif count is not None:
            acc = w.assign("p", f"{acc} / tl.maximum({count}, 1.0)")
        else:
            window = 1
            for k in kernel:
                window *= k
            acc = w.assign("p", f"{acc} / {float(window)}")
    name = w.assign("v", acc, comment=f"{node.aten} (op {node.index})")
    return Code(name, ctype(out.dtype))
