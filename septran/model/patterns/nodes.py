"""Reading ATen FX nodes for the patterns: an op's arguments by name, sizes that may be symbolic, layouts.

Shapes of a graph captured with dynamic dimensions are SymInts; a pattern compares them only where the
comparison is known without a guard (``statically_known_true``), so matching never adds guards to the graph.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from septran.model.flops import hint as num  # noqa: F401 - a size as a number (a symbolic one at its hint)
from septran.model.patterns.base import val

aten = torch.ops.aten
FLOATS = (torch.float32, torch.float16, torch.bfloat16)  # what SepTran's model kernels compute on


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


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= num(s)
    return n


def node_numel(node: Any) -> int:
    """Elements of the tensor a node computes (symbolic sizes at their hints), 0 if it computes none."""
    v = val(node)
    return numel(v.shape) if isinstance(v, torch.Tensor) else 0


def number(x: Any) -> Optional[float]:
    """A Python number argument (not a tensor, not a bool, not symbolic) as a float, else None."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None
    return float(x)


def float_dtype_problem(*nodes) -> Optional[str]:
    """Why these nodes' tensors cannot go to a SepTran kernel together (a dtype SepTran does not take, or mixed)."""
    dtypes = [val(n).dtype for n in nodes]
    for d in dtypes:
        if d not in FLOATS:
            return (f"{str(d).removeprefix('torch.')} is not a dtype SepTran's model kernels take "
                    "(float32, float16, bfloat16)")
    if len(set(dtypes)) > 1:
        return "the operands' dtypes differ (" + ", ".join(str(d).removeprefix("torch.") for d in dtypes) + ")"
    return None


def dtype_problem(node: Any) -> Optional[str]:
    """Why a node's tensor is not one SepTran computes (None if it is)."""
    if not isinstance(val(node), torch.Tensor):
        return f"{getattr(node, 'name', node)} has no tensor metadata"
    return float_dtype_problem(node)


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


def plain_cast(node: Any) -> bool:
    """An ``aten._to_copy`` that changes only the dtype (same device, strided, no memory format)."""
    if not is_call(node, aten._to_copy.default) or len(node.args) != 1:
        return False
    src, dst = val(node.args[0]), val(node)
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor) or src.device != dst.device:
        return False
    kw = node.kwargs
    return (set(kw) <= {"dtype", "layout", "device", "memory_format"}
            and kw.get("layout") in (None, torch.strided)
            and kw.get("memory_format") in (None, torch.preserve_format))


def users_inside(node: fx.Node, inside: set) -> bool:
    """Every use of ``node`` is by a node of ``inside``."""
    return all(u in inside for u in node.users)


def unavailable(op: str, device, logic: bool = True) -> Optional[str]:
    """Why ``op`` cannot run on ``device`` (no target, no mapping there, its logic file missing), or None."""
    from septran.errors import SepTranError
    from septran.ops import kernels

    try:
        target = kernels.target_for(device)
        kernels.mapping_file(target, op)
        if logic:
            kernels.logic(op)
    except (SepTranError, StopIteration, OSError, ImportError) as err:
        return f"SepTran cannot run {op} on {device}: {err}"
    return None
