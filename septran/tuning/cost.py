"""The static cost model: a roofline estimate of one call of a tile program.

No compile, no run: the tile program says what each program of the grid
does, and the target's ``perf`` facts (``backends/<target>/target.yaml``) say
how fast the hardware does it. The search ranks candidates by ``seconds``.

What is counted, per program of the grid, times the trip counts of the loops
around it:

- FLOPs. A gemm leaf: ``2 * m * n * k`` from its operands' extents, at the
  matrix unit's rate for its operand dtype. Elementwise code: elements of the
  output x arithmetic nodes of the element expression (``+ - * /``, negation,
  comparisons, ``exp2``, ``where``... one each; casts and loads none). A
  reduction: one operation per element it reads. Elementwise code and
  reductions go at the ``vector_flops`` rate. The work counted is the work
  the program does: a tile that overhangs its tensor computes on its padded
  extents (the padding is zeros, but the loops still run), so FLOPs are those
  of padded tiles.
- Bytes: copies (and vendor loads and stores) with one side in global memory,
  the global side's in-bounds part (``Region.valid``) x its dtype's size: what
  moves between global and on-chip memory. A tile re-read in every iteration
  of a loop counts every time (GEMM's A and B tiles, once per output tile).
  Caches are not modelled.

Loops whose trip count or clipping depends on the block (causal attention) and
tiles that overhang at the edges are summed over the grid: exactly along a
dimension of at most ``EXACT`` blocks or iterations; along a longer one, at the
first two and last two (where the edges are) plus ``EXACT - 4`` midpoints of
the interior, each standing for its share (exact for a trip count linear in
the block index, as a causal mask gives). A grid dimension nothing depends on
(batch, heads) is a factor.

The roofline: per program, ``compute = sum(flops / per-unit rate)`` and
``memory = bytes / per-unit bandwidth``; their maximum where the target
overlaps copies with compute (``overlap: true``: GPUs), their sum where it does
not (the CPU's scalar C runs one after the other). The busiest unit runs
``ceil(programs / units)`` programs (the last wave rounded up to whole
programs) of average cost, and no sooner than the slowest program sampled ends (a grid
smaller than a wave with uneven programs, as causal attention's): ``seconds = launch +
max(ceil(programs / units) * average time per program, slowest program)``;
``waves = programs / (units * resident programs per unit)``. Occupancy is
reported (shared memory x stages, threads, program limit, and registers when
the caller knows them from nvcc) and a program that cannot be resident at all
gets ``seconds = inf``; occupancy does not otherwise change ``seconds``.
"""
from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Callable, Optional

from septran.errors import SepTranError
from septran.expr import Const, Expr, Var, evaluate, leaves, substitute
from septran.frontend import elementwise as el
from septran.frontend.primitives import PRIMITIVES
from septran.lowering import compute_forms
from septran.lowering import tile_ir as ir
from septran.lowering.tile_ir import DTYPE_BYTES, buffer_bytes
from septran.target import Target

log = logging.getLogger(__name__)

EXACT = 8  # a grid dimension or loop of at most this many is summed exactly; longer ones are sampled
ELEMENTWISE_COUNTED = (el.Bin, el.Neg, el.Call)  # element-expression nodes that cost one operation


class CostModelError(SepTranError):
    """The cost model cannot estimate this program on this target."""

    stage = "cost model"


@dataclass(frozen=True)
class Estimate:
    seconds: float  # the roofline estimate for one call
    flops: float  # total floating-point operations of the call
    bytes: float  # total bytes moved between global memory and on-chip memory
    programs: int  # grid size
    waves: float  # programs / (parallel units * programs resident per unit)
    occupancy: float  # 0..1, resident programs per unit relative to the best possible (GPU); 1.0 on cpu/DSA
    bound: str  # "compute" or "memory"
    notes: tuple[str, ...] = ()


class _Tally:
    """FLOPs by rate (matrix unit per dtype, vector) and global bytes."""

    __slots__ = ("matrix", "vector", "bytes")

    def __init__(self, matrix: Optional[dict] = None, vector: float = 0.0, nbytes: float = 0.0):
        self.matrix, self.vector, self.bytes = dict(matrix or {}), vector, nbytes

    def add(self, other: "_Tally", weight: float = 1.0) -> None:
        for dt, f in other.matrix.items():
            self.matrix[dt] = self.matrix.get(dt, 0.0) + f * weight
        self.vector += other.vector * weight
        self.bytes += other.bytes * weight

    @property
    def flops(self) -> float:
        return sum(self.matrix.values()) + self.vector


