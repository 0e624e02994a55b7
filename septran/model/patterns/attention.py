"""scaled_dot_product_attention -> ``septran.attention`` (examples/attention).

AOTAutograd leaves one ATen call per attention, the backend torch picked for the device
(``_scaled_dot_product_flash_attention_for_cpu`` on the CPU, flash / efficient / cudnn on GPUs, or
``scaled_dot_product_attention`` itself in an exported graph), whose output 0 is the attention. The pattern
matches at that output. Grouped heads come two ways: K and V with fewer heads (``enable_gqa=True``), or
Llama's ``repeat_kv`` (unsqueeze, expand, clone, view) before the call, which the pattern reads through so
that the kernel reads the unrepeated K and V (the clone is erased once nothing else uses it). A bool mask
that torch turned into ``where(mask, 0, -inf)`` is read through to the bool mask.
"""
from __future__ import annotations

import math
import operator
from typing import Optional

import torch
import torch.fx as fx

import septran.ops.attention  # noqa: F401  (defines torch.ops.septran.attention)
from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import (aten, arguments, device_problem, float_dtype_problem, is_call, num, same,
                                          same_shape, seq_major, through_full_slices)

# The ATen forms of scaled_dot_product_attention, the ones this torch has (the set changes between versions).
SDPA = tuple(op for op in (getattr(aten, name, None) for name in (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math",
    "scaled_dot_product_attention",
)) if op is not None)
SINGLE = (aten.scaled_dot_product_attention,)  # returns the attention itself, not a tuple


def _grouped_source(node) -> Optional[tuple[fx.Node, list]]:
    """``(kv, nodes)`` when ``node`` is repeat_kv(kv, r) (each KV head repeated r times, consecutively, as
    ``repeat_interleave(r, dim=1)`` and Llama's ``repeat_kv`` make them), else None."""
    chain = []
    n = node
    if not is_call(n, aten.view, aten._unsafe_view, aten.reshape):
        return None
    chain.append(n)
    n = n.args[0]
    if is_call(n, aten.clone):
        chain.append(n)
        n = n.args[0]
    if not is_call(n, aten.expand):
        return None
    chain.append(n)
    expanded = val(n)
    n = through_full_slices(n.args[0], chain)  # x[:, :, None, :, :] is an unsqueeze and whole slices
    if not is_call(n, aten.unsqueeze) or n.args[1] not in (2, -3):
        return None
    chain.append(n)
    src = through_full_slices(n.args[0], chain)
    s, e, o = val(src), expanded, val(node)
    if s is None or e is None or o is None or s.dim() != 4 or e.dim() != 5 or o.dim() != 4:
        return None
    if not (same_shape(e.shape[:2], s.shape[:2]) and same_shape(e.shape[3:], s.shape[2:])):
        return None
    if not (same(o.shape[0], s.shape[0]) and same(o.shape[1], s.shape[1] * e.shape[2])
            and same_shape(o.shape[2:], s.shape[2:])):
        return None
    return src, chain


def _bool_mask_source(node) -> Optional[tuple[fx.Node, list]]:
    """``(m, nodes)`` when ``node`` is ``where(m, 0.0, -inf)`` (torch's float form of a bool mask)."""
    if not is_call(node, aten.where) or len(node.args) != 3:
        return None
    cond, yes, no = node.args
    if val(cond) is None or val(cond).dtype != torch.bool:
        return None
    if not (is_call(yes, aten.scalar_tensor) and is_call(no, aten.scalar_tensor)):
        return None
    if yes.args[0] != 0.0 or no.args[0] != -math.inf:
        return None
    return cond, [node, yes, no]


def _lower_right(mask, qv, kv) -> Optional[list]:
    """The nodes of ``ones(Sq, Sk, dtype=bool).tril(Sk - Sq)`` (the causal mask aligned bottom-right: a few new
    queries against a KV cache), or None."""
    if not is_call(mask, aten.tril) or val(mask) is None or val(mask).dim() != 2:
        return None
    ones = mask.args[0]
    diagonal = mask.args[1] if len(mask.args) > 1 else mask.kwargs.get("diagonal", 0)
    filled = is_call(ones, aten.ones) or (is_call(ones, aten.full) and ones.args[1] in (True, 1))
    if not filled or val(ones) is None or val(ones).dtype != torch.bool:
        return None
    sq, sk = qv.shape[2], kv.shape[2]
    if not same_shape(val(mask).shape, (sq, sk)):
        return None
    d = val(diagonal) if isinstance(diagonal, fx.Node) else diagonal
    if d is None or not same(d, sk - sq):
        return None
    return [mask, ones] + ([diagonal] if isinstance(diagonal, fx.Node) else [])


