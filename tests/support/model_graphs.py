"""Model-level test helpers: capture a module's ATen inference graph (as the septran backend does, through
AOTAutograd), apply patterns to it with small stand-ins for septran/model/rewrite.py, run and compare."""
from __future__ import annotations

import torch
from torch._dynamo.backends.common import aot_autograd

from septran.model.patterns.base import Match, val

def apply_patterns(gm, patterns, results: list):
    """Asks ``patterns`` at every node, last node first; applies each Match; appends every Match/Refusal."""
    graph, gone = gm.graph, set()
    for node in reversed(list(graph.nodes)):
        if node in gone or node.op != "call_function":
            continue
        for p in patterns:
            r = p.match(node)
            if r is None:
                continue
            results.append(r)
            if isinstance(r, Match):
                with graph.inserting_before(r.output):
                    new = graph.call_function(r.op, r.args, r.kwargs)
                new.meta["val"] = val(r.output)
                r.output.replace_all_uses_with(new)
                for n in sorted(r.nodes, key=lambda n: -list(graph.nodes).index(n)):
                    if not n.users:
                        graph.erase_node(n)
                        gone.add(n)
                break
    graph.lint()
    gm.recompile()
    return gm


def compiled(fn, patterns, results: list, dynamic=False):
    """``fn`` under torch.compile with a backend that applies ``patterns`` to its AOTAutograd inference graph."""

    def fw(gm, example_inputs):
        return apply_patterns(gm, patterns, results).forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=aot_autograd(fw_compiler=fw), fullgraph=True, dynamic=dynamic)


def err(out, ref) -> float:
    return (out.double() - ref.double()).abs().max().item()


def assert_flash_rule(out, ref64, torch_out, eps: float = 1e-5):
    """FlashAttention's rule: SepTran's error vs float64 at most twice torch's own in the same dtype, plus eps."""
    assert out.dtype == torch_out.dtype and out.shape == torch_out.shape
    e, t = err(out, ref64), err(torch_out, ref64)
    assert e <= 2 * t + eps, f"septran's error {e:.3e} vs torch's {t:.3e}"


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


def count_builds(monkeypatch) -> list:
    """Every kernel SepTran builds from now on (its C build: the cpu target's), by name."""
    from septran.build import c_builder as c_build

    built = []
    real = c_build.build
    monkeypatch.setattr(c_build, "build", lambda *a, **k: built.append(a[0].name) or real(*a, **k))
    return built