def estimate(program: ir.TileProgram, target: Target, value: Callable[[Expr], int], *,
             registers_per_thread: Optional[int] = None) -> Estimate:
    """The roofline estimate of one call of ``program`` on ``target``.

    ``value(expr) -> int`` evaluates the program's integer expressions (the
    lowering's ``Constants.value``); block and loop indices are substituted
    before it is called. ``registers_per_thread`` (from nvcc's resource usage,
    when the pruning stage has it) adds the register limit to occupancy.
    """
    perf = target.perf
    if perf is None:
        raise CostModelError(f"target {target.name} gives no speeds for the cost model", target.loc,
                             hint=f"add a `perf:` section to {target.folder / 'target.yaml'} (see backends/README.md)")
    if program.target != target.name:
        raise CostModelError(f"the tile program is for target {program.target}, not {target.name}")
    walk = _Walker(program, target, value)
    tally, programs, each = walk.grid()
    for dt in tally.matrix:
        if dt not in perf.peak_flops:
            raise CostModelError(f"target {target.name} gives no matrix rate for {dt} (perf.peak_flops has "
                                 f"{', '.join(perf.peak_flops)})", perf.loc)
    notes = list(walk.notes)
    resident, best, limit = _residency(program, target, value, registers_per_thread)
    occupancy = resident / best if best else 1.0
    if limit:
        notes.append(f"{resident} of {best} programs per unit resident, limited by {limit}")
    if programs == 0:
        return Estimate(perf.launch_seconds, 0.0, 0.0, 0, 0.0, occupancy, "memory", tuple(notes + ["empty grid"]))
    compute, memory = _times(tally, perf, 1.0 / programs)
    bound = "compute" if compute >= memory else "memory"
    average = max(compute, memory) if perf.overlap else compute + memory
    slowest = max(sum(_times(one, perf)) if not perf.overlap else max(_times(one, perf)) for one in each)
    if resident == 0:
        notes.append(f"cannot launch: one program needs more than a unit has ({limit})")
        seconds, waves = math.inf, math.inf
    else:
        waves = programs / (perf.units * resident)
        # The busiest unit runs ceil(programs / units) programs; none finishes before its slowest program.
        seconds = perf.launch_seconds + max(math.ceil(programs / perf.units) * average, slowest)
    log.debug("estimate %s on %s: %.3g s, %.3g FLOP, %.3g B, %d programs, %s-bound", program.name, target.name,
              seconds, tally.flops, tally.bytes, programs, bound)
    return Estimate(seconds, tally.flops, tally.bytes, programs, waves, occupancy, bound, tuple(notes))


def _times(tally: _Tally, perf, scale: float = 1.0) -> tuple[float, float]:
    """(compute, memory) seconds of ``tally x scale`` on one unit (a unit's share of each device-wide rate)."""
    units = perf.units
    compute = (sum(f * scale * units / perf.peak_flops[dt] for dt, f in tally.matrix.items())
               + tally.vector * scale * units / perf.vector_flops)
    return compute, tally.bytes * scale * units / perf.bandwidth_bytes


def _residency(program: ir.TileProgram, target: Target, value, registers: Optional[int]) -> tuple[int, int, str]:
    """(programs resident per unit, the most the unit could hold, what limits it) from the target's facts."""
    perf, k = target.perf, program.kernel
    limits: dict[str, int] = {}
    if perf.programs_per_unit:
        limits["the unit's program limit"] = perf.programs_per_unit
    if perf.threads_per_unit and k.threads:
        limits[f"threads ({k.threads} per program)"] = perf.threads_per_unit // k.threads
    best = min(limits.values()) if limits else 1
    if perf.shared_space is not None:
        shared = perf.shared_reserved_bytes + sum(
            buffer_bytes(b, value)
            for b in k.buffers if b.space == perf.shared_space)
        limits[f"{perf.shared_space} memory ({shared} bytes per program)"] = perf.shared_bytes_per_unit // max(shared, 1)
    if registers and perf.registers_per_unit and k.threads:  # the hook for nvcc's register counts
        limits[f"registers ({registers} per thread)"] = perf.registers_per_unit // (registers * k.threads)
    if not limits:
        return 1, 1, ""
    why = min(limits, key=limits.get)
    resident = limits[why]
    return resident, best, why if resident < best else ""


def _sample(n: int) -> list[tuple[int, float]]:
    """Indices of a range of ``n`` with weights summing to ``n``: all of them, or edges plus interior midpoints."""
    if n <= EXACT:
        return [(i, 1.0) for i in range(n)]
    inner, parts = n - 4, EXACT - 4
    picks = [(i, 1.0) for i in (0, 1, n - 2, n - 1)]
    picks += [(2 + int((j + 0.5) * inner / parts), inner / parts) for j in range(parts)]
    return picks


