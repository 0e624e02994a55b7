"""Test helpers of the model-level patterns: capture a module's ATen graph as the backend does, apply a
pattern's Matches to it (a small stand-in for septran/model/rewrite.py), and run the result."""
from __future__ import annotations

import torch
from torch._dynamo.backends.common import aot_autograd


def capture(module, *inputs, dynamic=None) -> list:
    """The ATen inference graphs (GraphModules) that torch.compile makes of ``module`` for ``inputs``."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=aot_autograd(fw_compiler=keep), dynamic=dynamic, fullgraph=True)
    with torch.no_grad():
        compiled(*inputs)
    return graphs


def matches(gm, pattern) -> list:
    """What ``pattern`` returns at each node (Matches and Refusals), in graph order."""
    out = []
    for node in list(gm.graph.nodes):
        r = pattern.match(node)
        if r is not None:
            out.append(r)
    return out


def apply(gm, *patterns) -> list:
    """Replace every Match of ``patterns`` (tried in order at each node) by its op call; returns the Matches."""
    from septran.model.patterns.base import Match

    done = []
    for node in list(gm.graph.nodes):
        if node.graph is None:  # erased by an earlier match
            continue
        for pattern in patterns:
            m = pattern.match(node)
            if isinstance(m, Match):
                with gm.graph.inserting_after(m.output):
                    call = gm.graph.call_function(m.op, m.args, m.kwargs)
                call.meta["val"] = m.output.meta.get("val")
                m.output.replace_all_uses_with(call)
                for n in sorted(m.nodes, key=lambda n: -_order(gm, n)):
                    if not n.users:
                        gm.graph.erase_node(n)
                done.append(m)
                break
    gm.graph.lint()
    gm.recompile()
    return done


def _order(gm, node) -> int:
    for i, n in enumerate(gm.graph.nodes):
        if n is node:
            return i
    return -1


def compile_with(module, *patterns, dynamic=None, record=None):
    """``torch.compile(module)`` whose ATen graphs get ``patterns`` applied (``record`` collects the Matches)."""

    def rewrite(gm, example_inputs):
        found = apply(gm, *patterns)
        if record is not None:
            record.extend(found)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(module, backend=aot_autograd(fw_compiler=rewrite), dynamic=dynamic, fullgraph=True)
