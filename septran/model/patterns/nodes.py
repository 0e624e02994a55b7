"""Reading ATen FX nodes for the patterns: an op's arguments by name, sizes that may be symbolic, layouts.

Shapes of a graph captured with dynamic dimensions are SymInts; a pattern compares them only where the
comparison is known without a guard (``statically_known_true``), so matching never adds guards to the graph.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import optimization_hint, statically_known_true

from septran.model.patterns.base import val

aten = torch.ops.aten
FLOAT_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def is_call(node: Any, *targets) -> bool:
    """Whether ``node`` is a call of one of ``targets`` (OpOverloads or OpOverloadPackets)."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return any(target is t or packet is t for t in targets)


def arguments(node: fx.Node) -> Optional[dict]:
    """The node's arguments by their schema names, defaults filled in (None if the target has no schema)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def same(a, b) -> bool:
    """``a == b`` for ints or SymInts, known without a guard."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return statically_known_true(a == b)


def same_shape(a, b) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def num(x) -> int:
    """A size as a number for the report (a symbolic size: the size it was traced with)."""
    return x if isinstance(x, int) else int(optimization_hint(x, fallback=1))


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= num(s)
    return n


def float_dtype_problem(*nodes) -> Optional[str]:
    """Why these nodes' tensors cannot go to a SepTran kernel together (a dtype SepTran does not take, or mixed)."""
    dtypes = [val(n).dtype for n in nodes]
    for d in dtypes:
        if d not in FLOAT_DTYPES:
            return (f"{str(d).removeprefix('torch.')} is not a dtype SepTran's model kernels take "
                    "(float32, float16, bfloat16)")
    if len(set(dtypes)) > 1:
        return "the operands' dtypes differ (" + ", ".join(str(d).removeprefix("torch.") for d in dtypes) + ")"
    return None


def device_problem(*nodes) -> Optional[str]:
    devices = {val(n).device for n in nodes}
    return None if len(devices) == 1 else "the operands are on different devices"


def seq_major(shape, stride) -> Optional[bool]:
    """For a (B, H, S, D) tensor: True if it lies in memory as (B, S, H, D) (a ``transpose(1, 2)`` of a
    contiguous tensor: how Llama and BERT make their heads), False if it is contiguous, None if neither.
    Strides of extent-1 dimensions do not matter (views and kernels never step along them)."""
    if len(shape) != 4:
        return None
    b, h, s, d = shape

    def fits(expected) -> bool:
        return all(same(n, 1) or same(st, e) for n, st, e in zip(shape, stride, expected))

    if fits((h * s * d, s * d, d, 1)):
        return False
    if fits((s * h * d, d, h * d, 1)):
        return True
    return None


def through_full_slices(node, chain: list):
    """The node under ``x[:, :, ...]``'s whole-dimension slices (added to ``chain``), or ``node`` itself."""
    while is_call(node, aten.slice) and isinstance(node.args[0], fx.Node) and val(node.args[0]) is not None:
        a = arguments(node)
        size = val(node.args[0]).shape[a["dim"] % val(node.args[0]).dim()]
        end = a["end"]
        if a["start"] not in (None, 0) or a["step"] != 1:
            break
        if end is not None and not (isinstance(end, int) and end >= 2**62) and not same(end, size):
            break
        chain.append(node)
        node = node.args[0]
    return node
