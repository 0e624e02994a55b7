"""Before staging: a serial loop that runs once is its body, with its index 0.

Why: stage places a tile in the innermost loop over which its region moves. The row operators walk a row's
column tiles in several loops (LayerNorm: the mean, the squared deviations, the output; softmax: the maximum,
the exps, the scaling). Where the row fits in one tile (a row length the program knows, at most the mapping's
BN), each of those loops runs once, yet each staged a tile of its own: LayerNorm read X into three tiles, each
widened from float16 or bfloat16 again, and a staged output was stored after one pass and loaded again for the
next. With the index replaced by 0 the regions no longer move: the row is staged once for all the passes, and
an output is stored once, after its last write.

Only loops whose trip count is the number 1: a pipelined loop keeps its stages, a ``parallel_range`` its
meaning, and a count that depends on a dynamic size or on a block index (causal attention) stays a loop. The
verify pass has already proved every index in bounds with the loop in place; index 0 is one of the values it
proved. ``assume`` bounds dynamic sizes from above (one_tile.py: the version of a program that runs where a row
fits one tile): a loop whose count is 1 for every size so bounded is dropped there too.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from septran.expr import Const, Expr, Sym, Var, substitute
from septran.lowering import flat_ir as fl
from septran.lowering.constants import Constants
from septran.lowering.intervals import Unbounded, bounds


def drop_single_trips(consts: Constants, flat: fl.FlatProgram,
                      assume: Mapping[Sym, int] = MappingProxyType({})) -> fl.FlatProgram:
    """``assume``: dynamic size -> the most it is in the program made (see the module's docstring)."""
    ranges = {**consts.intervals, **{s: (1, n) for s, n in assume.items()}} if assume else None
    program = _invoke(flat.program, consts, {}, ranges)
    return flat if program is flat.program else dataclasses.replace(flat, program=program)


def one_trip(extent: Expr, consts: Constants, ranges) -> bool:
    if consts.known(extent) == 1:
        return True
    if ranges is None:
        return False
    try:
        return bounds(extent, ranges) == (1, 1)
    except (Unbounded, KeyError):
        return False


def _stmts(stmts: tuple, consts: Constants, env: Mapping[Expr, Expr], ranges) -> tuple:
    out = []
    for s in stmts:
        if not isinstance(s, fl.Loop):
            out.append(_invoke(s, consts, env, ranges))
            continue
        extent = substitute(s.extent, env) if env else s.extent
        if s.stages is None and not s.parallel and one_trip(extent, consts, ranges):
            out.extend(_stmts(s.body, consts, {**env, Var(s.var): Const(0)}, ranges))
        else:
            out.append(dataclasses.replace(s, extent=extent, body=_stmts(s.body, consts, env, ranges)))
    return tuple(out)


def _invoke(s: fl.Invoke, consts: Constants, env: Mapping[Expr, Expr], ranges) -> fl.Invoke:
    body = _stmts(s.body, consts, env, ranges)
    if not env:
        return s if body == s.body else dataclasses.replace(s, body=body)

    def sub(e: Expr) -> Expr:
        return substitute(e, env)

    def view(v: fl.View) -> fl.View:
        return dataclasses.replace(v, offsets=tuple(map(sub, v.offsets)), extents=tuple(map(sub, v.extents)),
                                   origin=tuple((sub(a), sub(b)) for a, b in v.origin))

    def index(u):  # an IndexUse, or a window's start (windows.WindowUse)
        fields = {f.name: sub(getattr(u, f.name)) for f in dataclasses.fields(u) if isinstance(getattr(u, f.name), Expr)}
        return dataclasses.replace(u, **fields)

    return dataclasses.replace(s, operands=tuple(dataclasses.replace(o, view=view(o.view)) for o in s.operands),
                               indices=tuple(map(index, s.indices)), temps=tuple((t, view(v)) for t, v in s.temps),
                               body=body)
