"""Small questions patterns ask of ATen FX nodes: which op, which constant, how many elements."""
from __future__ import annotations

import numbers
from typing import Any, Optional

import torch
import torch.fx as fx

from septran.model.patterns.base import val

FLOATS = (torch.float32, torch.float16, torch.bfloat16)  # what SepTran's norms and chains compute on


def is_op(node: Any, *ops) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in ops


def number(x: Any) -> Optional[float]:
    """A Python number argument (not a tensor, not a bool, not symbolic) as a float, else None."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None
    return float(x)


def numel(node: Any) -> int:
    """Elements of the tensor a node computes (a symbolic size counts at its hint), 0 if unknown."""
    v = val(node)
    if not isinstance(v, torch.Tensor):
        return 0
    n = v.numel()
    try:
        return int(n) if isinstance(n, int) else int(n.node.hint)
    except Exception:  # no hint: the report counts it as nothing
        return 0


def dtype_problem(node: Any) -> Optional[str]:
    """Why a node's tensor is not one SepTran computes (None if it is)."""
    v = val(node)
    if not isinstance(v, torch.Tensor):
        return f"{getattr(node, 'name', node)} has no tensor metadata"
    if v.dtype not in FLOATS:
        dt = str(v.dtype).removeprefix("torch.")
        return f"{dt} is not a dtype SepTran computes here (float32, float16, bfloat16)"
    return None


def plain_cast(node: Any) -> bool:
    """An ``aten._to_copy`` that changes only the dtype (same device, strided, no memory format)."""
    if not is_op(node, torch.ops.aten._to_copy.default) or len(node.args) != 1:
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
    from septran.model import kernels
    from septran.model.ops import shipped

    try:
        target = kernels.target_for(device)
        shipped.mapping_file(target, op)
        if logic:
            shipped.example(op)
    except (SepTranError, StopIteration, OSError) as err:
        return f"SepTran cannot run {op} on {device}: {err}"
    return None
