"""Floating-point operations of one ATen node, at the sizes the graph was captured with.

GEMM-like nodes (mm, addmm, bmm, baddbmm, linear, matmul, attention, convolution) count exactly (a
multiply-add is 2); normalisations and softmax a few per element; other elementwise nodes one per output
element; views, copies and shape arithmetic none. A symbolic size counts at its hint (the example's size); a
profile (``septran.model.profile``) passes the call's real values instead, so its FLOPs are the call's.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch
import torch.fx as fx

aten = torch.ops.aten

# No arithmetic: views, layout, copies, allocation, indexing.
NO_FLOPS = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "slice",
    "select", "as_strided", "alias", "detach", "clone", "contiguous", "split", "split_with_sizes", "unbind",
    "_to_copy", "copy", "copy_", "cat", "stack", "index", "index_select", "embedding", "gather", "zeros",
    "zeros_like", "ones", "ones_like", "empty", "empty_like", "empty_strided", "full", "full_like", "arange",
    "new_zeros", "new_empty", "new_ones", "new_full", "lift_fresh_copy", "scalar_tensor", "sym_size", "sym_numel",
    "sym_stride", "slice_scatter", "select_scatter", "index_put", "constant_pad_nd", "repeat", "flip", "roll",
    "narrow", "chunk", "movedim", "unfold", "diagonal", "triu", "tril", "masked_fill", "where", "fill", "bernoulli",
}
VIEWS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "slice",
         "select", "as_strided", "alias", "detach", "split", "split_with_sizes", "unbind", "narrow", "chunk",
         "movedim", "unfold", "diagonal"}
PER_ELEMENT = {  # a few operations per element of the input
    "native_layer_norm": 5, "layer_norm": 5, "rms_norm": 4, "_fused_rms_norm": 4, "native_group_norm": 5,
    "native_batch_norm": 5, "_native_batch_norm_legit_no_training": 5, "_softmax": 5, "softmax": 5,
    "_log_softmax": 5, "log_softmax": 5,
}


def hint(size: Any) -> int:
    """A size as a number: a symbolic one at its hint (the example's value)."""
    if isinstance(size, int):
        return size
    try:  # torch 2.13 names it optimization_hint (hint_int before): with neither, every symbolic size was 1
        from torch.fx.experimental.symbolic_shapes import optimization_hint as size_hint
    except ImportError:
        try:
            from torch.fx.experimental.symbolic_shapes import hint_int as size_hint
        except ImportError:
            size_hint = None
    try:
        return int(size_hint(size, fallback=1)) if size_hint is not None else int(size.node.hint)
    except Exception:  # a size with no hint counts as 1, which undercounts but never breaks a report
        return 1


def _shape(x: Any, values: Optional[dict] = None) -> tuple[int, ...]:
    if values is not None and isinstance(x, fx.Node) and x in values:
        v = values[x]
    else:
        v = x.meta.get("val") if isinstance(x, fx.Node) else x
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
    return tuple(hint(s) for s in v.shape) if isinstance(v, torch.Tensor) else ()


def _numel(x: Any, values: Optional[dict] = None) -> int:
    return math.prod(_shape(x, values))


def op_name(node: fx.Node) -> str:
    """The ATen overload packet's name (``addmm``), or the function's name for other callables."""
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t._overloadpacket.__name__
    if isinstance(t, torch._ops.OpOverloadPacket):
        return t.__name__
    return getattr(t, "__name__", str(t))


def is_view(node: fx.Node) -> bool:
    return node.op == "call_function" and (op_name(node) in VIEWS or node.target is operator.getitem)


def _attention(node: fx.Node, values: Optional[dict] = None) -> int:
    q, k, v = (_shape(a, values) for a in node.args[:3])
    if len(q) < 2 or len(k) < 2 or len(v) < 2:
        return 0
    rows = math.prod(q[:-1])  # batch x heads x queries
    return rows * k[-2] * (2 * q[-1] + 2 * v[-1] + 5)  # QK^T, PV, softmax


def node_flops(node: fx.Node, values: Optional[dict] = None) -> int:
    """The node's FLOPs (0 for placeholders, outputs, views and copies). ``values``: the real value of the node
    and of its arguments (a call's tensors), else the sizes the graph was captured with."""
    if node.op != "call_function":
        return 0
    if node.target in (operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv):
        return 0
    name = op_name(node)
    args = node.args
    if name == "mm":
        (m, k), n = _shape(args[0], values), _shape(args[1], values)[-1]
        return 2 * m * n * k
    if name in ("addmm", "baddbmm"):
        return 2 * _numel(node, values) * _shape(args[1], values)[-1] + _numel(node, values)
    if name in ("bmm", "matmul", "gemm"):  # gemm: septran::gemm already in a graph
        return 2 * _numel(node, values) * _shape(args[0], values)[-1]
    if name == "linear":
        bias = _numel(node, values) if len(args) > 2 and args[2] is not None else 0
        return 2 * _numel(node, values) * _shape(args[0], values)[-1] + bias
    if "scaled_dot_product" in name or name.startswith("septran_attention"):
        return _attention(node, values)
    if name in ("convolution", "conv2d", "conv1d", "_convolution"):
        w = _shape(args[1], values)
        return 2 * _numel(node, values) * math.prod(w[1:]) if w else 0
    if name in PER_ELEMENT:
        return PER_ELEMENT[name] * _numel(args[0], values)
    if name in NO_FLOPS:
        return 0
    if name in ("sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "norm", "cumsum", "argmax"):
        return _numel(args[0], values)
    return _numel(node, values)  # elementwise: one per output element
