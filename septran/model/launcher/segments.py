"""Cutting a lowered graph into segments: runs of steps and the glue between them that one launcher can run.

A node joins a segment if it is a fast step (``septran.model.steps.FAST``), an ATen view (its output a tensor), or
a ``copy_`` (a KV-cache write, ``septran.model.inplace``). Nodes that compute nothing a segment reads from and
that read nothing a segment writes stay where they are without splitting it: integer arithmetic on sizes, the
arena's views, the once-concatenated weights of fused GEMMs. Any other node (one that stays with torch) ends the
segment; so does the graph's output. A segment with no step is left as it is.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from septran.model import steps
from septran.model.flops import VIEWS, op_name
from septran.model.launcher.runner import Segment

aten = torch.ops.aten
_TUPLE_VIEWS = {"split", "split_with_sizes", "unbind", "chunk"}


def _joins(n: fx.Node) -> bool:
    if n.op != "call_function":
        return False
    if isinstance(n.target, steps.Step):
        return type(n.target) in steps.FAST.values()
    if not isinstance(n.meta.get("val"), torch.Tensor) or not isinstance(n.target, torch._ops.OpOverload):
        return False
    if n.target is aten.copy_.default:
        return True
    name = op_name(n)
    return name in VIEWS and name not in _TUPLE_VIEWS


def _beside(n: fx.Node, arena) -> bool:
    """A node that may stay where it is inside a segment (it reads no tensor a segment writes)."""
    from septran.model.patterns.fuse_gemms import ConcatWeights

    if n.op in ("placeholder", "get_attr"):
        return True
    if n.op != "call_function":
        return False
    if isinstance(n.meta.get("val"), (int, torch.SymInt)) and not any(
            isinstance(a.meta.get("val"), torch.Tensor) for a in n.all_input_nodes):
        return True
    if n.target is operator.getitem and arena is not None and n.args[0] is arena:
        return True
    return isinstance(n.target, ConcatWeights) and all(a.op == "placeholder" for a in n.all_input_nodes)


def cut(graph: fx.Graph, arena=None) -> list[list[fx.Node]]:
    """The segments, in order, each a list of nodes in graph order."""
    out, current, members = [], [], set()
    for n in graph.nodes:
        if _joins(n):
            current.append(n)
            members.add(n)
        elif _beside(n, arena) and not any(a in members for a in n.all_input_nodes):
            continue
        else:
            if any(isinstance(m.target, steps.Step) for m in current):
                out.append(current)
            current, members = [], set()
    if any(isinstance(m.target, steps.Step) for m in current):
        out.append(current)
    return out


def replace(gm: fx.GraphModule, nodes: list[fx.Node], name: str) -> Segment:
    """``nodes`` become one ``Segment`` node (and a getitem per value read after it)."""
    members = set(nodes)
    inputs = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in members and a not in inputs:
                inputs.append(a)
    outputs = [n for n in nodes if any(u not in members for u in n.users)]
    sub = fx.Graph()
    env = {}
    for a in inputs:
        p = sub.placeholder(a.name)
        p.meta = dict(a.meta)
        env[a] = p
    for n in nodes:
        env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(tuple(env[n] for n in outputs))
    sub_gm = fx.GraphModule(torch.nn.Module(), sub)
    segment = Segment(sub_gm, name, sum(isinstance(n.target, steps.Step) for n in nodes))
    graph = gm.graph
    with graph.inserting_after(nodes[-1]):
        call = graph.call_function(segment, tuple(inputs))
    call.meta["val"] = tuple(n.meta.get("val") for n in outputs)
    last = call
    for i, n in enumerate(outputs):
        with graph.inserting_after(last):
            got = graph.call_function(operator.getitem, (call, i))
        got.meta = dict(n.meta)
        n.replace_all_uses_with(got, delete_user_cb=lambda u: u not in members and u is not got)
        last = got
    for n in reversed(nodes):
        graph.erase_node(n)
    return segment
