"""Pass: verify. Proves, for the specialised shapes and tunables, that the program stays in bounds.

Every name is a number or a loop variable with a known range by now, so
interval arithmetic over the loops decides each obligation:

* every tile index stays in its partition's grid on every iteration;
* every loop runs a number of times that is >= 0 and fits the index type (a
  trip count that depends on the block and may be negative is clamped to 0);
* every element a primitive or compute reads or writes lies in its tile: the
  operands that share an index letter (gemm's m, n, k; a compute's i, j) have
  the same extent, and the same tunable wherever both are tunables, so that
  no point of a search space breaks the tie;
* every tensor can be indexed with 32-bit integers.

What it cannot prove it refuses, at the logic line, with the numbers.
"""
from __future__ import annotations

import dataclasses

from septran.errors import LoweringError
from septran.expr import BinOp, Const, Expr, Var, ceildiv, leaves
from septran.frontend.ir import Param, PrimCall, Privilege, walk
from septran.lowering import flat_ir as fl
from septran.lowering import windows
from septran.lowering.constants import INDEX_LIMIT, Constants, Context
from septran.lowering.coverage import check_programs_cover
from septran.lowering.dynamic import DynamicValue, at_most, upper_index
from septran.lowering.intervals import Unbounded, bounds, witness
from septran.lowering.verify_reads import check_program

TRIPS = "trips"  # env's entry of loop and grid indices' trip counts (never a Sym: bounds never looks it up)


def verify(ctx: Context, consts: Constants, flat: fl.FlatProgram) -> fl.FlatProgram:
    env = dict(consts.intervals)  # a dynamic size: any it may take
    trips: dict = {}  # loop and grid index -> its trip count: what proves an index in bounds for every size
    for param, t in zip(ctx.graph.entry_task.params, flat.tensors):
        if any(isinstance(v, Var) and v.sym in consts.dynamic for e in t.shape for v in leaves(e)):
            continue  # its size bounds each dynamic dimension; the runtime checks every call's product
        numel = 1
        for e in t.shape:
            numel *= consts.value(e)
        if numel > INDEX_LIMIT:
            raise LoweringError(f"{param.name} has {numel} elements; TileLang indexes tensors with 32-bit integers "
                                f"(at most {INDEX_LIMIT})", param.loc,
                                hint="split the call into smaller tensors")
    for sym, extent in flat.grid:
        lo, hi = _bounds(extent, env, flat.why.logic, "the grid's extent")
        _fits_int32(extent, env, consts, flat.why.logic, "the grid's extent")
        if hi <= 0:
            return flat  # no program runs (an empty output): nothing inside can go wrong
        if hi > INDEX_LIMIT:
            raise LoweringError(f"the grid has {hi} programs along one dimension, more than a 32-bit index counts",
                                flat.why.logic)
        env[sym] = (0, hi - 1)
        trips[sym] = extent
    env[TRIPS] = trips
    _indices(flat.grid_indices, env, consts)
    _outputs_covered(ctx, consts, flat, env)
    _outputs_written(ctx, consts, flat, env)
    check_programs_cover(ctx, consts, flat)
    program = _invoke(flat.program, env, consts)
    check_program(ctx, consts, program, env)  # shifted, constant and gathered reads of computes
    return dataclasses.replace(flat, program=program)