class _Walker:
    def __init__(self, program: ir.TileProgram, target: Target, value):
        self.program, self.target, self.value = program, target, value
        self.params = {p.sym: p for p in program.params}
        self.dtypes = {**{b.sym: b.dtype for b in program.kernel.buffers}, **{p.sym: p.dtype for p in program.params}}
        self.bound = {s for s, _ in program.kernel.grid} | set(_loop_vars(program.kernel.body))
        self.notes: list[str] = []
        self._deps: dict[int, frozenset] = {}
        self._memo: dict = {}

    # -- the grid ---------------------------------------------------------------------------------------------
    def grid(self) -> tuple[_Tally, int, list[_Tally]]:
        """The whole grid's tally, the number of programs, and the tally of each distinct program sampled."""
        extents = [(s, self.value(e)) for s, e in self.program.kernel.grid]
        programs = math.prod(n for _, n in extents)
        total, each = _Tally(), []
        if programs == 0:
            return total, 0, each
        body = self.program.kernel.body
        deps = self.deps_of(body)
        varying = [(s, n) for s, n in extents if s in deps]
        factor = math.prod(n for s, n in extents if s not in deps)
        sampled = [s.name for s, n in varying if n > EXACT]
        if sampled:
            self.notes.append(f"block-dependent work summed over sampled blocks along {', '.join(sampled)}")
        for point in itertools.product(*(_sample(n) for _, n in varying)):
            env = {s: i for (s, _), (i, _) in zip(varying, point)}
            one = self.stmts(body, env)
            total.add(one, factor * math.prod(w for _, w in point))
            each.append(one)
        return total, programs, each

    # -- statements -------------------------------------------------------------------------------------------
    def stmts(self, body, env: dict) -> _Tally:
        out = _Tally()
        for s in body:
            out.add(self.stmt(s, env))
        return out

    def stmt(self, s, env: dict) -> _Tally:
        deps = self.deps_of((s,))
        key = (id(s), tuple(sorted((sym.id, sym.name, v) for sym, v in env.items() if sym in deps)))
        if key not in self._memo:
            self._memo[key] = self._stmt(s, env)
        return self._memo[key]

    def _stmt(self, s, env: dict) -> _Tally:
        if isinstance(s, ir.For):
            n = self.val(s.extent, env)
            out = _Tally()
            if n <= 0:
                return out
            if s.var not in self.deps_of(s.body):
                out.add(self.stmts(s.body, env), n)
                return out
            if n > EXACT and f"loop {s.var.name} sampled" not in self.notes:
                self.notes.append(f"loop {s.var.name} sampled")
            for i, w in _sample(n):
                out.add(self.stmts(s.body, {**env, s.var: i}), w)
            return out
        if isinstance(s, ir.Guarded):  # the version the sizes take (the general one where the size is no number)
            try:
                small = 1 <= self.val(Var(s.size), env) <= s.at_most
            except (KeyError, SepTranError):
                small = False
            return self.stmts(s.then if small else s.otherwise, env)
        if isinstance(s, ir.Copy):
            return _Tally(nbytes=self.global_bytes((s.src, s.dst), env))
        if isinstance(s, ir.VendorOp):
            return _Tally(nbytes=self.global_bytes(tuple(r for _, r in s.args), env) if s.op in ("load", "store") else 0.0)
        if isinstance(s, ir.LeafCall):
            return self.leaf(s, env)
        return _Tally()  # a fill: on-chip only

    def leaf(self, call: ir.LeafCall, env: dict) -> _Tally:
        args = dict(call.args)
        if call.expr is not None:  # elementwise: the loop over the output (its in-bounds part where it runs over that)
            out = call.args[0][1]
            elements = math.prod(max(self.val(e, env), 0) for e in (out.valid or out.extents))
            ops = sum(isinstance(n, ELEMENTWISE_COUNTED) for n in el.nodes(call.expr))
            touched = {n.of for n in el.nodes(call.expr) if isinstance(n, el.Elt)} | {call.store.of}
            regions = [r for _, r in call.args if r.of in touched]
            return _Tally(vector=float(elements * ops), nbytes=self.global_bytes(regions, env))
        kind = _kind(call, self.target)
        if kind == "gemm":
            c, a = args["C"], args["A"]
            k = a.extents[-2] if dict(call.flags).get("transpose_A") else a.extents[-1]
            flops = 2.0 * math.prod(self.val(e, env) for e in c.extents) * self.val(k, env)
            dtype = a.dtype or self.dtypes[a.of]
            return _Tally(matrix={dtype: flops}, nbytes=self.global_bytes(tuple(args.values()), env))
        if kind == "reduce":  # the in-bounds part where the leaf is told it (a vendor's row reduction), else all
            x = args["X"]
            extents = (x.valid or x.extents) if ir.told_in_bounds(call) else x.extents
            return _Tally(vector=float(math.prod(max(self.val(e, env), 0) for e in extents)),
                          nbytes=self.global_bytes(tuple(args.values()), env))
        if kind in compute_forms.ELEMENT_OPS:  # a compute's form: its arithmetic on each in-bounds element
            y = args["Y"]
            elements = math.prod(max(self.val(e, env), 0) for e in (y.valid or y.extents))
            return _Tally(vector=float(elements * compute_forms.ELEMENT_OPS[kind]),
                          nbytes=self.global_bytes(tuple(args.values()), env))
        note = f"leaf {call.impl} ({kind}) not counted"
        if note not in self.notes:
            self.notes.append(note)
        return _Tally()

    def global_bytes(self, regions, env: dict) -> float:
        """Bytes of the in-bounds part of each region of a global tensor."""
        total = 0.0
        for r in regions:
            if r.of in self.params:
                extents = r.valid or r.extents
                total += math.prod(max(self.val(e, env), 0) for e in extents) * DTYPE_BYTES[r.dtype or self.dtypes[r.of]]
        return total

    # -- expressions ------------------------------------------------------------------------------------------
    def val(self, e: Expr, env: dict) -> int:
        if env:
            e = substitute(e, {Var(s): Const(v) for s, v in env.items()})
        return self.value(e)

    def deps_of(self, stmts) -> frozenset:
        """The block and loop indices the counts of ``stmts`` depend on (loop extents, region extents, clipping)."""
        key = id(stmts) if len(stmts) != 1 else id(stmts[0])
        if key not in self._deps:
            found: set = set()
            for s in stmts:
                if isinstance(s, ir.For):
                    found |= self._syms(s.extent) | (self.deps_of(s.body) - {s.var})
                elif isinstance(s, ir.Guarded):
                    found |= {s.size} | self.deps_of(s.then) | self.deps_of(s.otherwise)
                elif isinstance(s, ir.Copy):
                    found |= self._region_syms((s.src, s.dst))
                elif isinstance(s, (ir.VendorOp, ir.LeafCall)):
                    found |= self._region_syms(tuple(r for _, r in s.args))
            self._deps[key] = frozenset(found)
        return self._deps[key]

    def _region_syms(self, regions) -> set:
        return {sym for r in regions for e in tuple(r.extents) + tuple(r.valid or ()) for sym in self._syms(e)}

    def _syms(self, e: Expr) -> set:
        return {leaf.sym for leaf in leaves(e) if isinstance(leaf, Var) and leaf.sym in self.bound}


