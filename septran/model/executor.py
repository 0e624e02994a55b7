"""The direct runner: a rewritten graph whose SepTran nodes call their kernels straight, with one memory plan.

``lower(gm)`` runs after ``rewrite`` in the backend (never for ``explain_model``, ``torch.export`` or a graph
handed to another backend: those keep the custom ops). It

0. writes KV caches in place (``septran.model.inplace``) and fuses sibling GEMMs (Q, K, V: one GEMM on their
   weights concatenated once, ``septran.model.patterns.fuse_gemms``);
1. replaces every ``torch.ops.septran.*`` call by a step (``septran.model.steps``): no dispatcher at run time;
2. plans the intermediates' memory (``septran.model.memory_plan``): each output of a step that can write into a
   given tensor, and that neither the graph returns nor a view of it does, gets a place in one arena per shape
   bucket, by liveness (a buffer lives from its step to the last read of it or of a view of it). A node
   ``septran_arena(...)`` at the graph's start hands the steps their views: the bucket is the values of the
   symbols the planned sizes depend on (a decode step's sizes depend on none of the cache length's, so every
   step of a generation shares one arena); a new bucket is planned once and kept (the last ``BUCKETS``);
3. on cpu, runs each segment of steps and the glue between them as one generated C function
   (``septran.model.launcher``: one Python-to-C crossing per segment; ``SEPTRAN_LAUNCHER=0`` turns it off).

A call that finds its arena in use by another thread runs with fresh buffers (slower, never wrong), and its end
does not free the arena the other still uses; a call after one of its own thread's that raised before the graph's
last node released the arena takes it back.
"""
from __future__ import annotations

import logging
import math
import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import torch
import torch.fx as fx

from septran.model import inplace, memory_plan, step_table, steps
from septran.model.flops import is_view
from septran.model.patterns import fuse_gemms

log = logging.getLogger(__name__)
BUCKETS = 8  # shape buckets (arenas) kept per graph


def _is_septran(node: fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace == "septran")


def _storage(v):
    try:
        from torch.multiprocessing.reductions import StorageWeakRef

        return StorageWeakRef(v.untyped_storage())
    except Exception:  # noqa: BLE001 - a value without storage (a symbolic int, an opaque object)
        return None


def _expr(size):
    """A size as a sympy expression (an int as itself)."""
    import sympy

    return sympy.Integer(size) if isinstance(size, int) else size.node.expr


@dataclass
class _Planned:
    node: fx.Node
    shape: tuple  # sympy expressions
    dtype: torch.dtype
    start: int
    end: int


def _lifetimes(graph: fx.Graph) -> list[_Planned]:
    """The steps' outputs the arena may hold, with their lifetimes (in node order) and symbolic shapes."""
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    out = []
    for node in nodes:
        if not isinstance(node.target, steps.Step) or not node.target.takes_out:
            continue
        v = node.meta.get("val")
        if not isinstance(v, torch.Tensor) or v.device.type == "meta" or not _contiguous(v):
            continue
        base = _storage(v)
        alias, end, escapes = {node}, order[node], False
        for n in nodes[order[node] + 1:]:  # every node that reads the buffer or one of its views
            reads = any(a in alias for a in n.all_input_nodes)
            if not reads:
                continue
            if n.op == "output":
                escapes = True
                break
            end = order[n]
            nv = n.meta.get("val")
            same = base is not None and isinstance(nv, torch.Tensor) and _storage(nv) == base
            if is_view(n) or same or nv is None or (n.op == "call_function" and _mutates(n)):
                alias.add(n)
        if escapes:
            continue
        out.append(_Planned(node, tuple(_expr(s) for s in v.shape), v.dtype, order[node], end))
    return out


