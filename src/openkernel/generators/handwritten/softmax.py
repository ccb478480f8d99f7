"""Row softmax / log-softmax over the last dimension.

A row that fits MAX_FUSED elements is read once into registers (single pass). A longer row
takes the looped kernel: one pass keeps a running max and a rescaled running sum per lane
(online softmax), a second pass writes the output, so any row length works with bounded
registers. The choice is made at call time from the actual row length.
"""

from __future__ import annotations

from openkernel.generators.family import Family, Match, Tunable
from openkernel.generators.handwritten.common import (
    FLOAT_DTYPES,
    TRITON_HEADER,
    dtype_name,
    init_method,
    module_preamble,
    op_bases,
)
from openkernel.generators.refparse import parse_reference
from openkernel.records import TaskProbe
from openkernel.task import Task

_OPS = {"_softmax": ("softmax", {"softmax", "Softmax"}),
        "_log_softmax": ("log_softmax", {"log_softmax", "LogSoftmax"})}

_KERNELS = '''
@triton.jit
def _softmax_fused(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr,
                   LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # -inf in the padding: it never wins the max and exp(-inf) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    s = tl.sum(e, axis=0)
    if LOG:
        y = z - tl.log(s)
    else:
        y = e / s
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr,
                    LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # Lanes that have seen only padding keep m == m_new == -inf: scale 1, add 0 (no NaN).
        scale = tl.where(m == m_new, 1.0, tl.exp(m - m_new))
        s = s * scale + tl.where(mask, tl.exp(x - m_new), 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = x - row_max - tl.log(total)
        else:
            y = tl.exp(x - row_max) / total
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """{label} over the last dimension in one Triton kernel per call."""

{init}
    def forward(self, {arg}):
        n_cols = {arg}.shape[-1]
        x = {arg}.contiguous().view(-1, n_cols)
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y.view({arg}.shape)
        grid = (x.shape[0],)
        if n_cols <= MAX_FUSED:
            _softmax_fused[grid](x, y, n_cols, x.stride(0), y.stride(0),
                                 BLOCK=triton.next_power_of_2(n_cols), LOG={log},
                                 num_warps=NUM_WARPS)
        else:
            _softmax_looped[grid](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=LOOP_BLOCK,
                                  LOG={log}, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y.view({arg}.shape)
'''


class RowSoftmax(Family):
    name = "row_softmax"
    summary = "softmax / log_softmax over the last dim: single pass, or online looped"
    tunables = (
        Tunable("MAX_FUSED", (1024, 2048, 4096, 8192, 16384), None,
                "longest row read in one pass (longer rows loop)"),
        Tunable("LOOP_BLOCK", (256, 512, 1024, 2048, 4096), (512, 1024, 2048, 4096),
                "columns per step of the looped kernel"),
        Tunable("num_warps", (1, 2, 4, 8, 16), (4,), "warps per row"),
        Tunable("num_stages", (1, 2, 3, 4), (2,), "software pipelining of the looped kernel"),
    )
    starts = ({"MAX_FUSED": 8192, "LOOP_BLOCK": 1024, "num_warps": 8, "num_stages": 2},
              {"MAX_FUSED": 4096, "LOOP_BLOCK": 2048, "num_warps": 4, "num_stages": 3},
              {"MAX_FUSED": 16384, "LOOP_BLOCK": 4096, "num_warps": 16, "num_stages": 2},
              {"MAX_FUSED": 1024, "LOOP_BLOCK": 1024, "num_warps": 4, "num_stages": 2})
    cpu_starts = ({"MAX_FUSED": 8192, "LOOP_BLOCK": 2048, "num_warps": 4, "num_stages": 2},
                  {"MAX_FUSED": 1024, "LOOP_BLOCK": 512, "num_warps": 4, "num_stages": 2},
                  {"MAX_FUSED": 4096, "LOOP_BLOCK": 1024, "num_warps": 8, "num_stages": 3})

    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        ops = op_bases(probe)
        if len(ops) != 1 or ops[0] not in _OPS:
            return None
        if backend != "triton":
            return "the row_softmax family is Triton only"
        kind, names = _OPS[ops[0]]
        ref = parse_reference(task.reference_code)
        if ref is None or len(ref.forward_args) != 1 or len(probe.input_shapes) != 1:
            return f"the {kind} family takes exactly one tensor input"
        dtypes = {dtype_name(d) for d in probe.input_dtypes}
        if not dtypes <= FLOAT_DTYPES:
            return f"the {kind} family handles floating inputs only"
        dim = ref.scalar(names, "dim", 1, None)
        ndim = len(probe.input_shapes[0])
        if dim is None or dim.init_param or dim.const not in (-1, ndim - 1):
            return f"the {kind} family reduces over the last dimension only (dim=-1)"
        why = f"the reference runs aten.{ops[0]} over the last dimension of one tensor"
        return Match(self, why, {"ref": ref, "log": kind == "log_softmax", "label": kind})

    def render(self, match: Match, params: dict, backend: str) -> str:
        ref = match.spec["ref"]
        consts = (f"MAX_FUSED = {params['MAX_FUSED']}\nLOOP_BLOCK = {params['LOOP_BLOCK']}\n"
                  f"NUM_WARPS = {params['num_warps']}\nNUM_STAGES = {params['num_stages']}\n")
        body = _KERNELS.format(label=match.spec["label"], init=init_method(ref),
                               arg=ref.forward_args[0], log=match.spec["log"])
        return module_preamble(ref, TRITON_HEADER) + "\n" + consts + body