def program_value(program: ir.TileProgram) -> Callable[[Expr], int]:
    """``value`` for ``estimate`` from the program's own constants (what ``Constants.value`` gives the lowering)."""
    dynamic = [c.sym.name for c in program.consts if c.value is None]
    if dynamic:  # a size bound at each call: the roofline has no number for it (the search measures instead)
        raise CostModelError(f"the cost model has no size for the dynamic dimension {', '.join(dynamic)}")
    env = {Var(c.sym): c.value for c in program.consts}
    return lambda e: evaluate(e, env)


def rank_correlation(xs, ys) -> float:
    """Spearman's rank correlation of two equally long sequences (ties get their mean rank); nan if undefined."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("rank_correlation needs two sequences of the same length, at least 2")
    rx, ry = ranks(list(xs)), ranks(list(ys))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else math.nan


def _loop_vars(body):
    for s in body:
        if isinstance(s, ir.For):
            yield s.var
            yield from _loop_vars(s.body)
        elif isinstance(s, ir.Guarded):
            yield from _loop_vars(s.then)
            yield from _loop_vars(s.otherwise)


def _kind(call: ir.LeafCall, target: Target) -> str:
    """What family of primitive a leaf call runs: its template is the implementation's template for that kind."""
    if dict(call.attrs).get("op") is not None:
        return "reduce"
    impl = target.leaves.get(call.impl)
    for key, template in (impl.templates.items() if impl else ()):
        if template == call.template:
            return PRIMITIVES[key].kind if key in PRIMITIVES else key
    return "unknown"


__all__ = ["CostModelError", "Estimate", "estimate", "program_value", "rank_correlation"]
