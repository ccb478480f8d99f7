"""The reference's compute ops and what a library call computes of them, without torch.

Shared by the worker's ``torch_compute`` check (a candidate must not run every compute op of
the reference in PyTorch) and by the generators, which must not offer such a candidate (an
Inductor seed that is nothing but the reference's own library call).
"""

from __future__ import annotations

_NON_COMPUTE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "arange",
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "permute", "transpose", "t",
    "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias", "slice", "select",
    "unsqueeze", "squeeze", "split", "split_with_sizes", "unbind", "lift_fresh", "fill_", "zero_",
    "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "is_same_size", "item",
    "lift_fresh_copy", "resize_", "set_", "flatten", "view_as", "narrow", "stride", "size",
}


def compute_ops(ops: list[str]) -> set[str]:
    """``aten.gelu.default`` -> ``gelu``, dropping allocation, view and copy ops."""
    bases = {op.split(".")[1] if op.startswith("aten.") else op for op in ops}
    return {b for b in bases if b not in _NON_COMPUTE}


# Library calls that compute several of a reference's ops at once (cuBLASLt's epilogues, the
# fused GEMM forms): a candidate calling one computes each of those ops in PyTorch.
_COVERS = {
    "addmm": {"mm", "add"}, "_addmm_activation": {"addmm", "mm", "add", "relu", "gelu"},
    "baddbmm": {"bmm", "add"}, "addbmm": {"bmm", "add", "sum"}, "addmv": {"mv", "add"},
    "linear": {"addmm", "mm", "add", "matmul"}, "matmul": {"mm", "bmm", "mv", "dot"},
}


def torch_covers(ref_ops: set[str], cand_ops: set[str]) -> bool:
    """Whether the candidate's PyTorch calls compute every compute op of the reference (the
    ``torch_compute`` check): a lone library call with a decoy kernel beside it is caught
    even when the call is a fused form of the reference's ops (``_addmm_activation`` for an
    addmm and a relu)."""
    covered = set(cand_ops)
    for op in cand_ops:
        covered |= _COVERS.get(op, set())
    return bool(ref_ops) and ref_ops <= covered
