"""The rewrite: every pattern match in an ATen FX graph becomes a call of its SepTran custom op.

Nodes are visited last to first, so that the largest pattern ending at a node wins (a GEMM takes its activation
before the activation alone is looked at); at each node the patterns (``PATTERNS``) are asked in order. A match
inserts ``op(*args, **kwargs)`` before its ``output``, gives it ``output``'s uses, and erases the matched nodes
nothing else uses any more. A pattern that fails, or whose op disagrees with the graph on the output's shape or
dtype, never breaks the model: the node stays with torch and the report says why.
"""
from __future__ import annotations

import logging
import operator
from typing import Optional

import torch
import torch.fx as fx

from septran.model.flops import is_view, node_flops, op_name
from septran.model.patterns.base import Match, Refusal
from septran.model.report import Report, Row, next_graph_id

log = logging.getLogger(__name__)


def _op_text(node: fx.Node) -> str:
    if node.op in ("placeholder", "output", "get_attr"):
        return node.op
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}.{op_name(node)}"
    return f"{getattr(t, '__module__', '') or ''}.{getattr(t, '__name__', t)}".lstrip(".")


def _shape_text(node: fx.Node) -> str:
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return f"[{', '.join(str(s) for s in v.shape)}] {str(v.dtype).removeprefix('torch.')}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(f"[{', '.join(map(str, t.shape))}]" for t in v if isinstance(t, torch.Tensor)) + ")"
    return "" if v is None else type(v).__name__


def _default_why(node: fx.Node) -> str:
    if node.target is operator.getitem:
        return "torch: takes a result of a tuple (no compute)"
    if not isinstance(node.target, torch._ops.OpOverload):
        return "torch: shape arithmetic" if node.meta.get("val") is not None and not isinstance(
            node.meta.get("val"), torch.Tensor) else f"torch: no pattern knows {_op_text(node)}"
    if node.target.namespace == "septran":
        return f"SepTran: {node.target.name()}"
    if is_view(node):
        return "torch: a view (no compute)"
    return f"torch: no pattern knows {_op_text(node)}"


def _same(a, b) -> bool:
    """Two shapes or dtypes agree, symbolic sizes by their expressions (no guard is added)."""
    return str(a) == str(b)


def _check(match: Match, order: dict) -> Optional[str]:
    """Why ``match`` cannot be applied, or None: its nodes are op calls, its inputs come before its output, its
    op gives the output's shape and dtype."""
    out = match.output
    if out not in match.nodes:
        return "the match's output is not among its nodes"
    if any(n.op != "call_function" for n in match.nodes):
        return "the match holds a node that is not an op call"
    inputs = []  # every node the call reads, inside lists too (an elementwise chain's inputs)
    fx.node.map_arg((match.args, match.kwargs), inputs.append)
    if any(a in match.nodes or order.get(a, len(order)) >= order[out] for a in inputs):
        return "the match reads a value computed inside it or after its output"
    want = out.meta.get("val")
    if not isinstance(want, torch.Tensor):
        return "the match's output is not a tensor"
    fake_args, fake_kwargs = fx.node.map_arg((match.args, match.kwargs), lambda a: a.meta.get("val"))
    mode = torch._guards.detect_fake_mode([want])
    try:
        with mode if mode is not None else torch._subclasses.FakeTensorMode():
            got = match.op(*fake_args, **fake_kwargs)
    except Exception as err:  # noqa: BLE001 - the op's fake refuses its arguments: torch keeps the nodes
        return f"{match.pattern}'s op refused its arguments: {type(err).__name__}: {err}"
    if not isinstance(got, torch.Tensor) or not _same(got.shape, want.shape) or got.dtype != want.dtype:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return f"{match.pattern}'s op gives {shape}, the graph has {tuple(want.shape)} {want.dtype}"
    return None


