"""Cutting a lowered graph into segments: runs of steps and the glue between them that one launcher can run.

A node joins a segment if it is a fast step (``septran.model.step_table.FAST``), an ATen view (its output a tensor),
a ``copy_`` (a KV-cache write, ``septran.model.inplace``), or one of the small operations the launcher computes
itself (``glue``: positions, masks, rotary tables, embeddings, ``index_copy_``), where its metadata shows the
recorder can take it. Nodes that compute nothing a segment reads from and
that read nothing a segment writes stay where they are without splitting it: integer arithmetic on sizes, the
arena's views, the once-concatenated weights of fused GEMMs. Any other node (one that stays with torch) ends the
segment; so does the graph's output. A segment with no step is left as it is.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from septran.model import step_table, steps
from septran.model.flops import VIEWS, op_name
from septran.model.launcher import glue
from septran.model.launcher.runner import Segment

aten = torch.ops.aten
_TUPLE_VIEWS = {"split", "split_with_sizes", "unbind", "chunk"}
_SPLITS = (aten.split.Tensor, aten.split_with_sizes.default)


def _joins(n: fx.Node) -> bool:
    if n.op != "call_function":
        return False
    if isinstance(n.target, steps.Step):
        return type(n.target) in step_table.FAST.values() and not _reads_its_mask(n)
    if n.target is operator.getitem:  # a piece of a split (cut() keeps it only after its split)
        return isinstance(n.args[0], fx.Node) and n.args[0].target in _SPLITS
    if n.target in _SPLITS or glue.joins(n):
        return True
    if not isinstance(n.meta.get("val"), torch.Tensor) or not isinstance(n.target, torch._ops.OpOverload):
        return False
    if n.target is aten.copy_.default:
        return True
    name = op_name(n)
    return name in VIEWS and name not in _TUPLE_VIEWS


def _reads_its_mask(n: fx.Node) -> bool:
    """A prefill's attention with a bool mask (more than ``DECODE_ROWS`` queries, not causal): its step reads the
    mask's values at every call (``steps_attention.Attention``), so no launcher can record it. It stays out,
    with the Python of its step, and the steps around it still launch (inside, it kept its whole segment on its
    steps)."""
    from septran.model.steps_attention import Attention
    from septran.ops.attention import DECODE_ROWS

    if not isinstance(n.target, Attention) or len(n.args) < 6:
        return False
    q, mask, causal = n.args[1], n.args[4], n.args[5]
    rows = q.meta.get("val").shape[2] if isinstance(q, fx.Node) and isinstance(q.meta.get("val"), torch.Tensor) \
        else None
    return isinstance(mask, fx.Node) and causal is False and isinstance(rows, int) and rows > DECODE_ROWS


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
        if _joins(n) and (n.target is not operator.getitem or n.args[0] in members):
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


def replace(gm: fx.GraphModule, nodes: list[fx.Node], name: str, make=Segment) -> Segment:
    """``nodes`` become one ``Segment`` node (``make``: its class; and a getitem per value read after it)."""
    members = set(nodes)
    inputs = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in members and a not in inputs:
                inputs.append(a)
    for p in _sources(gm.graph, nodes):  # the dynamic sizes the segment's values depend on, from the graph's inputs
        if p not in inputs:
            inputs.append(p)
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
    segment = make(sub_gm, name, sum(isinstance(n.target, steps.Step) for n in nodes))
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


def _symbols(v) -> set:
    if isinstance(v, torch.SymInt):
        return set(v.node.expr.free_symbols)
    if isinstance(v, torch.Tensor):
        out = set()
        for e in (*v.shape, *v.stride(), v.storage_offset()):
            if isinstance(e, torch.SymInt):
                out |= e.node.expr.free_symbols
        return out
    if isinstance(v, (list, tuple)):
        return set().union(*(_symbols(x) for x in v)) if v else set()
    return set()


def _sources(graph: fx.Graph, nodes: list) -> list:
    """The placeholders that give the symbols the segment's values are sized by (a symbol as a whole: an integer
    input, or a dimension of a tensor input)."""
    import sympy

    wanted = set().union(*(_symbols(n.meta.get("val")) for n in nodes))
    found = []
    for p in graph.nodes:
        if not wanted:
            break
        if p.op != "placeholder":
            continue
        v = p.meta.get("val")
        here = set()
        if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
            here = {v.node.expr}
        elif isinstance(v, torch.Tensor):
            here = {s.node.expr for s in v.shape
                    if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol)}
        if here & wanted:
            found.append(p)
            wanted -= here
    return found
