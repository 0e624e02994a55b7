"""Element expressions: what ``task.compute(out, lambda i, j: ...)`` stores in each element.

Tracing the lambda on ``Index`` objects builds a small tree: loads of the
leaf's tiles at those indices (``X[i, j]``, ``m[i]``: equal index names mean
equal extents, as in einsum), float constants, arithmetic, comparisons, math
functions, and two facts about where a tile sits in its whole tensor
(``global_index``, ``global_size``), which masks need. No hardware here: a
target only says how to loop over the elements.
"""
from __future__ import annotations

import math
from typing import Optional

from septran.errors import FrontendError, SourceLoc
from septran.frontend.index_expr import Affine, Gather, Index, IndexEntry  # noqa: F401 (el.Index: the logic's loop index)

# name -> (arity, meaning); the TileLang spelling is the emitter's business
FUNCTIONS = {
    "exp": (1, "e ** x"),
    "exp2": (1, "2 ** x"),
    "log": (1, "natural logarithm"),
    "log2": (1, "base-2 logarithm"),
    "sqrt": (1, "square root"),
    "rsqrt": (1, "1 / sqrt(x)"),
    "erf": (1, "error function"),
    "tanh": (1, "hyperbolic tangent"),
    "abs": (1, "absolute value"),
    "maximum": (2, "the larger of two values"),
    "minimum": (2, "the smaller of two values"),
    "where": (3, "where(cond, a, b): a where cond holds, else b"),
    # The lowering picks one side (choose_recomputed, from leaf_calls); no target computes it.
    "recomputable": (2, "recomputable(T[i, j], value): a tile's element that holds value; read where it holds it "
                        "exactly, value computed again where its stored copy was rounded (a 16-bit tensor written, "
                        "then read back)"),
}


class Elem:
    """A node of an element expression; Python operators build the tree."""

    def _bin(self, op: str, other, swap: bool = False) -> "Elem":
        other = as_elem(other)
        return Bin(op, other, self) if swap else Bin(op, self, other)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __neg__(self): return Neg(self)
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __floordiv__(self, o): return self._bin("//", o)
    def __rfloordiv__(self, o): return self._bin("//", o, True)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return self._bin("%", o, True)

    def __eq__(self, o): return _equality("==", self, o)
    def __ne__(self, o): return _equality("!=", self, o)

    def __bool__(self):
        raise TypeError("an element expression has no truth value while a task is traced; use task.where(cond, a, b)")

    __hash__ = object.__hash__


class Num(Elem):
    """A constant: a Python int stays an integer (it takes the type of the integers it meets), a float is float32;
    ``dtype``, where the lowering set it, is the type it is printed as."""

    def __init__(self, value, dtype: Optional[str] = None):
        self.value = value if isinstance(value, int) and not isinstance(value, bool) else float(value)
        self.dtype = dtype


class Load(Elem):
    """``X[i, j]``: the element of operand ``arg`` at ``idx``: per dimension an index name, or an
    ``index_expr.Affine`` (``j + 1``, ``0``) or ``index_expr.Gather`` (``T[i]``)."""

    def __init__(self, arg, idx: tuple[str, ...]):
        self.arg, self.idx = arg, idx


class GlobalIndex(Elem):
    """Where index ``idx`` of ``arg``'s axis ``axis`` falls in the whole tensor the tile was cut from."""

    def __init__(self, arg, axis: int, idx: str):
        self.arg, self.axis, self.idx = arg, axis, idx


class ScalarRef(Elem):
    """A task's scalar parameter (``eps``), as the task function sees it."""

    def __init__(self, param):
        self.param = param

    def __repr__(self) -> str:
        return f"<scalar {self.param.name}>"


class IntExpr(Elem):
    """An integer from the task's shapes (``task.global_size(K, 2) - task.global_size(Q, 2)``)."""

    def __init__(self, expr):
        self.expr = expr


class Position(Elem):
    """A resolved ``GlobalIndex``: the tile's start in its tensor (an integer expression) plus the index."""

    def __init__(self, start, idx: str):
        self.start, self.idx = start, idx


class Bin(Elem):
    def __init__(self, op: str, lhs: Elem, rhs: Elem):
        self.op, self.lhs, self.rhs = op, lhs, rhs

    def __bool__(self):
        # `a == b` between two nodes: Python's containers (in, .index, a dataclass's ==) ask whether they are the
        # same node, as they did before == built comparisons; anything else has no truth value while tracing.
        same = getattr(self, "_same", None)
        if same is None:
            return Elem.__bool__(self)
        return same if self.op == "==" else not same


def _equality(op: str, a: Elem, b):
    from septran.expr import Expr

    if isinstance(b, bool) or not isinstance(b, (Elem, Expr, int, float)):
        return NotImplemented  # Python falls back to identity (None, strings...)
    out = Bin(op, a, as_elem(b))
    if isinstance(b, Elem):
        out._same = a is b
    return out


class Neg(Elem):
    def __init__(self, operand: Elem):
        self.operand = operand


class Call(Elem):
    def __init__(self, fn: str, args: tuple[Elem, ...]):
        self.fn, self.args = fn, args


