"""A compute's read as a buffer element: plain, shifted (``X[i, j + 1]``), constant or gathered (``X[i, T[i]]``).

The verification proved every plain, shifted and constant read inside its
tile. A gathered index is data and proves nothing: the verification made sure
its dimension is a whole dimension of the tensor, and here the read is
guarded, so that an index outside the dimension reads 0 (never memory outside
the buffer; both TileLang's ``if_then_else`` and C's ``?:`` evaluate only the
branch taken).
"""
from __future__ import annotations

from septran.expr import BinOp, Const, Sym, Var, simplify
from septran.frontend import elementwise as el
from septran.frontend.index_expr import Affine, Gather
from septran.lowering.elem_types import INTS  # a buffer of these is an index as it is



def element(view, idx: tuple, integer, dtypes) -> tuple[el.Elt, list]:
    """(the element of ``view`` at ``idx``, [(dimension, gathered index, extent)]) for the read's guards.

    ``integer``: a shape expression of the logic -> ``el.Size`` in the program; ``dtypes``: buffer -> type.
    """
    pad = len(view.offsets) - len(idx)
    index, gathered = [], []
    for d, off in enumerate(view.offsets):
        if d < pad:  # leading dimensions of one element
            index.append(off)
            continue
        entry = idx[d - pad]
        if isinstance(entry, str):
            index.append(simplify(off + Var(Sym(entry))))
        elif isinstance(entry, Affine):
            at = integer(entry.offset).expr
            term = simplify(Const(entry.scale) * Var(Sym(entry.name))) if entry.name is not None else Const(0)
            if isinstance(at, BinOp) and at.op == "-" and at.lhs == Const(0):  # j - half, not j + (0 - half)
                index.append(simplify(simplify(off + term) - at.rhs))
            else:
                index.append(simplify(simplify(off + term) + at))
        else:
            g = _integer_value(entry, dtypes)
            gathered.append((d, g, view.extents[d]))
            index.append(g if off == Const(0) else el.Bin("+", el.Size(off, None), g))
    return el.Elt(view.of, tuple(index)), gathered


def _integer_value(entry: Gather, dtypes) -> el.Elem:
    """The gathered value as an int32 index: an integer buffer's element as it is, anything else truncated."""
    v = entry.value
    if isinstance(v, el.Elt) and dtypes[v.of] in INTS:
        return v
    if isinstance(v, el.Cast) and isinstance(v.operand, el.Elt) and dtypes[v.operand.of] in INTS:
        return v.operand
    return el.Cast("int32", el.fold(v))


def guarded(value: el.Elem, gathered: list, extent_value, zero: el.Elem) -> el.Elem:
    """``value`` where every gathered index lies in its dimension, else ``zero`` (0 of the buffer's type)."""
    for _, g, extent in gathered:
        value = bounded(value, g, extent, extent_value, zero, low=True)
    return value


def bounded(value: el.Elem, at, extent, extent_value, zero: el.Elem, low: bool = False, high: bool = True) -> el.Elem:
    """``value`` where index ``at`` (an integer expression, or an element of an index tile) is below ``extent``
    (``high``) and not below 0 (``low``), else ``zero``; ``extent_value``: its number, or None."""
    index = at if isinstance(at, el.Elem) else el.Size(at, None)
    if high:
        value = el.Call("where", (el.Bin("<", index, el.Size(extent, extent_value(extent))), value, zero))
    if low:
        value = el.Call("where", (el.Bin(">=", index, el.Size(Const(0), 0)), value, zero))
    return value
