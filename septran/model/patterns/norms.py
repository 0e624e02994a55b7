"""Softmax, log-softmax, LayerNorm and RMSNorm in ATen graphs -> ``torch.ops.septran.{softmax,layer_norm,rms_norm}``.

RMSNorm is found as ``aten.rms_norm`` / ``_fused_rms_norm`` and in its decomposed form, as AOTAutograd gives
``nn.RMSNorm`` and as models write it: ``x * rsqrt(mean(x^2, -1, keepdim) + eps) [* w]`` (``x.pow(2)`` or
``x * x``, ``w`` on either side), with Llama's float32 upcast (``x.float()`` first, ``.to(dtype)`` before or after
the weight): the kernel computes in float32 and stores once, in the dtype the graph's last node has.
"""
from __future__ import annotations

import math
import operator
from typing import Optional

import torch
import torch.fx as fx

from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import dtype_problem, is_call, node_numel, number, plain_cast, unavailable

aten = torch.ops.aten


def _ops():
    from septran.ops import norms  # noqa: F401 - registers torch.ops.septran.{softmax,layer_norm,rms_norm}

    return torch.ops.septran


def _opt(name: str):
    return getattr(getattr(aten, name, None), "default", None)


class SoftmaxPattern(Pattern):
    name = "softmax"

    def match(self, node: fx.Node) -> Result:
        if is_call(node, aten._softmax.default, aten._log_softmax.default):
            x, dim = node.args[0], node.args[1]
        elif is_call(node, aten.softmax.int, aten.log_softmax.int):
            x, dim = node.args[0], node.args[1]
        else:
            return None
        log = node.target in (aten._log_softmax.default, aten.log_softmax.int)
        for n in (x, node):
            if dtype_problem(n):
                return Refusal(self.name, node, dtype_problem(n))
        if val(x).dim() == 0:
            return Refusal(self.name, node, "a softmax of a 0-d tensor is left to torch")
        if unavailable("softmax", val(x).device):
            return Refusal(self.name, node, unavailable("softmax", val(x).device))
        what = "log_softmax" if log else "softmax"
        return Match(self.name, (node,), node, _ops().softmax.default, (x, int(dim), log, val(node).dtype),
                     kernel=f"examples/softmax ({what}, dim {int(dim)})", flops=5 * node_numel(node))


class LayerNormPattern(Pattern):
    name = "layer_norm"

    def match(self, node: fx.Node) -> Result:
        if is_call(node, operator.getitem) and is_call(node.args[0], aten.native_layer_norm.default):
            ln = node.args[0]
            if node.args[1] != 0:
                return None
            if any(u is not node for u in ln.users):
                return Refusal(self.name, ln, "its mean and rstd are used too (training): left to torch")
            nodes = (ln, node)
        elif is_call(node, aten.layer_norm.default):
            ln, nodes = node, (node,)
        else:
            return None
        args = list(ln.args) + [None] * 6
        x, shape, w, b = args[0], args[1], args[2], args[3]
        eps = ln.kwargs.get("eps", args[4] if args[4] is not None else 1e-5)
        for n in (x, w, b, node):
            if n is not None and dtype_problem(n):
                return Refusal(self.name, ln, dtype_problem(n))
        if number(eps) is None:
            return Refusal(self.name, ln, "its eps is not a number")
        if val(node).dtype != val(x).dtype:
            return Refusal(self.name, ln, "its output's dtype differs from its input's")
        if unavailable("layernorm", val(x).device):
            return Refusal(self.name, ln, unavailable("layernorm", val(x).device))
        n = math.prod(int(s) for s in shape)
        kind = ", ".join(k for k, t in (("weight", w), ("bias", b)) if t is not None) or "no affine"
        return Match(self.name, nodes, node, _ops().layer_norm.default, (x, n, w, b, number(eps)),
                     kernel=f"examples/layernorm ({kind})", flops=8 * node_numel(node))