def _outputs_covered(ctx: Context, consts: Constants, flat: fl.FlatProgram, env) -> None:
    """Every tile of an output the kernel allocates (and does not clear) is handed to some program of the grid:
    an element no program owns would come back as whatever memory held."""
    entry = ctx.graph.entry_task
    for param, t in zip(entry.params, flat.tensors):
        if ctx.graph.privilege(entry.name, param.name) is not Privilege.WRITE:
            continue
        for op in (o for o in flat.program.operands if o.param == param.name):
            for axis, (ext, dim) in enumerate(zip(op.view.extents, t.shape)):
                try:
                    n = -(-consts.value(dim) // max(consts.value(ext), 1))
                except DynamicValue:
                    _covered_every_size(flat, param.name, axis, ceildiv(dim, ext), env, consts)
                    continue
                for u in (u for u in flat.grid_indices if isinstance(u, fl.IndexUse) and u.source == param.name and u.axis == axis):
                    lo, hi = _bounds(u.index, env, u.loc, f"index {u.written}")
                    if n > 1 and (lo > 0 or hi < n - 1):
                        raise LoweringError(
                            f"{u.partition}: the grid hands out tiles {lo}..{hi} of {param.name} along dimension {axis}, "
                            f"but {param.name} has {n} tiles there: the others would never be written",
                            u.loc, hint="make the grid's parallel_range run over every tile of the output "
                                        f"({u.partition}.shape)")


def _outputs_written(ctx: Context, consts: Constants, flat: fl.FlatProgram, env) -> None:
    """An output the kernel allocates uncleared must be written by some statement that runs: one written only
    inside loops that run 0 times for these shapes (a walk over an empty input) would come back as whatever
    memory held. An empty output never gets here (no program runs)."""
    entry = ctx.graph.entry_task
    outputs = {p.name for p in entry.params if ctx.graph.privilege(entry.name, p.name) is Privilege.WRITE}
    written: set[str] = set()
    skipped: dict[str, tuple] = {}  # output -> (the first loop that never runs around a write of it, its trips)

    def invoke(inv: fl.Invoke, names: dict, env, idle) -> None:
        inner = {}
        for param, op in zip(inv.callee.params, inv.operands):
            root = names.get(op.param)
            if root is None:
                continue
            inner[param.name] = root
            if inv.binding is not None and root in outputs and op.privilege is not Privilege.READ:
                if idle is None:
                    written.add(root)
                else:
                    skipped.setdefault(root, idle)
        for b in inv.body:
            stmt(b, inner, env, idle)

    def stmt(st, names: dict, env, idle) -> None:
        if isinstance(st, fl.Invoke):
            invoke(st, names, env, idle)
            return
        if idle is not None:  # inside a loop that never runs: no bounds needed, nothing here runs either
            for b in st.body:
                stmt(b, names, env, idle)
            return
        hi = _bounds(st.extent, env, st.why.logic, "the loop's trip count")[1]
        inner = dict(env)
        inner[st.var] = (0, max(hi - 1, 0))
        for b in st.body:
            stmt(b, names, inner, None if hi > 0 else (st, max(hi, 0)))

    invoke(flat.program, {p.name: p.name for p in entry.params}, env, None)
    for name in (n for n in outputs if n not in written and n in skipped):
        loop, trips = skipped[name]
        raise LoweringError(
            f"output {name} is written only inside this loop, which runs {trips} times for these shapes"
            f"{_shapes_in(loop.extent, consts, str(loop.extent))}: {name} would come back unwritten",
            loop.why.logic,
            hint=f"write {name} outside the loop as well (its value for an empty range), or pass {name}=... "
                 "filled as it should be",
        )


def _covered_every_size(flat, name: str, axis: int, n: Expr, env, consts: Constants) -> None:
    """An output's tiles along a dynamic dimension: the grid index that hands them out runs over all of them."""
    for u in (u for u in flat.grid_indices if isinstance(u, fl.IndexUse) and u.source == name and u.axis == axis):
        trips = env[TRIPS]
        if not (isinstance(u.index, Var) and u.index.sym in trips and at_most(n, trips[u.index.sym], consts.values, env)):
            raise LoweringError(
                f"{u.partition}: cannot prove that the grid hands out every tile of {name} along its dynamic dimension "
                f"{axis} ({n} tiles) for every size", u.loc,
                hint="index the output's tiles by a grid index that runs over them (parallel_range over "
                     f"{u.partition}.shape), or drop the dimension from `dynamic`")


def _fits_int32(e: Expr, env, consts: Constants, loc, what: str) -> None:
    """TileLang computes a count in 32-bit integers, ``ceildiv(a, b)`` as ``(a + b - 1) // b``: a tile far larger
    than what it tiles (``BK: 2147483646`` over 37 elements) wraps that sum around, and TVM folds the loop to no
    trips, silently. Every step of the count must fit; where it does not, the tunable in it is the culprit."""
    if not isinstance(e, BinOp) or any(isinstance(v, Var) and v.sym in consts.dynamic for v in leaves(e)):
        return  # a dynamic size: its number comes with each call, which the runtime checks
    _fits_int32(e.lhs, env, consts, loc, what)
    _fits_int32(e.rhs, env, consts, loc, what)
    try:
        (_, a), (_, b) = bounds(e.lhs, env), bounds(e.rhs, env)
        lo, hi = bounds(e, env)
    except Unbounded:
        return  # the bound checks report it
    worst = a + b - 1 if e.op == "ceildiv" else max(abs(lo), abs(hi))
    if worst <= INDEX_LIMIT:
        return
    tunables = {v: name for name, v in consts.tunables.items()}
    whys = {Var(c.sym): c.why for c in consts.consts}
    culprit = next((v for v in leaves(e) if v in tunables and whys.get(v) and whys[v].mapping), None)
    at = f" (logic {loc})" if culprit is not None and loc is not None else ""
    raise LoweringError(
        f"{what} {e}{at} reaches {worst} while it is computed, more than a 32-bit integer holds ({INDEX_LIMIT}): "
        "TileLang's count would wrap around", whys[culprit].mapping if culprit is not None else loc,
        hint=f"make {tunables[culprit] if culprit is not None else 'the tile'} no larger than the dimension it tiles")


def _bounds(e: Expr, env, loc, what: str):
    try:
        return bounds(e, env)
    except Unbounded as err:
        raise LoweringError(f"cannot prove {what} in bounds: {err}", loc,
                            hint="write indices as sums and products of loop variables, shapes and tunables") from None


def _shapes_in(e: Expr, consts: Constants, written: str) -> str:
    """The shapes an index is computed from, with their values: " (with Q.shape[1] = 6, K.shape[1] = 4)"."""
    named: dict = {}
    for dim, var in consts.entry_dims.items():  # equal dimensions share a constant: the name the logic wrote
        if var not in named or (str(dim) in written and str(named[var]) not in written):
            named[var] = dim
    used = [leaf for leaf in dict.fromkeys(leaves(e)) if leaf in named]

    def value(v) -> str:
        try:
            return str(consts.value(v))
        except DynamicValue:
            return "any size"

    return f" (with {', '.join(f'{named[v]} = {value(v)}' for v in used)})" if used else ""


def _indices(uses, env, consts: Constants) -> None:
    for u in uses:
        if isinstance(u, windows.WindowUse):
            windows.check(u, env, consts.value)
            continue
        try:
            lo, hi = bounds(u.index, env)
        except Unbounded as err:  # a divisor made of shapes that is 0 (GQA with fewer query heads than key heads)
            raise LoweringError(f"cannot prove index {u.written} in bounds: {err}{_shapes_in(u.index, consts, u.written)}", u.loc,
                                hint="check the shapes the index divides by") from None
        n = _bounds(u.grid, env, u.loc, f"the tiles of {u.source}")[0]
        if lo >= 0 and hi > n - 1 and consts.dynamic and _below(u.index, u.grid, env, consts):
            continue  # the grid grows with a dynamic size, and the index with it
        if lo < 0 or hi > n - 1:
            bad = lo if lo < 0 else hi
            at = witness(u.index, {s: r for s, r in env.items() if s != TRIPS and r[0] != r[1]}, bad)
            where = f" (at {', '.join(f'{k} = {v}' for k, v in at.items())})" if at else ""
            raise LoweringError(
                f"{u.partition}: index {u.written} reaches {bad}{where}, but {u.source} has {n} tile"
                f"{'' if n == 1 else 's'} along dimension {u.axis} ({'0..' + str(n - 1) if n else 'none'})"
                f"{_shapes_in(u.index, consts, u.written)}",
                u.loc,
                hint="keep every tile index inside its partition's grid (0 .. shape - 1)",
            )


def _below(index: Expr, grid: Expr, env, consts: Constants) -> bool:
    """``index <= grid - 1`` for every size of the dynamic dimensions (and every value of the loops)."""
    trips = env[TRIPS]
    if isinstance(index, Var) and index.sym in trips:
        return at_most(trips[index.sym], grid, consts.values, env)
    return at_most(upper_index(index, trips), BinOp("-", grid, Const(1)), consts.values, env)


def _invoke(s: fl.Invoke, env, consts: Constants) -> fl.Invoke:
    _indices(s.indices, env, consts)
    if s.binding is not None:
        _letters(s, consts)
        return s
    return dataclasses.replace(s, body=tuple(_stmt(b, env, consts) for b in s.body))


def _stmt(s, env, consts: Constants):
    if isinstance(s, fl.Invoke):
        return _invoke(s, env, consts)
    loc = s.why.logic
    lo, hi = _bounds(s.extent, env, loc, "the loop's trip count")
    _fits_int32(s.extent, env, consts, loc, "the loop's trip count")
    if lo < 0 and lo == hi:
        raise LoweringError(f"the loop runs {hi} times: a trip count must be >= 0", loc,
                            hint="a range that may be empty is task.range(0) or task.minimum(n, ...); never negative")
    if hi > INDEX_LIMIT:
        raise LoweringError(f"the loop runs up to {hi} times, more than a 32-bit index counts ({INDEX_LIMIT})", loc)
    extent = s.extent if lo >= 0 else BinOp("max", s.extent, Const(0))  # negative for some blocks: none there
    if hi <= 0:
        return dataclasses.replace(s, extent=extent)  # never runs: nothing inside can go wrong
    inner = dict(env)
    inner[s.var] = (0, hi - 1)
    inner[TRIPS] = {**env[TRIPS], s.var: extent}
    return dataclasses.replace(s, extent=extent, body=tuple(_stmt(b, inner, consts) for b in s.body))


def _letters(s: fl.Invoke, consts: Constants) -> None:
    """Operands that share an index letter have one extent there."""
    leaf = s.callee
    for prim in (p for p, _ in walk(leaf.body) if isinstance(p, PrimCall)):
        sig = prim.signature
        seen: dict[str, tuple[str, int, Expr]] = {}
        for k, letters in enumerate(sig.dims):
            arg = prim.args[k]
            if letters is None or not isinstance(arg, Param):
                continue
            extents = s.operands[leaf.params.index(arg)].view.extents
            extra = len(extents) - len(letters)
            if extra < 0:
                continue  # a rank mismatch: the leaf binding reports it with the implementation's name
            if sig.per_operand_batch:
                for axis in range(extra):
                    if consts.value(extents[axis]) != 1:
                        raise LoweringError(
                            f"{sig.params[k]} is read at [{', '.join(letters)}], but it has {len(extents)} dimensions and "
                            f"dimension {axis} holds {consts.value(extents[axis])} elements",
                            prim.loc, hint="index every dimension, or cut the tile down to one element there")
            for pos, letter in enumerate(letters):
                extent = extents[extra + pos]
                if letter not in seen:
                    seen[letter] = (sig.params[k], pos, extent)
                    continue
                first, first_pos, first_extent = seen[letter]
                # A compute's indices are the user's choice at the compute; a primitive's operands, at the launch.
                loc = prim.loc if prim.expr is not None else s.launch.loc
                _tie(letter, (first, first_pos, first_extent), (sig.params[k], pos, extent), sig, loc, consts, prim.loc)


def _tie(letter: str, a, b, sig, loc, consts: Constants, prim_loc) -> None:
    (pa, axa, ea), (pb, axb, eb) = a, b
    try:
        va, vb = consts.value(ea), consts.value(eb)
    except DynamicValue:  # no number: only one expression has one extent for every size
        if ea == eb:
            return
        what = f"{sig.name}'s index {letter} (logic {prim_loc})" if sig.name != "compute" else f"index {letter}"
        raise LoweringError(
            f"{what} runs over {ea} elements of {pa} (dimension {axa}) and {eb} of {pb} (dimension {axb}): "
            "equal extents cannot be proven for every size of the dynamic dimensions", loc,
            hint="tile both by one tunable, or drop the dimension from `dynamic`") from None
    what = f"{sig.name}'s index {letter} (logic {prim_loc})" if sig.name != "compute" else f"index {letter}"
    if va != vb:
        raise LoweringError(
            f"{what} runs over {va} elements of {pa} (dimension {axa}, {ea}) but {pb} has {vb} there "
            f"(dimension {axb}, {eb}): reading {pb} at {letter} would leave its tile",
            loc, hint="an index shared by two tiles ties their extents; check the order of the indices and operands")
    tunables = set(consts.tunables.values())
    if isinstance(ea, Var) and isinstance(eb, Var) and ea != eb and ea in tunables and eb in tunables:
        raise LoweringError(
            f"{what} ties {pa}'s dimension {axa} ({ea} = {va}) to {pb}'s dimension {axb} ({eb} = {vb}): "
            "equal today, but two tunables; another point of the mapping would read outside a tile",
            loc, hint=f"use one tunable for both, or check the order of the operands (is {pb} the one meant?)")
