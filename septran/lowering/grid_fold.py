"""A parallel_range of any rank on TileLang's three grid dimensions.

The last dimension of the range becomes blockIdx.x and the one before it
blockIdx.y, as hand-written TileLang does; with more than three, every
dimension before those shares blockIdx.z, whose extent is their product, and
each recovers its own index by division and modulo (outermost first:
``i0 = bz // (n1 * n2)``, ``i1 = bz // n2 % n1``, ``i2 = bz % n2``). The
verification bounds these like any index; the writes pass treats the shared
index as parallel when every dimension folded into it is.
"""
from __future__ import annotations

from typing import Callable

from septran.expr import Const, Expr, Sym, Var, simplify

GRID_DIMS = 3  # blockIdx.x, y, z


def fold(loop_vars: list, extents: list[Expr], new_name: Callable[[int], Sym]):
    """(grid, loop var -> its index expression, folded): grid is blockIdx.x first; ``new_name(k)`` names grid index k."""
    n = len(loop_vars)
    if n <= GRID_DIMS:
        syms = [new_name(n - 1 - k) for k in range(n)]
        grid = tuple((s, e) for s, e in reversed(list(zip(syms, extents))))
        return grid, {v: Var(s) for v, s in zip(loop_vars, syms)}, ()
    outer = n - (GRID_DIMS - 1)  # how many dimensions share blockIdx.z
    bz = new_name(2)
    inner = [(new_name(1 - k), e) for k, e in enumerate(extents[outer:])]  # by, bx
    loops = {v: Var(s) for v, (s, _) in zip(loop_vars[outer:], inner)}
    parts, stride = [], Const(1)
    for k in reversed(range(outer)):  # innermost of the folded dimensions first
        index = Var(bz) // stride
        parts.append(index if k == 0 else simplify(index % extents[k]))
        stride = simplify(stride * extents[k])
    parts.reverse()
    loops.update(dict(zip(loop_vars[:outer], parts)))
    grid = tuple(reversed(inner)) + ((bz, stride),)
    return grid, loops, ((bz, tuple(parts)),)