def _apply(graph: fx.Graph, match: Match) -> tuple[fx.Node, set]:
    """Inserts the call, moves ``output``'s uses to it, erases the matched nodes left unused; returns the call
    and the erased nodes."""
    out = match.output
    with graph.inserting_before(out):
        call = graph.call_function(match.op, tuple(match.args), dict(match.kwargs))
    call.meta.update({k: v for k, v in out.meta.items() if k in ("val", "tensor_meta", "stack_trace", "nn_module_stack")})
    out.replace_all_uses_with(call)
    erased: set = set()
    order = {n: i for i, n in enumerate(graph.nodes)}
    for n in sorted(match.nodes, key=lambda n: -order[n]):  # users before what they use
        if not n.users:
            graph.erase_node(n)
            erased.add(n)
    return call, erased


def _rows(nodes: list, graph_id: int) -> dict:
    return {n: Row(graph_id, n.name, _op_text(n), _shape_text(n), "", node_flops(n)) for n in nodes}


def unrewritten(gm: fx.GraphModule, why: str) -> Report:
    """The report of a graph that runs as captured: every op with torch, for ``why``."""
    rows = _rows(list(gm.graph.nodes), next_graph_id())
    for n, row in rows.items():
        row.runs = "input" if n.op == "placeholder" else "output" if n.op == "output" else f"torch: {why}"
    return Report(list(rows.values()))


def rewrite(gm: fx.GraphModule, patterns: Optional[list] = None) -> Report:
    """Rewrites ``gm`` in place (and recompiles it); returns the report of every node."""
    if patterns is None:
        from septran.model.patterns import PATTERNS

        patterns = PATTERNS
    from septran.model.patterns import gelu_written

    graph_id = next_graph_id()
    graph = gm.graph
    gelu_written.canonicalize(graph)  # GPT-2's gelu_new as aten.gelu: the GEMM's epilogue takes it
    nodes = list(graph.nodes)
    rows = _rows(nodes, graph_id)
    order = {n: i for i, n in enumerate(nodes)}
    why: dict = {}
    gone: set = set()
    for node in reversed(nodes):
        if node in gone or node.op != "call_function" or node.graph is not graph:
            continue
        if isinstance(node.target, torch._ops.OpOverload) and node.target.namespace == "septran":
            continue
        for pattern in patterns:
            name = getattr(pattern, "name", type(pattern).__name__)
            try:
                result = pattern.match(node)
                if result is None:
                    continue
                if isinstance(result, Refusal):
                    why.setdefault(result.node, f"torch: {result.pattern} refused: {result.why}")
                    continue
                problem = _check(result, order)
                if problem is not None:
                    log.warning("pattern %s at %s not applied: %s", name, node.name, problem)
                    why.setdefault(node, f"torch: {problem}")
                    continue
                call, erased = _apply(graph, result)
            except Exception as err:  # noqa: BLE001 - a pattern's bug must never break the model
                log.warning("pattern %s failed at %s", name, node.name, exc_info=True)
                why.setdefault(node, f"torch: pattern {name} failed: {type(err).__name__}: {err}")
                continue
            gone |= erased
            kernel = result.kernel or name
            for n in result.nodes:
                if n in erased:
                    part = "" if n is result.output else f" (part of {result.output.name})"
                    rows[n].runs = f"SepTran: {kernel}{part}"
                else:
                    rows[n].runs = f"torch: also used outside {kernel} at {result.output.name}"
            rows[result.output].runs = f"SepTran: {kernel}"
            log.info("%s: %s replaced by %s", result.output.name, ", ".join(n.name for n in result.nodes), call.name)
            break
    for n, row in rows.items():
        if not row.runs:
            row.runs = "input" if n.op == "placeholder" else "output" if n.op == "output" else why.get(n) or _default_why(n)
    from septran.model.patterns.noops import drop_noops

    drop_noops(graph)  # views to the shape they already have: their uses read the input
    graph.eliminate_dead_code()
    left = set(graph.nodes)
    for n, row in rows.items():  # e.g. a weight's transpose no kernel reads any more, a view that changed nothing
        if n not in left and n not in gone and row.runs.startswith("torch"):
            row.runs = "unused after the rewrite (not run)"
    graph.lint()
    gm.recompile()
    return Report(list(rows.values()))
