"""How the launcher follows a view: each value's buffer, offset, sizes and strides as expressions, from the view's
operation (a slice moves the offset, a transpose swaps strides) or, for a reshape and for the tensors a step hands
its kernel, by matching the tensor against the value it starts at (a permutation of its dimensions, or runs of them
merged or a fixed-size one split). Every result is checked against the real tensor by the recorder.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import sympy
import torch
import torch.fx as fx

from septran.model.launcher.cexpr import Unsupported, expr, value

aten = torch.ops.aten


class Defer(Unsupported):
    """This call's sizes cannot tell the symbolic dimensions apart (one is 1): record on a later call."""


@dataclass(frozen=True)
class Desc:
    base: object  # int (an input's index) or ("tmp", i)
    offset: object  # elements, sympy
    sizes: tuple
    strides: tuple
    dtype: torch.dtype


def same(a, b) -> bool:
    """``a == b`` for every value of the sizes (each a non-negative integer: Max(1, s + 1) is s + 1)."""
    d = sympy.sympify(a) - sympy.sympify(b)
    if d.free_symbols:
        d = d.xreplace({x: sympy.Symbol(x.name, integer=True, nonnegative=True) for x in d.free_symbols})
    return sympy.simplify(sympy.expand(d)) == 0


def contiguous_strides(sizes) -> tuple:
    out, step = [], sympy.Integer(1)
    for s in reversed(sizes):
        out.append(step)
        step = step * s
    return tuple(reversed(out))


