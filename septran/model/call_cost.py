"""One call's FLOPs and bytes at its real sizes: what a profile divides its times by.

A SepTran op counts what its kernel computes (a SwiGLU is two GEMMs and the gate; an attention QK^T, softmax
and PV over every key it is given, as ``flops.py`` counts torch's); a torch node counts as ``flops.node_flops``
does, at the call's sizes instead of the captured graph's. Bytes are every tensor read and written once: the
least the call has to move, so GB/s is a lower bound of what the memory system saw.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx as fx

from septran.model.flops import node_flops, op_name

ACTIVATION_FLOPS = {"none": 0, "relu": 1, "gelu": 8, "gelu_tanh": 10, "silu": 4}


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(x.shape[-1], 1) if x.dim() else 1


def _gemm(x, w, bias, w_transposed, act, *_) -> int:
    k = x.shape[-1]
    n = w.shape[0] if w_transposed else w.shape[1]
    m = _rows(x)
    return 2 * m * n * k + m * n * ((bias is not None) + ACTIVATION_FLOPS.get(act, 1))


def _swiglu(x, wg, wu, transposed, *_) -> int:
    k = x.shape[-1]
    n = wg.shape[0] if transposed else wg.shape[1]
    m = _rows(x)
    return 4 * m * n * k + 5 * m * n  # two GEMMs; silu and the product


def _attention(q, k, v, mask, causal, scale, seq_major, *_) -> int:
    # q, k, v are (B, H, S, D) whatever ``seq_major`` says (it names the memory layout, heads of a (B, S, H, D)
    # tensor: reading it as the shape counted H keys, 64 times too few FLOPs for BERT's 512)
    rows, keys = q.shape[0] * q.shape[1] * q.shape[2], k.shape[2]
    return rows * keys * (2 * q.shape[-1] + 2 * v.shape[-1] + 5)  # QK^T, PV, softmax


def _elementwise(inputs, spec, *_, out=None) -> int:
    from septran.ops.elementwise import parse

    return len(parse(spec)) * (out.numel() if isinstance(out, torch.Tensor) else 0)


SEPTRAN: dict[str, Callable[..., int]] = {
    "gemm": _gemm,
    "gemm_residual": lambda x, w, bias, r, t, *_: _gemm(x, w, bias, t, "none") + r.numel(),  # + the residual
    "bmm": lambda a, b, *_: 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2],
    "swiglu": _swiglu,
    "attention": _attention,
    "attention_written": lambda q, k, v, keep, scale, *_: _attention(q, k, v, None, False, scale, False),
    "softmax": lambda x, *_: 5 * x.numel(),
    "layer_norm": lambda x, *_: 5 * x.numel(),
    "rms_norm": lambda x, *_: 4 * x.numel(),
    "rope": lambda x, *_: 3 * x.numel(),  # x * cos + rotate_half(x) * sin
}


def septran_op(node: fx.Node):
    """The ``torch.ops.septran`` op a node calls: its target, or the op of a direct runner's step
    (``septran.model.steps``: called ``step(out, *the op's arguments)``); else None."""
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t if t.namespace == "septran" else None
    op = getattr(t, "op", None)
    return op if isinstance(op, torch._ops.OpOverload) and op.namespace == "septran" and hasattr(t, "kernel") else None


def is_septran(node: fx.Node) -> bool:
    return septran_op(node) is not None


def is_step(node: fx.Node) -> bool:
    """A direct runner's step (its first argument is the arena's view for its output, or None)."""
    return not isinstance(node.target, torch._ops.OpOverload) and is_septran(node)


def flops(node: fx.Node, args: tuple, kwargs: dict, out: Any) -> int:
    """The FLOPs of ``node`` called with ``args`` and ``kwargs`` (real values), giving ``out``."""
    if node.op != "call_function":
        return 0
    op = septran_op(node)
    if op is not None:
        name = op._overloadpacket.__name__
        if is_step(node):
            args = args[1:]
        if name == "elementwise":
            return _elementwise(*args, out=out, **kwargs)
        count = SEPTRAN.get(name)
        try:
            return int(count(*args, *kwargs.values())) if count is not None else 0
        except (AttributeError, IndexError, TypeError, ValueError):  # a signature this table does not know yet
            return 0  # no FLOPs rather than a wrong count
    # fx.Interpreter fetched ``args`` and ``kwargs`` in the node's own structure: the same places hold the values
    values = {node: out}
    values.update((a, v) for a, v in zip(node.args, args) if isinstance(a, fx.Node))
    values.update((node.kwargs[k], v) for k, v in kwargs.items() if isinstance(node.kwargs.get(k), fx.Node))
    return node_flops(node, values)


def nbytes(args: tuple, kwargs: dict, out: Any) -> int:
    """Every tensor the call reads or writes, once each (a tensor passed twice counts once)."""
    found: list = []
    _tensors_into((args, kwargs, out), found)
    seen, total = set(), 0
    for t in found:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _tensors_into(value: Any, out: list) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors_into(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors_into(v, out)


def shapes_text(args: tuple) -> str:
    """The call's tensor arguments' shapes, for the trace (``64x256, 256x688``)."""
    found: list = []
    _tensors_into(args, found)
    return ", ".join("x".join(map(str, t.shape)) or "scalar" for t in found)