class RMSNormPattern(Pattern):
    name = "rms_norm"

    def match(self, node: fx.Node) -> Result:
        found = self._fused(node)
        if found is None:
            found = self._decomposed(node)
        if found is None or isinstance(found, Refusal):
            return found
        nodes, x, k, w, eps = found
        for n in (x, w, node):
            if n is not None and dtype_problem(n):
                return Refusal(self.name, node, dtype_problem(n))
        xv = val(x)
        if tuple(val(node).shape) != tuple(xv.shape):
            return Refusal(self.name, node, "its weight broadcasts the result beyond the input's shape")
        if w is not None and _squeeze(val(w).shape) != tuple(xv.shape[xv.dim() - k:]):
            return None  # not a weight of the normalised dimensions: the mul is something else
        if unavailable("rmsnorm", xv.device):
            return Refusal(self.name, node, unavailable("rmsnorm", xv.device))
        n = math.prod(int(s) for s in xv.shape[xv.dim() - k:])
        return Match(self.name, tuple(nodes), node, _ops().rms_norm.default, (x, n, w, eps, val(node).dtype),
                     kernel="examples/rmsnorm" + ("" if w is not None else " (no weight)"),
                     flops=4 * node_numel(node))

    def _fused(self, node):
        fused, plain = _opt("_fused_rms_norm"), _opt("rms_norm")
        if is_call(node, operator.getitem) and fused is not None and is_call(node.args[0], fused) and node.args[1] == 0:
            op, nodes = node.args[0], [node.args[0], node]
        elif plain is not None and is_call(node, plain):
            op, nodes = node, [node]
        else:
            return None
        args = list(op.args) + [None] * 4
        x, shape, w = args[0], args[1], op.kwargs.get("weight", args[2])
        eps = op.kwargs.get("eps", args[3])
        if dtype_problem(x):
            return Refusal(self.name, node, dtype_problem(x))
        eps = torch.finfo(val(x).dtype).eps if eps is None else number(eps)
        if eps is None:
            return Refusal(self.name, node, "its eps is not a number")
        return nodes, x, len(shape), w, eps

    def _decomposed(self, node):
        inner, cast = _strip_cast(node)
        nodes = [node] if cast is not None else []
        core = _core(inner)
        if core is not None:
            return _finish(nodes + core[0], core, None)
        if not is_call(inner, aten.mul.Tensor):
            return None
        for a, w in (inner.args, inner.args[::-1]):
            a2, mid = _strip_cast(a)
            core = _core(a2)
            if core is not None and isinstance(w, fx.Node) and w not in core[0]:
                return _finish(nodes + [inner] + ([a] if mid is not None else []) + core[0], core, w)
        return None


def _squeeze(shape) -> tuple:
    """A weight's shape less its leading ones (``(1, 1, D)`` broadcasts as ``(D,)``)."""
    shape = tuple(shape)
    while shape and shape[0] == 1 and len(shape) > 1:
        shape = shape[1:]
    return shape


def _strip_cast(node):
    return (node.args[0], node) if plain_cast(node) else (node, None)


def _core(node) -> Optional[tuple]:
    """``A * rsqrt(mean(A^2) + eps)`` (either order) or ``A / sqrt(mean(A^2) + eps)``: (nodes, A, dims, eps)."""
    if is_call(node, aten.mul.Tensor):
        pairs = [(a, r) for a, r in (node.args, node.args[::-1]) if is_call(r, aten.rsqrt.default)]
    elif is_call(node, aten.div.Tensor) and is_call(node.args[1], aten.sqrt.default) and not node.kwargs:
        pairs = [node.args]
    else:
        return None
    for a, r in pairs:
        s = r.args[0]
        if not is_call(s, aten.add.Tensor, aten.add.Scalar) or s.kwargs.get("alpha", 1) != 1:
            continue
        m, eps = (s.args[0], number(s.args[1])) if isinstance(s.args[0], fx.Node) else (s.args[1], number(s.args[0]))
        if eps is None or not is_call(m, aten.mean.dim) or m.kwargs.get("dtype") is not None:
            continue
        keep = m.args[2] if len(m.args) > 2 else m.kwargs.get("keepdim", False)
        p = m.args[0]
        squares = (is_call(p, aten.pow.Tensor_Scalar) and p.args[0] is a and number(p.args[1]) == 2.0) or (
            is_call(p, aten.mul.Tensor) and p.args[0] is a and p.args[1] is a)
        if not squares or not keep:
            continue
        return [node, r, s, m, p], a, list(m.args[1]), eps
    return None


def _finish(nodes, core, w):
    """The match's parts once the core is found: the input before its float32 upcast, the reduced dims checked."""
    _, a, dims, eps = core
    x = a
    src, cast = _strip_cast(a)
    if cast is not None and val(a).dtype == torch.float32:
        x, nodes = src, nodes + [a]
    rank = val(a).dim()
    dims = sorted(d % rank for d in dims) if rank else []
    k = len(dims)
    if not dims or dims != list(range(rank - k, rank)):
        return Refusal(RMSNormPattern.name, nodes[0], f"its mean is over dims {dims}, not the last ones")
    return list(dict.fromkeys(nodes)), x, k, w, eps


PATTERNS = [RMSNormPattern(), LayerNormPattern(), SoftmaxPattern()]
