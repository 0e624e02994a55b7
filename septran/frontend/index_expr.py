"""Index expressions of ``task.compute``'s reads: ``X[i, j + 1]``, ``X[i, 0]``, ``X[i, T[i]]``.

A read names, per dimension, either one of the compute's indices (a plain
``str``, as einsum: equal names, equal extents), an affine expression of at
most one index (``scale * name + offset``, the offset a number or a shape
expression such as ``X.shape[1] // 2``), or a gather (an integer read from a
tile). The verification proves affine reads lie in their tiles; a gather's
index is data: its axis must be a whole dimension, and the lowering guards it
(a read outside the dimension gives 0).
"""
from __future__ import annotations

from typing import Optional, Union

from septran.expr import Const, Expr, as_expr, simplify


class Affine:
    """``scale * name + offset``; ``name`` None: a constant index."""

    def __init__(self, name: Optional[str], scale: int, offset: Expr):
        from septran.frontend.bounds import int32_problem

        problem = int32_problem(offset) or int32_problem(Const(scale))
        if problem:  # raised inside the compute's lambda: task.compute reports it at the user's line
            raise TypeError(f"an index expression: {problem}")
        self.name, self.scale, self.offset = name, scale, offset

    def _shift(self, other, sign: int) -> "Affine":
        if isinstance(other, (Affine, Index)):
            raise TypeError("an index expression moves with one index (j + 1, j + half, 2 * j); "
                            "it cannot add two indices")
        if isinstance(other, bool) or not isinstance(other, (int, Expr)):
            return NotImplemented
        offset = self.offset + as_expr(other) if sign > 0 else self.offset - as_expr(other)
        return Affine(self.name, self.scale, simplify(offset))

    def __add__(self, o): return self._shift(o, 1)
    def __radd__(self, o): return self._shift(o, 1)
    def __sub__(self, o): return self._shift(o, -1)

    def __rsub__(self, o): return (-self)._shift(o, 1)

    def __neg__(self): return Affine(self.name, -self.scale, simplify(Const(0) - self.offset))

    def __mul__(self, o):
        if isinstance(o, Expr):
            raise TypeError(f"{self.describe()} * {o}: an index is scaled by an integer only (2 * j)")
        if isinstance(o, bool) or not isinstance(o, int):
            return NotImplemented
        return Affine(self.name, self.scale * o, simplify(self.offset * o))

    __rmul__ = __mul__

    def __lt__(self, _):
        raise TypeError("an index expression is not a value; compare task.global_index(X, axis, j) instead")

    __gt__ = __le__ = __ge__ = __lt__

    def __bool__(self):
        raise TypeError("an index expression has no truth value while a task is traced")

    def __repr__(self) -> str:
        return self.describe()

    def plain(self) -> bool:
        return self.name is not None and self.scale == 1 and self.offset == Const(0)

    def describe(self) -> str:
        if self.name is None:
            return str(self.offset)
        term = self.name if self.scale == 1 else f"-{self.name}" if self.scale == -1 else f"{self.scale} * {self.name}"
        if self.offset == Const(0):
            return term
        if isinstance(self.offset, Const) and self.offset.value < 0:
            return f"{term} - {-self.offset.value}"
        return f"{term} + {self.offset}"


class Gather:
    """An index read from data: ``value`` is an element expression (``T[i]``), converted to an integer."""

    def __init__(self, value):
        self.value = value


class Index:
    """A loop index of ``task.compute``: it indexes tiles, shifted or scaled (``X[i, j + 1]``)."""

    def __init__(self, name: str):
        self.name = name

    def _affine(self):
        return Affine(self.name, 1, Const(0))

    def __add__(self, o): return self._affine() + o
    def __radd__(self, o): return o + self._affine()
    def __sub__(self, o): return self._affine() - o
    def __rsub__(self, o): return o - self._affine()
    def __mul__(self, o): return self._affine() * o
    def __rmul__(self, o): return o * self._affine()
    def __neg__(self): return -self._affine()

    def _refuse(self, *_):
        raise TypeError(f"index {self.name} is not a value; compare task.global_index(X, axis, {self.name}) instead")

    __lt__ = __gt__ = __le__ = __ge__ = _refuse

    def __repr__(self) -> str:
        return self.name


IndexEntry = Union[str, Affine, Gather]


def name_of(e: IndexEntry) -> Optional[str]:
    """The compute index an entry moves with (None for constants and gathers)."""
    return e if isinstance(e, str) else e.name if isinstance(e, Affine) else None


def renamed(e: IndexEntry, rename: dict, inner) -> IndexEntry:
    """``e`` with index names replaced; ``inner`` renames a gather's element expression."""
    if isinstance(e, str):
        return rename.get(e, e)
    if isinstance(e, Affine):
        return Affine(rename.get(e.name, e.name) if e.name else None, e.scale, e.offset)
    return Gather(inner(e.value))


def describe(e: IndexEntry, describe_elem) -> str:
    if isinstance(e, str):
        return e
    if isinstance(e, Affine):
        return e.describe()
    return describe_elem(e.value)