class Views:
    """The recorder's view-following half (``record.Recorder``): needs ``descs``, ``sources``, ``sub_values``,
    ``int_inputs`` and ``_check``."""

    def _split(self, n: fx.Node, pieces) -> list:
        """The pieces of a split along a dimension of fixed size: each a slice of the input."""
        d = self.descs.get(n.args[0])
        if d is None or n.kwargs or not isinstance(pieces, (list, tuple)):
            raise Unsupported(f"{n.name}: a split the launcher cannot follow")
        dim = (n.args[2] if len(n.args) > 2 else 0) % len(d.sizes)
        if d.sizes[dim].free_symbols:
            raise Unsupported(f"{n.name}: a split along a dynamic dimension")
        out, start = [], 0
        for t in pieces:
            sizes = list(d.sizes)
            sizes[dim] = sympy.Integer(t.shape[dim])
            piece = Desc(d.base, d.offset + start * d.strides[dim], tuple(sizes), d.strides, t.dtype)
            self._check(t, piece, n.name)
            out.append(piece)
            start += t.shape[dim]
        return out

    def _int(self, a):
        """An integer argument as an expression: a literal, or an input (its own size variable)."""
        if isinstance(a, int):
            return sympy.Integer(a)
        if isinstance(a, fx.Node) and a in self.int_inputs:
            meta = a.meta.get("val")  # the graph's expression where the inputs give its symbols (s + 1)
            if isinstance(meta, torch.SymInt) and meta.node.expr.free_symbols <= set(self.sources):
                return meta.node.expr
            return self.int_inputs[a]
        raise Unsupported(f"an integer argument {a} the launcher cannot follow")

    def _view(self, n: fx.Node, d: Desc, v: torch.Tensor, meta) -> Desc:
        """The view ``n`` of ``d``: its offset, sizes and strides from the operation's arguments."""
        name = n.target._overloadpacket.__name__
        sizes, strides, offset = list(d.sizes), list(d.strides), d.offset
        args = list(n.args[1:])
        rank = len(sizes)
        if name in ("alias", "detach"):
            pass
        elif name in ("slice", "narrow"):
            if n.kwargs:
                raise Unsupported(f"{n.name}: keyword arguments")
            dim = (args[0] if args else 0) % rank
            if name == "narrow":
                start = self._int(args[1])
                length = self._int(args[2])
                step = 1
            else:
                start = self._int(args[1]) if len(args) > 1 and args[1] is not None else sympy.Integer(0)
                end = self._int(args[2]) if len(args) > 2 and args[2] is not None else sizes[dim]
                step = args[3] if len(args) > 3 else 1
                if not isinstance(step, int) or step < 1:
                    raise Unsupported(f"{n.name}: a negative or dynamic step")
                # a literal negative bound counts from the end, clamped at 0, as Python's (``x[:, -1:]``)
                start = sympy.Max(0, start + sizes[dim]) if start.is_number and start < 0 else start
                end = sympy.Max(0, end + sizes[dim]) if end.is_number and end < 0 else end
                end = sympy.Min(end, sizes[dim])
                length = sympy.floor((end - start + step - 1) / step) if step > 1 else end - start
                m = expr(meta.shape[dim]) if isinstance(meta, torch.Tensor) and meta.dim() == rank else None
                known = m is not None and m.free_symbols <= set(self.sub_values)
                if known and value(m, self.sub_values) == v.shape[dim]:
                    length = m  # the graph's own expression (a decode step's one row: 1, not (s + 1) - s)
            offset = offset + start * strides[dim]
            sizes[dim] = sympy.sympify(length)
            strides[dim] = strides[dim] * step
        elif name == "select":
            dim = args[0] % rank
            index = self._int(args[1])
            if index.is_number and index < 0:
                index = index + sizes[dim]
            offset = offset + index * strides[dim]
            del sizes[dim], strides[dim]
        elif name in ("transpose", "t"):
            a, b = (args[0] % rank, args[1] % rank) if name == "transpose" else (0, 1 % max(rank, 1))
            sizes[a], sizes[b] = sizes[b], sizes[a]
            strides[a], strides[b] = strides[b], strides[a]
        elif name == "permute":
            order = [i % rank for i in args[0]]
            sizes, strides = [sizes[i] for i in order], [strides[i] for i in order]
        elif name == "unsqueeze":
            dim = args[0] % (rank + 1)
            sizes.insert(dim, sympy.Integer(1))
            strides.insert(dim, sympy.Integer(1))
        elif name == "squeeze" and not args:
            keep = [i for i, e in enumerate(sizes) if not (e.is_number and e == 1)]
            sizes, strides = [sizes[i] for i in keep], [strides[i] for i in keep]
        elif name == "expand":
            out = [self._int(a) if not (isinstance(a, int) and a == -1) else None for a in args[0]]
            lead = len(out) - rank
            sizes2, strides2 = [], []
            for i, e in enumerate(out):
                j = i - lead
                if j < 0:
                    sizes2.append(e)
                    strides2.append(sympy.Integer(0))
                elif e is None or same(e, sizes[j]):
                    sizes2.append(sizes[j])
                    strides2.append(strides[j])
                elif sizes[j].is_number and sizes[j] == 1:
                    sizes2.append(e)
                    strides2.append(sympy.Integer(0))
                else:
                    raise Unsupported(f"{n.name}: an expand the launcher cannot follow")
            sizes, strides = sizes2, strides2
        elif name in ("view", "_unsafe_view", "reshape", "squeeze", "flatten"):
            return self._match(v, d, n.name)
        else:
            raise Unsupported(f"{n.name}: the view {name}")
        return Desc(d.base, offset, tuple(sympy.sympify(e) for e in sizes), tuple(sympy.sympify(e) for e in strides),
                    v.dtype)

    def _match(self, t: torch.Tensor, d: Desc, what: str) -> Desc:
        """``t``, which starts where ``d`` does, as a permutation or a reshape of ``d``'s dimensions."""
        sub = self.sub_values
        for e in d.sizes:
            if e.free_symbols and value(e, sub) <= 1:
                raise Defer(f"{what}: a dynamic size is {value(e, sub)} in this call")
        dims = [(s, st) for s, st in zip(d.sizes, d.strides) if value(s, sub) != 1]
        found = _permuted(t, dims, sub)
        if found is None:
            found = _reshaped(t, dims, sub)
        if found is None:
            raise Unsupported(f"{what}: a tensor {tuple(t.shape)} that is no view of the graph's value")
        out = Desc(d.base, d.offset, found[0], found[1], t.dtype)
        self._check(t, out, what)
        return out

    def _block(self, t: torch.Tensor, d: Desc, what: str) -> Optional[Desc]:
        """``t`` as a block of ``d``: the same dimensions in the same order, each whole or, where its size is fixed,
        a part of it at a fixed index (a head of a KV cache); None where ``t`` is no such block."""
        sub = self.sub_values
        if t.dim() != len(d.sizes) or t.dtype != d.dtype or d.base not in self.ptrs:
            return None
        delta, rest = divmod(t.data_ptr() - self.ptrs[d.base] - value(d.offset, sub) * t.element_size(),
                             t.element_size())
        if rest or delta < 0:
            return None
        offset, sizes = d.offset, list(d.sizes)
        for i in sorted(range(t.dim()), key=lambda i: -value(d.strides[i], sub)):
            whole, stride = d.sizes[i], d.strides[i]
            if t.shape[i] == value(whole, sub):
                continue
            if whole.free_symbols or stride.free_symbols or t.shape[i] > value(whole, sub):
                return None  # a part of a dimension that varies is no fixed block
            at = delta // int(stride) if int(stride) else 0
            if at + t.shape[i] > int(whole):
                return None
            delta -= at * int(stride)
            offset, sizes[i] = offset + at * stride, sympy.Integer(t.shape[i])
        if delta:
            return None
        out = Desc(d.base, offset, tuple(sizes), d.strides, t.dtype)
        try:
            self._check(t, out, what)
        except Defer:
            raise
        except Unsupported:
            return None
        return out


