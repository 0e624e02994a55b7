"""The GEMM family: ``mm`` / ``addmm`` (bias) / ``linear`` with a following relu, gelu (erf or tanh) or silu
fused as the epilogue, and ``bmm``, as AOTAutograd leaves them.

A Linear arrives as ``view(x) -> addmm(bias, ., t(W)) -> view -> act``: the leading dimensions of ``x`` fold into
the rows (``septran::gemm`` keeps them; the model mappings make the rows dynamic), ``W`` is read as stored
(N, K) through the ``gemm_bt`` leaf, no copy. The pattern is asked at the activation (the last node) first.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from septran.model.flops import node_flops
from septran.model.patterns.base import Match, Pattern, Refusal, val
from septran.model.patterns.nodes import FLOATS, is_call

aten = torch.ops.aten
ACTS = {aten.relu.default: "relu", aten.silu.default: "silu"}
VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _act(node: fx.Node):
    """The activation ``node`` computes ("gelu", "gelu_tanh", ...), or None."""
    if is_call(node, aten.gelu.default):
        approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)
    return ACTS.get(node.target) if isinstance(node, fx.Node) else None


def _dims(node) -> tuple:
    v = val(node)
    return tuple(str(s) for s in v.shape) if isinstance(v, torch.Tensor) else ()


def _transposed(b: fx.Node):
    """(W, True) when ``b`` is W (N, K) transposed by ``t`` / ``transpose(0, 1)`` / ``permute([1, 0])``."""
    if is_call(b, aten.t.default) or (is_call(b, aten.transpose.int) and sorted(int(d) % 2 for d in b.args[1:3]) == [0, 1]) \
            or (is_call(b, aten.permute.default) and list(b.args[1]) == [1, 0]):
        w = b.args[0]
        if len(_dims(w)) == 2:
            return w, True
    return b, False


def _refusal(node: fx.Node, *tensors) -> Refusal | None:
    from septran.ops import kernels
    from septran.target import load_target

    for t in tensors:
        v = val(t)
        if not isinstance(v, torch.Tensor):
            return Refusal("gemm", node, "an operand has no known shape")
        if v.dtype not in FLOATS:
            return Refusal("gemm", node, f"{str(v.dtype).removeprefix('torch.')} is not a SepTran GEMM dtype")
        target = kernels.target_for(v.device)
        if str(v.dtype).removeprefix("torch.") not in load_target(target).dtypes:
            return Refusal("gemm", node, f"the {target} target has no {v.dtype}")
    return None


def _kernel_text(bias, act: str, trans: bool, plain: bool) -> str:
    if plain:
        return "examples/gemm"
    parts = (["bias"] if bias is not None else []) + ([act] if act != "none" else []) + (["W^T in place"] if trans else [])
    return f"examples/gemm_epilogue ({', '.join(parts)})"


class GemmPattern(Pattern):
    name = "gemm"

    def match(self, node: fx.Node):
        act = _act(node)
        inner = node.args[0] if act else node
        view = None  # the view back to x's leading dimensions, at the end or before the activation
        if is_call(inner, *VIEWS) and (inner is node or len(inner.users) == 1) \
                and is_call(inner.args[0], aten.mm.default, aten.addmm.default):
            view, inner = inner, inner.args[0]
        if is_call(inner, aten.linear.default):
            return self._linear(node, inner, act)
        if not is_call(inner, aten.mm.default, aten.addmm.default):
            return None
        if (act or view is not None) and len(inner.users) != 1:  # the GEMM's result is used elsewhere too
            return None
        if inner.target is aten.addmm.default:
            if inner.kwargs.get("beta", 1) != 1 or inner.kwargs.get("alpha", 1) != 1:
                return Refusal("gemm", inner, "addmm with beta or alpha other than 1")
            bias, a, b = inner.args[:3]
            if len(_dims(bias)) != 1:
                return None if node is not inner else Refusal("gemm", inner, "the bias is not one value per column")
        else:
            bias, (a, b) = None, inner.args[:2]
        refused = _refusal(inner, a, b, *([bias] if bias is not None else []))
        if refused is not None:
            return None if node is not inner else refused
        nodes = [inner]
        x = a
        if view is not None:  # x's leading dimensions, folded into rows by the view, come back in the output
            lead = _dims(a.args[0])[:-1] if is_call(a, *VIEWS) else None
            if lead is not None and _dims(view) == lead + _dims(inner)[-1:] and _dims(a.args[0])[-1:] == _dims(a)[-1:]:
                x = a.args[0]
                nodes += [a, view] if view is not node else [a]
            else:
                return None  # the GEMM alone is matched at its own node
        w, trans = _transposed(b)
        if trans:
            nodes.append(b)
        if node is not inner and node not in nodes:
            nodes.append(node)
        return self._match(nodes, node, x, w, bias, trans, act or "none")

    def _linear(self, node, lin, act):
        if act and len(lin.users) != 1:
            return None
        x, w = lin.args[:2]
        bias = lin.args[2] if len(lin.args) > 2 else lin.kwargs.get("bias")
        refused = _refusal(lin, x, w, *([bias] if bias is not None else []))
        if refused is not None:
            return None if act else refused
        out = node if act else lin
        return self._match([lin] + ([node] if act else []), out, x, w, bias, True, act or "none")

    def _match(self, nodes, out, x, w, bias, trans, act):
        import septran.ops.gemm  # noqa: F401 - registers torch.ops.septran.gemm

        gemm = torch.ops.septran.gemm.default
        plain = bias is None and act == "none" and not trans
        return Match("gemm", tuple(nodes), out, gemm, (x, w, bias, trans, act),
                     kernel=_kernel_text(bias, act, trans, plain), flops=sum(node_flops(n) for n in nodes))


class BmmPattern(Pattern):
    name = "bmm"

    def match(self, node: fx.Node):
        if not is_call(node, aten.bmm.default):
            return None
        a, b = node.args[:2]
        refused = _refusal(node, a, b)
        if refused is not None:
            return Refusal("bmm", node, refused.why)
        import septran.ops.bmm  # noqa: F401 - registers torch.ops.septran.bmm

        return Match("bmm", (node,), node, torch.ops.septran.bmm.default, (a, b), kernel="examples/bmm", flops=node_flops(node))


def register(patterns: list) -> None:
    patterns += [GemmPattern(), BmmPattern()]