class Cast(Elem):
    """``operand`` converted to ``dtype``: the lowering decides every conversion, the emitter prints it."""

    def __init__(self, dtype, operand: Elem):
        self.dtype, self.operand = dtype, operand
        if not isinstance(dtype, str):
            self.arg = dtype  # task.cast(x, X): X's element type, which the lowering knows


class Elt(Elem):
    """A resolved ``Load`` (or the element a compute stores): buffer ``of`` at ``index`` (integer expressions)."""

    def __init__(self, of, index: tuple):
        self.of, self.index = of, index


def entry(index, what: str) -> IndexEntry:
    """One dimension of a read as the logic wrote it; TypeError says what is wrong."""
    from septran.expr import Expr, as_expr

    if isinstance(index, Index):
        return index.name
    if isinstance(index, Affine):
        return index.name if index.plain() else index
    if isinstance(index, (int, Expr)) and not isinstance(index, bool):
        return Affine(None, 0, as_expr(index))
    if isinstance(index, Elem):
        return Gather(index)
    raise TypeError(f"{what}[...] takes indices of the compute (i, j + 1, 0, T[i]), not {type(index).__name__}")


def as_elem(value) -> Elem:
    from septran.expr import Expr

    if isinstance(value, Elem):
        return value
    if isinstance(value, Expr):
        from septran.frontend.bounds import int32_problem

        problem = int32_problem(value)
        if problem:
            raise TypeError(f"a shape expression in a compute: {problem}")
        return IntExpr(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**64:
        shown = str(value) if len(str(value)) <= 24 else f"of {len(str(abs(value)))} digits"
        raise TypeError(f"the integer constant {shown} does not fit in 64 bits (torch refuses it too: 'int too big to "
                        "convert'); write it as a float (1e30) if you mean a float")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Num(value)
    if isinstance(value, (Index, Affine)):  # j, j + 1
        raise TypeError(f"index {value!r} is not a value; use task.global_index(X, axis, j)")
    raise TypeError(f"{value!r} ({type(value).__name__}) is not an element expression")


def children(e: Elem) -> tuple[Elem, ...]:
    if isinstance(e, (Load, Elt)):  # a gather's index is read too
        from septran.frontend.index_expr import Gather

        idx = e.idx if isinstance(e, Load) else e.index
        return tuple(i.value if isinstance(i, Gather) else i for i in idx if isinstance(i, (Gather, Elem)))
    if isinstance(e, Bin):
        return (e.lhs, e.rhs)
    if isinstance(e, (Neg, AsFloat, Cast)):
        return (e.operand,)
    if isinstance(e, Call):
        return e.args
    return ()


def _rebuilt(e: Elem, go) -> Elem:
    """``e`` with ``go`` applied to each operand of an operation (a leaf as it is)."""
    if isinstance(e, Bin):
        return Bin(e.op, go(e.lhs), go(e.rhs))
    if isinstance(e, Neg):
        return Neg(go(e.operand))
    if isinstance(e, AsFloat):
        return AsFloat(go(e.operand))
    if isinstance(e, Cast):
        return Cast(e.dtype, go(e.operand))
    if isinstance(e, Call):
        return Call(e.fn, tuple(go(a) for a in e.args))
    return e


def map_leaves(e: Elem, fn) -> Elem:
    """``e`` rebuilt with every leaf (a load, a number, a position...) replaced by ``fn(leaf)``."""
    if isinstance(e, (Bin, Neg, AsFloat, Cast, Call)):
        return _rebuilt(e, lambda x: map_leaves(x, fn))
    if isinstance(e, Load) and children(e):  # a gather: its index expression first
        from septran.frontend.index_expr import renamed

        e = Load(e.arg, tuple(renamed(i, {}, lambda v: map_leaves(v, fn)) for i in e.idx))
    return fn(e)


def nodes(e: Elem):
    yield e
    for c in children(e):
        yield from nodes(c)


class Size(Elem):
    """A resolved ``IntExpr``: an integer expression of the program, and its value where it is a constant."""

    def __init__(self, expr, value: int):
        self.expr, self.value = expr, value


class AsFloat(Elem):
    """An integer of the program (a size) used in float arithmetic."""

    def __init__(self, operand: Elem):
        self.operand = operand


def fold(e: Elem) -> Elem:
    """Folds float arithmetic on constants (after the lowering resolved ``IntExpr`` to ``Size``).

    Integer arithmetic on sizes stays symbolic (``j < X_dim1``); as soon as a
    number or a math function meets a size, the result is a float constant
    (``1 / sqrt(head_dim)`` becomes one number).
    """
    if isinstance(e, Bin):
        a, b = fold(e.lhs), fold(e.rhs)
        if e.op in _COMPARE and isinstance(a, Num) and isinstance(b, Num):
            return Num(float(_COMPARE[e.op](a.value, b.value)))
        known = all(isinstance(x, Num) or (isinstance(x, Size) and x.value is not None) for x in (a, b))
        if e.op in _INT_ARITH and _integer(a) and _integer(b) and known and (e.op in "+-*" or b.value):
            return Num(_INT_ARITH[e.op](int(a.value), int(b.value)))  # integer arithmetic on constants stays exact
        if e.op in _ARITH and (e.op == "/" or not (_integer(a) and _integer(b))):  # '/' is float division
            # float arithmetic: a constant size meeting a number folds with it; meeting a tile's
            # element it stays named, as a float (mean[i] / T.float32(X_dim1))
            if known:
                return Num(_ARITH[e.op](float(a.value), float(b.value)))
            a, b = (AsFloat(x) if isinstance(x, Size) else x for x in (a, b))
        return Bin(e.op, a, b)
    if isinstance(e, Neg):
        a = fold(e.operand)
        return Num(-a.value) if isinstance(a, Num) else Neg(a)
    if isinstance(e, Call):
        args = tuple(fold(a) for a in e.args)
        if e.fn == "where" and isinstance(args[0], Num):  # a choice the numbers already make
            return args[1] if args[0].value else args[2]
        if all(isinstance(a, Num) or (isinstance(a, Size) and a.value is not None) for a in args) and e.fn in _MATH:
            try:
                return Num(_MATH[e.fn](*(float(a.value) for a in args)))
            except (ValueError, ZeroDivisionError, OverflowError):
                pass
        return Call(e.fn, args)
    return e


def _integer(e: Elem) -> bool:
    """Integer-valued: sizes, positions, and + - * of them (index arithmetic for masks)."""
    if isinstance(e, (Size, Position)) or (isinstance(e, Num) and isinstance(e.value, int)):
        return True
    return isinstance(e, Bin) and e.op in _INT_ARITH and _integer(e.lhs) and _integer(e.rhs)


def _div(a: float, b: float) -> float:
    return a / b if b else math.copysign(math.inf, a) if a else math.nan


_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
            "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _div}
_INT_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
              "//": lambda a, b: a // b, "%": lambda a, b: a % b}
_MATH = {
    "exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2, "sqrt": math.sqrt,
    "rsqrt": lambda x: 1.0 / math.sqrt(x), "erf": math.erf, "tanh": math.tanh, "abs": abs, "maximum": max, "minimum": min,
}


def rename_indices(e: Elem, rename: dict) -> Elem:
    """``e`` with the compute's index names replaced (the lowering avoids names the program uses)."""

    def leaf(x: Elem) -> Elem:
        if isinstance(x, Load):
            from septran.frontend.index_expr import renamed

            return Load(x.arg, tuple(renamed(i, rename, lambda v: v) for i in x.idx))
        if isinstance(x, Position):
            return Position(x.start, rename.get(x.idx, x.idx))
        if isinstance(x, GlobalIndex):
            return GlobalIndex(x.arg, x.axis, rename.get(x.idx, x.idx))
        return x

    return map_leaves(e, leaf)


def describe(e: Elem, name_of) -> str:
    """The expression as the logic wrote it, for dumps and error messages."""
    if isinstance(e, Num):
        return repr(e.value)
    if isinstance(e, Load):
        from septran.frontend import index_expr

        return f"{name_of(e.arg)}[{', '.join(index_expr.describe(i, lambda v: describe(v, name_of)) for i in e.idx)}]"
    if isinstance(e, GlobalIndex):
        return f"global_index({name_of(e.arg)}, {e.axis}, {e.idx})"
    if isinstance(e, IntExpr):
        return str(e.expr)
    if isinstance(e, ScalarRef):
        return e.param.name
    if isinstance(e, Bin):
        return f"({describe(e.lhs, name_of)} {e.op} {describe(e.rhs, name_of)})"
    if isinstance(e, Neg):
        return f"-{describe(e.operand, name_of)}"
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(describe(a, name_of) for a in e.args)})"
    if isinstance(e, Cast):
        to = e.dtype if isinstance(e.dtype, str) else name_of(e.dtype)
        return f"cast({describe(e.operand, name_of)}, {to})"
    return "?"