def _permuted(t, dims, sub):
    used, sizes, strides = set(), [], []
    for s, st in zip(t.shape, t.stride()):
        if s == 1:
            sizes.append(sympy.Integer(1))
            strides.append(sympy.Integer(st))
            continue
        cands = [i for i, (es, et) in enumerate(dims) if i not in used and value(es, sub) == s and value(et, sub) == st]
        if not cands:
            return None
        if any(not (same(dims[i][0], dims[cands[0]][0]) and same(dims[i][1], dims[cands[0]][1])) for i in cands):
            return None  # two dimensions alike in this call but not in general
        used.add(cands[0])
        sizes.append(dims[cands[0]][0])
        strides.append(dims[cands[0]][1])
    return (tuple(sizes), tuple(strides)) if len(used) == len(dims) else None


def _reshaped(t, dims, sub):
    """Sizes and strides of ``t`` as a reshape of ``dims`` (in order): runs of dimensions that lie one inside the
    next merge, a dimension of fixed size splits; None where ``t`` is no such reshape."""
    shape = list(t.shape)
    pn = [(i, s) for i, s in enumerate(shape) if s != 1]
    sizes = [sympy.Integer(1)] * len(shape)
    strides = [sympy.Integer(st) for st in t.stride()]  # (those of dimensions of 1: as they are)
    i = j = 0
    while i < len(dims) or j < len(pn):
        if i >= len(dims) or j >= len(pn):
            return None
        gi, gj = [i], [j]
        pv, pp = value(dims[i][0], sub), pn[j][1]
        while pv != pp:
            if pv < pp:
                i += 1
                if i >= len(dims):
                    return None
                gi.append(i)
                pv *= value(dims[i][0], sub)
            else:
                j += 1
                if j >= len(pn):
                    return None
                gj.append(j)
                pp *= pn[j][1]
        if not all(same(dims[a][1], dims[a + 1][0] * dims[a + 1][1]) for a in gi[:-1]):
            return None  # the run does not lie one dimension inside the next: no view merges it
        inner = dims[gi[-1]][1]
        if len(gj) == 1:
            sizes[pn[gj[0]][0]] = math.prod((dims[g][0] for g in gi), start=sympy.Integer(1))
            strides[pn[gj[0]][0]] = inner
        elif all(not dims[g][0].free_symbols for g in gi):
            step = inner
            for g in reversed(gj):
                sizes[pn[g][0]] = sympy.Integer(pn[g][1])
                strides[pn[g][0]] = step
                step = step * pn[g][1]
        else:
            return None
        i += 1
        j += 1
    return tuple(sizes), tuple(strides)