def _mutates(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _contiguous(v) -> bool:
    """Contiguous by the expressions, without asking the shape environment (which could add a guard)."""
    step = 1
    for size, stride in reversed(list(zip(v.shape, v.stride()))):
        if str(_expr(size)) != "1" and str(_expr(stride)) != str(step):
            return False
        step = _expr(size) * step
    return True


class Arena:
    """The graph's first node: the views the planned steps write into, for this call's shape bucket."""

    def __init__(self, planned: list[_Planned], symbols: list, binding: list):
        self.planned = planned
        self.symbols = symbols  # the sympy symbols the planned shapes depend on
        self.binding = binding  # per symbol: (index into this node's arguments, axis or None)
        self.buckets: OrderedDict = OrderedDict()  # symbol values -> (arena, views, placement)
        self._lock = threading.Lock()
        self._busy = False
        self._held = None  # the views handed to the call that holds the arena
        self._holder = None  # and its thread
        self.__name__ = "septran_arena"
        self.__module__ = __name__

    def __call__(self, *values):
        key = tuple(values[i] if axis is None else values[i].shape[axis] for i, axis in self.binding)
        found = self.buckets.get(key)
        if found is None:
            found = self._plan(key)
        me = threading.get_ident()
        with self._lock:
            # held by another thread: this call allocates its own. Held by this thread: its last call raised before
            # releasing it (a graph never runs inside itself), so it is free again.
            if self._busy and self._holder != me:
                return self._fresh(found[2], found[0].device)
            self._busy, self._held, self._holder = True, found[1], me
        return found[1]

    def release(self, views=None, *_):
        """The graph's last node before its output: the arena is free for the next call, if this call held it (a
        call that ran on fresh buffers, beside another thread's, must not free the arena that one still uses)."""
        if views is None or views is self._held:
            self._busy, self._held = False, None

    def shapes(self, key: tuple) -> list[tuple[int, ...]]:
        sub = dict(zip(self.symbols, key))
        return [tuple(int(s.xreplace(sub)) if sub else int(s) for s in p.shape) for p in self.planned]

    def _plan(self, key: tuple):
        shapes = self.shapes(key)
        buffers = [memory_plan.Buffer(p.node.name, math.prod(s) * p.dtype.itemsize, p.start, p.end)
                   for p, s in zip(self.planned, shapes)]
        placement = memory_plan.place(buffers)
        device = self.planned[0].node.meta["val"].device
        arena = torch.empty(placement.peak, dtype=torch.uint8, device=device)
        views = tuple(arena[placement.offsets[b.name]: placement.offsets[b.name] + b.size].view(p.dtype).view(s)
                      for b, p, s in zip(buffers, self.planned, shapes))
        log.info("septran: memory plan for sizes %s: %d intermediates in an arena of %d bytes (fresh buffers would "
                 "hold %d)", dict(zip(map(str, self.symbols), key)), len(buffers), placement.peak, placement.unplanned)
        found = self.buckets[key] = (arena, views, (shapes, placement))
        while len(self.buckets) > BUCKETS:
            self.buckets.popitem(last=False)
        return found

    def _fresh(self, info, device):
        shapes, _ = info
        return tuple(torch.empty(s, dtype=p.dtype, device=device) for p, s in zip(self.planned, shapes))

    @property
    def peak(self) -> int:
        """The largest arena planned so far, in bytes."""
        return max((found[2][1].peak for found in self.buckets.values()), default=0)


class Executor:
    """What ``lower`` made of one graph: its steps, its arena (None when nothing is planned) and its segments
    (``septran.model.launcher``: none where the launcher is off)."""

    def __init__(self, step_list: list, arena: Optional[Arena], segments: Optional[list] = None):
        self.steps = step_list
        self.arena = arena
        self.segments = segments or []

    @property
    def peak_bytes(self) -> int:
        return self.arena.peak if self.arena is not None else 0


def _bind(graph: fx.Graph, symbols: set) -> Optional[tuple[list, list, list]]:
    """Where each symbol's value is at run time: (symbols, placeholder nodes, (argument index, axis)), or None
    when some symbol is in no placeholder (the planned sizes cannot be computed)."""
    import sympy

    where: dict = {}
    args: list = []
    for p in graph.nodes:
        if p.op != "placeholder":
            continue
        v = p.meta.get("val")
        found = []
        if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
            found.append((v.node.expr, None))
        elif isinstance(v, torch.Tensor):
            found += [(s.node.expr, d) for d, s in enumerate(v.shape)
                      if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol)]
        for sym, axis in found:
            if sym in symbols and sym not in where:
                if p not in args:
                    args.append(p)
                where[sym] = (args.index(p), axis)
    if set(where) != symbols:
        return None
    ordered = sorted(symbols, key=str)
    return ordered, args, [where[s] for s in ordered]


def lower(gm: fx.GraphModule, plan_memory: bool = True, fuse: bool = True, launch: Optional[bool] = None) -> Executor:
    """Steps for the graph's SepTran nodes, and its memory plan (see the module's docstring). In place.
    ``launch``: run runs of steps and glue as one launcher each (``septran.model.launcher``; default
    ``SEPTRAN_LAUNCHER``, on; cpu graphs, and CUDA graphs where ``SEPTRAN_LAUNCHER_CUDA=1``)."""
    graph = gm.graph
    inplace.reinplace_cache_writes(graph)
    if fuse:
        fuse_gemms.fuse_sibling_gemms(graph)
    step_list = []
    for node in list(graph.nodes):
        if _is_septran(node):
            step = step_table.make(node.target)
            node.target = step
            node.args = (None, *node.args)
            step_list.append(step)
    arena = _arena(graph) if plan_memory and step_list else None
    segments = []
    if step_list and _launches(graph, launch):
        from septran.model import launcher

        arena_node = next((n for n in graph.nodes if n.target is arena), None) if arena is not None else None
        segments = launcher.launch(gm, arena_node)
    graph.lint()
    gm.recompile()
    return Executor(step_list, arena, segments)


def _launches(graph: fx.Graph, launch: Optional[bool]) -> bool:
    from septran.model import launcher

    if launch is None:
        launch = launcher.enabled()
    if not launch:
        return False
    devices = {v.device.type for n in graph.nodes for v in [n.meta.get("val")] if isinstance(v, torch.Tensor)}
    return launcher.runs_on(devices)  # the host's; a CUDA device's where SEPTRAN_LAUNCHER_CUDA=1


def _arena(graph: fx.Graph) -> Optional[Arena]:
    planned = _lifetimes(graph)
    symbols = set().union(*(e.free_symbols for p in planned for e in p.shape)) if planned else set()
    bound = _bind(graph, symbols) if planned else None
    if bound is None:
        if planned:
            log.info("septran: no memory plan: a size depends on a symbol no input gives")
        return None
    ordered, args, binding = bound
    arena = Arena(planned, ordered, binding)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    with graph.inserting_after(placeholders[-1] if placeholders else next(iter(graph.nodes))):
        views = graph.call_function(arena, tuple(args))
    for i, p in enumerate(planned):
        with graph.inserting_before(p.node):
            view = graph.call_function(operator.getitem, (views, i))
        view.meta["val"] = p.node.meta["val"]  # its shape, type and (contiguous) strides
        p.node.args = (view, *p.node.args[1:])
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        graph.call_function(arena.release, (views,))
    return arena
