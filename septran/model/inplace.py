"""KV-cache writes in place: ``x[:, :, pos:pos + s] = k`` on a graph input becomes one copy into the input.

AOTAutograd functionalizes the write: ``new = slice_scatter(cache, copy(slice(cache, ...), k), ...)`` builds a
whole new cache (a copy of all of it), the graph reads ``new``, and ``copy_(cache, new)`` (kept in the graph:
``keep_inference_input_mutations``) copies all of it back. Per decode step that is two passes over both caches
for one row each. Where nothing reads the old cache after the scatter, the scatter is the write itself:
``slice(cache, ...).copy_(k)`` at the scatter's place, its readers read ``cache``, and the final ``copy_`` goes.

Hugging Face's ``StaticCache`` writes by position, ``cache.index_copy_(2, cache_position, k)``, which AOTAutograd
functionalizes the same way: ``new = index_copy(cache, 2, pos, k)`` (a copy of the whole cache) and a final
``copy_(cache, new)``. Under the same condition (nothing reads the old cache after it) it becomes
``cache.index_copy_(2, pos, k)``: eager's own write, one row per head. ``k`` must not alias the cache (then the
in-place write could read what it already wrote); a value computed by the graph from other tensors never does,
and anything else keeps the copy.
"""
from __future__ import annotations

import logging

import torch
import torch.fx as fx

log = logging.getLogger(__name__)
aten = torch.ops.aten


def _is(node, *targets) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _slice_args(node) -> tuple:
    """(dim, start, end, step) of a slice or slice_scatter's trailing arguments, defaults filled in."""
    first = 1 if node.target is aten.slice.Tensor else 2
    names = ("dim", "start", "end", "step")
    given = list(node.args[first:]) + [node.kwargs.get(n) for n in names[len(node.args) - first:]]
    dim, start, end, step = (given + [None] * 4)[:4]
    return (0 if dim is None else dim, start, end, 1 if step is None else step)


def _read_after(cache: fx.Node, new: fx.Node, final: fx.Node, order: dict) -> bool:
    from septran.model.flops import is_view

    alias, todo = {cache}, [cache]
    while todo:
        for u in todo.pop().users:
            if u is final or u is new:
                continue
            if order[u] > order[new]:
                return True
            if is_view(u) and u not in alias:
                alias.add(u)
                todo.append(u)
    return False


def _views_of(node: fx.Node) -> set:
    """``node`` and every view of it in the graph (a view of a view included)."""
    from septran.model.flops import is_view

    alias, todo = {node}, [node]
    while todo:
        for u in todo.pop().users:
            if is_view(u) and u not in alias:
                alias.add(u)
                todo.append(u)
    return alias


def _reinplace_index_copy(graph: fx.Graph, final: fx.Node, cache: fx.Node, new: fx.Node, order: dict) -> bool:
    """``copy_(cache, index_copy(cache, dim, index, src))`` as ``cache.index_copy_(dim, index, src)``, where
    nothing reads the old cache after the index_copy and ``src`` is no view of the cache."""
    if len(new.args) != 4 or new.kwargs or _read_after(cache, new, final, order):
        return False
    dim, index, src = new.args[1:]
    if not isinstance(dim, int) or not isinstance(src, fx.Node) or not isinstance(index, fx.Node):
        return False
    if src in _views_of(cache):
        return False
    with graph.inserting_before(new):
        write = graph.call_function(aten.index_copy_.default, (cache, dim, index, src))
    write.meta["val"] = None
    new.replace_all_uses_with(cache, delete_user_cb=lambda u: u is not final)
    graph.erase_node(final)
    graph.erase_node(new)
    return True


def reinplace_cache_writes(graph: fx.Graph) -> int:
    """Rewrites every such write in place; returns how many."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    done = 0
    for final in list(graph.nodes):
        if not _is(final, aten.copy_.default) or final.users:
            continue
        cache, new = final.args[0], final.args[1]
        if cache.op != "placeholder" or not isinstance(new, fx.Node) or new.args[0] is not cache:
            continue
        if _is(new, aten.index_copy.default):
            done += _reinplace_index_copy(graph, final, cache, new, order)
            continue
        if not _is(new, aten.slice_scatter.default):
            continue
        where = _slice_args(new)
        if where[3] != 1:
            continue
        src = new.args[1]
        # the old cache (or a view of it) read after the scatter, but by the final copy_: it must stay a copy
        if _read_after(cache, new, final, order):
            continue
        value = src
        if _is(src, aten.copy.default) and _is(src.args[0], aten.slice.Tensor) and src.args[0].args[0] is cache \
                and _slice_args(src.args[0]) == where and len(src.users) == 1:
            value = src.args[1]  # copy(slice(cache), k): k broadcast into the slice's shape, as copy_ does
        dim, start, end, _ = where
        with graph.inserting_before(new):
            view = graph.call_function(aten.slice.Tensor, (cache, dim, start, end))
            write = graph.call_function(aten.copy_.default, (view, value))
        view.meta["val"] = None
        write.meta["val"] = None
        new.replace_all_uses_with(cache, delete_user_cb=lambda u: u is not final)
        graph.erase_node(final)
        graph.erase_node(new)
        if value is not src and not src.users:
            slice_node = src.args[0]
            graph.erase_node(src)
            if not slice_node.users:
                graph.erase_node(slice_node)
        done += 1
    if done:
        log.info("septran: %d cache write(s) in place", done)
    return done
