"""Attention written out by hand (GPT-2's and nanoGPT's reference code) -> ``septran.attention``.

    att = (q @ k.transpose(-2, -1)) * scale          # or / sqrt(d), or no scale
    att = att.masked_fill(~mask, -inf)              # or torch.where(mask, att, -inf), or no mask (a decode step)
    y = softmax(att, dim=-1) @ v

AOTAutograd leaves each 4-d ``@`` as ``expand``, ``view`` to (B*H, ., .), ``bmm`` and ``view`` back. The pattern
matches at the last view and reads back to Q, K and V, (B, H, S, D) tensors with the same batch and heads (the
expands change nothing). It fires only where the rewrite is exact:

- the scale is a positive Python number (``mul`` by it, or ``div`` by it), or absent (1.0);
- the mask fills with -inf where a bool tensor ``m`` is False (``masked_fill(~m, -inf)``, ``where(m, x, -inf)``).
  ``m`` is torch's ``ones(Sq, Sk).tril(Sk - Sq)`` (the causal mask, bottom-right): the logic's own causal mask, no
  tensor. Any other ``m`` (GPT-2's precomputed buffer is a graph input, its values unknown at compile time)
  becomes ``septran::attention_written`` (``septran.model.written_attention_op``): at run time it checks that
  ``m`` is the causal triangle (the answer kept while the tensor is unchanged) and runs the causal attention,
  or else the written-out torch operators (eager's answer: a row the mask hides entirely is NaN written out
  but zeros from the attention kernel, SDPA's answer).
- the softmax is over the keys, in the scores' dtype, and nothing else reads the scores or the weights.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.fx as fx

import septran.model.written_attention_op  # noqa: F401  (defines torch.ops.septran.attention_written)
import septran.ops.attention  # noqa: F401  (defines torch.ops.septran.attention)
from septran.model.patterns.attention import _lower_right
from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import (aten, device_problem, float_dtype_problem, is_call, num, number, same,
                                          same_shape)

VIEWS = (aten.view, aten._unsafe_view, aten.reshape)


def _only_user(node: fx.Node, user: fx.Node) -> bool:
    return set(node.users) == {user}


def _bmm_operands(out: fx.Node) -> Optional[tuple[fx.Node, fx.Node, list]]:
    """``(a, b, nodes)`` when ``out`` is ``view(bmm(view(expand(a)), view(expand(b))), (B, H, M, N))``: torch's
    4-d matmul of a (B, H, M, K) and b (B, H, K, N), no broadcast; else None."""
    if not is_call(out, *VIEWS) or not is_call(out.args[0], aten.bmm.default):
        return None
    bmm = out.args[0]
    if not _only_user(bmm, out):
        return None
    nodes = [out, bmm]
    operands = []
    for arg in bmm.args[:2]:
        if not is_call(arg, *VIEWS) or not _only_user(arg, bmm):
            return None
        src = arg.args[0]
        nodes.append(arg)
        if is_call(src, aten.expand):
            if not _only_user(src, arg) or val(src.args[0]) is None or not same_shape(val(src.args[0]).shape,
                                                                                         val(src).shape):
                return None  # a real broadcast: not one head per batch and head
            nodes.append(src)
            src = src.args[0]
        sv, flat = val(src), val(arg)
        if sv is None or flat is None or sv.dim() != 4 or flat.dim() != 3 or not (
                same(flat.shape[0], sv.shape[0] * sv.shape[1]) and same_shape(flat.shape[1:], sv.shape[2:])):
            return None  # not the (B * H, rows, columns) view of a (B, H, rows, columns) tensor
        operands.append(src)
    a, b = operands
    av, bv, ov = val(a), val(b), val(out)
    if av is None or bv is None or ov is None or av.dim() != 4 or bv.dim() != 4 or ov.dim() != 4:
        return None
    if not (same_shape(av.shape[:2], bv.shape[:2]) and same_shape(ov.shape[:2], av.shape[:2])
            and same(ov.shape[2], av.shape[2]) and same(ov.shape[3], bv.shape[3]) and same(av.shape[3], bv.shape[2])):
        return None
    return a, b, nodes


def _transposed(node: fx.Node) -> Optional[fx.Node]:
    """``k`` when ``node`` is ``k.transpose(-2, -1)`` of a 4-d k, else None."""
    if is_call(node, aten.transpose) and sorted(d % 4 for d in node.args[1:3]) == [2, 3]:
        return node.args[0]
    if is_call(node, aten.permute) and [d % 4 for d in node.args[1]] == [0, 1, 3, 2]:
        return node.args[0]
    return None


def _minus_inf(x) -> bool:
    if is_call(x, aten.scalar_tensor, aten.full) and x.args:
        x = x.args[0] if is_call(x, aten.scalar_tensor) else x.args[1]
    return number(x) == -math.inf


def _masked(node: fx.Node) -> Optional[tuple[fx.Node, fx.Node, list]]:
    """``(scores, keep, nodes)`` when ``node`` fills the scores with -inf where the bool ``keep`` is False."""
    if is_call(node, aten.masked_fill) and len(node.args) == 3 and _minus_inf(node.args[2]):
        hide = node.args[1]
        if is_call(hide, aten.bitwise_not, aten.logical_not) and _only_user(hide, node):
            return node.args[0], hide.args[0], [node, hide]
        return None  # hidden where True: the op's bool mask says the keys that take part, and there is no node for it
    if is_call(node, aten.where) and len(node.args) == 3 and _minus_inf(node.args[2]):
        extra = [node.args[2]] if isinstance(node.args[2], fx.Node) and _only_user(node.args[2], node) else []
        return node.args[1], node.args[0], [node] + extra
    return None


def _scaled(node: fx.Node) -> tuple[fx.Node, Optional[float], list]:
    """``(scores, scale, nodes)``: the scale a ``mul`` by a number or ``div`` by one applies (1.0 if none; None
    if it is not a positive number)."""
    if is_call(node, aten.mul, aten.div) and len(node.args) == 2 and isinstance(node.args[0], fx.Node):
        c = number(node.args[1])
        if c is None or c <= 0 or not math.isfinite(c):
            return node.args[0], None, [node]
        return node.args[0], (c if is_call(node, aten.mul) else 1.0 / c), [node]
    return node, 1.0, []


class WrittenAttention(Pattern):
    name = "attention"

    def match(self, node: fx.Node) -> Result:
        found = _bmm_operands(node)
        if found is None:
            return None
        weights, v, nodes = found
        if not is_call(weights, aten._softmax.default, aten.softmax.int):
            return None
        if any(u not in set(nodes) for u in weights.users):
            return Refusal(self.name, node, "the attention weights are used elsewhere: SepTran's attention computes "
                                            "the output only")
        dim = weights.args[1]
        if dim % 4 != 3 or (is_call(weights, aten._softmax.default) and weights.args[2]) or (
                is_call(weights, aten.softmax.int) and len(weights.args) > 2 and weights.args[2] is not None):
            return None
        nodes.append(weights)
        scores = weights.args[0]
        keep, mask_nodes = None, []
        masked = _masked(scores)
        if masked is not None:
            scores, keep, mask_nodes = masked
            if val(scores) is None or not same_shape(val(masked[2][0]).shape, val(scores).shape):
                return None  # the mask broadcasts the scores to more dimensions
        scores_out, scale, scale_nodes = _scaled(scores)
        if scale is None:
            return Refusal(self.name, node, f"the scores are scaled by {scores.args[1]}: SepTran's attention takes "
                                            "a positive number")
        qk = _bmm_operands(scores_out)
        if qk is None:
            return None
        q, kt, qk_nodes = qk
        k = _transposed(kt)
        if k is None:
            return None
        # A score tensor also read elsewhere keeps its own computation (the rewrite erases only unused nodes).
        inner = mask_nodes + scale_nodes + qk_nodes + [kt]
        qv, kv, vv = val(q), val(k), val(v)
        if kv is None or kv.dim() != 4 or not (same_shape(kv.shape[:2], vv.shape[:2]) and same(kv.shape[2], vv.shape[2])):
            return None
        why = float_dtype_problem(q, k, v, weights) or device_problem(q, k, v)
        if why:
            return Refusal(self.name, node, why)
        causal = lower_right = False
        mask = None
        if keep is not None:
            mv = val(keep)
            if mv is None or mv.dtype != torch.bool or mv.dim() > 4:
                return Refusal(self.name, node, "a mask that is not a bool tensor of up to 4 dimensions")
            proof = _lower_right(keep, qv, kv)
            if proof is None:  # its values are known only at run time: checked then (a buffer, GPT-2's mask)
                return self._checked(node, nodes + inner, q, k, v, keep, scale, qv, kv, vv)
            causal = lower_right = True
            inner += proof
        nodes += inner
        b, h, sq, d = (num(x) for x in qv.shape)
        sk, dv = num(kv.shape[2]), num(vv.shape[3])
        what = ["written out"] + (["causal, bottom-right"] if causal else [])
        what += ["bool mask"] if mask is not None else []
        return Match(
            pattern=self.name, nodes=tuple(dict.fromkeys(nodes)), output=node, op=torch.ops.septran.attention.default,
            args=(q, k, v, mask, causal, float(scale), False, lower_right),
            kernel=f"examples/attention ({', '.join(what)})", flops=2 * b * h * sq * sk * (d + dv),
        )

    def _checked(self, node, nodes, q, k, v, keep, scale, qv, kv, vv) -> Match:
        """A mask whose values only the run knows: ``septran::attention_written`` checks it at run time and runs
        the causal attention where it is the causal lower triangle, the written-out torch operators elsewhere."""
        b, h, sq, d = (num(x) for x in qv.shape)
        sk, dv = num(kv.shape[2]), num(vv.shape[3])
        return Match(
            pattern=self.name, nodes=tuple(dict.fromkeys(nodes)), output=node,
            op=torch.ops.septran.attention_written.default, args=(q, k, v, keep, float(scale)),
            kernel="examples/attention (written out, causal when the mask is, checked at run time)",
            flops=2 * b * h * sq * sk * (d + dv),
        )
