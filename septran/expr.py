"""Small symbolic integer expressions shared by the task graph and the tile program.

Shapes stay symbolic while a logic file is traced (``A.shape[0]``, a tunable
``"BM"``, a loop index); the lowering substitutes what a call fixes. Names are
``Sym`` objects compared by identity, never strings (exo's ``Sym``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Mapping, Union

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Sym:
    """A named object (a parameter, a loop index, a buffer) compared by identity."""

    name: str
    id: int = 0

    def __repr__(self) -> str:
        return f"{self.name}"


def fresh(name: str) -> Sym:
    return Sym(name, next(_ids))


class Expr:
    """Base of symbolic integer expressions; Python arithmetic builds trees."""

    def _bin(self, op: str, other, swap=False) -> "Expr":
        try:
            other = as_expr(other)
        except TypeError:
            return NotImplemented  # an element expression on the other side builds the tree
        lhs, rhs = (other, self) if swap else (self, other)
        return simplify(BinOp(op, lhs, rhs))

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __floordiv__(self, o): return self._bin("//", o)
    def __rfloordiv__(self, o): return self._bin("//", o, True)
    def __mod__(self, o): return self._bin("%", o)  # floor modulo: a folded grid index (lowering only)

    def __truediv__(self, o):
        if not isinstance(o, (int, float, Expr)):
            return NotImplemented  # an element expression divides (in task.compute)
        raise TypeError(f"{self} / {o}: shapes are integers; use // (floor division) or task.ceildiv")

    def __rtruediv__(self, o):
        if not isinstance(o, (int, float, Expr)):
            return NotImplemented
        raise TypeError(f"{o} / {self}: shapes are integers; use // (floor division) or task.ceildiv")

    def __index__(self):
        raise TypeError(
            f"the symbolic value {self} has no Python integer value while a task is traced; "
            "loop over it with task.range(...) or task.parallel_range(...)"
        )

    def __bool__(self):
        raise TypeError(f"the symbolic value {self} cannot be used in a Python `if` while a task is traced")


@dataclass(frozen=True)
class Const(Expr):
    value: int

    def __str__(self): return str(self.value)


@dataclass(frozen=True)
class Tunable(Expr):
    """A tile size or other knob whose value the mapping's ``tunables`` sets."""

    name: str

    def __str__(self): return self.name


@dataclass(frozen=True)
class Dim(Expr):
    """Extent ``axis`` of a task parameter's shape."""

    param: Sym
    axis: int

    def __str__(self): return f"{self.param.name}.shape[{self.axis}]"


@dataclass(frozen=True)
class GlobalStart(Expr):
    """Where a task parameter's tile starts, along ``axis``, in the whole tensor it was cut from."""

    param: Sym
    axis: int

    def __str__(self): return f"global_offset({self.param.name}, {self.axis})"


@dataclass(frozen=True)
class GlobalExtent(Expr):
    """The extent along ``axis`` of the whole tensor a task parameter's tile was cut from."""

    param: Sym
    axis: int

    def __str__(self): return f"global_size({self.param.name}, {self.axis})"


@dataclass(frozen=True)
class Var(Expr):
    """A loop index or any other named integer."""

    sym: Sym

    def __str__(self): return self.sym.name


@dataclass(frozen=True)
class BinOp(Expr):
    op: str  # one of + - * // % ceildiv min max
    lhs: Expr
    rhs: Expr

    def __str__(self):
        if self.op in ("ceildiv", "min", "max"):
            return f"{self.op}({self.lhs}, {self.rhs})"
        return f"({self.lhs} {self.op} {self.rhs})"


ExprLike = Union[Expr, int]


def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"expected an integer or a symbolic shape, got {x!r}")
    return Const(int(x))


def ceildiv(a: ExprLike, b: ExprLike) -> Expr:
    return simplify(BinOp("ceildiv", as_expr(a), as_expr(b)))


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return simplify(BinOp("min", as_expr(a), as_expr(b)))


_FOLD: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "ceildiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}


def simplify(e: Expr) -> Expr:
    """Folds constants and the identities that keep generated code readable."""
    if not isinstance(e, BinOp):
        return e
    a, b = simplify(e.lhs), simplify(e.rhs)
    if e.op in ("//", "%", "ceildiv") and b == Const(0):
        raise ZeroDivisionError(f"{e}: division of a shape by zero")
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_FOLD[e.op](a.value, b.value))
    if e.op == "+" and a == Const(0):
        return b
    if e.op in ("+", "-") and b == Const(0):
        return a
    if e.op == "*" and (a == Const(0) or b == Const(0)):
        return Const(0)
    if e.op == "*" and a == Const(1):
        return b
    if e.op in ("*", "//", "ceildiv") and b == Const(1):
        return a
    if e.op == "%" and b == Const(1):
        return Const(0)
    return BinOp(e.op, a, b)


def substitute(e: Expr, env: Mapping[Expr, Expr]) -> Expr:
    """Replaces leaves found in ``env`` (keys are leaf expressions) and re-simplifies."""
    if e in env:
        return env[e]
    if isinstance(e, BinOp):
        return simplify(BinOp(e.op, substitute(e.lhs, env), substitute(e.rhs, env)))
    return e


def evaluate(e: Expr, env: Mapping[Expr, int]) -> int:
    """The integer value of ``e`` once every leaf is bound; KeyError names a free leaf."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, BinOp):
        return _FOLD[e.op](evaluate(e.lhs, env), evaluate(e.rhs, env))
    return env[e]


def leaves(e: Expr):
    """Every non-constant leaf of ``e``, in order."""
    if isinstance(e, BinOp):
        yield from leaves(e.lhs)
        yield from leaves(e.rhs)
    elif not isinstance(e, Const):
        yield e
