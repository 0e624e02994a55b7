"""Nodes that compute nothing, removed after the rewrite: a view, reshape or expand to the shape its input
already has (``expand(x, x.shape)``, what ``repeat_kv`` and ``q @ k`` leave around a bmm when the heads need no
repeating; ``view(x, x.shape)``), and ``alias``.

Each returns its input's sizes and strides unchanged, so its uses read the input itself; the node is one
torch call fewer per step (a few microseconds of Python and dispatch each, the direct runner's unit cost).
Sizes are compared as expressions (a symbolic size is never asked, which would add a guard). Copies
(``clone``, a cast to the same dtype) are left: they give new storage, which a later in-place write may rely on.
"""
from __future__ import annotations

import logging

import torch
import torch.fx as fx

from septran.model.patterns.base import val

log = logging.getLogger(__name__)
aten = torch.ops.aten
SAME_SHAPE = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default)


def _sizes(shape) -> list[str]:
    return [str(s) for s in shape]


def _noop(node: fx.Node) -> bool:
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    if any(u.op == "output" for u in node.users):  # a returned view stays one (AOTAutograd's alias bookkeeping)
        return False
    if node.target is aten.alias.default:
        return True
    if node.target not in SAME_SHAPE:
        return False
    src, out = val(node.args[0]), val(node)
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    return _sizes(src.shape) == _sizes(out.shape) and _sizes(src.stride()) == _sizes(out.stride()) \
        and src.dtype == out.dtype


def drop_noops(graph: fx.Graph) -> int:
    """Gives each no-op node's uses its input and erases it; returns how many."""
    dropped = 0
    for node in list(graph.nodes):
        if _noop(node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            dropped += 1
    if dropped:
        log.info("septran: %d no-op views removed", dropped)
    return dropped
