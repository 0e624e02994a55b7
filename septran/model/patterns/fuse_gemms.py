"""Sibling GEMMs as one: projections of the same input (Q, K and V) run as one GEMM on their weights concatenated.

After the rewrite, ``septran.gemm(x, Wq)``, ``septran.gemm(x, Wk)`` and ``septran.gemm(x, Wv)`` (same x, same
layout and activation; all with a bias or none, as Qwen2's and BERT's projections have) read x three times and
launch three kernels; one GEMM on ``cat(Wq, Wk, Wv)`` (and ``cat(bq, bk, bv)``) reads it once, and a decode
step's one-row GEMMs pay one call instead of three. Each old output becomes a slice of the fused one along its
last dimension; a slice whose readers are not all views that split only that dimension (what attention's
``view(b, s, heads, head_dim)`` does) is made contiguous, so that no reader meets strides it did not have.

The weights are graph inputs (a module's parameters), so they are concatenated at run time, once: the
``ConcatWeights`` step keeps the result and makes it again only when a weight changes (another tensor, or
the same one written in place: its version counter). The pass runs in the direct runner only
(``septran.model.executor``): a graph kept on the custom ops would concatenate at every call.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import torch
import torch.fx as fx

log = logging.getLogger(__name__)
aten = torch.ops.aten


class ConcatWeights:
    """``cat(ws, dim)``, kept while every weight is the same tensor at the same version.

    A weight made under ``torch.inference_mode`` keeps no version counter; it is kept by its address, shape,
    strides and dtype (the weights are held here, so no other tensor can take that address while the result is
    kept), so a model loaded or built under inference mode concatenates once too. Such a tensor can be written
    in place only inside inference mode, where this cache cannot see it: ``reset()`` (or a new tensor in the
    module) makes it concatenate again.
    """

    def __init__(self, dim: int, name: str):
        self.dim = dim
        self.__name__ = name
        self.__module__ = __name__
        self._key = None
        self._ws: tuple = ()
        self._value = None
        self.made = 0  # how many times the weights were concatenated (tests)

    def __call__(self, *ws):
        if not self._same(ws):
            self.made += 1
            self._value = torch.cat(ws, self.dim)
            self._ws = ws
            self._key = tuple(self._version(w) for w in ws)
        return self._value

    @staticmethod
    def _version(w):
        meta = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype)
        if w.is_inference():
            return meta
        return meta + (w._version,)

    def _same(self, ws) -> bool:
        return self._key is not None and len(ws) == len(self._key) and all(
            self._version(w) == k for w, k in zip(ws, self._key))

    def reset(self) -> None:
        """Forget the concatenation (after writing an inference-mode weight in place)."""
        self._ws, self._key, self._value = (), None, None


def _fake(like, fn):
    mode = torch._guards.detect_fake_mode([like])
    if mode is None:
        return None
    with mode:
        return fn()


def _splits_last_only(user: fx.Node, lead: tuple) -> bool:
    """``user`` is a view that keeps the leading dimensions and splits only the last one."""
    if user.op != "call_function" or user.target not in (aten.view.default, aten._unsafe_view.default,
                                                          aten.reshape.default):
        return False
    shape = list(user.args[1])
    return len(shape) > len(lead) and [str(s) for s in shape[:len(lead)]] == [str(s) for s in lead]


def _key(node: fx.Node):
    """What siblings share (input, layout, activation), or None for a GEMM this pass leaves alone."""
    if node.op != "call_function" or node.target is not torch.ops.septran.gemm.default or node.kwargs:
        return None
    x, w, bias, transposed, act = node.args
    v, wv = node.meta.get("val"), w.meta.get("val") if isinstance(w, fx.Node) else None
    if not isinstance(v, torch.Tensor) or not isinstance(wv, torch.Tensor) or wv.dim() != 2:
        return None
    if not all(isinstance(s, int) for s in wv.shape):  # the outputs' widths: numbers, to slice at
        return None
    if bias is not None:  # a bias of the output's width, of the weight's dtype (concatenated alongside)
        bv = bias.meta.get("val") if isinstance(bias, fx.Node) else None
        if not isinstance(bv, torch.Tensor) or bv.dim() != 1 or bv.dtype != wv.dtype or bv.device != wv.device \
                or bv.shape[0] != wv.shape[0 if transposed else 1]:
            return None
    return (x, transposed, act, bias is not None, wv.dtype, wv.device, wv.shape[1 if transposed else 0])


def fuse_sibling_gemms(graph: fx.Graph) -> int:
    """Fuses every group of sibling GEMMs; returns how many groups."""
    import septran.ops.gemm  # noqa: F401 - torch.ops.septran.gemm, which a graph without GEMMs never registered

    groups: dict = defaultdict(list)
    for node in graph.nodes:
        key = _key(node)
        if key is not None:
            groups[key].append(node)
    fused = 0
    for (x, transposed, act, biased, *_), nodes in groups.items():
        if len(nodes) < 2:
            continue
        ws = [n.args[1] for n in nodes]
        widths = [w.meta["val"].shape[0 if transposed else 1] for w in ws]
        first = nodes[0]
        with graph.inserting_before(first):
            cat = graph.call_function(ConcatWeights(0 if transposed else 1, f"septran_concat_{first.name}"), tuple(ws))
            cat_b = graph.call_function(ConcatWeights(0, f"septran_concat_bias_{first.name}"),
                                        tuple(n.args[2] for n in nodes)) if biased else None
            call = graph.call_function(torch.ops.septran.gemm.default, (x, cat, cat_b, transposed, act))
        wvals = [w.meta["val"] for w in ws]
        cat.meta["val"] = _fake(wvals[0], lambda: torch.cat(wvals, 0 if transposed else 1))
        if biased:
            bvals = [n.args[2].meta["val"] for n in nodes]
            cat_b.meta["val"] = _fake(bvals[0], lambda: torch.cat(bvals, 0))
        out = first.meta["val"]
        call.meta["val"] = _fake(out, lambda: out.new_empty(*out.shape[:-1], sum(widths)))
        lead = tuple(out.shape[:-1])
        start = 0
        for node, width in zip(nodes, widths):
            with graph.inserting_after(call):
                part = graph.call_function(aten.slice.Tensor, (call, -1, start, start + width))
            part.meta["val"] = _fake(out, lambda s=start, w=width: call.meta["val"][..., s:s + w])
            if not all(_splits_last_only(u, lead) for u in node.users):
                with graph.inserting_after(part):
                    dense = graph.call_function(aten.clone.default, (part,), {"memory_format": torch.contiguous_format})
                dense.meta["val"] = node.meta.get("val")
                part = dense
            node.replace_all_uses_with(part)
            graph.erase_node(node)
            start += width
        fused += 1
        log.info("septran: %d GEMMs of %s fused into one (widths %s)", len(nodes), x.name, widths)
    return fused
