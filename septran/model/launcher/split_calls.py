"""A step that calls its kernel once per block of its result, recorded (``Recorder``'s mixin): the decode attention
per batch and KV head on a KV cache's own blocks (``steps_attention.Attention._per_kv_head``)."""
from __future__ import annotations

import math

import sympy
import torch

from septran.model.launcher.cexpr import Unsupported, expr
from septran.model.launcher.views import Desc


class SplitCalls:
    def _split_calls(self, n, calls: list, result) -> None:
        """A step that called its kernel once per block (the decode attention per batch and KV head,
        ``steps_attention.Attention._per_kv_head``): each call's inputs are blocks of the graph's values where they
        lie, its output a block of the step's result, which the step allocated and the launcher places."""
        meta = n.meta.get("val")
        if not isinstance(result, torch.Tensor) or not isinstance(meta, torch.Tensor):
            raise Unsupported(f"{n.name} gives no tensor")
        sizes, strides = tuple(expr(s) for s in meta.shape), tuple(expr(s) for s in meta.stride())
        nbytes = math.prod(sizes, start=sympy.Integer(1)) * result.element_size()
        d = Desc(self._tmp(nbytes, result.data_ptr()), sympy.Integer(0), sizes, strides, result.dtype)
        self._check(result, d, n.name)
        readable = [self.descs[a] for a in n.all_input_nodes if a in self.descs]
        for plan, fn, kernel_tensors, given in calls:
            lay = plan.layout
            converts = self._converts(lay)
            if not self._takes(fn) or not (self._plain(lay) or converts) or plan.workspaces or \
                    lay.allocate or len(kernel_tensors) != len(lay.take):
                raise Unsupported(f"{n.name}: a kernel call per block whose plan converts, allocates or reorders")
            tensors = self._graph_tensors(n, lay, kernel_tensors, given, None)  # the blocks, not their float32 copies
            params = {}
            for k, t in enumerate(tensors):
                inside = readable if lay.roles[k] == "input" else [d]
                params[k] = next((p for p in (self._block(t, src, n.name) for src in inside) if p is not None), None)
                if params[k] is None:
                    raise Unsupported(f"{n.name}: a kernel call per block on a tensor that is no block of its values")
            self._planned_call(n, plan, fn, kernel_tensors, params, converts)
        self.descs[n] = d