def check_function(fn: str, args: tuple, loc: Optional[SourceLoc]) -> Call:
    arity, _ = FUNCTIONS[fn]
    if len(args) != arity:
        raise FrontendError(f"task.{fn} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}", loc)
    try:
        call = Call(fn, tuple(as_elem(a) for a in args))
    except TypeError as err:
        raise FrontendError(f"task.{fn}: {err}", loc) from None
    if fn == "recomputable" and not (isinstance(call.args[0], Load) and not children(call.args[0])):
        raise FrontendError(f"task.recomputable's first argument is a tile's element (Y[i, j]), not "
                            f"{type(call.args[0]).__name__}", loc,
                            hint="write task.recomputable(Y[i, j], task.exp(X[i, j] - m[i])): Y's element, and the value "
                                 "it holds")
    return call


def choose_recomputed(e: Elem, exact) -> Elem:
    """``e`` with each ``recomputable(stored, value)`` replaced by ``stored`` where ``exact(stored)`` (the element
    read holds what was computed, unrounded) and by ``value`` elsewhere."""
    if isinstance(e, Call) and e.fn == "recomputable":
        stored, value = e.args
        return choose_recomputed(stored if exact(stored) else value, exact)
    return _rebuilt(e, lambda x: choose_recomputed(x, exact))
