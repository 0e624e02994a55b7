"""Building an FX graph from ONNX nodes with constants folded and shapes known.

An ONNX value is either a constant (a real ``torch.Tensor``, computed at import) or an ``fx.Node`` whose
``meta["val"]`` is a meta tensor (its shape and dtype). ``Builder.call(fn, ...)`` runs ``fn`` eagerly when every
tensor it reads is a constant (so shape arithmetic, ``Shape -> Gather -> Concat -> Reshape``, folds into numbers),
else adds a ``call_function`` node and runs ``fn`` on meta tensors to learn what it gives. The graph is
specialised to the input shapes it was built for; ``api.OnnxModel`` builds one per call signature.

Every node made while an ONNX node is converted carries ``stack_trace = <that node's label>``: AOTAutograd
copies it to the ATen nodes it makes, which is how the report finds the ONNX node of each ATen node.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree


def is_const(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def meta_of(v: Any):
    """What a value looks like: the meta tensor of a node, the constant itself."""
    return v.meta["val"] if isinstance(v, fx.Node) else v


class Builder:
    def __init__(self):
        self.graph = fx.Graph()
        self.root = torch.nn.Module()
        self.label = ""  # the ONNX node being converted (set by graph.py)
        self._buffers: dict[int, fx.Node] = {}  # by id of the constant...
        self._constants: list[torch.Tensor] = []  # ...kept alive here, so that no id is reused while building

    def input(self, name: str, example: torch.Tensor) -> fx.Node:
        node = self.graph.placeholder(_ident(name, "input"))
        node.meta["val"] = torch.empty_strided(example.shape, example.stride(), dtype=example.dtype, device="meta")
        return node

    def tensor_node(self, t: torch.Tensor) -> fx.Node:
        """A constant as a graph value: a buffer of the module, read by ``get_attr``."""
        key = id(t)
        if key not in self._buffers:
            name = f"const{len(self._buffers)}"
            self.root.register_buffer(name, t.contiguous())
            node = self.graph.get_attr(name)
            node.meta["val"] = torch.empty(t.shape, dtype=t.dtype, device="meta")
            self._buffers[key] = node
            self._constants.append(t)
        return self._buffers[key]

    def call(self, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)``: a constant if every tensor argument is one, else new node(s).

        A function returning a tuple or list gives a tuple of values (one ``getitem`` node per element)."""
        flat, _ = pytree.tree_flatten((args, kwargs))
        if not any(isinstance(a, fx.Node) for a in flat):
            return fn(*args, **kwargs)

        def as_node(a):
            return self.tensor_node(a) if isinstance(a, torch.Tensor) else a

        args, kwargs = pytree.tree_map(as_node, (args, kwargs))
        margs, mkwargs = pytree.tree_map(lambda a: meta_of(a) if isinstance(a, fx.Node) else a, (args, kwargs))
        result = fn(*margs, **mkwargs)
        node = self.graph.call_function(fn, tuple(args), dict(kwargs))
        self._mark(node, result)
        if isinstance(result, (tuple, list)):
            outs = []
            for i, r in enumerate(result):
                item = self.graph.call_function(operator.getitem, (node, i))
                self._mark(item, r)
                outs.append(item)
            return tuple(outs)
        return node

    def _mark(self, node: fx.Node, val) -> None:
        node.meta["val"] = val
        if self.label:
            node.meta["stack_trace"] = self.label

    def output(self, values: list) -> fx.GraphModule:
        # A folded output is a copy of its buffer, so that a caller writing into it changes no later call's result.
        outs = tuple(self.graph.call_function(torch.clone, (self.tensor_node(v),)) if is_const(v) else v for v in values)
        for o in outs:
            o.meta.setdefault("val", o.args[0].meta["val"] if o.target is torch.clone else None)
        self.graph.output(outs)
        gm = fx.GraphModule(self.root, self.graph)
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return gm


def _ident(name: str, fallback: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or fallback
    return out if not out[0].isdigit() else f"_{out}"