class Attention(Pattern):
    name = "attention"

    def match(self, node: fx.Node) -> Result:
        if is_call(node, *SINGLE):
            call, out = node, node
        elif node.op == "call_function" and node.target is operator.getitem and is_call(node.args[0], *SDPA):
            call, out = node.args[0], node
            if node.args[1] != 0:
                return None
        else:
            return None
        nodes = [out] if call is out else [out, call]
        if call is not out:
            for user in call.users:
                if user is out:
                    continue
                if (user.target is not operator.getitem or user.args[1] != 0) and user.users:
                    return Refusal(self.name, out, "another output of the attention (log-sum-exp, weights) is used: "
                                                   "SepTran's attention computes the output only")
                nodes.append(user)  # an unused output (or another copy of output 0's): goes with the call
        a = arguments(call)
        q, k, v = a["query"], a["key"], a["value"]
        mask = a.get("attn_mask", a.get("attn_bias"))
        if any(val(t) is None for t in (q, k, v, out)):
            return None
        qv, kv, vv = val(q), val(k), val(v)
        if qv.dim() != 4 or kv.dim() != 4 or vv.dim() != 4:
            return Refusal(self.name, out, f"attention over {qv.dim()}-d tensors: SepTran's takes (batch, heads, "
                                           "sequence, head dim)")
        why = float_dtype_problem(q, k, v) or device_problem(q, k, v)
        if why:
            return Refusal(self.name, out, why)
        if a.get("dropout_p") not in (None, 0, 0.0):
            return Refusal(self.name, out, f"dropout_p={a['dropout_p']}: SepTran's attention has no dropout")
        if a.get("dropout_mask") is not None:
            return Refusal(self.name, out, "a dropout mask: SepTran's attention has no dropout")
        scale = a.get("scale")
        if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
            return Refusal(self.name, out, f"scale={scale}: SepTran's attention takes a positive number "
                                           "(or torch's default)")
        causal, lower_right = bool(a.get("is_causal")), False
        if causal and mask is not None:
            return Refusal(self.name, out, "both is_causal and a mask")
        # Grouped heads: read K and V before they were repeated.
        for name in ("k", "v"):
            t = k if name == "k" else v
            found = _grouped_source(t)
            if found is not None:
                src, chain = found
                nodes += chain
                k, v = (src, v) if name == "k" else (k, src)
        kv, vv = val(k), val(v)
        if not same(kv.shape[1], vv.shape[1]):
            return None  # K read through repeat_kv and V not (or the reverse): torch's own error, not ours
        if mask is not None:
            found = _bool_mask_source(mask)
            if found is not None:
                mask, chain = found
                nodes += chain
            causal_nodes = _lower_right(mask, qv, kv)
            if causal_nodes is not None:  # the logic's own causal mask: no mask tensor at all
                mask, lower_right, causal = None, True, True
                nodes += causal_nodes
        if mask is not None:
            mv = val(mask)
            if mv is None:
                return None
            if mv.dtype != torch.bool and mv.dtype != qv.dtype:
                return Refusal(self.name, out, f"a {str(mv.dtype).removeprefix('torch.')} mask on "
                                               f"{str(qv.dtype).removeprefix('torch.')} attention")
            if mv.dim() > 4:
                return Refusal(self.name, out, f"a {mv.dim()}-d mask")
        layout = seq_major(val(out).shape, val(out).stride())
        if layout is None:
            return Refusal(self.name, out, f"the attention's output has strides {tuple(val(out).stride())}: "
                                           "SepTran's op writes (B, H, S, D) contiguous or laid out as (B, S, H, D)")
        b, hq, sq, d = (num(x) for x in qv.shape)
        sk, dv = num(kv.shape[2]), num(vv.shape[3])
        grouped = not same(kv.shape[1], qv.shape[1])
        causal_text = "causal, bottom-right" if lower_right else "causal"
        what = [w for w, on in ((causal_text, causal), ("grouped heads", grouped)) if on]
        if mask is not None:
            what.append("bool mask" if val(mask).dtype == torch.bool else "float mask")
        return Match(
            pattern=self.name, nodes=tuple(nodes), output=out, op=torch.ops.septran.attention.default,
            args=(q, k, v, mask, causal, float(scale or 0.0), layout, lower_right),
            kernel="examples/attention" + (f" ({', '.join(what)})" if what else ""),
            flops=2 * b * hq * sq * sk * (d + dv),
        )

