"""Chains of elementwise ATen ops -> one generated SepTran kernel (``torch.ops.septran.elementwise``).

Asked at a node (the chain's last), the pattern grows the chain backwards through operands that are elementwise
ops of the table, have the output's shape, are used only inside the chain, and are not the last node of what
an earlier pattern takes (a GEMM's epilogue, RMSNorm, SwiGLU stay theirs: this pattern is tried last). What
the chain reads from outside are its inputs: tensors of the output's shape, or broadcast along leading
dimensions (a vector of the last dimension), or one value per row, or a single value; numbers are constants.
"""
from __future__ import annotations

import heapq
import math

import torch
import torch.fx as fx

from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import FLOATS, node_numel, number, plain_cast, unavailable
from septran.ops.logic.elementwise_chain import POW_EXPONENTS, kind_of

aten = torch.ops.aten

_UNARY = {
    aten.neg.default: "neg", aten.exp.default: "exp", aten.log.default: "log", aten.tanh.default: "tanh",
    aten.sigmoid.default: "sigmoid", aten.relu.default: "relu", aten.silu.default: "silu", aten.erf.default: "erf",
    aten.rsqrt.default: "rsqrt", aten.sqrt.default: "sqrt", aten.abs.default: "abs",
    aten.reciprocal.default: "reciprocal",
}
_BINARY = {
    aten.add.Tensor: "add", aten.add.Scalar: "add", aten.sub.Tensor: "sub", aten.sub.Scalar: "sub",
    aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
    aten.maximum.default: "maximum", aten.minimum.default: "minimum",
}


def translate(node: fx.Node):
    """``(name, operands)`` of a table op (operands: fx nodes or floats), a str saying why a known op is not
    taken, or None for an op that is not elementwise."""
    t, args, kw = node.target, node.args, node.kwargs
    if t in _UNARY:
        return _UNARY[t], [args[0]]
    if t in _BINARY:
        if kw.get("alpha", 1) != 1 or kw.get("rounding_mode") is not None:
            return f"{t.__name__} with alpha or rounding_mode is not in the elementwise table"
        return _BINARY[t], list(args[:2])
    if t in (aten.rsub.Scalar, aten.rsub.Tensor):
        if kw.get("alpha", 1) != 1:
            return "rsub with alpha is not in the elementwise table"
        return "sub", [args[1], args[0]]
    if t is aten.gelu.default:
        approx = kw.get("approximate", args[1] if len(args) > 1 else "none")
        return ("gelu_tanh" if approx == "tanh" else "gelu"), [args[0]]
    if t is aten.pow.Tensor_Scalar:
        p = number(args[1])
        if p not in POW_EXPONENTS:
            return f"pow by {args[1]!r} is not in the elementwise table (exponents {POW_EXPONENTS})"
        return "pow", [args[0], p]
    if t is aten.where.self:
        return "where", list(args[:3])
    if t is aten._to_copy.default:
        if not plain_cast(node):
            return None
        return "same", [args[0]]
    if t is aten.clone.default and kw.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format):
        return "same", [args[0]]
    return None


class ElementwisePattern(Pattern):
    name = "elementwise"

    def match(self, node: fx.Node) -> Result:
        if node.op != "call_function":
            return None
        tr = translate(node)
        if tr is None:
            return None
        if isinstance(tr, str):
            return Refusal(self.name, node, tr)
        out = val(node)
        if not isinstance(out, torch.Tensor) or out.dtype not in FLOATS:
            dt = str(getattr(out, "dtype", "no tensor")).removeprefix("torch.")
            return Refusal(self.name, node, f"{dt} is not a dtype SepTran's elementwise chains compute")
        why = self._operands_problem(node, tr, out) or unavailable("elementwise_chain", out.device, logic=False)
        if why:
            return Refusal(self.name, node, why)
        members = self._grow(node, out)
        return self._build(node, members, out)

    # -- growing the chain -----------------------------------------------------------------------------------

    def _operands_problem(self, node, tr, out):
        """Why ``node``'s outside operands cannot be inputs of a chain ending in ``out`` (None if they can)."""
        name, operands = tr
        for pos, a in enumerate(operands):
            if isinstance(a, fx.Node):
                v = val(a)
                if not isinstance(v, torch.Tensor):
                    return f"operand {a.name} has no tensor metadata"
                cond = name == "where" and pos == 0
                if v.dtype not in (FLOATS + ((torch.bool,) if cond else ())):
                    return f"operand {a.name} is {str(v.dtype).removeprefix('torch.')}, not a float tensor"
                if kind_of(v.shape, out.shape) is None:
                    return (f"operand {a.name} of shape {tuple(v.shape)} broadcasts to {tuple(out.shape)} other than "
                            "along leading dimensions or as one value per row")
            elif number(a) is None or not math.isfinite(number(a)):
                return f"operand {a!r} is not a finite number"
        return None

    def _grow(self, sink: fx.Node, out) -> list:
        """The chain's nodes, last first: operands absorbed latest-first, so a node's users are decided before it."""
        order = {n: k for k, n in enumerate(sink.graph.nodes)}
        members, seen, heap = {sink}, {sink}, []

        def push_operands(n):
            for a in n.all_input_nodes:
                if a not in seen:
                    seen.add(a)
                    heapq.heappush(heap, (-order[a], a.name, a))

        push_operands(sink)
        while heap:
            _, _, m = heapq.heappop(heap)
            if m.op != "call_function" or not all(u in members for u in m.users):
                continue
            tr = translate(m)
            v = val(m)
            if tr is None or isinstance(tr, str) or not isinstance(v, torch.Tensor) or v.dtype not in FLOATS:
                continue
            if v.dim() != out.dim() or kind_of(v.shape, out.shape) != "full":
                continue
            if self._operands_problem(m, tr, out) or self._claimed(m):
                continue
            members.add(m)
            push_operands(m)
        return sorted(members, key=lambda n: order[n])

    def _claimed(self, node) -> bool:
        """An earlier pattern takes ``node`` as its last node: the chain leaves it to that pattern."""
        from septran.model.patterns import PATTERNS

        for p in PATTERNS:
            if isinstance(p, ElementwisePattern):
                break
            try:
                if isinstance(p.match(node), Match):
                    return True
            except Exception:  # a failing pattern claims nothing
                continue
        return False

    # -- the call ------------------------------------------------------------------------------------------------

    def _build(self, sink, members, out) -> Result:
        from septran.ops import elementwise as ew_ops

        index = {n: k for k, n in enumerate(members)}
        inputs, ops = [], []
        for n in members:
            name, operands = translate(n)
            enc = []
            for a in operands:
                if isinstance(a, fx.Node) and a in index:
                    enc.append(("v", index[a]))
                elif isinstance(a, fx.Node):
                    if a not in inputs:
                        inputs.append(a)
                    enc.append(("i", inputs.index(a)))
                else:
                    enc.append(("c", number(a)))
            ops.append((name, *enc))
        if not any(kind_of(val(a).shape, out.shape) == "full" for a in inputs):
            return Refusal(self.name, sink, "no input of the chain has its output's shape")
        names = "+".join(dict.fromkeys(op[0] for op in ops))
        return Match(self.name, tuple(members), sink, torch.ops.septran.elementwise.default,
                     (inputs, ew_ops.spec_of(ops), out.dtype),
                     kernel=f"generated elementwise chain ({len(ops)} ops: {names})",
                     flops=sum(node_numel(n) for n in members))


PATTERNS = [ElementwisePattern()]
